// CORS (src/protocol/http/cors.ts): CORS_ORIGINS parsing, preflight detection and answers, and the headers
// added to other responses for listed, unlisted and absent origins (docs/access-control.md, "CORS").
import { describe, expect, it } from "vitest";
import {
  ALLOW_HEADERS,
  ALLOW_METHODS,
  allowOrigin,
  type CorsConfig,
  corsConfig,
  EXPOSE_HEADERS,
  isPreflight,
  listedOrigin,
  MAX_AGE,
  preflightResponse,
  withCors,
} from "../../src/protocol/http/cors.js";

type CorsEnv = Parameters<typeof corsConfig>[0];
const cfg = (origins: string | undefined): CorsConfig => corsConfig({ CORS_ORIGINS: origins } as CorsEnv); // env-like: the var may be unset

const NONE = cfg("");
const ANY = cfg("*");
const LIST = cfg("https://dash.example.com, http://localhost:5173");

function request(method: string, headers: Record<string, string> = {}): Request {
  return new Request("https://relay.example.com/v1/episodes", { method, headers });
}

/** Every header as [name, value] pairs, sorted (names are lower case in Headers). */
const headerList = (r: Response) => [...r.headers.entries()].sort(([a], [b]) => a.localeCompare(b));

describe("corsConfig", () => {
  it.each<[string, string | undefined, boolean, string[]]>([
    ["unset", undefined, false, []],
    ["empty", "", false, []],
    ["blank", "   ", false, []],
    ["star", "*", true, []],
    ["star with spaces", "  *  ", true, []],
    ["one origin", "https://dash.example.com", false, ["https://dash.example.com"]],
    [
      "normalized: case, spaces, trailing slashes",
      " HTTPS://Dash.Example.COM/ ,http://LOCALHOST:5173//",
      false,
      ["https://dash.example.com", "http://localhost:5173"],
    ],
    ["empty items dropped", ",https://a.example,, ,", false, ["https://a.example"]],
    ["duplicates folded", "https://a.example,https://A.example/", false, ["https://a.example"]],
    ["a star inside a list is not 'any' and is dropped", "*, https://a.example", false, ["https://a.example"]],
    [
      "ports are kept apart",
      "http://localhost:5173,http://localhost:3000",
      false,
      ["http://localhost:5173", "http://localhost:3000"],
    ],
  ])("%s", (_label, raw, any, origins) => {
    const c = cfg(raw);
    expect(c.any).toBe(any);
    expect([...c.origins]).toStrictEqual(origins);
  });
});

describe("listedOrigin and allowOrigin", () => {
  it.each<[string, CorsConfig, string | null, boolean, string | null]>([
    ["no Origin header, any", ANY, null, false, null],
    ["no Origin header, list", LIST, null, false, null],
    ["any origin with *", ANY, "https://evil.example", false, "*"],
    ["opaque origin 'null' with *", ANY, "null", false, "*"],
    ["listed", LIST, "https://dash.example.com", true, "https://dash.example.com"],
    ["listed, other case: echoed as sent", LIST, "HTTPS://DASH.example.com", true, "HTTPS://DASH.example.com"],
    ["listed port", LIST, "http://localhost:5173", true, "http://localhost:5173"],
    ["other port", LIST, "http://localhost:5174", false, null],
    ["other scheme", LIST, "http://dash.example.com", false, null],
    ["subdomain of a listed origin", LIST, "https://x.dash.example.com", false, null],
    ["suffix trick", LIST, "https://dash.example.com.evil.example", false, null],
    ["opaque origin 'null' with a list", LIST, "null", false, null],
    ["nothing configured", NONE, "https://dash.example.com", false, null],
  ])("%s", (_label, c, origin, listed, allowed) => {
    if (origin !== null) expect(listedOrigin(c, origin)).toBe(listed);
    expect(allowOrigin(c, origin)).toBe(allowed);
  });

  it("a '*' configuration lists no origin by name", () => {
    expect(listedOrigin(ANY, "https://dash.example.com")).toBe(false);
    expect(listedOrigin(ANY, "*")).toBe(false);
  });
});

describe("isPreflight", () => {
  it.each<[string, string, Record<string, string>, boolean]>([
    [
      "OPTIONS with Origin and Access-Control-Request-Method",
      "OPTIONS",
      { origin: "https://a.example", "access-control-request-method": "POST" },
      true,
    ],
    [
      "header names in any case",
      "OPTIONS",
      { Origin: "https://a.example", "Access-Control-Request-Method": "GET" },
      true,
    ],
    ["OPTIONS without Origin", "OPTIONS", { "access-control-request-method": "POST" }, false],
    ["OPTIONS without Access-Control-Request-Method", "OPTIONS", { origin: "https://a.example" }, false],
    ["bare OPTIONS", "OPTIONS", {}, false],
    ["GET with both headers", "GET", { origin: "https://a.example", "access-control-request-method": "POST" }, false],
    ["POST with both headers", "POST", { origin: "https://a.example", "access-control-request-method": "POST" }, false],
  ])("%s → %s", (_label, method, headers, expected) => {
    expect(isPreflight(request(method, headers))).toBe(expected);
  });
});

describe("preflightResponse", () => {
  const VARY = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers";
  const preflight = (origin: string) =>
    request("OPTIONS", {
      origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization",
    });

  it("an allowed (listed) origin gets 204 with every Allow header", async () => {
    const res = preflightResponse(preflight("https://dash.example.com"), LIST);
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    expect(headerList(res)).toStrictEqual([
      ["access-control-allow-headers", "Authorization, Content-Type, Accept, If-None-Match"],
      ["access-control-allow-methods", "GET, HEAD, POST, DELETE, OPTIONS"],
      ["access-control-allow-origin", "https://dash.example.com"],
      ["access-control-max-age", "7200"],
      ["vary", VARY],
    ]);
    expect(res.headers.has("access-control-allow-credentials")).toBe(false);
  });

  it("with '*' the allowed origin is '*'", () => {
    const res = preflightResponse(preflight("https://anything.example"), ANY);
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-allow-methods")).toBe(ALLOW_METHODS);
    expect(res.headers.get("access-control-allow-headers")).toBe(ALLOW_HEADERS);
    expect(res.headers.get("access-control-max-age")).toBe(MAX_AGE);
  });

  it.each([
    ["an unlisted origin", LIST, "https://evil.example"],
    ["any origin when nothing is configured", NONE, "https://dash.example.com"],
  ])("%s gets 204 with Vary only", (_label, c, origin) => {
    const res = preflightResponse(preflight(origin), c);
    expect(res.status).toBe(204);
    expect(headerList(res)).toStrictEqual([["vary", VARY]]);
  });

  it("the exported constants are the documented values", () => {
    expect([ALLOW_METHODS, ALLOW_HEADERS, EXPOSE_HEADERS, MAX_AGE]).toStrictEqual([
      "GET, HEAD, POST, DELETE, OPTIONS",
      "Authorization, Content-Type, Accept, If-None-Match",
      "ETag, WWW-Authenticate, Content-Length, X-Episode-Relay",
      "7200",
    ]);
  });
});

describe("withCors", () => {
  const get = (origin?: string) => request("GET", origin === undefined ? {} : { origin });
  const original = () =>
    new Response("body", { status: 404, headers: { "content-type": "text/plain", etag: '"abc"' } });

  it("a listed origin gets Allow-Origin (echoed), Expose-Headers and Vary: Origin; status, body and headers kept", async () => {
    const res = withCors(original(), get("https://dash.example.com"), LIST);
    expect(res.status).toBe(404);
    expect(await res.text()).toBe("body");
    expect(headerList(res)).toStrictEqual([
      ["access-control-allow-origin", "https://dash.example.com"],
      ["access-control-expose-headers", "ETag, WWW-Authenticate, Content-Length, X-Episode-Relay"],
      ["content-type", "text/plain"],
      ["etag", '"abc"'],
      ["vary", "Origin"],
    ]);
  });

  it("an unlisted origin gets no Allow-Origin but Vary: Origin (the answer depends on it)", () => {
    const res = withCors(original(), get("https://evil.example"), LIST);
    expect(res.headers.has("access-control-allow-origin")).toBe(false);
    expect(res.headers.has("access-control-expose-headers")).toBe(false);
    expect(res.headers.get("vary")).toBe("Origin");
  });

  it("no Origin header with a list configured: Vary: Origin only", () => {
    const res = withCors(original(), get(), LIST);
    expect(res.headers.has("access-control-allow-origin")).toBe(false);
    expect(res.headers.get("vary")).toBe("Origin");
  });

  it("'*' answers any origin with '*'", () => {
    const res = withCors(original(), get("https://anything.example"), ANY);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-expose-headers")).toBe(EXPOSE_HEADERS);
    expect(res.headers.get("vary")).toBe("Origin");
  });

  it.each([
    ["nothing configured, with an Origin", NONE, "https://dash.example.com"],
    ["nothing configured, no Origin", NONE, undefined],
    ["'*', no Origin", ANY, undefined],
  ])("%s: the response is returned untouched", (_label, c, origin) => {
    const res = original();
    expect(withCors(res, get(origin), c)).toBe(res);
    expect(headerList(res)).toStrictEqual([
      ["content-type", "text/plain"],
      ["etag", '"abc"'],
    ]);
  });

  it.each([
    ["Accept", "Accept, Origin"],
    ["Accept, Accept-Encoding", "Accept, Accept-Encoding, Origin"],
    ["origin", "origin"],
    ["Accept, ORIGIN", "Accept, ORIGIN"],
    ["*", "*"],
  ])("an existing Vary %j becomes %j", (vary, expected) => {
    const res = withCors(new Response("x", { headers: { vary } }), get("https://dash.example.com"), LIST);
    expect(res.headers.get("vary")).toBe(expected);
  });

  it("works on responses whose headers are immutable (as from a stub or fetch)", () => {
    const res = Response.redirect("https://relay.example.com/elsewhere", 302); // immutable headers
    expect(() => res.headers.set("x", "y")).toThrow();
    const out = withCors(res, get("https://dash.example.com"), LIST);
    expect(out.status).toBe(302);
    expect(out.headers.get("location")).toBe("https://relay.example.com/elsewhere");
    expect(out.headers.get("access-control-allow-origin")).toBe("https://dash.example.com");
  });

  it("a 101 upgrade is returned as is (CORS does not apply to WebSockets)", () => {
    // Node's Response cannot be built with status 101 (workerd's can): a stand-in object
    const res = { status: 101, headers: new Headers() } as unknown as Response;
    expect(withCors(res, get("https://dash.example.com"), LIST)).toBe(res);
    expect(withCors(res, get("https://x.example"), ANY)).toBe(res);
    expect([...res.headers.keys()]).toStrictEqual([]);
  });
});

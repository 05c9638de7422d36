// Access control through the real Worker and the real Durable Objects: the Worker's fetch is
// called with the test env plus a RELAY_SECRET (vitest-pool-workers cannot change env per test).
// Tokens are made here with jose's SignJWT, independently of src/protocol/http/auth.ts.
import { env } from "cloudflare:workers";
import { decodeProtectedHeader, SignJWT, UnsecuredJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { mintToken } from "../../src/protocol/http/auth.js";
import worker from "../../src/worker/index.js";
import { openDelta } from "../support/deltas.js";
import { freshId } from "./support.js";

const SECRET = "auth-test-secret-7f3a9c2e51b84d06a1e2f3c4d5b6a798";
const WRONG_SECRET = "not-the-relay-secret-0000000000000000000000000000";
/** A host that is not local: only a token lets a request through. */
const HOST = "https://relay.example.com";
const DASHBOARD = "https://dash.example.com";

const base: Env = { ...env };
const AUTH_ENV: Env = { ...base, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined, CORS_ORIGINS: DASHBOARD };
const CLOSED_ENV: Env = { ...base, RELAY_SECRET: undefined, AUTH_OFF_ON_LOOPBACK: undefined, CORS_ORIGINS: DASHBOARD };
const LOOPBACK_ENV: Env = { ...base, RELAY_SECRET: undefined, AUTH_OFF_ON_LOOPBACK: "true", CORS_ORIGINS: DASHBOARD };

type Role = "producer" | "watcher" | "admin";
const ROLES: Role[] = ["producer", "watcher", "admin"];

// ---- tokens ----

/** Every token made in this file, to prove none comes back in a response or a log line. */
const minted: string[] = [];
const now = () => Math.floor(Date.now() / 1000);

async function sign(payload: Record<string, unknown>, opts: { secret?: string; alg?: string } = {}): Promise<string> {
  const t = await new SignJWT(payload)
    .setProtectedHeader({ alg: opts.alg ?? "HS256", typ: "JWT" })
    .setIssuedAt()
    .sign(new TextEncoder().encode(opts.secret ?? SECRET));
  minted.push(t);
  return t;
}

const b64url = (b: Uint8Array) =>
  btoa(String.fromCharCode(...b))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");

/** A compact JWS over arbitrary header and payload text, correctly HMAC-signed with SECRET. */
async function signRaw(header: string, payload: string): Promise<string> {
  const enc = new TextEncoder();
  const input = `${b64url(enc.encode(header))}.${b64url(enc.encode(payload))}`;
  const key = await crypto.subtle.importKey("raw", enc.encode(SECRET), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const sig = new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(input)));
  return `${input}.${b64url(sig)}`;
}

function token(
  role: string,
  episodes: unknown,
  extra: Record<string, unknown> = {},
  opts: { secret?: string; alg?: string } = {},
) {
  return sign({ role, episodes, exp: now() + 3600, ...extra }, opts);
}

// ---- requests ----

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: Record<string, unknown> | null;
  ws: WebSocket | null;
}

/** Everything any response said (bodies and headers), checked for tokens at the end. */
const answered: string[] = [];

async function call(
  e: Env,
  method: string,
  url: string,
  init: { headers?: Record<string, string>; body?: Uint8Array } = {},
): Promise<Answer> {
  const req = new Request(url, { method, headers: init.headers, body: init.body });
  const res = await worker.fetch(req, e);
  const ws = res.webSocket;
  if (ws) {
    ws.accept();
    ws.close(1000, "test done");
  }
  const text = ws ? "" : await res.text();
  let json: Record<string, unknown> | null = null;
  try {
    json = text ? (JSON.parse(text) as Record<string, unknown>) : null;
  } catch {
    json = null;
  }
  answered.push(text, JSON.stringify([...res.headers]));
  return { status: res.status, headers: res.headers, text, json, ws };
}

const auth = (t: string): Record<string, string> => ({ authorization: `Bearer ${t}` });
const upgrade: Record<string, string> = { upgrade: "websocket" };

interface Endpoint {
  name: string;
  method: string;
  path: (id: string) => string;
  write: boolean;
  upgrade?: boolean;
  body?: () => Uint8Array;
}

const ENDPOINTS: Endpoint[] = [
  { name: "POST deltas", method: "POST", path: (id) => `${id}/deltas`, write: true, body: () => openDelta() },
  { name: "ingest socket", method: "GET", path: (id) => `${id}/ingest`, write: true, upgrade: true },
  { name: "POST reply", method: "POST", path: (id) => `${id}/reply`, write: true, body: () => Uint8Array.of(0xc1) },
  { name: "GET episode", method: "GET", path: (id) => id, write: false },
  { name: "GET status", method: "GET", path: (id) => `${id}/status`, write: false },
  { name: "watch socket", method: "GET", path: (id) => `${id}/watch`, write: false, upgrade: true },
  { name: "DELETE episode", method: "DELETE", path: (id) => id, write: true },
];

function hit(
  e: Env,
  ep: Endpoint,
  id: string,
  headers: Record<string, string> = {},
  host = HOST,
  query = "",
): Promise<Answer> {
  return call(e, ep.method, `${host}/v1/episodes/${ep.path(id)}${query}`, {
    headers: {
      ...(ep.upgrade ? upgrade : {}),
      ...(ep.body ? { "content-type": "application/msgpack" } : {}),
      ...headers,
    },
    body: ep.body?.(),
  });
}

const REFUSED = [401, 403, 503];

function expectPassed(a: Answer, ep: Endpoint) {
  expect(REFUSED, `${ep.name}: ${a.status} ${a.text}`).not.toContain(a.status);
  if (ep.upgrade) expect(a.status, `${ep.name}: ${a.text}`).toBe(101);
}

function expectUnauthorized(a: Answer, reason?: RegExp) {
  expect(a.status, a.text).toBe(401);
  expect(a.json).toMatchObject({ error: "unauthorized" });
  expect(typeof a.json?.message).toBe("string");
  if (reason) expect(a.json?.message).toMatch(reason);
  expect(a.headers.get("www-authenticate")).toMatch(/^Bearer\b/);
}

function expectForbidden(a: Answer) {
  expect(a.status, a.text).toBe(403);
  expect(a.json).toMatchObject({ error: "forbidden" });
}

// ---- logs ----

const logged: string[] = [];
beforeAll(() => {
  for (const level of ["log", "info", "warn", "error", "debug"] as const) {
    const original = console[level].bind(console);
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      logged.push(
        args
          .map((x) => (typeof x === "string" ? x : x instanceof Error ? `${x.message} ${x.stack}` : JSON.stringify(x)))
          .join(" "),
      );
      original(...args);
    });
  }
});
afterAll(() => vi.restoreAllMocks());

// ---- the matrix ----

describe("endpoint × role × scope", () => {
  for (const role of ROLES) {
    for (const scope of ["exact id", "prefix pattern"] as const) {
      for (const ep of ENDPOINTS) {
        const allowed = role !== "watcher" || !ep.write;
        it(`${role}, ${scope}, in scope: ${ep.name} → ${allowed ? "passes" : "403"}`, async () => {
          const run = freshId("run");
          const id = scope === "exact id" ? `${run}-ep` : `${run}:ep-1`;
          const t = await token(role, [scope === "exact id" ? id : `${run}:*`]);
          const a = await hit(AUTH_ENV, ep, id, auth(t));
          if (allowed) expectPassed(a, ep);
          else expectForbidden(a);
          if (allowed && role === "producer" && ep.name === "POST deltas") expect(a.status, a.text).toBe(200);
        });
        it(`${role}, ${scope}, out of scope: ${ep.name} → 403`, async () => {
          const run = freshId("run");
          // near misses: an id extending the exact one; an id sharing the prefix but for the separator
          const [pattern, other] = scope === "exact id" ? [`${run}-ep`, `${run}-ep2`] : [`${run}:*`, `${run}-x:ep-1`];
          const t = await token(role, [pattern]);
          expectForbidden(await hit(AUTH_ENV, ep, other, auth(t)));
        });
      }
    }
  }
});

describe("endpoint × token problem → 401", () => {
  const problems: Array<[string, () => Promise<Record<string, string>>, RegExp]> = [
    ["missing", async () => ({}), /missing/],
    ["malformed", async () => auth("not.a-jwt"), /malformed/],
    ["wrongly signed", async () => auth(await token("admin", ["*"], {}, { secret: WRONG_SECRET })), /signature/],
    ["expired", async () => auth(await token("admin", ["*"], { exp: now() - 3600 })), /expired/],
  ];
  for (const ep of ENDPOINTS) {
    for (const [problem, headers, reason] of problems) {
      it(`${ep.name}, ${problem} token → 401`, async () => {
        expectUnauthorized(await hit(AUTH_ENV, ep, freshId("p"), await headers()), reason);
      });
    }
  }
});

describe("token validation", () => {
  const status = ENDPOINTS.find((e) => e.name === "GET status")!;
  const cases: Array<[string, () => Promise<string>, RegExp]> = [
    [
      'alg "none"',
      async () => new UnsecuredJWT({ role: "admin", episodes: ["*"] }).setExpirationTime("1h").encode(),
      /algorithm|malformed/,
    ],
    ["HS512 with the right secret", () => token("admin", ["*"], {}, { alg: "HS512" }), /HS256/],
    ["no exp", () => sign({ role: "admin", episodes: ["*"] }), /exp/],
    ["not yet valid (nbf)", () => token("admin", ["*"], { nbf: now() + 3600 }), /nbf/],
    ["unknown role", () => token("superuser", ["*"]), /role/],
    ["no role", () => sign({ episodes: ["*"], exp: now() + 60 }), /role/],
    ["episodes not an array", () => token("admin", "*"), /episodes/],
    ["episodes with a slash pattern", () => token("admin", ["run-42/*"]), /episodes/],
    ["episodes with an inner *", () => token("admin", ["run-*-x"]), /episodes/],
    ["a well-signed payload that is not JSON", () => signRaw('{"alg":"HS256"}', "nope"), /malformed/],
    ["a well-signed payload that is a JSON array", () => signRaw('{"alg":"HS256"}', '["admin"]'), /malformed/],
  ];
  for (const [name, make, reason] of cases) {
    it(`${name} → 401`, async () => {
      const t = await make();
      minted.push(t);
      expectUnauthorized(await hit(AUTH_ENV, status, freshId("v"), auth(t)), reason);
    });
  }

  it("an Authorization header with another scheme → 401", async () => {
    expectUnauthorized(await hit(AUTH_ENV, status, freshId("v"), { authorization: `Basic ${btoa("a:b")}` }), /Bearer/);
  });

  it("expiry within the 30 s clock tolerance is accepted; 60 s past is not", async () => {
    expectPassed(
      await hit(AUTH_ENV, status, freshId("v"), auth(await token("watcher", ["*"], { exp: now() - 5 }))),
      status,
    );
    expectUnauthorized(
      await hit(AUTH_ENV, status, freshId("v"), auth(await token("watcher", ["*"], { exp: now() - 60 }))),
      /expired/,
    );
  });

  it('"*" grants every episode; several patterns are each honoured', async () => {
    const all = await token("watcher", ["*"]);
    expectPassed(await hit(AUTH_ENV, status, freshId("any"), auth(all)), status);
    const some = await token("watcher", ["exact-one", "run-7:*", "run-8.*"]);
    for (const id of ["exact-one", "run-7:a", "run-7:", "run-8.x"]) {
      expectPassed(await hit(AUTH_ENV, status, id, auth(some)), status);
    }
    for (const id of ["exact-one2", "run-7", "run-70:a", "run-8x"])
      expectForbidden(await hit(AUTH_ENV, status, id, auth(some)));
  });

  it("an empty episodes list grants nothing", async () => {
    expectForbidden(await hit(AUTH_ENV, status, freshId("v"), auth(await token("admin", []))));
  });
});

describe("listing and other paths", () => {
  it("GET /v1/episodes takes any valid token (the index filters by scope: test/workers/index.test.ts)", async () => {
    const url = `${HOST}/v1/episodes?prefix=${freshId("none")}`;
    expectUnauthorized(await call(AUTH_ENV, "GET", url));
    for (const role of ROLES) {
      const headers = auth(await token(role, ["*"]));
      // the suite's files share one directory: a scan over its runs may end at its budget with a
      // cursor (a page may be short and still have one); every page is empty, and the last says null
      let page = await call(AUTH_ENV, "GET", url, { headers });
      for (let pages = 1; ; pages++) {
        expect(page.status, page.text).toBe(200);
        const body = page.json as { episodes: unknown[]; cursor: string | null };
        expect(body.episodes).toEqual([]);
        if (body.cursor === null) break;
        expect(pages, "pages").toBeLessThan(100);
        page = await call(AUTH_ENV, "GET", `${url}&cursor=${encodeURIComponent(body.cursor)}`, { headers });
      }
    }
    expectUnauthorized(await call(AUTH_ENV, "GET", `${HOST}/v1/episodes/watch`, { headers: upgrade }));
  });

  it("unknown paths need a token, then answer as before (404, 400 bad id, 405)", async () => {
    const t = auth(await token("watcher", ["*"]));
    expectUnauthorized(await call(AUTH_ENV, "GET", `${HOST}/nope`));
    expect((await call(AUTH_ENV, "GET", `${HOST}/nope`, { headers: t })).status).toBe(404);
    expect((await call(AUTH_ENV, "GET", `${HOST}/v1/episodes/bad%20id`, { headers: t })).status).toBe(400);
    const wrongMethod = await call(AUTH_ENV, "PUT", `${HOST}/v1/episodes/${freshId("m")}/deltas`, { headers: t });
    expect(wrongMethod.status).toBe(405);
  });

  it("GET /v1/health needs no token, and ignores a bad one", async () => {
    for (const e of [AUTH_ENV, CLOSED_ENV, LOOPBACK_ENV]) {
      const a = await call(e, "GET", `${HOST}/v1/health`);
      expect(a.status).toBe(200);
      expect(a.json).toEqual({ ok: true, service: "episode-relay" });
      expect((await call(e, "GET", `${HOST}/v1/health`, { headers: auth("garbage") })).status).toBe(200);
    }
  });
});

describe("WebSocket tokens", () => {
  const ingest = ENDPOINTS.find((e) => e.name === "ingest socket")!;
  const watch = ENDPOINTS.find((e) => e.name === "watch socket")!;
  for (const ep of [ingest, watch]) {
    const role: Role = ep === ingest ? "producer" : "watcher";

    it(`${ep.name}: ?token= is accepted; a bad one is 401`, async () => {
      const id = freshId("q");
      const t = await token(role, [id]);
      expectPassed(await hit(AUTH_ENV, ep, id, {}, HOST, `?token=${encodeURIComponent(t)}`), ep);
      expectUnauthorized(await hit(AUTH_ENV, ep, id, {}, HOST, "?token=abc.def.ghi"), /malformed/);
      const wrong = await token(role, [id], {}, { secret: WRONG_SECRET });
      expectUnauthorized(await hit(AUTH_ENV, ep, id, {}, HOST, `?token=${wrong}`), /signature/);
    });

    it(`${ep.name}: Sec-WebSocket-Protocol "episode-relay, bearer.<token>" is accepted and answered "episode-relay"`, async () => {
      const id = freshId("sp");
      const t = await token(role, [id]);
      const a = await hit(AUTH_ENV, ep, id, { "sec-websocket-protocol": `episode-relay, bearer.${t}` });
      expectPassed(a, ep);
      expect(a.headers.get("sec-websocket-protocol")).toBe("episode-relay");
      const expired = await token(role, [id], { exp: now() - 3600 });
      expectUnauthorized(
        await hit(AUTH_ENV, ep, id, { "sec-websocket-protocol": `episode-relay, bearer.${expired}` }),
        /expired/,
      );
    });

    it(`${ep.name}: a bearer.<token> entry without "episode-relay" is 400`, async () => {
      const id = freshId("sp");
      const a = await hit(AUTH_ENV, ep, id, { "sec-websocket-protocol": `bearer.${await token(role, [id])}` });
      expect(a.status).toBe(400);
      expect(a.json).toMatchObject({ error: "bad_protocol" });
    });
  }

  it("the socket's scope and role are checked like HTTP: a watcher token cannot open the ingest socket", async () => {
    const id = freshId("sp");
    const t = await token("watcher", [id]);
    expectForbidden(await hit(AUTH_ENV, ingest, id, { "sec-websocket-protocol": `episode-relay, bearer.${t}` }));
    expectForbidden(await hit(AUTH_ENV, ingest, id, {}, HOST, `?token=${t}`));
    const other = await token("watcher", [`${id}x`]);
    expectForbidden(await hit(AUTH_ENV, watch, id, {}, HOST, `?token=${other}`));
  });

  it("without a bearer entry the offered episode-relay protocol is still answered (auth by header)", async () => {
    const id = freshId("sp");
    const a = await hit(AUTH_ENV, watch, id, {
      ...auth(await token("watcher", [id])),
      "sec-websocket-protocol": "episode-relay",
    });
    expect(a.status).toBe(101);
    expect(a.headers.get("sec-websocket-protocol")).toBe("episode-relay");
  });

  it("?token= is not accepted on plain HTTP requests", async () => {
    const id = freshId("q");
    const t = await token("admin", ["*"]);
    const a = await call(AUTH_ENV, "GET", `${HOST}/v1/episodes/${id}/status?token=${t}`);
    expectUnauthorized(a, /WebSocket upgrades/);
    // nor on a non-upgrade request to a socket endpoint
    expectUnauthorized(await call(AUTH_ENV, "GET", `${HOST}/v1/episodes/${id}/ingest?token=${t}`));
  });

  it("precedence: the Authorization header wins over ?token=", async () => {
    const id = freshId("q");
    const good = await token("watcher", [id]);
    expectPassed(await hit(AUTH_ENV, watch, id, auth(good), HOST, "?token=garbage"), watch);
    expectUnauthorized(await hit(AUTH_ENV, watch, id, auth("garbage"), HOST, `?token=${good}`));
  });
});

describe("no token travels past the Worker", () => {
  it("the Durable Objects (episode and viewer hub) get no Authorization, no ?token=, no bearer.* entry; other params stay", async () => {
    const seen: Request[] = [];
    const calls: unknown[][] = [];
    const fakeNamespace = {
      getByName: () => ({
        fetch: async (r: Request) => {
          seen.push(r);
          return Response.json({ ok: true });
        },
        // plain requests arrive as RPC calls: only the id and what the method needs
        status: async (...args: unknown[]) => {
          calls.push(args);
          return { ok: true, value: { ok: true } };
        },
      }),
    };
    const e = { ...AUTH_ENV, EPISODES: fakeNamespace, HUBS: fakeNamespace } as unknown as Env;
    const id = freshId("strip");
    const t = await token("producer", [id]);
    expect((await call(e, "GET", `${HOST}/v1/episodes/${id}/status?token=${t}`, { headers: auth(t) })).status).toBe(
      200,
    );
    await call(e, "GET", `${HOST}/v1/episodes/${id}/watch?after=3&token=${t}`, { headers: upgrade });
    await call(e, "GET", `${HOST}/v1/episodes/${id}/ingest`, {
      headers: { ...upgrade, "sec-websocket-protocol": `episode-relay, bearer.${t}` },
    });
    expect(calls).toEqual([[id]]);
    expect(seen).toHaveLength(2);
    for (const r of seen) {
      expect(r.headers.get("authorization")).toBeNull();
      expect(r.url).not.toContain("token");
      expect(r.headers.get("x-episode-id")).toBe(id);
      expect(JSON.stringify([...r.headers])).not.toContain(t);
    }
    expect(new URL(seen[0]!.url).searchParams.get("after")).toBe("3");
    expect(seen[0]!.headers.get("x-hub-shard"), "a watcher goes to a hub").toBe("0");
    expect(seen[1]!.headers.get("sec-websocket-protocol")).toBe("episode-relay");
  });
});

describe("modes", () => {
  it("fail closed: no secret and not local dev → 503 on every endpoint, even with a token", async () => {
    const t = auth(await token("admin", ["*"]));
    for (const ep of ENDPOINTS) {
      for (const host of [HOST, "http://127.0.0.1:8787", "http://relay.test"]) {
        for (const headers of [{}, t]) {
          const a = await hit(CLOSED_ENV, ep, freshId("closed"), headers, host);
          expect(a.status, `${ep.name} ${host}`).toBe(503);
          expect(a.json).toMatchObject({ error: "auth_not_configured" });
          expect(a.json?.message).toMatch(/RELAY_SECRET/);
        }
      }
    }
    expect((await call(CLOSED_ENV, "GET", `${HOST}/v1/episodes`)).status).toBe(503);
    expect((await call(CLOSED_ENV, "GET", `${HOST}/nope`)).status).toBe(503);
    const preflight = await call(CLOSED_ENV, "OPTIONS", `${HOST}/v1/episodes/x/status`, {
      headers: { origin: DASHBOARD, "access-control-request-method": "GET" },
    });
    expect(preflight.status).toBe(503);
  });

  it("no secret, local dev flag, but a non-local host (e.g. DNS rebinding) → 503", async () => {
    for (const host of [HOST, "http://192.168.1.5:8787", "http://localhost.evil.example", "http://127.0.0.1.nip.io"]) {
      const a = await hit(LOOPBACK_ENV, ENDPOINTS[4]!, freshId("lb"), {}, host);
      expect(a.status, host).toBe(503);
    }
  });

  it("no secret, local dev flag, local host → auth off: every endpoint passes without a token", async () => {
    for (const host of [
      "http://127.0.0.1:8787",
      "http://localhost:8787",
      "http://[::1]:8787",
      "http://relay.test",
      "http://x.localhost",
    ]) {
      for (const ep of ENDPOINTS) expectPassed(await hit(LOOPBACK_ENV, ep, freshId("lb"), {}, host), ep);
    }
  });

  it("auth off on loopback still refuses web pages of other origins (no drive-by writes or sockets)", async () => {
    const deltas = ENDPOINTS[0]!;
    const ingest = ENDPOINTS[1]!;
    const local = "http://127.0.0.1:8787";
    expectForbidden(await hit(LOOPBACK_ENV, deltas, freshId("o"), { origin: "https://evil.example" }, local));
    expectForbidden(await hit(LOOPBACK_ENV, ingest, freshId("o"), { origin: "https://evil.example" }, local));
    expectPassed(await hit(LOOPBACK_ENV, ingest, freshId("o"), { origin: "http://localhost:5173" }, local), ingest);
    expectPassed(await hit(LOOPBACK_ENV, deltas, freshId("o"), { origin: DASHBOARD }, local), deltas); // listed in CORS_ORIGINS
  });

  it("auth off on loopback: the episode-relay subprotocol is still answered, a bare bearer entry still 400", async () => {
    const watch = ENDPOINTS[5]!;
    const local = "http://localhost:8787";
    const a = await hit(
      LOOPBACK_ENV,
      watch,
      freshId("lbp"),
      { "sec-websocket-protocol": "episode-relay, bearer.whatever" },
      local,
    );
    expect(a.status).toBe(101);
    expect(a.headers.get("sec-websocket-protocol")).toBe("episode-relay");
    expect(
      (await hit(LOOPBACK_ENV, watch, freshId("lbp"), { "sec-websocket-protocol": "bearer.whatever" }, local)).status,
    ).toBe(400);
  });

  it("a secret wins over the local dev flag: tokens are required even on localhost", async () => {
    const e = { ...AUTH_ENV, AUTH_OFF_ON_LOOPBACK: "true" };
    const status = ENDPOINTS[4]!;
    expectUnauthorized(await hit(e, status, freshId("s"), {}, "http://127.0.0.1:8787"));
    expectPassed(
      await hit(e, status, freshId("s"), auth(await token("watcher", ["*"])), "http://127.0.0.1:8787"),
      status,
    );
  });

  it("an empty RELAY_SECRET counts as no secret (fail closed)", async () => {
    const a = await hit(
      { ...CLOSED_ENV, RELAY_SECRET: "" },
      ENDPOINTS[4]!,
      freshId("s"),
      auth(await token("admin", ["*"])),
    );
    expect(a.status).toBe(503);
  });
});

describe("keys and lifetimes", () => {
  const status = ENDPOINTS[4]!;
  const OLD = "auth-test-previous-secret-5e8a1f7c2b9d4e6a03c1";
  const THIRD = "auth-test-unrelated-secret-9f0e1d2c3b4a59687766";

  /** The key id the relay derives from a secret, computed here independently: SHA-256 over the label and the secret. */
  async function kidOf(secret: string): Promise<string> {
    const d = new Uint8Array(
      await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`episode-relay key id\u0000${secret}`)),
    );
    return [...d.slice(0, 8)].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function signed(secret: string, kid: string | null, claims: Record<string, unknown> = {}): Promise<string> {
    const t = await new SignJWT({ role: "watcher", episodes: ["*"], exp: now() + 600, ...claims })
      .setProtectedHeader(kid === null ? { alg: "HS256" } : { alg: "HS256", kid })
      .setIssuedAt()
      .sign(new TextEncoder().encode(secret));
    minted.push(t);
    return t;
  }

  it("a secret shorter than 32 bytes fails closed on every request but health, saying why; 32 bytes are enough", async () => {
    for (const secret of ["x", "s".repeat(31), "é".repeat(15)]) {
      const e = { ...AUTH_ENV, RELAY_SECRET: secret };
      for (const ep of ENDPOINTS) {
        const a = await hit(e, ep, freshId("weak"), auth(await signed(secret.padEnd(32, "!"), null)));
        expect(a.status, `${ep.name} ${secret.length}`).toBe(503);
        expect(a.json).toMatchObject({ error: "auth_not_configured" });
        expect(a.json?.message).toMatch(/RELAY_SECRET is \d+ bytes long; it must be at least 32/);
      }
      expect((await call(e, "GET", `${HOST}/v1/runs`)).status).toBe(503);
      expect((await call(e, "GET", `${HOST}/v1/health`)).status).toBe(200);
    }
    const exact = "é".repeat(16); // 16 characters, 32 UTF-8 bytes
    expectPassed(
      await hit({ ...AUTH_ENV, RELAY_SECRET: exact }, status, freshId("ok"), auth(await signed(exact, null))),
      status,
    );
    const a = await hit(
      { ...AUTH_ENV, RELAY_SECRET_PREVIOUS: "short" },
      status,
      freshId("weak"),
      auth(await token("watcher", ["*"])),
    );
    expect([a.status, a.json?.message]).toEqual([503, expect.stringMatching(/RELAY_SECRET_PREVIOUS is 5 bytes long/)]);
  });

  it("tokens carry the key id of their secret; one naming no key of the relay is refused", async () => {
    const t = await mintToken(SECRET, { role: "watcher", episodes: ["*"], ttl: 60 });
    minted.push(t);
    expect(decodeProtectedHeader(t)).toMatchObject({ alg: "HS256", kid: await kidOf(SECRET) });
    expectPassed(await hit(AUTH_ENV, status, freshId("kid"), auth(t)), status);
    expectUnauthorized(
      await hit(AUTH_ENV, status, freshId("kid"), auth(await signed(SECRET, "0123456789abcdef"))),
      /kid names none/,
    );
  });

  it("a rollover: RELAY_SECRET_PREVIOUS still verifies what it signed (kid or none); a third key and the old one after the rollover do not", async () => {
    const during = { ...AUTH_ENV, RELAY_SECRET_PREVIOUS: OLD };
    const old = await signed(OLD, await kidOf(OLD));
    const oldNoKid = await signed(OLD, null);
    const current = await signed(SECRET, await kidOf(SECRET));
    for (const t of [old, oldNoKid, current]) expectPassed(await hit(during, status, freshId("roll"), auth(t)), status);
    // a token naming the old key but signed by another one: its signature fails against the key it names
    expectUnauthorized(
      await hit(during, status, freshId("roll"), auth(await signed(THIRD, await kidOf(OLD)))),
      /signature/,
    );
    expectUnauthorized(await hit(during, status, freshId("roll"), auth(await signed(THIRD, null))), /signature/);
    // an old token that is expired says so, whichever key is tried first
    expectUnauthorized(
      await hit(during, status, freshId("roll"), auth(await signed(OLD, null, { exp: now() - 120 }))),
      /expired/,
    );
    // the rollover done (the previous secret removed): the old key's tokens stop working
    expectUnauthorized(await hit(AUTH_ENV, status, freshId("roll"), auth(old)));
    expectUnauthorized(await hit(AUTH_ENV, status, freshId("roll"), auth(oldNoKid)), /signature/);
  });

  it("a token may live at most its role's TOKEN_MAX_TTL (default producer 30d, watcher 7d, admin 1d)", async () => {
    const day = 86400;
    const life = async (role: Role, seconds: number, extra: Record<string, unknown> = {}) =>
      hit(AUTH_ENV, status, freshId("ttl"), auth(await token(role, ["*"], { exp: now() + seconds, ...extra })));
    expectPassed(await life("watcher", 7 * day), status);
    expectUnauthorized(await life("watcher", 7 * day + 120), /lifetime exceeds the watcher maximum of 7d/);
    expectPassed(await life("producer", 30 * day), status);
    expectUnauthorized(await life("producer", 31 * day), /producer maximum of 30d/);
    expectUnauthorized(await life("admin", 2 * day), /admin maximum of 1d/);
    // issued long ago: counted from iat, not from now; no iat, or one in the future: counted from now
    const issuedAt = async (iat: number | null, exp: number) => {
      const jwt = new SignJWT({ role: "watcher", episodes: ["*"], exp }).setProtectedHeader({ alg: "HS256" });
      const t = await (iat === null ? jwt : jwt.setIssuedAt(iat)).sign(new TextEncoder().encode(SECRET));
      minted.push(t);
      return hit(AUTH_ENV, status, freshId("ttl"), auth(t));
    };
    expectUnauthorized(await issuedAt(now() - 7 * day, now() + 3600), /lifetime exceeds/);
    expectPassed(await issuedAt(now() - 6 * day, now() + 3600), status);
    expectUnauthorized(await issuedAt(null, now() + 8 * day), /lifetime exceeds/);
    expectPassed(await issuedAt(null, now() + 6 * day), status);
    expectUnauthorized(await issuedAt(now() + day, now() + 8 * day), /lifetime exceeds/);
    // configured: per role, the others keep their defaults; an unreadable value fails closed
    const short = { ...AUTH_ENV, TOKEN_MAX_TTL: "watcher=1h" };
    expectUnauthorized(
      await hit(short, status, freshId("ttl"), auth(await token("watcher", ["*"], { exp: now() + 7200 }))),
      /maximum of 1h/,
    );
    expectPassed(
      await hit(short, status, freshId("ttl"), auth(await token("producer", ["*"], { exp: now() + 7200 }))),
      status,
    );
    const bad = await hit(
      { ...AUTH_ENV, TOKEN_MAX_TTL: "watcher=forever" },
      status,
      freshId("ttl"),
      auth(await token("watcher", ["*"])),
    );
    expect([bad.status, bad.json?.error]).toEqual([503, "auth_not_configured"]);
  });

  it("mintToken refuses a short secret and a lifetime past the role's maximum", async () => {
    await expect(mintToken("short", { role: "watcher", episodes: ["*"], ttl: 60 })).rejects.toThrow(/at least 32/);
    await expect(mintToken(SECRET, { role: "admin", episodes: ["*"], ttl: 2 * 86400 })).rejects.toThrow(
      /admin maximum/,
    );
  });
});

describe("CORS", () => {
  const preflight = (e: Env, origin: string, path = "/v1/episodes/x/deltas") =>
    call(e, "OPTIONS", `${HOST}${path}`, {
      headers: {
        origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
      },
    });

  it("a preflight from an allowed origin → 204 with the allow headers, no token needed", async () => {
    const a = await preflight(AUTH_ENV, DASHBOARD);
    expect(a.status).toBe(204);
    expect(a.headers.get("access-control-allow-origin")).toBe(DASHBOARD);
    const methods = a.headers.get("access-control-allow-methods")!;
    for (const m of ["GET", "POST", "DELETE"]) expect(methods).toContain(m);
    const allowHeaders = a.headers.get("access-control-allow-headers")!.toLowerCase();
    for (const h of ["authorization", "content-type"]) expect(allowHeaders).toContain(h);
    expect(Number(a.headers.get("access-control-max-age"))).toBeGreaterThan(0);
    expect(a.headers.get("vary")).toMatch(/Origin/);
    expect(a.headers.get("access-control-allow-credentials")).toBeNull();
  });

  it("a preflight from another origin gets no allow headers", async () => {
    const a = await preflight(AUTH_ENV, "https://evil.example");
    expect(a.status).toBe(204);
    expect(a.headers.get("access-control-allow-origin")).toBeNull();
    expect(a.headers.get("access-control-allow-methods")).toBeNull();
  });

  it('CORS_ORIGINS="*" allows any origin; "" allows none; lists may have several entries', async () => {
    expect(
      (await preflight({ ...AUTH_ENV, CORS_ORIGINS: "*" }, "https://any.example")).headers.get(
        "access-control-allow-origin",
      ),
    ).toBe("*");
    expect(
      (await preflight({ ...AUTH_ENV, CORS_ORIGINS: "" }, DASHBOARD)).headers.get("access-control-allow-origin"),
    ).toBeNull();
    const two = { ...AUTH_ENV, CORS_ORIGINS: `http://localhost:5173, ${DASHBOARD}/` };
    expect((await preflight(two, "http://localhost:5173")).headers.get("access-control-allow-origin")).toBe(
      "http://localhost:5173",
    );
    expect((await preflight(two, DASHBOARD)).headers.get("access-control-allow-origin")).toBe(DASHBOARD);
  });

  it("normal responses carry Allow-Origin, Vary: Origin and expose ETag; refusals too", async () => {
    const id = freshId("cors");
    const t = await token("producer", [id]);
    const ok = await call(AUTH_ENV, "POST", `${HOST}/v1/episodes/${id}/deltas`, {
      headers: { ...auth(t), origin: DASHBOARD, "content-type": "application/msgpack" },
      body: openDelta(),
    });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("access-control-allow-origin")).toBe(DASHBOARD);
    expect(ok.headers.get("vary")).toMatch(/Origin/);
    expect(ok.headers.get("access-control-expose-headers")).toMatch(/ETag/);
    const got = await call(AUTH_ENV, "GET", `${HOST}/v1/episodes/${id}`, {
      headers: { ...auth(t), origin: DASHBOARD },
    });
    expect(got.status).toBe(200);
    expect(got.headers.get("access-control-allow-origin")).toBe(DASHBOARD);
    const refused = await call(AUTH_ENV, "GET", `${HOST}/v1/episodes/${id}`, { headers: { origin: DASHBOARD } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get("access-control-allow-origin")).toBe(DASHBOARD);
    const health = await call(AUTH_ENV, "GET", `${HOST}/v1/health`, { headers: { origin: DASHBOARD } });
    expect(health.headers.get("access-control-allow-origin")).toBe(DASHBOARD);
  });

  it("responses to other origins or without Origin carry no Allow-Origin (but Vary: Origin)", async () => {
    const a = await call(AUTH_ENV, "GET", `${HOST}/v1/health`, { headers: { origin: "https://evil.example" } });
    expect(a.headers.get("access-control-allow-origin")).toBeNull();
    expect(a.headers.get("vary")).toMatch(/Origin/);
    const b = await call(AUTH_ENV, "GET", `${HOST}/v1/health`);
    expect(b.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("OPTIONS that is not a preflight is routed as before (after auth): 405", async () => {
    const t = auth(await token("admin", ["*"]));
    expectUnauthorized(await call(AUTH_ENV, "OPTIONS", `${HOST}/v1/episodes/x/status`));
    expect((await call(AUTH_ENV, "OPTIONS", `${HOST}/v1/episodes/x/status`, { headers: t })).status).toBe(405);
  });
});

describe("secrets stay secret", () => {
  it("no response body or header contained a token or the secret", () => {
    expect(minted.length).toBeGreaterThan(100);
    expect(answered.length).toBeGreaterThan(100);
    const all = answered.join("\n");
    for (const s of [SECRET, WRONG_SECRET]) expect(all).not.toContain(s);
    for (const t of minted) {
      expect(all).not.toContain(t);
      const sig = t.split(".")[2];
      if (sig) expect(all).not.toContain(sig); // not even the signature
    }
  });

  it("nothing logged contained a token or the secret", () => {
    const all = logged.join("\n");
    for (const s of [SECRET, WRONG_SECRET]) expect(all).not.toContain(s);
    for (const t of minted) {
      expect(all).not.toContain(t);
      const sig = t.split(".")[2];
      if (sig) expect(all).not.toContain(sig);
    }
  });
});

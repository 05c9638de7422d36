// Share links name the relay's public origin: PUBLIC_URL when set, else the origin the request
// came to; a PUBLIC_URL that is not an origin makes no link at all. Through the real Worker, with
// auth on (a token in the link's fragment) and off (a plain link).
import { env } from "cloudflare:workers";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import worker from "../../src/worker/index.js";

const SECRET = "share-link-secret-3e8d1a6c0b9f4725e1d3c5a7b9f0e2d4";
const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
/** Where the request goes, and the public origin a deploy may say instead. */
const HOST = "https://relay-internal.example.com";
const PUBLIC = "https://relay.example.org";
const RUN = `share-${Date.now().toString(36)}`;

async function share(e: Env, host = HOST): Promise<{ status: number; body: Record<string, unknown> | null }> {
  const admin = await new SignJWT({ role: "admin", episodes: ["*"] })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(SECRET));
  const res = await worker.fetch(
    new Request(`${host}/v1/runs/${RUN}/share`, { method: "POST", headers: { authorization: `Bearer ${admin}` } }),
    e,
  );
  const text = await res.text();
  let body: Record<string, unknown> | null = null;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    body = null;
  }
  return { status: res.status, body };
}

describe("a share link's origin", () => {
  it("is the request's own when PUBLIC_URL is unset (wrangler.toml's default, empty)", async () => {
    expect(env.PUBLIC_URL).toBe("");
    const { status, body } = await share(AUTH_ENV);
    expect(status).toBe(200);
    expect(body!.url).toBe(`${HOST}/runs/${RUN}#token=${encodeURIComponent(body!.token as string)}`);
  });

  it("is PUBLIC_URL's when set (a trailing slash or not), the token in the fragment", async () => {
    for (const value of [PUBLIC, `${PUBLIC}/`, ` ${PUBLIC} `]) {
      const { status, body } = await share({ ...AUTH_ENV, PUBLIC_URL: value });
      expect(status, value).toBe(200);
      expect(body!.url, value).toBe(`${PUBLIC}/runs/${RUN}#token=${encodeURIComponent(body!.token as string)}`);
    }
  });

  it("with auth off, is a plain link on PUBLIC_URL's origin (no token to carry)", async () => {
    const off: Env = { ...env, RELAY_SECRET: undefined, AUTH_OFF_ON_LOOPBACK: "true", PUBLIC_URL: PUBLIC };
    const { status, body } = await share(off, "http://relay.test");
    expect(status).toBe(200);
    expect(body).toMatchObject({ token: null, url: `${PUBLIC}/runs/${RUN}` });
  });

  it("a PUBLIC_URL that is not an http(s) origin makes no link (and no token)", async () => {
    for (const value of ["relay.example.org", `${PUBLIC}/relay`, `${PUBLIC}/?x=1`, "ftp://relay.example.org"]) {
      const { status, body } = await share({ ...AUTH_ENV, PUBLIC_URL: value });
      expect(status, value).toBe(500);
      expect(JSON.stringify(body), value).not.toMatch(/token=|eyJ/);
    }
  });
});

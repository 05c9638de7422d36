// Share links never outlive their maker (issue 39, finding 6), through the real Worker: a share
// expires when the admin token that made it does, at the latest, and is signed with the key that
// verified that token, so a share made with the previous key during a rollover ends with the
// rollover. Tokens are made here with jose, independently of src/protocol/http/auth.ts.
import { env } from "cloudflare:workers";
import { decodeJwt, decodeProtectedHeader, SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import worker from "../../src/worker/index.js";
import { freshId } from "./support.js";

const NEW = "share-test-current-secret-3c9e1a7f5b2d4086e1f2";
const OLD = "share-test-previous-secret-8a4f2c6e0b1d3957a2c4";
const HOST = "https://relay.example.com";
const base: Env = { ...env, AUTH_OFF_ON_LOOPBACK: undefined };
const AFTER: Env = { ...base, RELAY_SECRET: NEW };
const DURING: Env = { ...AFTER, RELAY_SECRET_PREVIOUS: OLD };

const nowS = () => Math.floor(Date.now() / 1000);

async function kidOf(secret: string): Promise<string> {
  const d = new Uint8Array(
    await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`episode-relay key id\u0000${secret}`)),
  );
  return [...d.slice(0, 8)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** An admin token for every episode, signed with `secret` (naming its key, or none), expiring at `exp`. */
async function admin(secret: string, exp: number, named = true): Promise<string> {
  return new SignJWT({ role: "admin", episodes: ["*"], exp })
    .setProtectedHeader(named ? { alg: "HS256", kid: await kidOf(secret) } : { alg: "HS256" })
    .setIssuedAt()
    .sign(new TextEncoder().encode(secret));
}

async function share(e: Env, maker: string, run: string, query = ""): Promise<{ token: string; expires: string }> {
  const res = await worker.fetch(
    new Request(`${HOST}/v1/runs/${run}/share${query}`, {
      method: "POST",
      headers: { authorization: `Bearer ${maker}` },
    }),
    e,
  );
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as { token: string; expires: string };
}

/** What a request of the share gets: 401 when its token is refused, else the route's own answer (404: no such episode). */
async function use(e: Env, token: string, run: string): Promise<number> {
  const res = await worker.fetch(
    new Request(`${HOST}/v1/episodes/${run}:e/status`, { headers: { authorization: `Bearer ${token}` } }),
    e,
  );
  await res.arrayBuffer();
  return res.status;
}

describe("a share's lifetime", () => {
  it("ends when its maker's token does: 7 days asked of a 1-hour admin gives 1 hour; a shorter ?ttl= is kept", async () => {
    const run = freshId("share");
    const exp = nowS() + 3600;
    const maker = await admin(NEW, exp);
    const s = await share(AFTER, maker, run);
    expect(decodeJwt(s.token).exp).toBe(exp);
    expect(Date.parse(s.expires) / 1000).toBe(exp);
    const short = await share(AFTER, maker, run, "?ttl=10m");
    const c = decodeJwt(short.token);
    expect(c.exp! - c.iat!).toBe(600);
    expect(c.exp).toBeLessThan(exp);
    // an explicit ttl past the maker's remaining life is capped too (still within the watcher's maximum)
    expect(decodeJwt((await share(AFTER, maker, run, "?ttl=2d")).token).exp).toBe(exp);
    expect(await use(AFTER, s.token, run)).toBe(404);
  });

  it("made during a rollover with the previous key (named or not): signed with it, refused once the rollover ends", async () => {
    const run = freshId("roll");
    for (const named of [true, false]) {
      const s = await share(DURING, await admin(OLD, nowS() + 3600, named), run);
      expect(decodeProtectedHeader(s.token).kid).toBe(await kidOf(OLD));
      expect(await use(DURING, s.token, run)).toBe(404);
      expect(await use(AFTER, s.token, run)).toBe(401);
    }
    // one made with the current key lives on after the rollover, as its maker does
    const current = await share(DURING, await admin(NEW, nowS() + 3600), run);
    expect(decodeProtectedHeader(current.token).kid).toBe(await kidOf(NEW));
    expect(await use(AFTER, current.token, run)).toBe(404);
  });
});

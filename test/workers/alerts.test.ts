// Who may set and read a run's alerts, through the real Worker with auth on (tokens made here with
// jose, as auth.test.ts does): an admin covering the run sets them; a watcher or a producer is
// refused 403 (the webhooks' secrets sign what the relay sends), an admin of another run gets the
// 404 a run nobody wrote gets, as for every run route, and an admin covering part of the run 403.
// Anyone covering the whole run reads them, a webhook's URL shown in full to an admin only.
import { env } from "cloudflare:workers";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import worker from "../../src/worker/index.js";

const SECRET = "alerts-test-secret-5c2e9a7f3b1d48e6a0c4f2b8d6e1a3c5";
const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
const HOST = "https://relay.example.com";
const RUN = `alerts-auth-${Date.now().toString(36)}`;
const HOOK = { url: "https://hooks.example.com/services/T000/B000/XXXXSECRETPATH", secret: "hook-secret-0123456789" };
const BODY = { webhooks: [HOOK], rules: [{ id: "flagged", kind: "flag" }] };

async function token(role: "admin" | "watcher" | "producer", episodes: string[]): Promise<string> {
  return new SignJWT({ role, episodes })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(SECRET));
}

async function call(method: "GET" | "PUT", tok: string, run = RUN): Promise<{ status: number; body: unknown }> {
  const res = await worker.fetch(
    new Request(`${HOST}/v1/runs/${run}/alerts`, {
      method,
      headers: { authorization: `Bearer ${tok}`, "content-type": "application/json" },
      body: method === "PUT" ? JSON.stringify(BODY) : undefined,
    }),
    AUTH_ENV,
  );
  return { status: res.status, body: await res.json() };
}

describe("a run's alerts: who may set and read them", () => {
  it("an admin of the run sets them; a watcher, a producer, a part-run admin or another run's admin may not", async () => {
    const admin = await token("admin", [`${RUN}:*`]);
    for (const [tok, status, error] of [
      [await token("watcher", [`${RUN}:*`]), 403, "forbidden"],
      [await token("producer", [`${RUN}:*`]), 403, "forbidden"],
      [await token("admin", [`${RUN}:a*`]), 403, "forbidden"],
      [await token("admin", ["another-run:*"]), 404, "not_found"],
    ] as const) {
      const r = await call("PUT", tok);
      expect(r.status).toBe(status);
      expect(r.body).toMatchObject({ error: error });
    }
    // nothing was set by the refused ones: the run has no storage yet
    expect((await call("GET", admin)).status).toBe(404);
    const set = await call("PUT", admin);
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ webhooks: [{ url: HOOK.url }], rules: [{ id: "flagged" }], origin: HOST });
    expect(JSON.stringify(set.body)).not.toContain(HOOK.secret);
  });

  it("a watcher covering the run reads them with each webhook's origin only; another run's admin gets 404", async () => {
    const admin = await token("admin", [`${RUN}:*`]);
    expect((await call("PUT", admin)).status).toBe(200);
    const watched = await call("GET", await token("watcher", [`${RUN}:*`]));
    expect(watched.status).toBe(200);
    expect(watched.body).toMatchObject({
      webhooks: [{ url: "https://hooks.example.com" }],
      rules: [{ id: "flagged" }],
    });
    expect(JSON.stringify(watched.body)).not.toContain("SECRETPATH");
    expect(JSON.stringify(watched.body)).not.toContain(HOOK.secret);
    const own = await call("GET", admin);
    expect(own.body).toMatchObject({ webhooks: [{ url: HOOK.url }] });
    expect((await call("GET", await token("admin", ["another-run:*"]))).status).toBe(404);
  });
});

import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { Episode } from "../../src/index.js";

describe("worker", () => {
  it("GET /v1/health answers 200 with the service name", async () => {
    const res = await exports.default.fetch("http://relay.test/v1/health");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await res.json()).toEqual({ ok: true, service: "episode-relay" });
  });

  it("unknown routes answer 404 JSON", async () => {
    const res = await exports.default.fetch("http://relay.test/nope");
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: "not_found" });
  });
});

describe("Episode Durable Object", () => {
  it("is reachable through env.EPISODES and has SQLite storage", async () => {
    const stub = env.EPISODES.getByName("health-check");
    // without the Worker's episode-id header the object serves nothing
    const res = await stub.fetch("http://episode/v1/episodes/health-check");
    expect(res.status).toBe(404);
    await res.body?.cancel();

    const x = await runInDurableObject(stub, (instance, state) => {
      expect(instance).toBeInstanceOf(Episode);
      return state.storage.sql.exec<{ x: number }>("select 1 as x").one().x;
    });
    expect(x).toBe(1);
  });
});

import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { Episode } from "../../src/worker/index.js";

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

  it("every answer of the Worker says it is the relay's (X-Episode-Relay), refusals and errors too", async () => {
    for (const [path, status] of [
      ["/v1/health", 200],
      ["/v1/nope", 404],
      ["/v1/episodes/a%2Fb", 400],
      ["/v1/episodes/never-written-x", 404],
      ["/v1/episodes/never-written-x/watch", 426],
    ] as const) {
      const res = await exports.default.fetch(`http://relay.test${path}`);
      expect(res.status, path).toBe(status);
      expect(res.headers.get("x-episode-relay"), path).toBe("1");
      await res.body?.cancel();
    }
    const bad = await (await exports.default.fetch("http://relay.test/v1/episodes/a%23b")).json();
    expect(bad).toMatchObject({
      error: "bad_episode_id",
      message: expect.stringMatching(/1-128 characters of \[A-Za-z0-9\._:-\]/),
    });
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

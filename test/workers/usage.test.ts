// Billing units counted by the objects themselves (src/objects/billing/), read through the Worker's admin
// routes: a golden case posted, watched and read shows in its episode's and its hub's usage;
// reading usage counts as nothing; the run's index and directory answer theirs; only an admin
// token may read it. The exported classes stay classes (instanceof holds both ways).
import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { usageOf } from "../../src/objects/billing/metered.js";
import { Episode as EpisodeObject } from "../../src/objects/episode/episode.js";
import { DIRECTORY_MS, FTS_SHADOW } from "../../src/objects/registry/episode-index.js";
import type { Usage } from "../../src/protocol/billing/usage.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { RUNS_NAME } from "../../src/protocol/registry/run.js";
import worker, { Episode } from "../../src/worker/index.js";
import { freshId, getBytes, golden, post, pushFrames, relay } from "./support.js";
import { Watcher } from "./watcher.js";

type EpisodeUsage = { episode: Usage; hubs: Usage[] };

async function usage(id: string): Promise<EpisodeUsage> {
  const res = await relay(`${id}/usage`);
  expect(res.status, await res.clone().text()).toBe(200);
  return res.json();
}

async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean, what: string): Promise<T> {
  let v = await read();
  for (let i = 0; i < 200 && !ok(v); i++) {
    await new Promise((r) => setTimeout(r, 25));
    v = await read();
  }
  if (!ok(v)) throw new Error(`timed out: ${what}: ${JSON.stringify(v)}`);
  return v;
}

describe("usage", () => {
  it("a golden case posted, watched and read: requests, rows, bytes and the watcher's acks are counted", async () => {
    const c = await golden("chat_basic");
    const id = `usage-run-${freshId("r")}:ep`;
    const producer = new ProducerCursor("p");
    await pushFrames(id, c, 0, 1, producer);
    const w = await Watcher.open(id);
    let acks = 0;
    const ack = w.ack.bind(w);
    w.ack = () => {
      acks++;
      ack();
    };
    await w.read((x) => x.caughtUp);
    await pushFrames(id, c, 1, c.frames.length, producer);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    await w.read((x) => x.finished !== null);
    await getBytes(id);

    const calls = c.frames.length + 2; // the deltas, the reply, the GET (each one RPC call from the Worker)
    const u = await eventually(
      () => usage(id),
      (x) => x.hubs.length === 1 && x.hubs[0]!.wsIn >= acks,
      "the hub counts every ack",
    );
    const e = u.episode;
    expect(e.object).toBe("Episode");
    expect(e.requests).toBeGreaterThanOrEqual(calls);
    expect(e.rowsWritten).toBeGreaterThan(0);
    expect(e.rowsRead).toBeGreaterThan(0);
    expect(e.sqliteBytes).toBeGreaterThan(0);
    expect(e.wakes).toBeGreaterThanOrEqual(1);
    expect(e.activeMs).toBeGreaterThanOrEqual(10_000); // at least one event and its idle tail (the model)
    expect(e.activeMs).toBeGreaterThanOrEqual(e.busyMs);
    expect(e.wsIn).toBe(0); // the producer posted over HTTP
    const h = u.hubs[0]!;
    expect(h.object).toBe("ViewerHub");
    expect(acks).toBeGreaterThan(2);
    expect(h.wsIn).toBeGreaterThanOrEqual(acks);
    expect(h.requests).toBeGreaterThanOrEqual(2); // the upgrade and the episode's feeds
    w.close();

    // reading usage is not a request, of the episode or its hubs: were it one, every read would count
    // one more than the read before; an alarm or the hub's call after the close may still count one
    // between two reads (seen under load), so some pair of reads in a row must agree, not all
    const reads = [u];
    for (let i = 0; i < 3; i++) reads.push(await usage(id));
    const pairs = reads.slice(1).map((b, i) => [reads[i]!, b] as const);
    expect(pairs.some(([a, b]) => b.episode.requests === a.episode.requests)).toBe(true);
    expect(pairs.some(([a, b]) => b.hubs[0]!.requests === a.hubs[0]!.requests)).toBe(true);
  });

  it("a run's usage: its index and the run directory", async () => {
    const run = `usage-run-${freshId("idx")}`;
    const id = `${run}:ep`;
    await pushFrames(id, await golden("chat_basic"), 0, 1, new ProducerCursor("p"));
    const read = async () => {
      const res = await exports.default.fetch(`http://relay.test/v1/runs/${run}/usage`);
      expect(res.status, await res.clone().text()).toBe(200);
      return (await res.json()) as { index: Usage; directory: Usage };
    };
    const u = await eventually(
      read,
      (x) => x.index.requests >= 1 && x.index.rowsWritten > 0,
      "the episode's row reaches its index",
    );
    expect(u.index.object).toBe("EpisodeIndex");
    expect(u.directory.object).toBe("RunDirectory");
    expect(u.index.sqliteBytes).toBeGreaterThan(0);

    // rows written by table: the row (its index entries with it), the text and FTS5's own rows, summing to the total
    const c = await golden("chat_basic");
    await pushFrames(id, c, 1, c.frames.length, new ProducerCursor("p2"));
    const withText = await eventually(
      read,
      // the text is kept in packs (INDEX_SCHEMA 17: segment_packs, a row per statement)
      (x) => (x.index.written.segment_packs ?? 0) > 0 && (x.index.written[FTS_SHADOW] ?? 0) > 0,
      "the episode's text reaches its index",
    );
    const w = withText.index.written;
    expect(w.rows).toBeGreaterThan(1); // the row and its index entries
    expect(Object.values(w).reduce((a, b) => a + b, 0)).toBe(withText.index.rowsWritten);
  });

  it("a quiet run's index tells the directory at once: no alarm set per update; updates within DIRECTORY_MS share one", async () => {
    const run = `usage-dir-${freshId("d")}`;
    const read = async () => {
      const res = await exports.default.fetch(`http://relay.test/v1/runs/${run}/usage`);
      expect(res.status, await res.clone().text()).toBe(200);
      return (await res.json()) as { index: Usage; directory: Usage };
    };
    const listed = async () => {
      const page = await env.RUN_DIRECTORY.getByName(RUNS_NAME).runs(null, 10, null, run, true);
      return page.runs.find((r) => r.run === run)?.episodes ?? 0;
    };
    // each episode's first write sends its row at once; DIRECTORY_MS apart, each update tells the directory itself
    for (let i = 0; i < 2; i++) {
      await pushFrames(`${run}:${i}`, await golden("chat_basic"), 0, 1, new ProducerCursor("p"));
      await eventually(listed, (n) => n === i + 1, "the directory lists the run's rows");
      await new Promise((r) => setTimeout(r, DIRECTORY_MS));
    }
    expect((await read()).index.written.alarm ?? 0).toBe(0);
    // three within the interval: the first told at once, the others by one alarm
    for (let i = 2; i < 5; i++)
      await pushFrames(`${run}:${i}`, await golden("chat_basic"), 0, 1, new ProducerCursor("p"));
    await eventually(listed, (n) => n === 5, "the directory lists all five");
    expect((await read()).index.written.alarm ?? 0).toBeLessThanOrEqual(1);
  });

  it("a node's metadata is one row written (or a checkpoint's appended nodes' one), a list's bodies a run and its parts, a logged frame one", async () => {
    const c = await golden("chat_basic");
    const id = `usage-run-${freshId("w")}:ep`;
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    const stored = await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => {
      const n = (t: string) => state.storage.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${t}`).one().n;
      return {
        body_runs: n("body_runs"),
        body_parts: n("body_parts"),
        bodies: state.storage.sql.exec<{ n: number }>("SELECT SUM(json_array_length(vers)) AS n FROM body_runs").one()
          .n,
        node_meta: n("node_meta"),
        node_packs: n("node_packs"),
        frames: n("frames"),
      };
    });
    const w = (await usage(id)).episode.written;
    expect(stored.node_meta + stored.node_packs).toBeGreaterThan(1);
    // each node and item written once, none replaced (a rowid node_meta wrote two each, bodies with bodies_ver three);
    // a checkpoint's appended nodes are one row of node_packs (EPISODE_SCHEMA 11)
    expect(w.node_meta ?? 0).toBe(stored.node_meta);
    expect(w.node_packs ?? 0).toBe(stored.node_packs);
    // bodies written at once as one run per list, one row for the run and one per part (EPISODE_SCHEMA 12; a row and
    // its key per body before): each written once, and fewer rows than bodies
    expect(w.body_runs ?? 0).toBe(stored.body_runs);
    expect(w.body_parts ?? 0).toBe(stored.body_parts);
    expect(stored.body_runs + stored.body_parts).toBeLessThan(2 * stored.bodies);
    expect(w.bodies).toBeUndefined();
    // a logged frame (one part each here) is one row written, and one more if it leaves the log again: the log is
    // keyed by its rowid alone (EPISODE_SCHEMA 8; keyed by (seq, part), each was two)
    expect(stored.frames).toBeGreaterThan(1);
    expect(w.frames).toBe(c.frames.length + (c.frames.length - stored.frames));
  });

  it("the archive code counts R2 operations through usageOf; the exported class is a class, instanceof holds", async () => {
    const id = freshId("usage-r2");
    await pushFrames(id, await golden("chat_basic"), 0, 1, new ProducerCursor("p"));
    const stub = env.EPISODES.getByName(id);
    const before = (await usage(id)).episode.r2;
    await runInDurableObject(stub, (instance) => {
      expect(instance).toBeInstanceOf(Episode);
      expect(instance).toBeInstanceOf(EpisodeObject);
      const u = usageOf(instance)!;
      u.r2Put(1000);
      u.r2Get();
      u.r2Delete(1000);
    });
    const { r2 } = (await usage(id)).episode;
    expect(r2).toStrictEqual({
      classA: before.classA + 1,
      classB: before.classB + 1,
      deletes: before.deletes + 1,
      bytesWritten: before.bytesWritten + 1000,
      bytesStored: before.bytesStored ?? 0,
    });
  });

  it("each call from outside is one request; the object's own calls (ingest → ingestMessage → ...) count nothing", async () => {
    const c = await golden("chat_basic");
    const id = freshId("usage-own");
    const producer = new ProducerCursor("p");
    await pushFrames(id, c, 0, 1, producer);
    const before = (await usage(id)).episode;
    const n = Math.min(3, c.frames.length - 1);
    await pushFrames(id, c, 1, 1 + n, producer);
    const after = (await usage(id)).episode;
    expect(n).toBeGreaterThan(0);
    expect(after.requests - before.requests).toBe(n);
    expect(after.wsIn).toBe(before.wsIn);
  });

  it("only an admin token reads usage", async () => {
    const secret = "usage-test-secret-3c9e1b7a5d2f4e6081a2b3c4d5e6f708";
    const e: Env = { ...env, RELAY_SECRET: secret, AUTH_OFF_ON_LOOPBACK: undefined };
    const id = freshId("usage-auth");
    const get = async (path: string, role?: "producer" | "watcher" | "admin", episodes = ["*"]) => {
      const headers: Record<string, string> = {};
      if (role) headers.authorization = `Bearer ${await mintToken(secret, { role, episodes, ttl: 600 })}`;
      const res = await worker.fetch(new Request(`https://relay.example.com/v1/${path}`, { headers }), e);
      await res.arrayBuffer();
      return res.status;
    };
    for (const path of [`episodes/${id}/usage`, "runs/some-run/usage"]) {
      expect(await get(path)).toBe(401);
      expect(await get(path, "watcher")).toBe(403);
      expect(await get(path, "producer")).toBe(403);
      expect(await get(path, "admin")).toBe(200);
    }
    expect(await get(`episodes/${id}/usage`, "admin", ["other-*"])).toBe(403);
    expect(await get(`episodes/${id}/usage`, "admin", [id])).toBe(200);
  });
});

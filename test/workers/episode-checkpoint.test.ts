// Checkpoints (src/objects/episode/checkpoint.ts): appended nodes and items wait in memory, read from
// the log, and reach the state's tables only at a checkpoint; an object evicted between checkpoints
// replays the log after the last one, and nothing acknowledged is lost. A frame's appends are read back
// from the log once for all of them, and a row's search text in slices a producer's turn gets between.
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { CHECKPOINT_FRAMES } from "../../src/objects/episode/checkpoint.js";
import { SearchSync } from "../../src/objects/episode/search-sync.js";
import { EpisodeState } from "../../src/objects/episode/state.js";
import { MemoryBodies } from "../../src/protocol/assembly/bodies.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { drain, MsgpackOut, writeCheckpoint } from "../../src/protocol/assembly/render.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { concatChunks } from "../../src/protocol/wire/writer.js";
import { delta, m, nd, node, openDelta } from "../support/deltas.js";
import { equal, freshId, getBytes, golden, post, pushFrames, relay } from "./support.js";

/**
 * What the episode's tables hold: the checkpoint, the newest frame, node bodies, the nodes whose metadata is stored
 * (node_meta's rows and node_packs' entries) and the rows that hold it.
 */
function stored(id: string) {
  return runInDurableObject(env.EPISODES.getByName(id), (_i, state) => {
    const sql = state.storage.sql;
    const n = (q: string) => sql.exec<{ n: number | null }>(q).one().n;
    return {
      // the newest turn logged after the meta row carries it, else the row (record-store.ts `Turn`)
      checkpoint: n(`SELECT COALESCE((SELECT json_extract(turn, '$.checkpoint') FROM frames WHERE turn IS NOT NULL
        AND seq > (SELECT seq FROM meta) ORDER BY k DESC LIMIT 1), (SELECT checkpoint FROM meta)) AS n`),
      seq: n("SELECT MAX(seq) AS n FROM frames"),
      bodies: n("SELECT SUM(json_array_length(vers)) AS n FROM body_runs WHERE kind = 0") ?? 0,
      // rows holding node bodies: runs and their parts (bodies.ts)
      bodyRows:
        n(`SELECT (SELECT COUNT(*) FROM body_runs WHERE kind = 0)
          + (SELECT COUNT(*) FROM body_parts) AS n`) ?? 0,
      nodeMeta:
        n(`SELECT (SELECT COUNT(*) FROM node_meta)
          + (SELECT COALESCE(SUM(json_array_length(infos)), 0) FROM node_packs) AS n`) ?? 0,
      metaRows: n("SELECT (SELECT COUNT(*) FROM node_meta) + (SELECT COUNT(*) FROM node_packs) AS n") ?? 0,
    };
  });
}

async function ok(res: Response): Promise<void> {
  expect(res.status, await res.clone().text()).toBe(200);
  await res.arrayBuffer();
}

describe("an object evicted between checkpoints loses nothing acknowledged", () => {
  it("routing-heavy node appends (as the cost bench sends): evicted between checkpoints, exact as the reference", async () => {
    // the golden cases set scalars and repair routing at every turn (writes that make a checkpoint of their frame);
    // this episode appends nodes only, so each eviction falls between checkpoints. The oracle is the reference
    // assembly over bodies in memory (src/protocol/assembly), given the same frames.
    const id = freshId("cp-evict");
    const producer = new ProducerCursor("test");
    const bodies = new MemoryBodies();
    const reference = new EpisodeAssembly(bodies);
    const send = async (frame: Uint8Array, ack: boolean) => {
      await ok(await post(`${id}/deltas`, encodeEnvelope(producer.envelope(frame))));
      if (ack) producer.acknowledge();
      reference.apply(frame);
    };
    const expected = () => {
      const out = new MsgpackOut();
      return concatChunks(drain(out, writeCheckpoint(out, bodies, reference.views())));
    };
    const routed = (i: number) =>
      node(i, {
        routed_experts: nd(
          "uint8",
          [64, 4, 8],
          Array.from({ length: 2048 }, (_, k) => (k * 7 + i) & 0x7f),
        ),
      });
    await send(openDelta(), true);
    let evictions = 0;
    for (let i = 0; i < 12; i++) {
      await send(delta({ nodes: [routed(i)] }), true);
      const before = await stored(id);
      expect(before.checkpoint!).toBeLessThan(before.seq!);
      expect(before.bodies).toBe(0);
      await abortAllDurableObjects();
      evictions++;
      expect(((await (await relay(`${id}/status`)).json()) as { seq: number }).seq).toBe(before.seq);
      const live = new Uint8Array(await (await relay(id)).arrayBuffer());
      const traces = expected();
      expect(equal(live.subarray(live.length - traces.length), traces), `after node ${i}`).toBe(true);
    }
    expect(evictions).toBe(12);
  });

  for (const name of ["chat_basic", "multi_trace_links", "routing_repair_widen", "ack_lost", "tool_calls_pending"]) {
    it(`${name}: evicted after every frame, its frames replayed each time, then the golden episode`, async () => {
      const c = await golden(name);
      const id = freshId(`cp-${name}`);
      const producer = new ProducerCursor("test");
      for (let i = 0; i < c.frames.length; i++) {
        await pushFrames(id, c, i, i + 1, producer);
        await abortAllDurableObjects();
        // the live view after the wake matches the golden checkpoint of this frame
        const cp = c.checkpoints.find((x) => x.after === i + 1);
        if (cp && c.ack_lost.length === 0) {
          const live = new Uint8Array(await (await relay(id)).arrayBuffer());
          expect(equal(live.subarray(live.length - cp.traces.length), cp.traces), `after frame ${i}`).toBe(true);
        }
      }
      await ok(await post(`${id}/reply`, c.reply));
      expect(equal(await getBytes(id), c.episode!)).toBe(true);
    });
  }
});

describe("checkpoints", () => {
  it("node appends wait for a checkpoint; one is written after CHECKPOINT_FRAMES frames, and reads are the same", async () => {
    const id = freshId("cp-frames");
    const producer = new ProducerCursor("p");
    const send = async (d: Uint8Array) => {
      await ok(await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d))));
      producer.acknowledge();
    };
    await send(openDelta());
    await send(delta({ nodes: [node(0)] }));
    await send(delta({ nodes: [node(1)] }));
    const early = await stored(id);
    // the open wrote through (a new trace); the two node appends wait
    expect(early).toMatchObject({ checkpoint: 1, seq: 3, bodies: 0, nodeMeta: 0 });
    for (let i = 2; i < CHECKPOINT_FRAMES; i++) await send(delta({ nodes: [node(i)] }));
    // CHECKPOINT_FRAMES frames logged since the checkpoint at seq 1, none written yet
    expect(await stored(id)).toMatchObject({ checkpoint: 1, seq: CHECKPOINT_FRAMES + 1, bodies: 0, nodeMeta: 0 });
    const bytes = await getBytes(id);
    await abortAllDurableObjects(); // the wake replays them all: the most a wake replays
    expect(equal(await getBytes(id), bytes)).toBe(true);
    // the next frame makes the checkpoint: its appends and the waiting ones are written
    await send(delta({ nodes: [node(CHECKPOINT_FRAMES)] }));
    const after = await stored(id);
    // the appended nodes' metadata in one row (EPISODE_SCHEMA 11, node-packs.ts), not one per node, and their
    // bodies in one run of one part (EPISODE_SCHEMA 12, bodies.ts): the open wrote no node
    expect(after).toMatchObject({
      checkpoint: CHECKPOINT_FRAMES + 2,
      bodies: CHECKPOINT_FRAMES + 1,
      bodyRows: 2,
      nodeMeta: CHECKPOINT_FRAMES + 1,
      metaRows: 1,
    });
    await send(delta({ nodes: [node(CHECKPOINT_FRAMES + 1)] }));
    const more = await getBytes(id);
    await abortAllDurableObjects();
    expect(equal(await getBytes(id), more)).toBe(true);
    const status = (await (await relay(`${id}/status`)).json()) as { seq: number; nodes: number };
    expect(status).toMatchObject({ seq: CHECKPOINT_FRAMES + 3, nodes: CHECKPOINT_FRAMES + 2 });
  });

  it("the nodes one frame appended are read back from the log once for all of them (a row's text, a checkpoint)", async () => {
    const id = freshId("cp-read-once");
    const producer = new ProducerCursor("p");
    const routed = (i: number) =>
      node(i, {
        routed_experts: nd(
          "uint8",
          [64, 4, 8],
          Array.from({ length: 2048 }, (_, k) => (k * 5 + i) & 0x7f),
        ),
      });
    for (const d of [openDelta(), delta({ nodes: [routed(0), routed(1), routed(2)] })]) {
      await ok(await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d))));
      producer.acknowledge();
    }
    expect(await stored(id)).toMatchObject({ checkpoint: 1, seq: 2, bodies: 0 }); // the three wait, in the log
    await runInDurableObject(env.EPISODES.getByName(id), (_i, ctx) => {
      // the log's rows read, through a view of the object's storage (as the meter counts them: each cursor's rowsRead)
      let cursors: Array<{ rowsRead: number }> = [];
      const sql = new Proxy(ctx.storage.sql, {
        get: (t, p) =>
          p === "exec"
            ? (q: string, ...b: SqlStorageValue[]) => {
                const c = t.exec(q, ...b);
                if (q.includes("FROM frames")) cursors.push(c);
                return c;
              }
            : Reflect.get(t, p, t),
      });
      const read = () => cursors.splice(0).reduce((n, c) => n + c.rowsRead, 0);
      const storage = new Proxy(ctx.storage, {
        get: (t, p) => {
          const v: unknown = p === "sql" ? sql : Reflect.get(t, p, t);
          return typeof v === "function" && p !== "sql" ? v.bind(t) : v;
        },
      });
      const state = new EpisodeState(storage as DurableObjectStorage);
      state.open();
      const t = [...state.memory().asm.traces.values()][0]!;
      cursors = [];
      const each = [0, 1, 2].map((k) => state.store.node(t, k));
      expect(read()).toBe(3); // the frame's row once per node
      const all = state.store.nodeRange(t, 0, 3);
      expect(read()).toBe(1);
      all.forEach((n, k) => {
        expect(equal(n.span, each[k]!.span), `node ${k}`).toBe(true);
      });
    });
  });

  it("a row's search text is read in slices with a pause between them; nodes appended during one wait for the next batch", async () => {
    const id = freshId("cp-text-slices");
    const producer = new ProducerCursor("p");
    // 40 nodes of 128 KiB of routing each (5 MiB, read 16 at a time: more than one slice), each with its message
    const big = (i: number) =>
      node(i, {
        routed_experts: nd(
          "uint8",
          [256, 64, 8],
          Array.from({ length: 256 * 64 * 8 }, (_, k) => (k + i) & 0x7f),
        ),
      });
    await ok(await post(`${id}/deltas`, encodeEnvelope(producer.envelope(openDelta()))));
    producer.acknowledge();
    for (let i = 0; i < 40; i++) {
      await ok(await post(`${id}/deltas`, encodeEnvelope(producer.envelope(delta({ nodes: [big(i)] })))));
      producer.acknowledge();
    }
    await runInDurableObject(env.EPISODES.getByName(id), async (_i, ctx) => {
      const state = new EpisodeState(ctx.storage);
      state.open();
      const { asm } = state.memory();
      const t = [...asm.traces.values()][0]!;
      const sync = new SearchSync(ctx.storage.sql, state.store);
      let pauses = 0;
      const p = await sync.batch(
        asm,
        () => undefined,
        async () => {
          // a turn comes in between: its node is not in this batch, nor counted as sent by it
          if (pauses++ === 0) t.nodes.push({ ...t.nodes.at(-1)! });
        },
      );
      expect(pauses).toBeGreaterThanOrEqual(1);
      expect(p!.next.get(t.tnum)!.nodes).toBe(40);
      const bodies = p!.batch.segments.map((x) => x.body);
      expect(bodies).toEqual(Array.from({ length: 40 }, (_, k) => `message ${k}`));
      t.nodes.pop();
    });
  });

  it("a write that is not an append (a scalar set) writes the appends first and checkpoints its frame", async () => {
    const id = freshId("cp-set");
    await ok(await post(`${id}/deltas`, openDelta()));
    await ok(await post(`${id}/deltas`, delta({ nodes: [node(0)] })));
    expect(await stored(id)).toMatchObject({ checkpoint: 1, bodies: 0 });
    await ok(await post(`${id}/deltas`, delta({ nodes: [node(1)], set: m({ is_completed: true }) })));
    const s = await stored(id);
    expect(s).toMatchObject({ checkpoint: 3, bodies: 2, bodyRows: 2, nodeMeta: 2, metaRows: 1 });
  });
});

// SQLite is the episode: the object's memory holds the index, node bytes live in SQLite and are
// rewritten only when a link or a repair touches them; GET streams from storage, as of the seq it
// started at; an old layout is upgraded; the two defects of issue 10 (a duplicate near the cap, a
// reply to an episode never written).
import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { commitIngest } from "../../src/objects/episode/commit.js";
import { EpisodeState } from "../../src/objects/episode/state.js";
import { parseDelta } from "../../src/protocol/assembly/delta.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { drain, MsgpackOut, writeCheckpoint } from "../../src/protocol/assembly/render.js";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { snapshotDeltas } from "../../src/protocol/assembly/snapshot.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { limitsFrom } from "../../src/protocol/limits/limits.js";
import { toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless, LMap } from "../../src/protocol/wire/lossless.js";
import { ChunkWriter, concatChunks } from "../../src/protocol/wire/writer.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { delta, openDelta } from "../support/deltas.js";
import { equal, freshId, getBytes, golden, post, relay } from "./support.js";

async function push(
  id: string,
  c: GoldenCase,
  from = 0,
  to = c.frames.length,
  producer = new ProducerCursor("p"),
): Promise<ProducerCursor> {
  for (let i = from; i < to; i++) {
    const res = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(c.frames[i]!)));
    expect(res.status, await res.clone().text()).toBe(200);
    await res.arrayBuffer();
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
  return producer;
}

const stub = (id: string) => env.EPISODES.getByName(id);

describe("the episode lives in SQLite", () => {
  it("memory holds the index (per node its size, links, routing shape, whether a repair touched it), not node bytes", async () => {
    const id = freshId("index");
    const c = await golden("large_routing");
    await push(id, c);
    await runInDurableObject(stub(id), (_i, state) => {
      // the index as the object reads it from its storage
      const asm = new EpisodeState(state.storage).memory().asm;
      expect(asm.bodies.constructor.name).toBe("SqlStore");
      for (const t of asm.traces.values()) {
        for (const n of t.nodes)
          expect(Object.keys(n).sort()).toEqual(["bytes", "parent", "parents", "repaired", "role", "routed", "ver"]);
      }
    });
  });

  it("a link or a repair rewrites only the node it touches: every node's version is the frame that last wrote it", async () => {
    for (const name of ["multi_trace_links", "routing_repair_u8"]) {
      const id = freshId(`versions-${name}`);
      const c = await golden(name);
      await push(id, c);
      // the expected version of each node: the seq of its frame, or of the last link or repair on it
      const want = new Map<string, number>();
      c.frames.forEach((f, i) => {
        const d = parseDelta(f);
        const seq = i + 1;
        const have = [...want.keys()].filter((k) => k.startsWith(`${d.trace}/`)).length;
        for (const { index } of d.links ?? []) want.set(`${d.trace}/${index}`, seq);
        for (const { index } of d.repairs ?? []) want.set(`${d.trace}/${index}`, seq);
        (d.nodes ?? []).forEach((_, k) => {
          want.set(`${d.trace}/${have + k}`, seq);
        });
      });
      await runInDurableObject(stub(id), (_instance, state) => {
        const rows = state.storage.sql
          .exec<{ id: string; idx: number; ver: number; versions: number }>(
            `SELECT t.id AS id, m.idx AS idx, m.ver AS ver,
             (SELECT COUNT(DISTINCT j.value) FROM body_runs b, json_each(b.vers) j
               WHERE b.tnum = m.tnum AND b.kind = 0 AND b.idx + j.key = m.idx AND j.value >= 0) AS versions
           FROM (SELECT tnum, idx, ver FROM node_meta UNION ALL
             -- a checkpoint's appended nodes (EPISODE_SCHEMA 11): one row holds several
             SELECT p.tnum, p.idx + j.key, j.value ->> 0 FROM node_packs p, json_each(p.infos) j WHERE j.type != 'null') m
           JOIN traces t ON t.tnum = m.tnum`,
          )
          .toArray();
        expect(rows.length).toBe(want.size);
        for (const r of rows) {
          expect(r.ver, `${name} ${r.id}/${r.idx}`).toBe(want.get(`${r.id}/${r.idx}`));
          expect(r.versions, "no reader holds an old version: it was replaced").toBe(1);
        }
      });
    }
  });

  it("GET streams the episode: several chunks, an exact Content-Length, the golden bytes; JSON too", async () => {
    const id = freshId("stream");
    const c = await golden("large_routing");
    await push(id, c);
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    const res = await relay(id);
    expect(res.headers.get("content-length")).toBe(String(c.episode!.length));
    const chunks: Uint8Array[] = [];
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
    }
    expect(chunks.length).toBeGreaterThan(1);
    expect(equal(concatChunks(chunks), c.episode!)).toBe(true);
    const json = await (await relay(id, { headers: { accept: "application/json" } })).json();
    expect(json).toEqual(toJson(decodeLossless(c.episode!)));
  });

  it("a GET reads the state as of its start: a repair and new nodes arriving while it streams do not show", async () => {
    const id = freshId("asof");
    const c = await golden("large_routing"); // checkpoints after 4, 8 and 12 frames
    const producer = await push(id, c, 0, 12);
    const res = await relay(id);
    const reader = res.body!.getReader();
    const first = await reader.read(); // part of the body is out; the rest is read after frame 13
    await push(id, c, 12, 13, producer); // repairs the last node of turn 12 and adds turn 13
    const chunks = [first.value!];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
    }
    const body = concatChunks(chunks);
    const cp = c.checkpoints.find((x) => x.after === 12)!.traces;
    expect(equal(body.subarray(body.length - cp.length), cp), "the body is the state after frame 12").toBe(true);
    // the old version of the repaired node goes once neither the reader nor a retraction needs it
    await push(id, c, 13, 14, producer);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    await runInDurableObject(stub(id), (_i, state) => {
      expect(state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM stale").one().n).toBe(0);
    });
  });

  it("a discarded trace stays readable for a reader that started before the discard", async () => {
    const id = freshId("discard-pin");
    const c = await golden("discard_retry");
    const at = c.frames.findIndex((f) => parseDelta(f).discard);
    const producer = await push(id, c, 0, at);
    const discard = c.frames[at]!;
    const expected = c.checkpoints.find((x) => x.after === at)!.traces;
    await runInDurableObject(stub(id), (_i, state) => {
      // the episode as the object holds it, over the object's storage
      const episode = new EpisodeState(state.storage);
      const asm = episode.memory().asm;
      const seq = at;
      const views = asm.views();
      const pin = episode.store.pin(seq);
      commitIngest(episode, discard, id, limitsFrom(env).maxEpisode, Date.now()); // the trace goes from the index (a bare delta: nothing can retract it)...
      expect(asm.traces.size).toBe(views.length - 1);
      const out = new MsgpackOut();
      const bytes = concatChunks(drain(out, writeCheckpoint(out, episode.store.reader(seq), views)));
      expect(equal(bytes, expected), "...but its bodies are there for the pinned reader").toBe(true);
      pin.release();
    });
    await abortAllDurableObjects(); // the object's own index did not see that commit: it reads storage again
    // the rest of the run, then its reply: nothing can be retracted any more
    producer.seq++; // the discard went in bare: the producer's next envelope is the one after it
    await push(id, c, at + 1, c.frames.length, producer);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    await runInDurableObject(stub(id), (_i, state) => {
      // nothing holds the discarded trace any more: it is gone
      expect(
        state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM traces WHERE dropped IS NOT NULL").one().n,
      ).toBe(0);
    });
  });

  it("waking up reads the index back from SQLite and gives the same bytes", async () => {
    const id = freshId("wake");
    const c = await golden("multi_trace_links");
    await push(id, c);
    const before = await getBytes(id);
    await abortAllDurableObjects(); // an eviction
    expect(equal(await getBytes(id), before)).toBe(true);
  });
});

describe("an old layout (the episode in memory, a base snapshot and a log) is upgraded on first use", () => {
  it("its state is rebuilt into SQLite: the same live bytes, then the golden episode", async () => {
    const id = freshId("upgrade");
    const c = await golden("chat_basic");
    // the old layout: a base snapshot of the first 4 frames, the log after it
    const asm = new EpisodeAssembly();
    for (const f of c.frames.slice(0, 4)) asm.apply(f);
    const w = new ChunkWriter();
    const base = [...snapshotDeltas(asm.bodies, asm.views())];
    w.arrayHeader(base.length);
    for (const d of base) {
      w.binHeader(d.length);
      w.raw(d);
    }
    const snapshot = w.bytes();
    await runInDurableObject(stub(id), (_i, state) => {
      const sql = state.storage.sql;
      sql.exec(`CREATE TABLE meta (id TEXT NOT NULL, status TEXT NOT NULL, seq INTEGER NOT NULL, bytes INTEGER NOT NULL,
        traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL, created INTEGER NOT NULL,
        updated INTEGER NOT NULL, error TEXT, base INTEGER NOT NULL)`);
      sql.exec(
        "CREATE TABLE frames (seq INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (seq, part))",
      );
      sql.exec("CREATE TABLE producers (name TEXT PRIMARY KEY, seq INTEGER NOT NULL)");
      sql.exec("CREATE TABLE reply (part INTEGER PRIMARY KEY, data BLOB NOT NULL)");
      sql.exec("CREATE TABLE base (part INTEGER PRIMARY KEY, data BLOB NOT NULL)");
      const bytes = c.frames.reduce((n, f) => n + f.length, 0);
      sql.exec("INSERT INTO meta VALUES (?, 'live', 8, ?, 1, 0, 0, ?, ?, NULL, 4)", id, bytes, Date.now(), Date.now());
      sql.exec("INSERT INTO base VALUES (0, ?)", snapshot.slice().buffer);
      c.frames.slice(4).forEach((f, i) => {
        sql.exec("INSERT INTO frames VALUES (?, 0, ?)", 5 + i, f.slice().buffer);
      });
    });
    await abortAllDurableObjects(); // as a deploy does: the next request starts a new object on the old storage
    const live = await getBytes(id);
    const cp = c.checkpoints.at(-1)!.traces;
    expect(equal(live.subarray(live.length - cp.length), cp)).toBe(true);
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    expect(equal(await getBytes(id), c.episode!)).toBe(true);
  });
});

describe("issue 10's defects", () => {
  it("a retry of an applied delta near the size cap is acknowledged as a duplicate, not refused 413", async () => {
    const id = freshId("dup-cap");
    const producer = new ProducerCursor("w");
    const send = (e: Uint8Array) => post(`${id}/deltas`, e);
    expect((await send(encodeEnvelope(producer.envelope(openDelta())))).status).toBe(200);
    producer.acknowledge();
    // MAX_EPISODE_BYTES is 10 MiB in tests: three 3 MiB deltas fit, a fourth would not
    const big = delta({ set: new LMap([["info", new Uint8Array(3 * 1024 * 1024)]]) });
    let last: Uint8Array | null = null;
    for (let i = 0; i < 3; i++) {
      last = encodeEnvelope(producer.envelope(big));
      const r = await send(last);
      expect(r.status).toBe(200);
      await r.arrayBuffer();
      producer.acknowledge();
    }
    const retry = await send(last!); // its ack was lost: the same envelope again
    expect(retry.status).toBe(200);
    expect(await retry.json()).toMatchObject({ ok: true, applied: 0, duplicates: 1 });
    const more = await send(encodeEnvelope(producer.envelope(big)));
    expect(more.status).toBe(413);
  });

  it("a reply to an episode never written is 404, and creates nothing", async () => {
    const id = freshId("reply-unknown");
    const reply = encodeReply({ success: false, error: "crashed" });
    const res = await post(`${id}/reply`, reply);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: "not_found" });
    expect((await relay(`${id}/status`)).status).toBe(404);
  });
});

// Catch-up: a joining watcher gets the state as bounded snapshot messages of ordinary deltas, paced
// by its acks (a window of WATCHER_WINDOW_BYTES, 1 MiB here, that starts small), at most
// MAX_CATCHUPS (2 here) at once, read into the hub's buffers and each used again; the log it
// replays after the snapshot is kept for it; a catch-up that stops acknowledging is closed 4008
// and its stream let go.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { FIRST_MESSAGE_BYTES, JoinBuffers, SnapshotMessages } from "../../src/objects/episode/catchup-stream.js";
import { FIRST_WINDOW } from "../../src/objects/hub/fan-out.js";
import { IDLE_MS } from "../../src/objects/hub/running-catchups.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { hubName } from "../../src/protocol/hub/shards.js";
import { type Chunks, decodeWatchMessage, MESSAGE_BYTES } from "../../src/protocol/watch/protocol.js";
import { decodeLossless, type LMap } from "../../src/protocol/wire/lossless.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { equal, freshId, golden, post } from "./support.js";
import { Watcher } from "./watcher.js";

const WINDOW = 1024 * 1024; // WATCHER_WINDOW_BYTES in vitest.workers.config.ts

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
    producer.acknowledge();
  }
  return producer;
}

/** The live traces after every frame of `c`, by the project's assembly (large_routing's checkpoints stop at 12 of 14). */
function finalTraces(c: GoldenCase): Uint8Array {
  const asm = new EpisodeAssembly();
  for (const f of c.frames) asm.apply(f);
  return asm.tracesBytes();
}

/** Poll `cond` until it holds (10 s at most). */
async function until(cond: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out: ${what}`);
}

/** Read whatever arrives within `ms` (the relay has sent what it will until the next ack). */
async function settle(w: Watcher, ms = 300): Promise<void> {
  await w.read(() => false, ms).catch(() => undefined);
}

describe("catch-up", () => {
  it("a late watcher gets the state in several bounded snapshot messages of ordinary deltas; it assembles the golden bytes", async () => {
    const c = await golden("large_routing"); // ~7 MB, nodes of ~600 KB
    const id = freshId("split");
    await push(id, c);
    const w = await Watcher.open(id);
    await w.read((x) => x.caughtUp);
    const snaps = w.messages.filter((m) => m.type === "snapshot");
    expect(snaps.length).toBeGreaterThan(2);
    expect(snaps.slice(0, -1).every((m) => m.more === true) && snaps.at(-1)!.more === false).toBe(true);
    const biggestNode = 1.3 * 1024 * 1024;
    expect(w.sizes[1]!, "the first snapshot message is small").toBeLessThanOrEqual(FIRST_MESSAGE_BYTES + biggestNode);
    expect(w.sizes[2]!, "the next at most twice as large").toBeLessThanOrEqual(2 * FIRST_MESSAGE_BYTES + biggestNode);
    for (const size of w.sizes) expect(size).toBeLessThanOrEqual(MESSAGE_BYTES + biggestNode);
    expect(equal(w.asm.tracesBytes(), finalTraces(c))).toBe(true);
    // read into the hub's buffers (HUB_POOL_BYTES, 4 MiB here: the largest messages get buffers of their own), each
    // used again once acknowledged, and yet the golden bytes
    const { pool } = (await env.HUBS.getByName(hubName(id, 0)).stats()).watchers;
    expect(pool.leased, `${pool.leased} messages read into ${pool.made} pooled buffers`).toBeGreaterThan(pool.made);
    expect(pool.lost).toBe(0);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    await w.read((x) => x.finished !== null);
    expect(equal(w.episodeBytes(), c.episode!)).toBe(true);
    w.close();
  });

  it("is paced by acks: nothing before the hello is acknowledged, then at most the window unacknowledged", async () => {
    const c = await golden("large_routing");
    const id = freshId("paced");
    await push(id, c);
    const w = await Watcher.open(id, "", "never");
    await settle(w);
    expect(
      w.messages.map((m) => m.type),
      "only the hello until it is acknowledged",
    ).toEqual(["hello"]);
    w.ack();
    await settle(w);
    const first = w.received;
    expect(w.messages.length).toBeGreaterThan(1);
    expect(first - w.sizes[0]!, "the first window is small").toBeLessThanOrEqual(FIRST_WINDOW + MESSAGE_BYTES);
    // every ack lets at most a window more through; acking to the end catches up
    for (let i = 0; i < 200 && !w.caughtUp; i++) {
      const acked = w.received;
      w.ack();
      await settle(w, 100);
      expect(w.received - acked).toBeLessThanOrEqual(WINDOW + MESSAGE_BYTES + 1.3 * 1024 * 1024);
    }
    expect(w.caughtUp).toBe(true);
    expect(equal(w.asm.tracesBytes(), finalTraces(c))).toBe(true);
    w.close();
  });

  it("at most MAX_CATCHUPS streams are read at once; the next starts when one leaves", async () => {
    const c = await golden("large_routing");
    const id = freshId("slots");
    await push(id, c);
    const firstTrace = (decodeLossless(c.frames[0]!) as LMap).get("trace") as string;
    // three streams larger than a window (none can join another's): the whole episode, its one trace by name,
    // and a resume from seq 0 (a snapshot too: the log keeps 6 frames here)
    const a = await Watcher.open(id, "", "never");
    const b = await Watcher.open(id, `?traces=${firstTrace}`, "never");
    const third = await Watcher.open(id, "?after=0", "never");
    for (const w of [a, b, third]) {
      await settle(w, 100);
      w.ack(); // each acknowledges its hello, then stops reading
    }
    for (const w of [a, b, third]) await settle(w);
    expect(a.messages.some((m) => m.type === "snapshot")).toBe(true);
    expect(b.messages.some((m) => m.type === "snapshot")).toBe(true);
    expect(
      third.messages.map((m) => m.type),
      "the third waits its turn",
    ).toEqual(["hello"]);
    a.close();
    // the freed slot's start is waited for (a quiet 300 ms was not always enough under load)
    await third.read((w) => w.messages.some((m) => m.type === "snapshot"), 30_000).catch(() => undefined);
    expect(
      third.messages.some((m) => m.type === "snapshot"),
      "a slot freed: it started",
    ).toBe(true);
    b.close();
    third.close();
  });

  it("a watcher joining a stream under way starts at once, every slot taken: the same bytes, then the golden state", async () => {
    const c = await golden("large_routing");
    const id = freshId("join-no-slot");
    await push(id, c);
    const a = await Watcher.open(id, "", "never");
    const b = await Watcher.open(id, "?after=0", "never");
    for (const w of [a, b]) {
      await settle(w, 100);
      w.ack();
    }
    for (const w of [a, b]) await settle(w); // both slots (MAX_CATCHUPS is 2 here) are taken
    const late = await Watcher.open(id, "", "until_caught_up");
    await late.read((x) => x.caughtUp);
    const firstOf = (w: Watcher) => w.messages.find((m) => m.type === "snapshot");
    expect(firstOf(late), "it joined a's stream: its first snapshot message is a's").toEqual(firstOf(a));
    expect(equal(late.asm.tracesBytes(), finalTraces(c))).toBe(true);
    expect(late.seqs, "no frame twice").toEqual([...new Set(late.seqs)]);
    for (const w of [a, b, late]) w.close();
  });

  it("the log a catching-up watcher still has to replay is kept, however far the log is trimmed meanwhile", async () => {
    const c = await golden("large_routing");
    const id = freshId("pinned-log");
    const producer = await push(id, c, 0, 2);
    const w = await Watcher.open(id, "", "never");
    await settle(w, 100);
    w.ack();
    await settle(w); // the snapshot as of seq 2 is under way
    // 12 more frames: LOG_KEEP_FRAMES is 6 here, so the log is trimmed past seq 2 meanwhile
    await push(id, c, 2, c.frames.length, producer);
    for (let i = 0; i < 200 && !w.caughtUp; i++) {
      w.ack();
      await settle(w, 100);
    }
    expect(w.caughtUp).toBe(true);
    expect(w.seqs, "every frame after the snapshot, once, in order").toEqual(
      Array.from({ length: c.frames.length - 2 }, (_, i) => i + 3),
    );
    expect(equal(w.asm.tracesBytes(), finalTraces(c))).toBe(true);
    // a watcher resuming from seq 2 gets the frames after it, or a snapshot if the log has been trimmed since
    const late = await Watcher.open(id, "?after=2");
    for (const f of c.frames.slice(0, 2)) late.asm.apply(f);
    await late.read((x) => x.caughtUp);
    expect(equal(late.asm.tracesBytes(), finalTraces(c))).toBe(true);
    for (const x of [w, late]) x.close();
  });

  it("watchers joining together share the snapshot: the same messages, byte for byte", async () => {
    const c = await golden("multi_trace_links");
    const id = freshId("cohort");
    await push(id, c);
    const ws = [await Watcher.open(id), await Watcher.open(id)];
    for (const w of ws) await w.read((x) => x.caughtUp);
    const snaps = ws.map((w) => w.messages.filter((m) => m.type === "snapshot"));
    expect(snaps[0]!.length).toBe(snaps[1]!.length);
    snaps[0]!.forEach((m, i) => {
      expect(m).toEqual(snaps[1]![i]);
    });
    for (const w of ws) w.close();
  });

  it("a catch-up that stops acknowledging is closed 4008 after IDLE_MS, its stream let go; the watcher reconnects and catches up", async () => {
    const c = await golden("large_routing");
    const id = freshId("idle");
    await push(id, c);
    const w = await Watcher.open(id, "", "never");
    await settle(w, 100);
    w.ack();
    await settle(w);
    expect(w.caughtUp).toBe(false);
    const hub = env.HUBS.getByName(hubName(id, 0));
    expect((await hub.stats()).watchers).toMatchObject({ catchingUp: 1, cohorts: 1 });
    const closed = await w.box.closed(IDLE_MS * 2);
    expect(closed.code).toBe(4008);
    expect(closed.reason).toMatch(/reconnect/);
    await until(async () => (await hub.stats()).watchers.cohorts === 0, "the hub let go of the stream");
    expect((await hub.stats()).watchers).toMatchObject({ catchingUp: 0, cohorts: 0 });
    const again = await Watcher.open(id);
    await again.read((x) => x.caughtUp);
    expect(equal(again.asm.tracesBytes(), finalTraces(c))).toBe(true);
    again.close();
  }, 40_000);
});

describe("what the episode allocates for a catch-up stream", () => {
  it("join buffers: messages of every size use the free buffers again, the smallest that holds them; at most keepBytes stay", () => {
    const MiB = 1024 * 1024;
    const buffers = new JoinBuffers(8 * MiB);
    const first = buffers.take(2 * MiB + 100); // a full message, a little over MESSAGE_BYTES
    buffers.give(first);
    expect(buffers.take(256 * 1024), "a smaller message (the first of a snapshot) takes the free buffer").toBe(first);
    buffers.give(first);
    const small = buffers.take(1.2 * MiB); // a larger free one holds it: no new buffer
    expect(small).toBe(first);
    const second = buffers.take(1.2 * MiB); // none free: a new one of its size class
    expect(second.byteLength).toBeLessThan(first.byteLength);
    buffers.give(first);
    buffers.give(second);
    expect(buffers.take(MiB), "the smallest free buffer that holds it").toBe(second);
    buffers.give(second);
    // past keepBytes the smallest go, the largest stay (they serve any message)
    const big = [buffers.take(3 * MiB), buffers.take(3 * MiB), buffers.take(3 * MiB)];
    for (const b of big) buffers.give(b);
    expect(buffers.kept).toBeLessThanOrEqual(8 * MiB);
    const kept = [buffers.take(3 * MiB), buffers.take(3 * MiB)];
    expect(kept.every((b) => b.byteLength >= 3 * MiB)).toBe(true);
  });

  it("a snapshot message ends before a planned delta that would not fit: it is built for the next message, not built and copied", async () => {
    const MiB = 1024 * 1024;
    const sizes = [100 * 1024, 1.5 * MiB, 1.5 * MiB, 400 * 1024, 1.5 * MiB];
    let built = 0;
    class Planned extends SnapshotMessages {
      private next = 0;
      get valid(): boolean {
        return true;
      }
      release(): void {}
      protected override nextBytes(): number | null {
        return this.next < sizes.length ? sizes[this.next]! : null;
      }
      protected nextDelta(): Chunks | null {
        if (this.next >= sizes.length) return null;
        built++;
        const n = sizes[this.next++]!;
        // a delta as pieces (two of them), as a snapshot with routing builds it
        return { chunks: [new Uint8Array(n - 10).fill(this.next), new Uint8Array(10).fill(this.next)], length: n };
      }
    }
    const s = new Planned(7, { routing: true, traces: null }, "join");
    const messages: number[][] = [];
    const more: boolean[] = [];
    for (let m = await s.message(); m !== null; m = await s.message()) {
      const decoded = decodeWatchMessage(m);
      if (decoded.type !== "snapshot") throw new Error(decoded.type);
      messages.push(decoded.deltas.map((d) => d.length));
      more.push(decoded.more);
      expect(built, "only the deltas of the messages given so far were built").toBe(
        messages.reduce((n, x) => n + x.length, 0),
      );
    }
    // limits 256 KiB, 512 KiB, 1 MiB, then 2 MiB: a message holds at least one delta
    expect(messages).toEqual([[sizes[0]], [sizes[1]], [sizes[2]], [sizes[3], sizes[4]]]);
    expect(more).toEqual([true, true, true, false]);
  });
});

import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeLossless, encodeLossless, type LMap } from "../../src/protocol/wire/lossless.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { equal, freshId, golden, inbox, openSocket, post, pushFrames } from "./support.js";
import { Watcher } from "./watcher.js";

const reply = async (id: string, c: GoldenCase) => (await post(`${id}/reply`, c.reply)).arrayBuffer();

describe("watchers", () => {
  for (const name of ["multi_trace_links", "ack_lost", "routing_repair_widen", "discard_retry"]) {
    it(`${name}: watchers from the start, joining midway and resuming all end with the golden episode`, async () => {
      const c = await golden(name);
      const id = freshId(`watch-${name}`);
      const producer = new ProducerCursor("p");
      const early = await Watcher.open(id);
      await early.read((w) => w.caughtUp);
      expect(early.messages[0]).toMatchObject({ type: "hello", episode: id, status: "new", seq: 0 });
      const half = Math.floor(c.frames.length / 2);
      await pushFrames(id, c, 0, half, producer);
      const late = await Watcher.open(id);
      await late.read((w) => w.caughtUp);
      // its snapshot may be the one the early watcher got (a stream a few frames old is shared), then the frames since
      expect(late.messages[1]).toMatchObject({ type: "snapshot", reason: "join" });
      const snapshot = late.messages[1]!;
      if (snapshot.type !== "snapshot") throw new Error(`expected a snapshot, got ${snapshot.type}`);
      const snapSeq = snapshot.seq;
      expect(snapSeq).toBeLessThanOrEqual(half);
      expect(late.messages.find((m) => m.type === "caught_up")?.seq, "then the frames after it, up to the head").toBe(
        half,
      );
      // one that drops after a few frames and resumes with ?after=
      const dropper = await Watcher.open(id);
      await dropper.read((w) => w.caughtUp);
      await pushFrames(id, c, half, half + 2, producer);
      await dropper.read((w) => w.lastSeq >= half + 2);
      const resumeAt = dropper.lastSeq;
      dropper.close();
      await pushFrames(id, c, half + 2, c.frames.length, producer);
      const resumed = await Watcher.open(id, `?after=${resumeAt}`);
      resumed.asm = dropper.asm; // continues the same assembly
      resumed.lastSeq = resumeAt;
      await resumed.read((w) => w.caughtUp);
      // frames after resumeAt, or a snapshot when the log (6 frames here) was trimmed past it
      const snap = resumed.messages.find((m) => m.type === "snapshot");
      if (snap) expect(snap.reason).toBe("trimmed");
      else expect(resumed.seqs[0]).toBe(resumeAt + 1);
      await reply(id, c);
      for (const w of [early, late, resumed]) {
        await w.read((x) => x.finished !== null);
        expect(equal(w.episodeBytes(), c.episode!), "watcher assembled the golden episode").toBe(true);
        w.close();
      }
      // every frame once, in order; a retraction (ack_lost) takes frames back, so seqs have holes there
      if (c.ack_lost.length === 0) expect(early.seqs).toEqual(Array.from({ length: c.frames.length }, (_, i) => i + 1));
      else expect(early.messages.some((m) => m.type === "snapshot" && m.reason === "rewind")).toBe(true);
    });
  }

  it("resume from several points gives exactly the missing frames", async () => {
    const c = await golden("tool_calls_pending");
    const id = freshId("resume");
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    // LOG_KEEP_FRAMES is 6 in tests: the log holds the last 6 frames
    for (const after of [6, 8, 10, 11]) {
      const w = await Watcher.open(id, `?after=${after}`);
      w.assemble = false;
      await w.read((x) => x.caughtUp);
      const seqs = w.messages.filter((m) => m.type === "frames").flatMap((m) => m.frames!.map(([s]) => s));
      expect(seqs).toEqual(Array.from({ length: 11 - after }, (_, i) => after + i + 1));
      w.close();
    }
  });

  it("resume from before the trimmed log, or ahead of it, gets a snapshot flagged as such", async () => {
    const c = await golden("tool_calls_pending");
    const id = freshId("trimmed");
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    const trimmed = await Watcher.open(id, "?after=2");
    await trimmed.read((x) => x.caughtUp);
    expect(trimmed.messages[1]).toMatchObject({ type: "snapshot", reason: "trimmed", seq: 11 });
    expect(equal(trimmed.asm.tracesBytes(), c.checkpoints.at(-1)!.traces)).toBe(true);
    const ahead = await Watcher.open(id, "?after=99");
    await ahead.read((x) => x.caughtUp);
    expect(ahead.messages[1]).toMatchObject({ type: "snapshot", reason: "ahead" });
    trimmed.close();
    ahead.close();
  });

  it("routing=0 drops routing bytes; traces= filters traces", async () => {
    const c = await golden("routing_repair_u8");
    const m = await golden("multi_trace_links");
    const id = freshId("variant");
    const id2 = freshId("variant2");
    const noRouting = await Watcher.open(id, "?routing=0");
    const full = await Watcher.open(id);
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    await reply(id, c);
    for (const w of [noRouting, full]) await w.read((x) => x.finished !== null);
    expect(equal(full.episodeBytes(), c.episode!)).toBe(true);
    const stripped = decodeLossless(noRouting.episodeBytes()) as LMap;
    const want = decodeLossless(c.episode!) as LMap;
    for (const t of want.get("traces") as LMap[])
      for (const n of t.get("nodes") as LMap[]) {
        const i = n.entries.findIndex(([k]) => k === "routed_experts");
        if (i >= 0) n.entries[i]![1] = null;
      }
    expect(equal(encodeLossless(stripped), encodeLossless(want))).toBe(true);
    const anyRepair = noRouting.messages.some(
      (x) => x.type === "frames" && x.frames.some(([, d]) => (decodeLossless(d) as LMap).has("routing_repairs")),
    );
    expect(anyRepair).toBe(false);

    const firstTrace = (decodeLossless(m.frames[0]!) as LMap).get("trace") as string;
    const filtered = await Watcher.open(id2, `?traces=${firstTrace}`);
    await filtered.read((x) => x.caughtUp);
    await pushFrames(id2, m, 0, m.frames.length, new ProducerCursor("p"));
    await filtered
      .read((x) => x.lastSeq > 0 && x.asm.traces.size > 0 && x.seqs.length > 0 && x.box.pending() === 0, 2000)
      .catch(() => undefined);
    expect([...filtered.asm.traces.keys()]).toEqual([firstTrace]);
    const everyFrameOfThatTrace = m.frames.filter(
      (f) => (decodeLossless(f) as LMap).get("trace") === firstTrace,
    ).length;
    expect(filtered.seqs.length).toBe(everyFrameOfThatTrace);
    for (const w of [noRouting, full, filtered]) w.close();
  });

  it("a refused reply reaches watchers as a status message, and a joiner's hello says finish_refused", async () => {
    const c = await golden("gap_detected");
    const id = freshId("refused");
    const w = await Watcher.open(id);
    await w.read((x) => x.caughtUp);
    for (const f of c.frames) (await post(`${id}/deltas`, f)).body?.cancel();
    expect((await post(`${id}/reply`, c.reply)).status).toBe(409);
    await w.read((x) => x.messages.some((m) => m.type === "status"));
    expect(w.messages.find((m) => m.type === "status")).toMatchObject({
      status: "finish_refused",
      error: c.finish_error,
    });
    const joiner = await Watcher.open(id);
    await joiner.read((x) => x.caughtUp);
    expect(joiner.messages[0]).toMatchObject({ type: "hello", status: "finish_refused" });
    expect(joiner.messages[1]).toMatchObject({ type: "status", status: "finish_refused", error: c.finish_error });
    for (const x of [w, joiner]) x.close();
  });

  it("watchers only acknowledge: anything but an ack or ping closes 1008; ping is answered pong", async () => {
    const id = freshId("ro");
    const w = await Watcher.open(id);
    await w.read((x) => x.caughtUp);
    w.ws.send("ping");
    expect(await w.box.next()).toBe("pong");
    w.ws.send("hello");
    expect(await w.box.closed()).toMatchObject({ code: 1008 });
    const b = await Watcher.open(id);
    await b.read((x) => x.caughtUp);
    b.ws.send(new Uint8Array([1, 2, 3]));
    expect(await b.box.closed()).toMatchObject({ code: 1008 });
  });

  it("watchers are capped per episode: one more is closed 1013", async () => {
    const id = freshId("cap");
    const open: Watcher[] = [];
    for (let i = 0; i < 20; i++) open.push(await Watcher.open(id));
    const extra = await openSocket(`${id}/watch`);
    expect(await inbox(extra).closed()).toMatchObject({ code: 1013 });
    for (const w of open) w.close();
  });

  it("a watcher that never acknowledges is closed 4008 once it falls too far behind; acknowledging ones are not", async () => {
    const c = await golden("large_routing"); // ~600 KB per frame; WATCHER_LAG_BYTES is 1 MiB in tests
    const id = freshId("slow");
    const slow = await Watcher.open(id, "", "until_caught_up");
    const fast = await Watcher.open(id);
    await slow.read((x) => x.caughtUp);
    await fast.read((x) => x.caughtUp);
    const producer = new ProducerCursor("p");
    for (let i = 0; i < 6; i++) {
      await pushFrames(id, c, i, i + 1, producer);
      await fast.read((x) => x.lastSeq >= i + 1);
      await new Promise((r) => setTimeout(r, 20)); // let the ack land before the next frame
    }
    const closed = await slow.box.closed();
    expect(closed.code).toBe(4008);
    expect(closed.reason).toMatch(/resume with \?after=/);
    expect(fast.lastSeq).toBe(6);
    fast.close();
  });

  it("survives hibernation: the object is rebuilt, sockets stay, every frame arrives in order", async () => {
    const c = await golden("chat_basic");
    const id = freshId("hib");
    const w = await Watcher.open(id, "", "until_caught_up");
    await w.read((x) => x.caughtUp);
    const producer = new ProducerCursor("p");
    const stub = env.EPISODES.getByName(id);
    await pushFrames(id, c, 0, 3, producer);
    await w.read((x) => x.lastSeq >= 3);
    const before = await runInDurableObject(stub, (instance) => instance);
    await new Promise((r) => setTimeout(r, 12_000)); // idle: the object hibernates
    expect(await runInDurableObject(stub, (instance) => instance), "a new instance").not.toBe(before);
    await pushFrames(id, c, 3, c.frames.length, producer);
    await reply(id, c);
    await w.read((x) => x.finished !== null);
    expect(w.seqs).toEqual(Array.from({ length: c.frames.length }, (_, i) => i + 1));
    expect(equal(w.episodeBytes(), c.episode!)).toBe(true);
    w.close();
  }, 40_000);
});

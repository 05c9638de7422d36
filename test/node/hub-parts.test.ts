// The viewer tier's pure parts: which hub a watcher goes to (src/protocol/hub/shards.ts), admission
// (src/protocol/hub/admission.ts), a hub's window of recent frames (src/protocol/hub/frames.ts), the retry hint in a
// 1013's reason (src/protocol/watch/protocol.ts) and how the client waits on it (clients/typescript/watch.ts).
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { reconnectDelay } from "../../clients/typescript/watch.js";
import { closeReason } from "../../src/protocol/http/errors.js";
import { Admission, RETRY_MAX_MS, RETRY_MIN_MS } from "../../src/protocol/hub/admission.js";
import type { FeedFrame } from "../../src/protocol/hub/feed.js";
import {
  FANOUT_MESSAGE_BYTES,
  framed,
  type HubFrame,
  HubWindow,
  messageRuns,
  received,
  variantMessage,
} from "../../src/protocol/hub/frames.js";
import { HubCounts, hubCount, hubName, parseHubs, pickShard } from "../../src/protocol/hub/shards.js";
import {
  decodeWatchMessage,
  frameMessage,
  framesMessage,
  joinFrameMessages,
  retryHintMs,
  retryReason,
} from "../../src/protocol/watch/protocol.js";

describe("shards", () => {
  it("one hub per perHub watchers, at least one, at most maxHubs", () => {
    expect(hubCount(0, 2000, 64)).toBe(1);
    expect(hubCount(2000, 2000, 64)).toBe(1);
    expect(hubCount(2001, 2000, 64)).toBe(2);
    expect(hubCount(100_000, 2000, 64)).toBe(50);
    expect(hubCount(1_000_000, 2000, 64)).toBe(64);
  });

  it("a shard is drawn below the count, every one of them reachable", () => {
    expect(pickShard(1, () => 0.99)).toBe(0);
    expect(pickShard(4, () => 0)).toBe(0);
    expect(pickShard(4, () => 0.999999)).toBe(3);
    const seen = new Set(Array.from({ length: 400 }, () => pickShard(5)));
    expect([...seen].sort()).toEqual([0, 1, 2, 3, 4]);
  });

  it("hub names keep the id whole and apart from the shard", () => {
    expect(hubName("run:a:1", 3)).toBe("3/run:a:1");
    expect(hubName("run:a:1", 3)).not.toBe(hubName("run:a:13", 0));
  });

  it("a hub count header is a whole number in range, else ignored", () => {
    expect(parseHubs("3", 64)).toBe(3);
    for (const bad of [null, undefined, "", "0", "-1", "1.5", "65", "x", "1e3"]) expect(parseHubs(bad, 64)).toBeNull();
  });

  it("the Worker's counts expire, and the oldest go first past the bound", () => {
    const c = new HubCounts(1000, 2);
    expect(c.get("a", 0)).toBe(1);
    c.set("a", 5, 0);
    expect(c.get("a", 999)).toBe(5);
    expect(c.get("a", 1001)).toBe(1);
    c.set("a", 2, 0);
    c.set("b", 3, 0);
    c.set("c", 4, 0);
    expect(c.size).toBe(2);
    expect(c.get("a", 10)).toBe(1);
    expect(c.get("c", 10)).toBe(4);
  });
});

describe("admission", () => {
  const limits = { maxWatchers: 10, maxWaiting: 4, catchUpsPerSecond: 2, maxQueuedBytes: 1000 };

  it("admits under every bound, refuses past each with a reason and a retry hint within bounds", () => {
    const a = new Admission(limits, 0, () => 0.5);
    expect(a.admit({ watchers: 9, waiting: 3, queuedBytes: 999 })).toEqual({ ok: true });
    for (const load of [
      { watchers: 10, waiting: 0, queuedBytes: 0 },
      { watchers: 0, waiting: 4, queuedBytes: 0 },
      { watchers: 0, waiting: 0, queuedBytes: 1000 },
    ]) {
      const d = a.admit(load);
      expect(d.ok).toBe(false);
      if (d.ok) continue;
      expect(d.reason).toMatch(/too many watchers|catch-ups waiting|not yet acknowledged/);
      expect(d.retryMs).toBeGreaterThanOrEqual(RETRY_MIN_MS);
      expect(d.retryMs).toBeLessThanOrEqual(RETRY_MAX_MS);
    }
  });

  it("a longer queue asks for a longer wait, jittered 1-2x", () => {
    const lo = new Admission({ ...limits, maxWaiting: 1 }, 0, () => 0);
    const hi = new Admission({ ...limits, maxWaiting: 1 }, 0, () => 0.999);
    const hint = (a: Admission, waiting: number) => {
      const d = a.admit({ watchers: 0, waiting, queuedBytes: 0 });
      return d.ok ? 0 : d.retryMs;
    };
    expect(hint(lo, 10)).toBe(5000); // 10 waiting at 2/s
    expect(hint(lo, 40)).toBe(20_000);
    expect(hint(hi, 10)).toBeGreaterThan(9900);
    expect(hint(lo, 10_000)).toBe(RETRY_MAX_MS);
  });

  it("catch-ups start at most catchUpsPerSecond, in bursts of as many", () => {
    const a = new Admission(limits, 0);
    expect(a.take(0)).toBe(0);
    expect(a.take(0)).toBe(0);
    const wait = a.take(0);
    expect(wait).toBe(500);
    expect(a.take(499)).toBeGreaterThan(0);
    expect(a.take(500)).toBe(0);
  });
});

/** A full collection (V8's gc(), exposed for this test), after the current turn's references are gone. */
async function collectGarbage(): Promise<void> {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  await new Promise((r) => setTimeout(r, 0));
  gc();
}

describe("a hub's window of recent frames", () => {
  const frame = (seq: number, bytes = 10): HubFrame => framed({ seq, trace: "t", delta: new Uint8Array(bytes) });

  it("covers what it holds after its base, and gives frames after a seq, bounded", () => {
    const w = new HubWindow(4, 100, 100);
    expect(w.covers(4)).toBe(true);
    expect(w.covers(3)).toBe(false);
    w.append([frame(5), frame(6), frame(8)]); // 7 was retracted: a gap
    expect(w.after(4, 1000).map((f) => f.seq)).toEqual([5, 6, 8]);
    expect(w.after(6, 1000).map((f) => f.seq)).toEqual([8]);
    expect(w.after(7, 1000).map((f) => f.seq)).toEqual([8]);
    expect(w.after(8, 1000)).toEqual([]);
    expect(w.after(4, 15).map((f) => f.seq)).toEqual([5]);
    expect(
      w.after(4, 0).map((f) => f.seq),
      "at least one",
    ).toEqual([5]);
  });

  it("drops the oldest past its byte and frame bounds; its base follows", () => {
    const w = new HubWindow(0, 30, 100);
    w.append([frame(1), frame(2), frame(3), frame(4)]);
    expect(w.stats()).toEqual({ frames: 3, bytes: 30, base: 1 });
    expect(w.covers(0)).toBe(false);
    expect(w.covers(1)).toBe(true);
    const f = new HubWindow(0, 1e9, 2);
    f.append([frame(1), frame(2), frame(3)]);
    expect(f.stats().base).toBe(1);
    f.reset(9);
    expect(f.stats()).toEqual({ frames: 0, bytes: 0, base: 9 });
    expect(f.covers(8)).toBe(false);
  });

  it("stays correct over many appends (its array is compacted)", () => {
    const w = new HubWindow(0, 50, 1e6);
    for (let s = 1; s <= 5000; s++) w.append([frame(s)]);
    expect(w.stats()).toEqual({ frames: 5, bytes: 50, base: 4995 });
    expect(w.after(4997, 1000).map((f) => f.seq)).toEqual([4998, 4999, 5000]);
  });

  it("lets go of a frame as soon as it drops (a storm fed 0.5 MB turns: dropped ones stayed, 43 MiB of them)", async () => {
    const w = new HubWindow(0, 3 << 20, 1e6);
    const dropped: Array<WeakRef<ArrayBufferLike>> = [];
    for (let s = 1; s <= 40; s++) {
      const f = frame(s, 1 << 20);
      if (s <= 30) dropped.push(new WeakRef(f.message.buffer));
      w.append([f]);
    }
    expect(w.stats().frames).toBe(3);
    await collectGarbage();
    expect(dropped.filter((r) => r.deref() !== undefined).length, "dropped frames still reachable").toBe(0);
    expect(w.after(37, 1 << 30).map((f) => f.seq)).toEqual([38, 39, 40]);
  });
});

describe("a fed frame's message (passed through to watchers of the whole episode)", () => {
  const bytes = (n: number, fill = 7) => new Uint8Array(n).fill(fill);

  it("is framesMessage of the frame alone, byte for byte, with the delta its tail; joined, framesMessage of them all", () => {
    const frames = [0, 10, 255, 256, 300, 65_535, 65_536, 70_000].flatMap((n, i) =>
      [1, 127, 200, 70_000, 2 ** 33].map((seq) => ({ seq: seq + i, delta: bytes(n, i + 1) })),
    );
    for (const f of frames) {
      const m = frameMessage(f.seq, f.delta);
      expect(Buffer.from(m).equals(framesMessage([f])), `seq ${f.seq}, ${f.delta.length} B`).toBe(true);
      expect(Buffer.from(m.subarray(m.length - f.delta.length)).equals(f.delta)).toBe(true);
      expect(m.byteOffset === 0 && m.buffer.byteLength === m.length, "a buffer of its own, of its size").toBe(true);
    }
    const run = frames.slice(0, 20);
    expect(
      Buffer.from(joinFrameMessages(run.map((f) => frameMessage(f.seq, f.delta)))).equals(framesMessage(run)),
    ).toBe(true);
    const one = frameMessage(5, bytes(3));
    expect(joinFrameMessages([one]), "one: those very bytes").toBe(one);
  });

  it("comes through a structured clone (as an RPC carries it) sharing one buffer; the hub keeps it, an older hub reads the delta", () => {
    const f = framed({ seq: 42, trace: "t", delta: bytes(20_000, 3) });
    const cloned = structuredClone(f) as FeedFrame;
    expect(cloned.delta.buffer, "the delta is a view of the message's buffer, carried once").toBe(
      cloned.message!.buffer,
    );
    expect(cloned.delta).toEqual(bytes(20_000, 3));
    const kept = received(cloned);
    expect(kept.message, "passed through, not rebuilt").toBe(cloned.message);
    expect(kept.message).toEqual(framesMessage([{ seq: 42, delta: bytes(20_000, 3) }]));
  });

  it("is built by the hub when the feed has none (an older episode) or one that does not match its frame", () => {
    const delta = bytes(600, 9);
    const old = received({ seq: 3, trace: "t", delta });
    expect(old.message).toEqual(framesMessage([{ seq: 3, delta }]));
    expect(old.delta).toEqual(delta);
    const other = frameMessage(4, delta); // another seq's message
    expect(received({ seq: 3, trace: "t", delta: other.subarray(other.length - 600), message: other }).message).toEqual(
      framesMessage([{ seq: 3, delta }]),
    );
    const apart = received({ seq: 3, trace: "t", delta, message: frameMessage(3, delta) }); // equal bytes, not its buffer
    expect(apart.message).toEqual(framesMessage([{ seq: 3, delta }]));
  });

  it("goes as it is to the whole episode's watchers; other variants get their own frames message", () => {
    const delta = (trace: string) =>
      new Uint8Array([0x81, 0xa5, ...new TextEncoder().encode("trace"), 0xa1, trace.charCodeAt(0)]);
    const fs = [framed({ seq: 1, trace: "a", delta: delta("a") }), framed({ seq: 2, trace: "b", delta: delta("b") })];
    const full = { routing: true, traces: null };
    expect(variantMessage(fs.slice(0, 1), full)).toBe(fs[0]!.message);
    expect(variantMessage(fs, full)).toEqual(framesMessage(fs));
    const onlyB = variantMessage(fs, { routing: true, traces: ["b"] })!;
    expect(onlyB).toEqual(framesMessage([fs[1]!]));
    const m = decodeWatchMessage(onlyB);
    expect(m.type === "frames" && m.frames.map(([seq]) => seq)).toEqual([2]);
    expect(variantMessage(fs, { routing: true, traces: ["c"] })).toBeNull();
    expect(variantMessage([], full)).toBeNull();
  });

  it("back-to-back frames share a fan-out message up to FANOUT_MESSAGE_BYTES; a larger frame goes alone", () => {
    const f = (seq: number, n: number) => framed({ seq, trace: "t", delta: bytes(n, seq) });
    const small = [1, 2, 3, 4, 5].map((s) => f(s, 3000)); // ~3 KiB messages: five fit in 16 KiB
    expect(messageRuns(small).map((r) => r.map((x) => x.seq))).toEqual([[1, 2, 3, 4, 5]]);
    const mixed = [f(1, 3000), f(2, 20_000), f(3, 3000), f(4, 3000), f(5, FANOUT_MESSAGE_BYTES)];
    const runs = messageRuns(mixed);
    expect(runs.map((r) => r.map((x) => x.seq))).toEqual([[1], [2], [3, 4], [5]]);
    for (const r of runs)
      expect(r.length === 1 || r.reduce((n, x) => n + x.message.length, 0) <= FANOUT_MESSAGE_BYTES).toBe(true);
    // every frame once, in order; a frame alone is sent as the very bytes the episode built
    expect(runs.flat()).toEqual(mixed);
    expect(variantMessage(runs[1]!, { routing: true, traces: null })).toBe(mixed[1]!.message);
    expect(messageRuns([])).toEqual([]);
  });
});

describe("retry hints", () => {
  it("a 1013 reason carries the hint, within a close reason's 123 bytes", () => {
    const r = retryReason("busy: 300 catch-ups waiting".padEnd(200, "."), 12_345);
    expect(closeReason(r)).toBe(r);
    expect(retryHintMs(r)).toBe(12_345);
    expect(retryHintMs("too many watchers")).toBeNull();
  });

  it("the client waits the hint and up to half again; resumes at once after a first 4008; else full jitter", () => {
    const b: [number, number] = [250, 10_000];
    expect(reconnectDelay(1013, retryReason("busy", 2000), 0, b, () => 0)).toBe(2000);
    expect(reconnectDelay(1013, retryReason("busy", 2000), 5, b, () => 1)).toBe(3000);
    expect(reconnectDelay(4008, "too far behind", 0, b, () => 0.7)).toBe(0);
    expect(reconnectDelay(4008, "too far behind", 1, b, () => 0.5)).toBe(250);
    expect(reconnectDelay(1006, "", 3, b, () => 0.5)).toBe(1000);
    expect(reconnectDelay(1006, "", 20, b, () => 0.5)).toBe(5000);
    const spread = new Set(Array.from({ length: 50 }, () => Math.round(reconnectDelay(1006, "", 0, b))));
    expect(spread.size, "watchers dropped together come back at different times").toBeGreaterThan(10);
    expect(Math.max(...spread)).toBeLessThanOrEqual(250);
  });
});

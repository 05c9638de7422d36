// The viewer tier's pure parts: which hub a watcher goes to (src/protocol/hub/shards.ts), admission
// (src/protocol/hub/admission.ts), a hub's window of recent frames (src/protocol/hub/window.ts), the retry hint in a
// 1013's reason (src/protocol/watch/protocol.ts) and how the client waits on it (clients/typescript/watch.ts).
import { describe, expect, it } from "vitest";
import { reconnectDelay } from "../../clients/typescript/watch.js";
import { Admission, RETRY_MAX_MS, RETRY_MIN_MS } from "../../src/protocol/hub/admission.js";
import type { FeedFrame } from "../../src/protocol/hub/feed.js";
import { HubCounts, hubCount, hubName, parseHubs, pickShard } from "../../src/protocol/hub/shards.js";
import { HubWindow } from "../../src/protocol/hub/window.js";
import { closeReason } from "../../src/protocol/http/errors.js";
import { retryHintMs, retryReason } from "../../src/protocol/watch/protocol.js";

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

describe("a hub's window of recent frames", () => {
  const frame = (seq: number, bytes = 10): FeedFrame => ({ seq, trace: "t", delta: new Uint8Array(bytes) });

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

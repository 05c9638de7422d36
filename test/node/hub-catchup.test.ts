// A hub's catch-ups (src/protocol/hub/catchup.ts) against a scripted byte stream in place of the episode's: a
// stream's messages are fetched once whatever the number of members, kept between the slowest
// and the fastest member up to COHORT_BYTES, and let go (closed and disposed) with the last
// member; where the stream ends, a watcher bridges to the hub's head from the window, or from a
// further stream when the window does not reach back far enough.
import { describe, expect, it } from "vitest";
import { type BridgeSource, CatchUp, COHORT_BYTES, Cohort, type OpenStream } from "../../src/protocol/hub/catchup.js";
import { type CatchUpStream, type StreamStep, stepHeader } from "../../src/protocol/hub/catchup-stream.js";
import { framed, HubWindow } from "../../src/protocol/hub/frames.js";
import { MessagePool, POOL_MIN_BUFFER } from "../../src/protocol/hub/message-pool.js";
import { decodeWatchMessage } from "../../src/protocol/watch/protocol.js";
import type { Variant } from "../../src/protocol/watch/variant.js";

const FULL: Variant = { routing: true, traces: null };
const settle = () => new Promise((r) => setTimeout(r, 0));

/**
 * The episode's pipe: a byte stream of steps (src/protocol/hub/catchup-stream.ts) giving `messages`,
 * then the end at `end` (or failing / saying rewound instead): one step per pull, so `pulls` counts
 * the steps the hub read. The stream stays open after its last step: `cancelled` says the hub
 * stopped reading; `closed` and `disposed`, that it let go of the pipe.
 */
function scripted(messages: Uint8Array[], end: number, last: StreamStep | Error = { end }) {
  const state = { pulls: 0, asked: 0, cancelled: 0, closed: 0, disposed: 0 };
  const bytes = (): ReadableStream<Uint8Array> =>
    new ReadableStream({
      type: "bytes",
      pull(c) {
        const i = state.pulls++;
        if (i < messages.length) {
          c.enqueue(stepHeader({ message: messages[i]! }));
          if (messages[i]!.length > 0) c.enqueue(messages[i]!.slice());
        } else if (i === messages.length) {
          if (last instanceof Error) c.error(last);
          else c.enqueue(stepHeader(last));
        }
      },
      cancel() {
        state.cancelled++;
      },
    });
  const cursor = (): CatchUpStream => ({
    bytes,
    pull() {
      state.asked++;
    },
    close() {
      state.closed++;
    },
    [Symbol.dispose]() {
      state.disposed++;
    },
  });
  return { cursor, state };
}

function source(window: HubWindow, head: () => number, open: OpenStream, pool = new MessagePool(1 << 30)) {
  const opened: Array<{ after: number | null }> = [];
  const woken: Cohort[] = [];
  const done: Cohort[] = [];
  const src: BridgeSource = {
    head,
    window,
    cohortFor: (variant, after, forced) => {
      opened.push({ after });
      return new Cohort(
        open,
        Cohort.key(variant, after, forced),
        0,
        variant,
        after,
        forced,
        (c) => woken.push(c),
        (c) => c.close(), // no lingering here (the hub's watchers keep a cohort joinable a while)
        (c) => done.push(c),
        pool,
      );
    },
  };
  return { src, opened, woken, done };
}

/** Pull a catch-up until it is done (or `limit` steps), settling between waits. */
async function drain(c: CatchUp, limit = 1000): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for (let i = 0; i < limit; i++) {
    const r = c.next();
    if (r === "done") return out;
    if (r === "wait") await settle();
    else out.push(...r);
  }
  throw new Error("catch-up never done");
}

const msg = (n: number, bytes = 8) => new Uint8Array(bytes).fill(n);

describe("hub catch-ups", () => {
  it("one stream for its members: each message fetched once, the same bytes to each; let go with the last member", async () => {
    const s = scripted([msg(1), msg(2), msg(3)], 5);
    const window = new HubWindow(5, 1e6, 1e6);
    const { src, done } = source(
      window,
      () => 5,
      async () => s.cursor(),
    );
    const cohort = src.cohortFor(FULL, null, undefined);
    const a = new CatchUp({ ...src, cohortFor: () => cohort }, FULL, null);
    const b = new CatchUp({ ...src, cohortFor: () => cohort }, FULL, null);
    expect(cohort.members.size).toBe(2);
    const [ga, gb] = await Promise.all([drain(a), drain(b)]);
    expect(ga).toEqual([msg(1), msg(2), msg(3)]);
    expect(gb).toEqual(ga);
    expect(s.state.pulls, "three messages and the end, pulled once").toBe(4);
    expect(s.state.asked, "each step asked for before it was read").toBe(4);
    expect(cohort.members.size).toBe(0);
    expect(done).toEqual([cohort]);
    await settle();
    expect(s.state, "the hub stopped reading and let go of the pipe").toMatchObject({
      cancelled: 1,
      closed: 1,
      disposed: 1,
    });
  });

  it("the fastest member waits once the cohort keeps COHORT_BYTES ahead of the slowest", async () => {
    const big = Array.from({ length: 6 }, (_, i) => msg(i, COHORT_BYTES / 2));
    const s = scripted(big, 1);
    const { src } = source(
      new HubWindow(1, 1e9, 1e6),
      () => 1,
      async () => s.cursor(),
    );
    const cohort = src.cohortFor(FULL, null, undefined);
    const shared = { ...src, cohortFor: () => cohort };
    const slow = new CatchUp(shared, FULL, null);
    const fast = new CatchUp(shared, FULL, null);
    let got = 0;
    for (let i = 0; i < 50; i++) {
      const r = fast.next();
      if (r === "wait") await settle();
      else if (r !== "done") got++;
    }
    expect(got, "held back by the slow member").toBeLessThan(6);
    expect(got).toBeGreaterThanOrEqual(2);
    // both go on, in turn: each gets every message once
    const counts = [0, got];
    const done = [false, false];
    for (let i = 0; i < 200 && !(done[0] && done[1]); i++) {
      const k = i % 2;
      if (done[k]) continue;
      const r = [slow, fast][k]!.next();
      if (r === "done") done[k] = true;
      else if (r === "wait") await settle();
      else counts[k]! += r.length;
    }
    expect(done).toEqual([true, true]);
    expect(counts).toEqual([6, 6]);
    expect(s.state.pulls, "six messages and the end, pulled once").toBe(7);
  });

  it("where the stream ends, the window bridges to the hub's head; frames are filtered for the variant", async () => {
    const s = scripted([msg(1)], 3);
    const window = new HubWindow(2, 1e6, 1e6);
    window.append([
      framed({ seq: 3, trace: "a", delta: new Uint8Array([0x80]) }),
      framed({ seq: 4, trace: "b", delta: new Uint8Array([0x80]) }),
      framed({ seq: 6, trace: "a", delta: new Uint8Array([0x80]) }),
    ]);
    const { src, opened } = source(
      window,
      () => 6,
      async () => s.cursor(),
    );
    const c = new CatchUp(src, { routing: true, traces: ["a"] }, null);
    const out = await drain(c);
    expect(out[0]).toEqual(msg(1));
    const frames = out.slice(1).flatMap((m) => {
      const msg = decodeWatchMessage(m);
      if (msg.type !== "frames") throw new Error(`expected frames, got ${msg.type}`);
      return msg.frames.map(([seq]) => seq);
    });
    expect(frames, "4 is another trace's; 5 was never logged").toEqual([6]);
    expect(opened).toEqual([{ after: null }]);
  });

  it("a resume inside the window needs no stream; one before it gets a stream from the episode", async () => {
    const window = new HubWindow(10, 1e6, 1e6);
    window.append([framed({ seq: 11, trace: "t", delta: new Uint8Array([0x80]) })]);
    const s = scripted([], 10);
    const { src, opened } = source(
      window,
      () => 11,
      async () => s.cursor(),
    );
    const inside = new CatchUp(src, FULL, 10);
    expect((await drain(inside)).length).toBe(1);
    expect(opened).toEqual([]);
    const before = new CatchUp(src, FULL, 7);
    await drain(before);
    expect(opened, "the episode streams 8..10, the window gives 11").toEqual([{ after: 7 }]);
  });

  it("a stream that ends ahead of the hub's feed waits for the feed", async () => {
    const s = scripted([], 9);
    let head = 7;
    const { src } = source(
      new HubWindow(7, 1e6, 1e6),
      () => head,
      async () => s.cursor(),
    );
    const c = new CatchUp(src, FULL, 3);
    for (let i = 0; i < 10; i++) {
      expect(c.next()).toBe("wait");
      await settle();
    }
    src.window.append([framed({ seq: 9, trace: "t", delta: new Uint8Array([0x80]) })]);
    head = 9;
    expect(c.next()).toBe("done");
  });

  it("a retraction makes the stream wait (the hub's restart follows); a broken stream throws", async () => {
    const rewound = scripted([msg(1)], 0, { rewound: true });
    const { src } = source(
      new HubWindow(0, 1e6, 1e6),
      () => 0,
      async () => rewound.cursor(),
    );
    const a = new CatchUp(src, FULL, null);
    let steps = 0;
    for (; steps < 20; steps++) {
      const r = a.next();
      if (r === "wait") await settle();
    }
    expect(a.snapshotting?.rewound).toBe(true);
    expect(a.snapshotting?.joinable()).toBe(false);
    const broken = scripted([], 0, new Error("the episode restarted"));
    const b = new CatchUp(
      source(
        new HubWindow(0, 1e6, 1e6),
        () => 0,
        async () => broken.cursor(),
      ).src,
      FULL,
      null,
    );
    expect(b.next()).toBe("wait");
    await settle();
    await settle();
    expect(() => b.next()).toThrow(/restarted/);
  });

  it("with the hub's pool dry, a cohort gives up what every member sent (no longer joinable) and waits for acknowledgements", async () => {
    const pool = new MessagePool(2 * POOL_MIN_BUFFER); // two buffers
    const s = scripted(
      Array.from({ length: 6 }, (_, i) => msg(i + 1)),
      1,
    );
    const { src } = source(
      new HubWindow(1, 1e6, 1e6),
      () => 1,
      async () => s.cursor(),
      pool,
    );
    const c = new CatchUp(src, FULL, null);
    const cohort = c.snapshotting!;
    const flow = { acked: 0 };
    let sent = 0;
    const got: Uint8Array[] = [];
    /** Views sent and not yet acknowledged, with the bytes they had when sent: the runtime may still read them. */
    const inFlight: Array<{ view: Uint8Array; bytes: Uint8Array }> = [];
    let waitsUnacked = 0;
    for (let i = 0; i < 500; i++) {
      const r = c.next();
      if (r === "done") break;
      if (r === "wait") {
        await settle();
        if (flow.acked < sent) waitsUnacked++;
        if (waitsUnacked >= 10 && flow.acked < sent) {
          for (const f of inFlight) expect(f.view, "untouched until acknowledged").toEqual(f.bytes);
          inFlight.length = 0;
          flow.acked = sent; // the watcher acknowledged everything sent
          pool.retry();
        }
        continue;
      }
      for (const m of r) {
        got.push(m.slice());
        inFlight.push({ view: m, bytes: m.slice() });
        pool.hold(m, flow, ++sent);
      }
    }
    expect(got).toEqual(Array.from({ length: 6 }, (_, i) => msg(i + 1)));
    expect(pool.made, "two buffers, used again").toBe(2);
    expect(waitsUnacked, "it waited for the acknowledgements").toBeGreaterThanOrEqual(10);
    expect(cohort.joinable(), "it gave up its first messages").toBe(false);
  });
});

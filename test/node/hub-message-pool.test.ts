// The hub's catch-up buffers (src/protocol/hub/message-pool.ts) and the byte stream of steps they
// are read from (src/protocol/hub/catchup-stream.ts): a buffer is used again only once its cohort
// dropped the message and every socket it went to acknowledged past it; one a gone socket did not
// acknowledge is never used again; the pool stops at its cap; a stream cut anywhere reads back the
// same steps into the pool's buffers, and one that breaks inside a step throws.
import type { UnderlyingByteSource } from "node:stream/web";
import { describe, expect, it } from "vitest";
import { StreamReader, type StreamStep, stepHeader } from "../../src/protocol/hub/catchup-stream.js";
import { type AckedFlow, bufferClass, MessagePool, POOL_MIN_BUFFER } from "../../src/protocol/hub/message-pool.js";

const KiB = 1024;

/** A message read into a buffer of `pool` (as a BYOB read leaves it: a view at the buffer's start). */
function read(pool: MessagePool, bytes: number): Uint8Array | null {
  const lease = pool.take(bytes);
  if (!lease) return null;
  const view = new Uint8Array(lease.buffer, 0, bytes);
  pool.adopt(lease, view);
  return view;
}

describe("catch-up message pool", () => {
  it("a buffer comes back once dropped and acknowledged by every socket it went to, not before", () => {
    const pool = new MessagePool(1024 * KiB);
    const m = read(pool, 10 * KiB)!;
    const a: { acked: number; gone?: boolean } = { acked: 0 };
    const b: { acked: number; gone?: boolean } = { acked: 0 };
    pool.hold(m, a, 100);
    pool.hold(m, b, 50);
    pool.drop(m);
    a.acked = 100;
    b.acked = 49;
    const other = read(pool, 10 * KiB)!;
    expect(other.buffer, "b is one byte short").not.toBe(m.buffer);
    b.acked = 50;
    const again = pool.take(10 * KiB)!;
    expect(again.buffer, "every socket acknowledged past it").toBe(m.buffer);
    expect(pool.made).toBe(2);
  });

  it("buffers come in classes a third apart from POOL_MIN_BUFFER: a message takes at most a third more than its size", () => {
    const pool = new MessagePool(64 * 1024 * KiB);
    expect(
      [1, POOL_MIN_BUFFER, POOL_MIN_BUFFER + 1, 1.5 * POOL_MIN_BUFFER + 1, 1536 * KiB, 2049 * KiB].map(bufferClass),
    ).toEqual([POOL_MIN_BUFFER, POOL_MIN_BUFFER, 1.5 * POOL_MIN_BUFFER, 2 * POOL_MIN_BUFFER, 1536 * KiB, 3072 * KiB]);
    for (let n = 1; n < 8 * 1024 * KiB; n = Math.ceil(n * 1.37)) {
      const c = bufferClass(n);
      expect(c).toBeGreaterThanOrEqual(n);
      if (n > POOL_MIN_BUFFER) expect(c / n).toBeLessThanOrEqual(1.5);
    }
    const small = read(pool, 100)!;
    pool.drop(small);
    expect(pool.take(100 * KiB)!.bytes, "a small free buffer does not serve a larger message").toBe(128 * KiB);
    expect(pool.take(200)!.buffer, "it serves one of its size").toBe(small.buffer);
  });

  it("a message its cohort still keeps is not reused, acknowledged or not", () => {
    const pool = new MessagePool(1024 * KiB);
    const m = read(pool, KiB)!;
    const f: AckedFlow = { acked: 10 };
    pool.hold(m, f, 10);
    expect(pool.take(KiB)!.buffer).not.toBe(m.buffer);
  });

  it("a buffer sent to a socket that went away unacknowledged is let go, and no longer counted", () => {
    const pool = new MessagePool(2 * POOL_MIN_BUFFER);
    const m = read(pool, KiB)!;
    const n = read(pool, KiB)!;
    pool.hold(m, { acked: 0, gone: true }, 1);
    pool.drop(m);
    expect(pool.bytes).toBe(2 * POOL_MIN_BUFFER);
    const l = pool.take(KiB)!;
    expect(l.buffer, "m is let go, a new buffer takes its place").not.toBe(m.buffer);
    expect(l.buffer).not.toBe(n.buffer);
    expect(pool.lost).toBe(1);
    expect(pool.made).toBe(3);
    expect(pool.bytes, "m no longer counts").toBe(2 * POOL_MIN_BUFFER);
    expect(pool.take(KiB), "at the cap, nothing free").toBeNull();
    pool.drop(n);
    expect(pool.take(KiB)!.buffer, "n was sent nowhere: free once dropped").toBe(n.buffer);
  });

  it("stops at its cap; a taker waits and is woken by an acknowledgement; with nothing in use a message gets a buffer past it", () => {
    const pool = new MessagePool(2 * POOL_MIN_BUFFER);
    const f = { acked: 0 };
    const held = [read(pool, KiB)!, read(pool, KiB)!];
    for (const [i, m] of held.entries()) {
      pool.hold(m, f, i + 1);
      pool.drop(m);
    }
    expect(pool.take(KiB)).toBeNull();
    let woken = 0;
    pool.wait(() => woken++);
    pool.retry();
    expect(woken).toBe(1);
    f.acked = 1;
    expect(pool.take(KiB)!.buffer).toBe(held[0]!.buffer);
    const lone = new MessagePool(256 * KiB);
    const first = lone.take(96 * KiB)!;
    const second = lone.take(96 * KiB)!;
    expect(lone.take(96 * KiB), "at the cap, two in use").toBeNull();
    lone.giveBack(first);
    lone.giveBack(second);
    expect(lone.take(128 * KiB)!.bytes, "the free ones are of another size: they make room").toBe(128 * KiB);
    expect(lone.bytes).toBe(224 * KiB);
  });

  it("a message larger than half the cap gets a buffer of its own, outside the pool; lease waits, then gives up", async () => {
    const pool = new MessagePool(256 * KiB);
    const big = pool.take(200 * KiB)!;
    expect(big).toMatchObject({ pooled: false, bytes: 200 * KiB });
    pool.adopt(big, new Uint8Array(big.buffer));
    expect(pool.bytes, "not counted").toBe(0);
    const a = read(pool, 96 * KiB)!;
    const b = read(pool, 96 * KiB)!;
    let gaveUp = 0;
    let closed = false;
    const waiting = pool.lease(
      96 * KiB,
      () => gaveUp++,
      () => closed,
    );
    expect(waiting).toBeInstanceOf(Promise);
    pool.drop(a); // its cohort let it go: sent nowhere, free
    expect(((await waiting) as { buffer: ArrayBuffer }).buffer).toBe(a.buffer);
    expect(gaveUp, "asked to give up before each try").toBeGreaterThanOrEqual(1);
    const never = pool.lease(
      96 * KiB,
      () => undefined,
      () => closed,
    );
    closed = true;
    pool.retry();
    await expect(never).rejects.toThrow(/closed/);
    expect(b.length).toBe(96 * KiB);
  });

  it("run dry, it asks for what is kept for no one (whenDry) before a taker waits", () => {
    const pool = new MessagePool(2 * POOL_MIN_BUFFER);
    const lingering = [read(pool, KiB)!, read(pool, KiB)!];
    let asked = 0;
    pool.whenDry(() => {
      asked++;
      pool.drop(lingering[0]!); // a cohort nobody is on closes
    });
    expect(pool.take(KiB)!.buffer, "the lingering cohort's buffer").toBe(lingering[0]!.buffer);
    expect(asked).toBe(1);
    expect(pool.take(KiB), "nothing more to give: the taker waits").toBeNull();
    expect(asked).toBe(2);
  });

  it("keeps at most `keepFree` bytes of free buffers; the rest go to the collector", () => {
    const pool = new MessagePool(1024 * KiB, 2 * POOL_MIN_BUFFER);
    const ms = [read(pool, KiB)!, read(pool, KiB)!, read(pool, KiB)!];
    for (const m of ms) pool.drop(m);
    pool.take(1); // reclaims the three: two kept, one let go
    expect(pool.bytes, "one taken again, one kept free").toBe(2 * POOL_MIN_BUFFER);
  });

  it("reset (every socket closed): buffers in use are never reused, free ones stay", () => {
    const pool = new MessagePool(1024 * KiB);
    const m = read(pool, KiB)!;
    const l = pool.take(KiB)!;
    pool.giveBack(l);
    pool.hold(m, { acked: 0 }, 1);
    pool.reset();
    expect(pool.lost).toBe(1);
    expect(pool.bytes).toBe(POOL_MIN_BUFFER);
    expect(pool.take(KiB)!.buffer).toBe(l.buffer);
  });
});

function byteStream(source: UnderlyingByteSource): ReadableStream<Uint8Array> {
  return new ReadableStream(source) as ReadableStream<Uint8Array>;
}

/** `steps` as the episode writes them, cut into pieces of `piece` bytes whatever the step boundaries. */
function streamOf(steps: StreamStep[], piece: number, tail: "close" | Error = "close"): ReadableStream<Uint8Array> {
  const parts: Uint8Array[] = [];
  for (const s of steps) {
    parts.push(stepHeader(s));
    if ("message" in s) parts.push(s.message);
  }
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  let at = 0;
  return byteStream({
    type: "bytes",
    pull(c) {
      if (at >= all.length) {
        if (tail === "close") {
          c.close();
          (c.byobRequest as unknown as { respond(n: number): void } | null)?.respond(0); // a pending BYOB read ends
        } else c.error(tail);
        return;
      }
      c.enqueue(all.slice(at, at + piece));
      at += piece;
    },
  });
}

describe("catch-up byte stream", () => {
  const messages = [3000, 0, 70 * KiB, 5].map((n, i) => new Uint8Array(n).map((_, j) => (i * 31 + j) & 0xff));
  const steps: StreamStep[] = [...messages.map((message) => ({ message })), { end: 2 ** 53 - 1 }];

  for (const piece of [1, 7, 4096, 1 << 20]) {
    it(`reads every step back, cut into pieces of ${piece} B, each message into a pool buffer used again`, async () => {
      const pool = new MessagePool(1024 * KiB);
      const reader = StreamReader.of(streamOf([...steps, { rewound: true }], piece));
      const got: StreamStep[] = [];
      for (let i = 0; i < steps.length + 1; i++) {
        const s = await reader.next(pool);
        got.push("message" in s ? { message: s.message.slice() } : s);
        if ("message" in s) pool.drop(s.message); // sent nowhere: free at once
      }
      expect(got).toEqual([...steps, { rewound: true }]);
      expect(pool.made, "one buffer for the small ones, one for the 70 KiB message").toBe(2);
      expect(pool.bytes).toBe(POOL_MIN_BUFFER + bufferClass(70 * KiB));
    });
  }

  it("a stream that ends or breaks inside a step throws; a step of another kind throws", async () => {
    const pool = new MessagePool(1024 * KiB);
    const whole = streamOf([{ message: new Uint8Array(100) }], 1 << 20);
    const cut = byteStream({
      type: "bytes",
      async start(c) {
        const r = whole.getReader();
        const { value } = await r.read();
        c.enqueue(value!.slice(0, 50));
        c.close();
      },
    });
    await expect(StreamReader.of(cut).next(pool)).rejects.toThrow(/ended inside a step|closed/);
    expect(pool.busy, "its lease was given back").toBe(0);
    await expect(
      StreamReader.of(streamOf([{ message: new Uint8Array(10) }], 4, new Error("the episode restarted"))).next(pool),
    ).resolves.toMatchObject({ message: expect.any(Uint8Array) });
    const broken = StreamReader.of(streamOf([], 4, new Error("the episode restarted")));
    await expect(broken.next(pool)).rejects.toThrow(/restarted/);
    const odd = stepHeader({ end: 1 });
    odd[0] = 9;
    await expect(
      StreamReader.of(
        byteStream({
          type: "bytes",
          start(c) {
            c.enqueue(odd);
          },
        }),
      ).next(pool),
    ).rejects.toThrow(/kind 9/);
  });
});

// The buffers a hub reads catch-up messages into, used again once every watcher they went to has
// acknowledged them. A catch-up moves hundreds of MiB through a hub; a new buffer per message (what
// an RPC result is) is garbage V8 collects only once about 64 MB more are held (its external
// memory rule), so an isolate's heap as Cloudflare counts it would peak far above what it holds.
// Reads fill these buffers in place instead (src/protocol/hub/catchup-stream.ts, a BYOB read), so
// what a hub holds for its catch-ups is the pool, whatever the number of bytes it moves.
// - A buffer is free again once its cohort dropped the message (src/protocol/hub/catchup.ts) and
//   each socket it was sent to acknowledged past it: WebSocket.send does not copy (the runtime
//   writes from the buffer itself until the write is done), and an acknowledgement proves the write
//   done. A buffer sent to a socket that went away unacknowledged is never reused (the runtime may
//   still hold it): the pool lets it go to the collector and counts it no more.
// - Buffers come in size classes a third apart (a small episode's catch-up holds little). At most
//   `capBytes` in buffers: past it a taker waits (`lease`), woken when an acknowledgement, a drop
//   or a socket gone frees one; with nothing in use, a message gets a buffer even past the cap (it
//   cannot wait for itself), and one larger than half the cap gets a buffer of its own, unpooled.
//   At most POOL_FREE_BYTES stay free between catch-ups.

/**
 * A hub's catch-up buffers, bytes: its cohorts' kept messages (COHORT_BYTES each, fewer when the
 * pool runs dry) and what their watchers have not acknowledged (their windows), for a few cohorts.
 */
export const CATCHUP_POOL_BYTES = 24 * 1024 * 1024;
/** Free buffers kept for the next catch-up at most, bytes (the rest go to the collector). */
const POOL_FREE_BYTES = 8 * 1024 * 1024;
/** The smallest buffer: buffers are a power of two from here or one and a half times one. */
export const POOL_MIN_BUFFER = 16 * 1024;

/**
 * The size class of a message of `length` bytes: the least of 16, 24, 32, 48, 64, ... KiB that holds
 * it, so a message takes at most a third more than its size.
 */
export function bufferClass(length: number): number {
  for (let p = POOL_MIN_BUFFER; ; p *= 2) {
    if (length <= p) return p;
    if (length <= p * 1.5) return p * 1.5;
  }
}

/** What the pool reads of a socket's flow (src/objects/hub/fan-out.ts `Flow`). */
export interface AckedFlow {
  /** Bytes the watcher acknowledged, counted as `end` below. */
  readonly acked: number;
  /** The socket is gone: what it did not acknowledge may still be read by the runtime. */
  readonly gone?: boolean;
}

/** A buffer taken to read one message into. */
export interface Lease {
  readonly buffer: ArrayBuffer;
  readonly bytes: number;
  /** False for a message too large for the pool: its buffer is its own, left to the collector. */
  readonly pooled: boolean;
}

interface InUse {
  bytes: number;
  /** Sends of it: the flow, and its count of bytes sent once this message was. */
  holds: Array<{ flow: AckedFlow; end: number }>;
  /** Its cohort no longer keeps it. */
  dropped: boolean;
}

export class MessagePool {
  /** Free buffers by size class. */
  private readonly free = new Map<number, ArrayBuffer[]>();
  private freeBytes = 0;
  private readonly inUse = new Map<ArrayBuffer, InUse>();
  /** Bytes in buffers the pool owns (free, taken or in use). */
  private owned = 0;
  /** Taken for a read, not yet adopted or given back. */
  private taken = 0;
  private readonly waiters: Array<() => void> = [];
  /** Called when the pool runs dry, to give back what is kept for no one (cohorts nobody is on). */
  private dry: (() => void) | null = null;
  /** Pooled buffers leased, buffers made, and buffers lost to sockets that went away, since the pool started (stats). */
  leased = 0;
  made = 0;
  lost = 0;

  constructor(
    private readonly capBytes: number,
    private readonly keepFree = POOL_FREE_BYTES,
  ) {}

  /** Bytes in buffers the pool owns now. */
  get bytes(): number {
    return this.owned;
  }

  /** Buffers in use (read into and not yet free again). */
  get busy(): number {
    return this.inUse.size + this.taken;
  }

  /** Call `f` when the pool runs dry, before a taker is told to wait (it may drop messages kept for no one). */
  whenDry(f: () => void): void {
    this.dry = f;
  }

  /** A buffer of at least `length` bytes to read into, or null: none is free and the pool is at its cap. */
  take(length: number): Lease | null {
    const l = this.tryTake(length);
    if (l || !this.dry) return l;
    this.dry();
    return this.tryTake(length);
  }

  /**
   * A buffer of at least `length` bytes: now, or once one is free. Short of buffers, the pool first
   * lets go of what is kept for no one (`whenDry`), then asks the taker to give up what it can
   * (`giveUp`), each time it tries again; it stops waiting (rejects) once `closed()`.
   */
  lease(length: number, giveUp: () => void, closed: () => boolean): Lease | Promise<Lease> {
    const now = this.take(length);
    if (now) return now;
    return new Promise((resolve, reject) => {
      const again = () => {
        if (closed()) return reject(new Error("catch-up stream closed"));
        giveUp();
        const l = this.take(length);
        if (l) resolve(l);
        else this.wait(again);
      };
      again();
    });
  }

  private tryTake(length: number): Lease | null {
    const size = bufferClass(length);
    // a message that would hold a good part of the pool gets a buffer of its own (it could wait long for room)
    if (size > this.capBytes / 2) return { buffer: new ArrayBuffer(length), bytes: length, pooled: false };
    this.reclaim();
    const b = this.free.get(size)?.pop();
    if (b) {
      this.freeBytes -= size;
      this.taken++;
      this.leased++;
      return { buffer: b, bytes: size, pooled: true };
    }
    // free buffers of other sizes make room for this one
    for (const [s, list] of this.free) {
      while (this.owned + size > this.capBytes && list.length > 0) {
        list.pop();
        this.owned -= s;
        this.freeBytes -= s;
      }
    }
    if (this.owned + size > this.capBytes && this.busy > 0) return null;
    const buffer = new ArrayBuffer(size); // before counting it: an allocation that fails changes nothing
    this.owned += size;
    this.taken++;
    this.made++;
    this.leased++;
    return { buffer, bytes: size, pooled: true };
  }

  /** A read filled `view` from `lease` (a BYOB read hands back the buffer it filled as a new object). */
  adopt(lease: Lease, view: Uint8Array): void {
    if (!lease.pooled) return;
    this.taken--;
    this.inUse.set(view.buffer as ArrayBuffer, { bytes: lease.bytes, holds: [], dropped: false });
  }

  /**
   * A lease that holds no message (the stream ended or failed): its buffer is the pool's again, or gone if a
   * failed read detached it.
   */
  giveBack(lease: Lease): void {
    if (!lease.pooled) return;
    this.taken--;
    if (lease.buffer.byteLength === lease.bytes) this.keep(lease.buffer, lease.bytes);
    else this.owned -= lease.bytes;
    this.wake();
  }

  /** `message` was sent on a socket whose flow counts `end` bytes sent once it was (nothing if not pooled). */
  hold(message: Uint8Array, flow: AckedFlow, end: number): void {
    this.inUse.get(message.buffer as ArrayBuffer)?.holds.push({ flow, end });
  }

  /** Its cohort no longer keeps `message`. */
  drop(message: Uint8Array): void {
    const u = this.inUse.get(message.buffer as ArrayBuffer);
    if (!u) return;
    u.dropped = true;
    this.retry();
  }

  /** Call `f` once a buffer may be free (after an acknowledgement or a drop). */
  wait(f: () => void): void {
    this.waiters.push(f);
  }

  /** Takers that waited try again (acknowledgements arrived, or a cohort closed). */
  retry(): void {
    if (this.waiters.length > 0) this.wake();
  }

  /** Every socket closed (the hub starts over): buffers in use are never reused, free ones are kept. */
  reset(): void {
    for (const u of this.inUse.values()) {
      this.owned -= u.bytes;
      this.lost++;
    }
    this.inUse.clear();
    this.wake();
  }

  private wake(): void {
    const ws = this.waiters.splice(0);
    for (const f of ws) f();
  }

  /** A buffer free again: kept for the next message of its size, or left to the collector past `keepFree`. */
  private keep(buffer: ArrayBuffer, size: number): void {
    if (this.freeBytes + size > this.keepFree) {
      this.owned -= size;
      return;
    }
    let list = this.free.get(size);
    if (!list) this.free.set(size, (list = []));
    list.push(buffer);
    this.freeBytes += size;
  }

  /** Buffers dropped and acknowledged by every socket they went to are free; those a gone socket holds are let go. */
  private reclaim(): void {
    for (const [buffer, u] of this.inUse) {
      if (!u.dropped) continue;
      let acked = true;
      let lost = false;
      for (const h of u.holds) {
        if (h.flow.acked >= h.end) continue;
        acked = false;
        if (h.flow.gone) lost = true;
      }
      if (lost) {
        this.inUse.delete(buffer);
        this.owned -= u.bytes;
        this.lost++;
      } else if (acked) {
        this.inUse.delete(buffer);
        this.keep(buffer, u.bytes);
      }
    }
  }
}

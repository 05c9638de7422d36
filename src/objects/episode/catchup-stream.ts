// Catching a watcher up, on the episode's side: the state as of a pinned seq as snapshot messages
// (or, when it resumes with `?after=` inside the log, none), then the log after it, one message
// at a time. The viewer hub that asked (src/protocol/hub/catchup.ts) reads the messages off a byte
// stream (CatchUpStream, below) as fast as its watchers acknowledge them, shares them between the
// watchers that joined together, and bridges from where the stream ends to its own head with the
// frames it was fed. Ingest goes on in between: the snapshot reads SQLite as of its seq (the pin
// keeps what it reads), and the replay reads the log as it grows.

import { RpcTarget } from "cloudflare:workers";
import type { BodyReader } from "../../protocol/assembly/bodies.js";
import { traceOf } from "../../protocol/assembly/delta.js";
import type { TraceView } from "../../protocol/assembly/render.js";
import {
  buildDelta,
  buildDeltaChunks,
  type DeltaPlan,
  plannedBytes,
  snapshotPlan,
} from "../../protocol/assembly/snapshot.js";
import type { Pin } from "../../protocol/episode/holds.js";
import { type StreamStep, stepHeader } from "../../protocol/hub/catchup-stream.js";
import { bufferClass } from "../../protocol/hub/message-pool.js";
import {
  type Chunks,
  type Frame,
  framesMessage,
  MESSAGE_BYTES,
  type SnapshotReason,
  snapshotMessage,
} from "../../protocol/watch/protocol.js";
import { deltaForVariant, stripRouting, type Variant } from "../../protocol/watch/variant.js";
import { concatChunks } from "../../protocol/wire/writer.js";
import type { Meta } from "./record-store.js";

/**
 * The first snapshot message is small, and each next one at most twice the last, up to MESSAGE_BYTES: a watcher that
 * leaves at once (a reconnect storm) costs the episode little, and the one read ahead for it (its cohort fetches the
 * next message while one is sent) little more; a long catch-up reaches full messages after a few.
 */
export const FIRST_MESSAGE_BYTES = 256 * 1024;

/**
 * Let go of buffers read from SQLite once a message holds a copy of their bytes: detached, their
 * memory goes at once. Left to the collector, they piled up: the runtime collects ArrayBuffers only
 * once ~64 MiB of them have (bench/repro/arraybuffer-garbage.mjs), and a catch-up reads every byte
 * it sends. `keep`: a buffer still in use (a delta carried to the next message).
 */
function freeReads(read: Uint8Array[], keep: ArrayBufferLike | null = null): void {
  for (const b of read) {
    if (b.buffer === keep) continue;
    try {
      (b.buffer as ArrayBuffer & { transfer?(length: number): ArrayBuffer }).transfer?.(0);
    } catch {
      // already let go, or not detachable: the collector takes it
    }
  }
  read.length = 0;
}

/** What a catch-up reads: the episode's record, index and stores. */
export interface CatchUpSource {
  /**
   * Frames and bodies it gives are fresh reads (SQLite's own buffers, held by nothing else): a message that
   * copied their bytes frees them (`freeReads`).
   */
  fresh?: boolean;
  meta(): Meta | null;
  /** The traces in memory as they stand now. */
  views(): TraceView[];
  pin(asOf: number): Pin;
  reader(asOf: number): BodyReader;
  frames(after: number, upTo: number, maxBytes: number): Iterable<{ seq: number; frame: Uint8Array }>;
  /** Whether a retraction took back frames after `seq` that a watcher holding it may have seen. */
  rewoundPast(seq: number): boolean;
  /** The snapshot as of `seq`: from SQLite (SnapshotBuilder), or from the archive once the bodies left it. */
  snapshot(seq: number, variant: Variant, reason: SnapshotReason): SnapshotMessages;
}

/** A snapshot's messages, built one at a time as pulled (nothing kept once given). */
export abstract class SnapshotMessages {
  /** One delta built that did not fit the last message. */
  private carried: Uint8Array | Chunks | null = null;
  private built = 0;
  done = false;

  constructor(
    readonly seq: number,
    protected readonly variant: Variant,
    private readonly reason: SnapshotReason,
  ) {}

  /** False once a retraction rewound the episode to before `seq`. */
  abstract get valid(): boolean;
  /** The next delta as the variant sees it (whole, or as pieces the message joins), or null at the end. */
  protected abstract nextDelta(): Uint8Array | Chunks | null | Promise<Uint8Array | Chunks | null>;
  /** Let go of what the snapshot holds. */
  abstract release(): void;
  /** About how large the next delta will be, before it is built (null: not known, or none left). */
  protected nextBytes(): number | null {
    return null;
  }

  /**
   * The next message: deltas up to about MESSAGE_BYTES (the first ones smaller), joined into `into(length)` when given;
   * null after the last.
   */
  async message(into?: (length: number) => Uint8Array): Promise<Uint8Array | null> {
    if (this.done) return null;
    const limit = Math.min(MESSAGE_BYTES, FIRST_MESSAGE_BYTES * 2 ** this.built);
    const batch: Array<Uint8Array | Chunks> = [];
    let bytes = 0;
    let more = false;
    for (;;) {
      // a delta that would not fit is left unbuilt: carrying it built costs a copy of its pieces
      const planned = this.carried === null && batch.length > 0 ? this.nextBytes() : null;
      if (planned !== null && bytes + planned > limit) {
        more = true;
        break;
      }
      const d = this.carried ?? (await this.nextDelta());
      this.carried = null;
      if (d === null) break;
      if (batch.length > 0 && bytes + d.length > limit) {
        // kept for the next message, joined: pieces are not held across turns (ingest goes on)
        this.carried = d instanceof Uint8Array ? d : concatChunks(d.chunks, d.length);
        more = true;
        break;
      }
      batch.push(d);
      bytes += d.length;
    }
    this.done = !more;
    this.built++;
    const message = snapshotMessage(this.seq, this.reason, batch, more, into);
    this.joined(this.carried);
    return message;
  }

  /** A message holds copies of the deltas it carries (`carried` is kept for the next one). */
  protected joined(_carried: Uint8Array | Chunks | null): void {}
}

/** A snapshot built from SQLite as of `seq`, planned from the index. */
export class SnapshotBuilder extends SnapshotMessages {
  private readonly plan: DeltaPlan[];
  private readonly wanted: TraceView[];
  private readonly reader: BodyReader;
  private readonly pin: Pin;
  /** The next planned delta. */
  private next = 0;
  /** Bodies read for the message being built (fresh reads only: freed once it is joined). */
  private readonly read: Uint8Array[] = [];

  constructor(
    src: Pick<CatchUpSource, "pin" | "reader" | "views" | "fresh">,
    seq: number,
    variant: Variant,
    reason: SnapshotReason,
  ) {
    super(seq, variant, reason);
    this.pin = src.pin(seq);
    const reader = src.reader(seq);
    this.reader = src.fresh
      ? {
          nodes: (tnum, from, to) => this.track(reader.nodes(tnum, from, to)),
          items: (tnum, field, from, to) => this.track(reader.items(tnum, field, from, to)),
        }
      : reader;
    this.wanted = src.views().filter((v) => variant.traces === null || variant.traces.includes(v.id));
    this.plan = snapshotPlan(this.wanted);
  }

  get valid(): boolean {
    return this.pin.valid;
  }

  /** With routing, from the plan (without, the stripped delta is far smaller than planned, and carried whole). */
  protected override nextBytes(): number | null {
    const p = this.plan[this.next];
    return p && this.variant.routing ? plannedBytes(this.wanted, p) : null;
  }

  release(): void {
    this.done = true;
    this.pin.release();
  }

  private track<T>(bodies: T[]): T[] {
    for (const b of bodies) if (b instanceof Uint8Array) this.read.push(b);
    return bodies;
  }

  protected override joined(carried: Uint8Array | Chunks | null): void {
    // a carried delta was joined (or stripped) into a buffer of its own; were it one, it stays
    freeReads(this.read, carried instanceof Uint8Array ? carried.buffer : null);
  }

  /**
   * The next planned delta as the variant sees it (routing stripped if asked), or null at the end.
   * With routing, its pieces as they are (the message is the one copy of the bodies it carries).
   */
  protected nextDelta(): Uint8Array | Chunks | null {
    if (this.next >= this.plan.length) return null;
    const p = this.plan[this.next++]!;
    return this.variant.routing
      ? buildDeltaChunks(this.reader, this.wanted, p)
      : stripRouting(buildDelta(this.reader, this.wanted, p));
  }
}

/** One catch-up stream: a snapshot (unless resuming inside the log), then the log after it. */
export class CatchUpMessages {
  private snapshot: SnapshotMessages | null = null;
  /** The log pin while replaying (the snapshot's pin holds the log before that). */
  private pin: Pin | null = null;
  /** The seq the watcher holds once it has every message given so far (-1 while in the snapshot). */
  private at: number;
  /** Why the stream starts with a snapshot, if it does. */
  readonly reason: SnapshotReason | null;

  /** @param forced a snapshot for this reason, whatever `after` says (after a retraction) */
  constructor(
    private readonly src: CatchUpSource,
    private readonly variant: Variant,
    after: number | null,
    forced?: SnapshotReason,
  ) {
    const m = src.meta();
    const seq = m?.seq ?? 0;
    if (!forced && after !== null && after <= seq && after >= (m?.base ?? 0) && !src.rewoundPast(after)) {
      this.at = after;
      this.pin = src.pin(after);
      this.reason = null;
    } else {
      this.reason =
        forced ?? (after === null ? "join" : after > seq ? "ahead" : src.rewoundPast(after) ? "rewind" : "trimmed");
      this.snapshot = src.snapshot(seq, variant, this.reason);
      this.at = -1;
    }
  }

  /** False once a retraction took back what this stream has given. */
  get valid(): boolean {
    return (this.snapshot ?? this.pin)?.valid ?? true;
  }

  /**
   * The next message (joined into `into(length)` when given), or null when the watcher has everything up to `seq` (the
   * episode's head now).
   */
  async next(into?: (length: number) => Uint8Array): Promise<Uint8Array | null> {
    const s = this.snapshot;
    if (s) {
      const m = await s.message(into);
      if (this.snapshot !== s) return null; // released while it was built (the stream closed)
      if (s.done) {
        // the snapshot is given: hold the log from its seq
        this.at = s.seq;
        this.pin = this.src.pin(s.seq);
        this.snapshot = null;
        s.release();
      }
      if (m) return m;
    }
    const head = this.src.meta()?.seq ?? 0;
    while (this.at < head) {
      const visible: Frame[] = [];
      const read: Uint8Array[] = [];
      const from = this.at;
      for (const { seq, frame } of this.src.frames(this.at, head, MESSAGE_BYTES)) {
        this.at = seq;
        if (this.src.fresh) read.push(frame);
        const d = deltaForVariant(frame, traceOf(frame), this.variant);
        if (d) visible.push({ seq, delta: d });
      }
      if (visible.length) {
        this.repin();
        const message = framesMessage(visible, into);
        freeReads(read);
        return message;
      }
      freeReads(read);
      if (this.at === from) this.at = head; // nothing logged after `at` up to the head (retracted frames leave gaps)
    }
    return null;
  }

  /** The seq the watcher holds after what was given (meaningful once `next` returned null). */
  get seq(): number {
    return this.at;
  }

  /** Hold only the log after `at` (what is still to read). */
  private repin(): void {
    if (this.pin?.asOf === this.at) return;
    const next = this.src.pin(this.at);
    this.pin?.release();
    this.pin = next;
  }

  /** Done, or the watcher is gone: let go of what it held. */
  release(): void {
    this.snapshot?.release();
    this.snapshot = null;
    this.pin?.release();
    this.pin = null;
  }
}

// ---- the stream a hub reads ----
//
// A catch-up stream handed to a viewer hub over RPC as a byte stream of steps
// (src/protocol/hub/catchup-stream.ts). The hub also holds the stream object itself (an RpcTarget) and asks
// for each step (`pull`) before it reads it: a step is built and written only then, so nothing is
// built before the hub's watchers can take it, and nothing waits in the stream between the two
// (the runtime reads a stream sent over RPC ahead of its reader: a hub's paused streams held
// what the episode had written into them). The stub also keeps this object up while the stream
// is read (a stream alone does not: between two runtime processes the object went away under it),
// and closing or disposing it lets go. Messages are joined into buffers used again (JoinBuffers):
// an IdentityTransformStream's write resolves once its reader (the runtime, sending it on) has
// taken the bytes, and a buffer is given back only after that. Each stream holds its
// pins; it lets go when the hub closes it, when the stream breaks (the hub went away), or when the
// hub has read nothing for STREAM_IDLE_MS; once a retraction took back what it read it says
// `rewound` and ends.

/** A stream whose hub read nothing for this long is closed (checked when another opens). */
const STREAM_IDLE_MS = 120_000;
/** Join buffers an episode keeps free for its streams at most, bytes (more are left to the collector). */
const JOIN_KEEP_BYTES = 8 * 1024 * 1024;

/**
 * Buffers an episode's catch-up streams join messages into, shared by all of them: one is taken for a
 * message and given back once the stream took it, so a catch-up of hundreds of MiB joins them into
 * a few buffers, and an idle stream holds none.
 */
export class JoinBuffers {
  private readonly free: ArrayBuffer[] = [];
  private freeBytes = 0;

  constructor(private readonly keepBytes = JOIN_KEEP_BYTES) {}

  /** The smallest free buffer that holds `length` bytes (messages of every size share them), else a new one. */
  take(length: number): ArrayBuffer {
    let i = -1;
    this.free.forEach((b, j) => {
      if (b.byteLength >= length && (i < 0 || b.byteLength < this.free[i]!.byteLength)) i = j;
    });
    if (i < 0) return new ArrayBuffer(bufferClass(length));
    this.freeBytes -= this.free[i]!.byteLength;
    return this.free.splice(i, 1)[0]!;
  }

  /** Kept for the next message; past `keepBytes` the smallest go (a larger one serves any message a smaller one would). */
  give(buffer: ArrayBuffer): void {
    this.free.push(buffer);
    this.freeBytes += buffer.byteLength;
    this.free.sort((a, b) => b.byteLength - a.byteLength);
    while (this.freeBytes > this.keepBytes) this.freeBytes -= this.free.pop()!.byteLength;
  }

  /** Free buffers kept, bytes (for tests). */
  get kept(): number {
    return this.freeBytes;
  }
}

export class CatchUpStream extends RpcTarget {
  private used = Date.now();
  private closed = false;
  /** A retraction took back what the stream read: its pins are let go, the next step says so. */
  private rewound = false;
  private readonly writer: WritableStreamDefaultWriter<Uint8Array>;
  private readable: ReadableStream<Uint8Array> | null;
  /** Steps the hub asked for and was not yet given. */
  private asked = 0;
  /** The buffer the message being written was joined into (given back once the stream took it). */
  private joined: ArrayBuffer | null = null;
  private readonly into = (length: number): Uint8Array => {
    this.joined = this.buffers.take(length);
    return new Uint8Array(this.joined, 0, length);
  };
  /** The pump waits for an ask. */
  private wake: (() => void) | null = null;

  constructor(
    private readonly stream: CatchUpMessages,
    private readonly open: Set<CatchUpStream>,
    /** The episode's buffers to join messages into, shared by its streams. */
    private readonly buffers: JoinBuffers,
  ) {
    super();
    // no highWaterMark: a write resolves only once the reader took its bytes (the joined buffer's reuse relies on it)
    const pipe = new IdentityTransformStream();
    this.readable = pipe.readable;
    this.writer = pipe.writable.getWriter();
    open.add(this);
    void this.pump();
  }

  /** What the hub reads (once). */
  bytes(): ReadableStream<Uint8Array> {
    const r = this.readable;
    if (!r) throw new Error("catch-up stream already taken");
    this.readable = null;
    return r;
  }

  /** The hub will read one more step. */
  pull(): void {
    this.asked++;
    this.used = Date.now();
    this.wake?.();
  }

  [Symbol.dispose](): void {
    this.close(new Error("catch-up stream let go"));
  }

  /** Until the hub asks for a step (or the stream closes). */
  private async ask(): Promise<void> {
    while (this.asked === 0 && !this.closed) await new Promise<void>((r) => (this.wake = r));
    this.wake = null;
    this.asked--;
  }

  /** Write the stream's steps as the hub reads them, until its end (or the hub's). */
  private async pump(): Promise<void> {
    try {
      for (;;) {
        await this.ask();
        if (this.closed) return;
        if (this.rewound || !this.stream.valid) {
          await this.write({ rewound: true });
          break;
        }
        const message = await this.stream.next(this.into);
        if (this.closed) return;
        if (!message) {
          await this.write({ end: this.stream.seq });
          break;
        }
        await this.write({ message });
        if (this.joined) this.buffers.give(this.joined);
        this.joined = null;
      }
      this.close();
      await this.writer.close();
    } catch (e) {
      // the hub cancelled or went away (its read side broke), or building a message failed
      this.close(e);
    }
  }

  private async write(step: StreamStep): Promise<void> {
    if (this.closed) throw new Error("catch-up stream closed");
    await this.writer.write(stepHeader(step));
    if ("message" in step) await this.writer.write(step.message);
    this.used = Date.now();
  }

  /**
   * After a retraction: let go of the stream's pins now if it read what was taken back (the hub hears it at its next
   * read).
   */
  retracted(): void {
    if (this.closed || this.stream.valid) return;
    this.rewound = true;
    this.stream.release();
  }

  /** Let go of the pins; the hub's read fails unless the stream already ended. */
  close(reason?: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.stream.release();
    this.open.delete(this);
    this.wake?.();
    if (reason !== undefined) this.writer.abort(reason).catch(() => undefined);
  }

  /** Close it if the hub read nothing since `now - STREAM_IDLE_MS`. */
  expire(now: number): void {
    if (now - this.used > STREAM_IDLE_MS) this.close(new Error("catch-up stream idle"));
  }
}

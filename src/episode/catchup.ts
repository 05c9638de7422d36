// One watcher's catch-up: the state as of a pinned seq as snapshot deltas (or, when it resumes
// with `?after=` inside the log, nothing), then the log after it, message by message. The caller
// sends what `next` gives while the watcher's window allows, and calls it again when the watcher
// acknowledges; ingest goes on in between, and the replay reads it from the log. When the replay
// reaches the head, in the same turn, `next` gives `caught_up` (and `finish` if the run ended)
// and the watcher joins the live fan-out: no gap, no duplicate.

import { traceOf } from "../assembly/delta.js";
import type { TraceView } from "../assembly/render.js";
import { snapshotDeltas } from "../assembly/snapshot.js";
import type { BodyReader } from "../assembly/store.js";
import { caughtUpMessage, finishMessage, framesMessage, MESSAGE_BYTES, snapshotMessage, type Frame } from "../watch/protocol.js";
import { deltaForVariant, type Variant } from "../watch/variant.js";
import type { Pin } from "./sql-store.js";
import type { Meta } from "./storage.js";

/** What a catch-up reads: the episode's record, index and stores. */
export interface CatchUpSource {
  meta(): Meta | null;
  /** The live traces as they stand now. */
  views(): TraceView[];
  pin(asOf: number): Pin;
  reader(asOf: number): BodyReader;
  frames(after: number, upTo: number, maxBytes: number): Iterable<{ seq: number; frame: Uint8Array }>;
  reply(): Uint8Array | null;
}

/** Why a watcher gets a snapshot: it joined, it resumed from before the log, or from past its end. */
export type SnapshotReason = "join" | "trimmed" | "ahead";

export class CatchUp {
  private pin: Pin;
  /** The snapshot's deltas still to send (null once the snapshot is sent, or when resuming). */
  private deltas: Iterator<Uint8Array> | null = null;
  private carried: Uint8Array | null = null;
  private readonly snapshotSeq: number;
  private readonly reason: SnapshotReason | null;
  /** The last seq sent. */
  private at: number;
  done = false;

  constructor(
    private readonly src: CatchUpSource,
    private readonly variant: Variant,
    after: number | null,
  ) {
    const m = src.meta();
    const seq = m?.seq ?? 0;
    if (after !== null && after <= seq && after >= (m?.base ?? 0)) {
      this.reason = null;
      this.at = this.snapshotSeq = after;
      this.pin = src.pin(after);
    } else {
      this.reason = after === null ? "join" : after > seq ? "ahead" : "trimmed";
      this.at = this.snapshotSeq = seq;
      this.pin = src.pin(seq);
      const views = src.views().filter((v) => variant.traces === null || variant.traces.includes(v.id));
      this.deltas = snapshotDeltas(src.reader(seq), views);
    }
  }

  /** The next messages to send, or null once caught up (the watcher is then live). */
  next(): Uint8Array[] | null {
    if (this.done) return null;
    if (this.reason !== null && this.deltas) return [this.snapshotPart()];
    const m = this.src.meta();
    const head = m?.seq ?? 0;
    while (this.at < head) {
      const visible: Frame[] = [];
      for (const { seq, frame } of this.src.frames(this.at, head, MESSAGE_BYTES)) {
        this.at = seq;
        const d = deltaForVariant(frame, traceOf(frame), this.variant);
        if (d) visible.push({ seq, delta: d });
      }
      if (visible.length) {
        this.repin();
        return [framesMessage(visible)];
      }
    }
    this.done = true;
    this.pin.release();
    const out = [caughtUpMessage(head)];
    if (m && m.status !== "live") out.push(finishMessage(m.status, head, this.src.reply() ?? new Uint8Array(0), m.error));
    return out;
  }

  /** One snapshot message of about MESSAGE_BYTES (the last says `more: false`). */
  private snapshotPart(): Uint8Array {
    const batch: Uint8Array[] = [];
    let bytes = 0;
    for (;;) {
      const d = this.carried ?? this.nextDelta();
      this.carried = null;
      if (d === null) break;
      if (batch.length > 0 && bytes + d.length > MESSAGE_BYTES) {
        this.carried = d;
        break;
      }
      batch.push(d);
      bytes += d.length;
    }
    const more = this.carried !== null;
    if (!more) {
      this.deltas = null;
      this.repin();
    }
    return snapshotMessage(this.snapshotSeq, this.reason!, batch, more);
  }

  /** The next snapshot delta as this watcher sees it (routing stripped if asked), or null at the end. */
  private nextDelta(): Uint8Array | null {
    for (;;) {
      const r = this.deltas!.next();
      if (r.done) return null;
      const d = this.variant.routing ? r.value : deltaForVariant(r.value, traceOf(r.value), this.variant);
      if (d) return d;
    }
  }

  /** Hold only what is still to read: the log after `at` (old node versions are no longer needed). */
  private repin(): void {
    if (this.pin.asOf === this.at) return;
    const next = this.src.pin(this.at);
    this.pin.release();
    this.pin = next;
  }

  /** The watcher is gone: let go of what it held. */
  release(): void {
    this.done = true;
    this.pin.release();
  }
}

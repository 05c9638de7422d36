// Catching a watcher up: the state as of a pinned seq as snapshot messages (or, when it resumes
// with `?after=` inside the log, none), then the log after it, message by message. The caller
// sends what `next` gives while the watcher's window allows, and calls it again when the watcher
// acknowledges; ingest goes on in between, and the replay reads it from the log. When the replay
// reaches the head, in the same turn, `next` gives `caught_up` (and `finish` if the run ended) and
// the watcher joins the live fan-out: no gap, no duplicate.
//
// Watchers that need the same snapshot (same seq, variant and reason: they joined at about the
// same time) share one Cohort: each message is built once, from one read of the bodies, and the
// same bytes go to each of them. A cohort keeps the messages between its slowest and its fastest
// member, up to COHORT_BYTES: past that the fastest waits for the slowest, unless the slowest has
// stopped acknowledging, which then continues on a cohort of its own (Watchers decides).

import { traceOf } from "../assembly/delta.js";
import type { TraceView } from "../assembly/render.js";
import { buildDelta, snapshotPlan, type DeltaPlan } from "../assembly/snapshot.js";
import type { BodyReader } from "../assembly/store.js";
import { caughtUpMessage, finishMessage, framesMessage, MESSAGE_BYTES, snapshotMessage, type Frame, type SnapshotReason } from "../watch/protocol.js";
import { deltaForVariant, stripRouting, variantKey, type Variant } from "../watch/variant.js";
import type { Pin } from "./sql-store.js";
import type { Meta } from "./storage.js";

/** The first snapshot message is small: a watcher that leaves at once (a reconnect storm) costs little. */
export const FIRST_MESSAGE_BYTES = 256 * 1024;
/** Messages a cohort keeps between its slowest and its fastest member, bytes. */
export const COHORT_BYTES = 8 * 1024 * 1024;

/** What a catch-up reads: the episode's record, index and stores. */
export interface CatchUpSource {
  meta(): Meta | null;
  /** The live traces as they stand now. */
  views(): TraceView[];
  pin(asOf: number): Pin;
  reader(asOf: number): BodyReader;
  frames(after: number, upTo: number, maxBytes: number): Iterable<{ seq: number; frame: Uint8Array }>;
  reply(): Uint8Array | null;
  /** Whether a retraction took back frames after `seq` that a watcher holding it may have seen. */
  rewoundPast(seq: number): boolean;
}

/** One snapshot's messages, built once for every watcher that needs them. */
export class Cohort {
  private readonly plan: DeltaPlan[];
  private readonly wanted: TraceView[];
  private readonly reader: BodyReader;
  /** The next planned delta to build, and one built that did not fit the last message. */
  private next: number;
  private carried: Uint8Array | null = null;
  /** Messages kept, `cache[i]` being message `first + i`; `total` once the last one is built. */
  private cache: Uint8Array[] = [];
  private cacheBytes = 0;
  private first: number;
  /** The planned delta each built message starts with (a member that falls behind resumes there). */
  private readonly starts: number[] = [];
  total: number | null = null;
  readonly members = new Set<CatchUp>();
  private readonly pin: Pin;

  /**
   * @param views the traces as of `seq` (kept: a member that falls behind continues on a new
   *   cohort built from the same views)
   * @param from where this cohort starts: message `index`, which starts with planned delta `delta`
   */
  constructor(
    src: CatchUpSource,
    readonly seq: number,
    readonly variant: Variant,
    readonly reason: SnapshotReason,
    readonly views: TraceView[],
    from = { index: 0, delta: 0 },
  ) {
    this.pin = src.pin(seq);
    this.reader = src.reader(seq);
    this.wanted = views.filter((v) => variant.traces === null || variant.traces.includes(v.id));
    this.plan = snapshotPlan(this.wanted);
    this.first = from.index;
    this.next = from.delta;
  }

  static key(seq: number, variant: Variant, reason: SnapshotReason): string {
    return `${seq}|${reason}|${variantKey(variant)}`;
  }

  /** Whether a new watcher can start here (the first message is still kept). */
  joinable(): boolean {
    return this.first === 0;
  }

  /** Where message `k` starts, for a cohort that continues from it. */
  startOf(k: number): { index: number; delta: number } {
    return { index: k, delta: this.starts[k]! };
  }

  /**
   * Message `k`, built if it is the next; null past the last; undefined when no longer kept;
   * "wait" when building it would keep more than COHORT_BYTES for a member further behind.
   */
  message(k: number): Uint8Array | null | undefined | "wait" {
    if (this.total !== null && k >= this.total) return null;
    if (k < this.first) return undefined;
    while (k >= this.first + this.cache.length) {
      if (this.total !== null) return null;
      if (this.cacheBytes > COHORT_BYTES && this.trim()) return "wait";
      const m = this.build();
      this.cache.push(m);
      this.cacheBytes += m.length;
    }
    return this.cache[k - this.first]!;
  }

  /**
   * Keep at most COHORT_BYTES: drop the oldest messages every member has sent (until then the
   * first messages stay, so a watcher arriving a little later still joins); true when the members
   * themselves are further apart than that.
   */
  trim(): boolean {
    let low = Number.MAX_SAFE_INTEGER;
    for (const m of this.members) low = Math.min(low, m.position);
    while (this.cacheBytes > COHORT_BYTES && this.first < low && this.cache.length > 0) {
      this.cacheBytes -= this.cache.shift()!.length;
      this.first++;
    }
    return this.cacheBytes > COHORT_BYTES;
  }

  /** The member furthest behind. */
  slowest(): CatchUp | null {
    let slow: CatchUp | null = null;
    for (const m of this.members) if (!slow || m.position < slow.position) slow = m;
    return slow;
  }

  leave(member: CatchUp): void {
    this.members.delete(member);
    if (this.members.size === 0) this.release();
    else this.trim();
  }

  release(): void {
    this.cache = [];
    this.cacheBytes = 0;
    this.pin.release();
  }

  /** The next message: planned deltas up to about MESSAGE_BYTES (the first one smaller). */
  private build(): Uint8Array {
    const index = this.first + this.cache.length;
    this.starts[index] = this.carried ? this.next - 1 : this.next;
    const limit = index === 0 ? FIRST_MESSAGE_BYTES : MESSAGE_BYTES;
    const batch: Uint8Array[] = [];
    let bytes = 0;
    for (;;) {
      const d = this.carried ?? this.nextDelta();
      this.carried = null;
      if (d === null) break;
      if (batch.length > 0 && bytes + d.length > limit) {
        this.carried = d;
        break;
      }
      batch.push(d);
      bytes += d.length;
    }
    const more = this.carried !== null;
    if (!more) this.total = index + 1;
    return snapshotMessage(this.seq, this.reason, batch, more);
  }

  /** The next planned delta as this cohort's variant sees it (routing stripped if asked), or null at the end. */
  private nextDelta(): Uint8Array | null {
    if (this.next >= this.plan.length) return null;
    const d = buildDelta(this.reader, this.wanted, this.plan[this.next++]!);
    return this.variant.routing ? d : stripRouting(d);
  }
}

/** Finds or makes the cohort for a snapshot (Watchers keeps them). */
export type CohortFor = (seq: number, variant: Variant, reason: SnapshotReason) => Cohort;

/** One watcher's catch-up: its place in a cohort's snapshot, then its own replay of the log. */
export class CatchUp {
  private cohort: Cohort | null = null;
  /** The next snapshot message to send. */
  position = 0;
  /** The log pin while replaying (the cohort's pin holds the log before that). */
  private pin: Pin | null = null;
  /** The last seq sent. */
  private at: number;
  done = false;

  /** @param forced a snapshot for this reason, whatever `after` says (after a retraction) */
  constructor(
    private readonly src: CatchUpSource,
    private readonly variant: Variant,
    after: number | null,
    cohortFor: CohortFor,
    forced?: SnapshotReason,
  ) {
    const m = src.meta();
    const seq = m?.seq ?? 0;
    if (!forced && after !== null && after <= seq && after >= (m?.base ?? 0) && !src.rewoundPast(after)) {
      this.at = after;
      this.pin = src.pin(after);
    } else {
      const reason: SnapshotReason = forced ?? (after === null ? "join" : after > seq ? "ahead" : src.rewoundPast(after) ? "rewind" : "trimmed");
      this.at = seq;
      this.join(cohortFor(seq, variant, reason));
    }
  }

  private join(c: Cohort): void {
    this.cohort = c;
    c.members.add(this);
  }

  /** Continue on `c` (a cohort of its own, after this one fell behind its old one). */
  moveTo(c: Cohort): void {
    this.cohort?.leave(this);
    this.join(c);
  }

  get snapshotting(): Cohort | null {
    return this.cohort;
  }

  /** The next messages to send: none for now (its cohort waits for a slower member), or null once caught up (the watcher is then live). */
  next(): Uint8Array[] | null {
    if (this.done) return null;
    const c = this.cohort;
    if (c) {
      const m = c.message(this.position);
      if (m === "wait") return [];
      if (m === undefined) throw new Error("snapshot message no longer kept");
      if (m !== null) {
        this.position++;
        if (c.total === this.position) this.endSnapshot();
        return [m];
      }
      this.endSnapshot();
    }
    const meta = this.src.meta();
    const head = meta?.seq ?? 0;
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
    this.release();
    const out = [caughtUpMessage(head)];
    if (meta && meta.status !== "live") out.push(finishMessage(meta.status, head, this.src.reply() ?? new Uint8Array(0), meta.error));
    return out;
  }

  /** The snapshot is sent: hold the log from its seq, leave the cohort. */
  private endSnapshot(): void {
    const c = this.cohort!;
    this.pin = this.src.pin(c.seq);
    this.cohort = null;
    c.leave(this);
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
    this.done = true;
    this.cohort?.leave(this);
    this.cohort = null;
    this.pin?.release();
    this.pin = null;
  }
}

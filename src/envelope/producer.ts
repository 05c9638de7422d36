// The producer side of the envelope: track what the relay has acknowledged, per trace, and
// wrap each outgoing delta with it. This is the worker's `TraceCursor` seen from the sink:
// it advances only on an ack, so after a lost ack the next (re-diffed) delta goes out with
// the same `acked` view and the relay trims what it already holds.
//
// `set` and `pending` are overwrites, which counts cannot de-duplicate: a failed send may still
// have reached the relay, and the worker's re-diff omits a field whose value went back to the
// acknowledged one. So after a failed send of a trace (`fail`), the next delta of that trace
// re-asserts every `set` field the failed delta(s) carried and it lacks, at its last
// acknowledged value, and `pending` (acknowledged value) if a failed delta carried `pending` and
// the new one carries neither `pending` nor `nodes`. (The Python sink does the same.)

import { parseDelta, type Entry } from "../assembly/delta.js";
import { LIST_FIELDS, type ListField } from "../assembly/fields.js";
import { ChunkWriter, EMPTY_ARRAY, encodeStr } from "../wire/writer.js";
import type { Envelope, ProducerAck } from "./envelope.js";

interface TraceAck {
  open: boolean;
  counts: Record<ListField, number>;
  /** Acknowledged semantic_parents per node. */
  links: number[];
  /** Last acknowledged value of each `set` field. */
  scalars: Map<string, Entry>;
  /** Last acknowledged `pending`. */
  pending: Uint8Array;
  /** `set` fields and `pending` carried by sends that failed since the last ack. */
  failedSet: Set<string>;
  failedPending: boolean;
}

const SET_KEY = encodeStr("set");
const PENDING_KEY = encodeStr("pending");

export class ProducerCursor {
  private readonly traces = new Map<string, TraceAck>();
  seq = 0;

  constructor(readonly producer = "") {}

  /**
   * Wrap `delta` (upstream msgpack bytes) with the next seq and the acked view of its trace.
   * The envelope's `delta` may differ from `delta` only by re-asserted fields (see above).
   */
  envelope(delta: Uint8Array): Envelope {
    const d = parseDelta(delta);
    const t = this.traces.get(d.trace);
    const acked: ProducerAck = { open: t?.open ?? false, counts: {}, links: new Map() };
    if (t) {
      for (const f of LIST_FIELDS) if (t.counts[f]) acked.counts[f] = t.counts[f];
      for (const { index } of d.links ?? []) acked.links.set(index, t.links[index] ?? 0);
    }
    return { producer: this.producer, seq: ++this.seq, acked, delta: t && !d.discard ? reassert(delta, t) : delta };
  }

  /** Record that the relay acknowledged `delta` (as passed to `envelope`). */
  acknowledge(delta: Uint8Array): void {
    const d = parseDelta(delta);
    if (d.discard) {
      this.traces.delete(d.trace);
      return;
    }
    let t = this.traces.get(d.trace);
    if (!t) {
      t = {
        open: false, counts: Object.fromEntries(LIST_FIELDS.map((f) => [f, 0])) as Record<ListField, number>, links: [],
        scalars: new Map(), pending: EMPTY_ARRAY, failedSet: new Set(), failedPending: false,
      };
      this.traces.set(d.trace, t);
    }
    if (d.open) t.open = true;
    for (const { index, items } of d.links ?? []) t.links[index] = (t.links[index] ?? 0) + items.length;
    for (const node of d.nodes ?? []) t.links.push(node.parents.length);
    t.counts.nodes += d.nodes?.length ?? 0;
    for (const f of LIST_FIELDS) if (f !== "nodes") t.counts[f] += d.lists[f]?.length ?? 0;
    for (const e of d.set ?? []) t.scalars.set(e.key, e);
    if (d.nodes) t.pending = EMPTY_ARRAY;
    if (d.pending) t.pending = d.pending;
    t.failedSet.clear();
    t.failedPending = false;
  }

  /** Record that sending `delta` failed: it may or may not have reached the relay. */
  fail(delta: Uint8Array): void {
    const d = parseDelta(delta);
    const t = this.traces.get(d.trace);
    if (!t || d.discard) return;
    for (const e of d.set ?? []) t.failedSet.add(e.key);
    if (d.pending) t.failedPending = true;
  }
}

/** `delta` with the re-asserted `set` fields and `pending` added, or `delta` itself if none. */
function reassert(delta: Uint8Array, t: TraceAck): Uint8Array {
  if (t.failedSet.size === 0 && !t.failedPending) return delta;
  const d = parseDelta(delta);
  const given = new Set((d.set ?? []).map((e) => e.key));
  const missing = [...t.failedSet].filter((k) => !given.has(k) && t.scalars.has(k)).map((k) => t.scalars.get(k)!);
  const pending = t.failedPending && !d.pending && !d.nodes;
  if (missing.length === 0 && !pending) return delta;
  const entries = d.entries.filter((e) => e.key !== "set");
  const set = [...(d.set ?? []), ...missing];
  const w = new ChunkWriter();
  w.mapHeader(entries.length + 1 + (pending ? 1 : 0));
  for (const e of entries) {
    if (e.key === "pending") continue; // absent when `pending` is re-asserted; written last otherwise
    w.raw(e.keySpan);
    w.raw(e.value);
  }
  w.raw(SET_KEY);
  w.mapHeader(set.length);
  for (const e of set) {
    w.raw(e.keySpan);
    w.raw(e.value);
  }
  const own = entries.find((e) => e.key === "pending");
  if (own) {
    w.raw(own.keySpan);
    w.raw(own.value);
  } else if (pending) {
    w.raw(PENDING_KEY);
    w.raw(t.pending);
  }
  return w.bytes();
}

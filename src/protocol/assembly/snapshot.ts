// A captured state as ordinary upstream deltas of bounded size, for a watcher that joins late:
// per trace, the first delta carries `open` and the first list items, later ones more items, and
// the last one also `set` (every scalar field, in order) and `pending` (explicitly, even `[]`:
// nodes in the same delta clear the preview first). Any reference `EpisodeAssembly` that applies
// them, in order, holds exactly the captured state (nodes carry their links and repaired routing).
//
// A delta holds at most one range of each list, in the upstream key order, and stays under the
// budget unless one node alone is larger (a node cannot be split).

import { ChunkWriter, concatChunks, encodeStr } from "../wire/writer.js";
import type { BodyReader } from "./bodies.js";
import { LIST_FIELDS, type ListField } from "./fields.js";
import { writeNode } from "./node.js";
import { countOf, type TraceView } from "./render.js";

/** Target size of one snapshot delta. */
export const DELTA_BYTES = 1 << 20;

const KEYS = Object.fromEntries(["trace", "open", "set", "pending", ...LIST_FIELDS].map((k) => [k, encodeStr(k)]));

export interface Range {
  field: ListField;
  from: number;
  to: number;
  bytes: number;
}

/** A list's items split into ranges of about `budget` bytes (items by their average size). */
function ranges(v: TraceView, field: ListField, budget: number): Range[] {
  const count = countOf(v, field);
  const out: Range[] = [];
  if (field === "nodes") {
    for (let from = 0; from < count; ) {
      let to = from + 1;
      let bytes = v.nodes[from]!.bytes;
      for (; to < count && bytes + v.nodes[to]!.bytes <= budget; to++) bytes += v.nodes[to]!.bytes;
      out.push({ field, from, to, bytes });
      from = to;
    }
  } else if (count > 0) {
    const avg = v.items[field].bytes / count;
    const per = Math.max(1, Math.floor(budget / Math.max(avg, 1)));
    for (let from = 0; from < count; from += per) {
      const to = Math.min(count, from + per);
      out.push({ field, from, to, bytes: avg * (to - from) });
    }
  }
  return out;
}

/** One snapshot delta, planned: which trace, which list ranges, and whether it opens or closes the trace. */
export interface DeltaPlan {
  /** Index of the trace in the views. */
  view: number;
  first: boolean;
  last: boolean;
  ranges: Range[];
}

/** The deltas that rebuild these traces, planned from the index alone (no body is read). */
export function snapshotPlan(views: readonly TraceView[], budget = DELTA_BYTES): DeltaPlan[] {
  const plan: DeltaPlan[] = [];
  views.forEach((v, view) => {
    const all = LIST_FIELDS.flatMap((f) => ranges(v, f, budget));
    // group consecutive ranges of distinct fields while they fit
    const groups: Range[][] = [];
    let cur: Range[] = [];
    let bytes = 0;
    for (const r of all) {
      if (cur.length > 0 && (cur.at(-1)!.field === r.field || bytes + r.bytes > budget)) {
        groups.push(cur);
        cur = [];
        bytes = 0;
      }
      cur.push(r);
      bytes += r.bytes;
    }
    if (cur.length > 0 || groups.length === 0) groups.push(cur);
    groups.forEach((g, i) => {
      plan.push({ view, first: i === 0, last: i === groups.length - 1, ranges: g });
    });
  });
  return plan;
}

/**
 * About how many bytes `p` builds into, from the index alone: its bodies (items by their average
 * size), the fields it carries, and a bound on its headers. A message can end before a delta that
 * would not fit, instead of building it and keeping a copy for the next one.
 */
export function plannedBytes(views: readonly TraceView[], p: DeltaPlan): number {
  const v = views[p.view]!;
  // map and array headers, list keys, the trace id (its UTF-8 at most 3 bytes a UTF-16 unit)
  let n = 64 + v.id.length * 3 + p.ranges.length * 32;
  for (const r of p.ranges) n += r.bytes;
  for (const s of v.slots) {
    const carried = (p.first && s.from === "open") || (p.last && (s.from === "set" || s.from === "extra"));
    if (carried && "value" in s) n += s.key.length + s.value.length;
  }
  if (p.last) n += v.pending.length;
  return n;
}

/** Build one planned delta, reading its bodies from `reader`. */
export function buildDelta(reader: BodyReader, views: readonly TraceView[], p: DeltaPlan): Uint8Array {
  const d = buildDeltaChunks(reader, views, p);
  return concatChunks(d.chunks, d.length);
}

/**
 * The delta as pieces (views of the stored bodies; header bytes in scratch buffers): written into a message without
 * joining them first.
 */
export function buildDeltaChunks(
  reader: BodyReader,
  views: readonly TraceView[],
  p: DeltaPlan,
): { chunks: Uint8Array[]; length: number } {
  const v = views[p.view]!;
  const set = p.last ? v.slots.filter((s) => s.from === "set") : [];
  // unknown lists (whole, each a top-level key as a newer reference sends it)
  const extra = p.last ? v.slots.filter((s) => s.from === "extra") : [];
  const w = new ChunkWriter();
  w.mapHeader(1 + (p.first ? 1 : 0) + p.ranges.length + extra.length + (p.last ? (set.length ? 2 : 1) : 0));
  w.raw(KEYS.trace!);
  w.str(v.id);
  if (p.first) {
    const open = v.slots.filter((s) => s.from === "open");
    w.raw(KEYS.open!);
    w.mapHeader(open.length);
    for (const s of open) {
      w.raw(s.key);
      if (s.from === "open") w.raw(s.value);
    }
  }
  for (const r of p.ranges) {
    w.raw(KEYS[r.field]!);
    w.arrayHeader(r.to - r.from);
    if (r.field === "nodes") {
      for (const n of reader.nodes(v.tnum, r.from, r.to)) {
        if (n instanceof Uint8Array) w.raw(n);
        else writeNode(w, n);
      }
    } else for (const item of reader.items(v.tnum, r.field, r.from, r.to)) w.raw(item);
  }
  for (const s of extra) {
    w.raw(s.key);
    if (s.from === "extra") w.raw(s.value);
  }
  if (p.last) {
    if (set.length) {
      w.raw(KEYS.set!);
      w.mapHeader(set.length);
      for (const s of set) {
        w.raw(s.key);
        if (s.from === "set") w.raw(s.value);
      }
    }
    w.raw(KEYS.pending!);
    w.raw(v.pending);
  }
  return { chunks: w.finish(), length: w.length };
}

/** Every trace's snapshot deltas, in arrival order. */
export function* snapshotDeltas(
  reader: BodyReader,
  views: readonly TraceView[],
  budget = DELTA_BYTES,
): Generator<Uint8Array> {
  for (const p of snapshotPlan(views, budget)) yield buildDelta(reader, views, p);
}

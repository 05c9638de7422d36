// The trainer's annotations of an episode's traces, in prime-rl's record shape (its update.py
// `make_update`, written by its trainer's AnnotationWriter and its orchestrator's `stamp_batch`):
//
//   {version: 1, trace_id, info, branches: [{index, trainer_logprobs?, entropies?, is_masked?,
//    advantages?, mismatch_kl?, ...}]}
//
// One value per token of the branch (the branch's nodes' token_ids concatenated along its path,
// src/protocol/annotations/fold.ts), null where the record does not cover the token. A trace gets several
// records (one per trained sample, one per shipped batch): the relay keeps one merged record per
// trace in the same shape, `info` merged deeply as prime-rl merges it and the records' branch
// entries one after another in the order they came. prime-rl's readers fold updates in order,
// branch entry by branch entry (`fold_trace_updates`: a node takes a stream only where the entry
// covers all its sampled tokens, and a later entry overwrites an earlier one), so folding the
// merged record (fold.ts) gives exactly what folding every record would: a position-by-position
// merge of the streams would not (a later entry that covers a node only in part must leave it the
// earlier values). Pure: no runtime imports.

import { DeltaError } from "../assembly/errors.js";
import { decodeLossless, encodeLossless, F64, LMap, type LValue } from "../wire/lossless.js";

/** The record version prime-rl writes (update.py UPDATE_VERSION). */
export const ANNOTATION_VERSION = 1;
/** The streams prime-rl writes (update.py STREAM_FIELDS; others are kept as given). */
export const STREAM_FIELDS = ["advantages", "trainer_logprobs", "entropies", "is_masked", "mismatch_kl"] as const;
/**
 * Streams whose nulls inside a node still leave the node its other values when folded (prime-rl's
 * PARTIAL_STREAM_FIELDS).
 */
export const PARTIAL_STREAMS: ReadonlySet<string> = new Set(["is_masked", "mismatch_kl"]);
/** A branch index is below this; a stream has at most this many values (a branch's tokens). */
export const MAX_BRANCH_INDEX = 1 << 20;
export const MAX_STREAM_VALUES = 1 << 22;
/**
 * Keys (counted at every level) a trace's `info` may hold: one record's is checked before any
 * merge, and a record that adds keys past it to the merged one is refused. Its depth is the one
 * body limit's (MAX_DEPTH, src/protocol/limits/limits.ts).
 */
export const MAX_INFO_KEYS = 10_000;

/** One value of a stream: a number (kept as float64), a flag (is_masked), or null (not covered). */
export type StreamValue = number | boolean | null;

/** One record as received, checked. */
export interface AnnotationRecord {
  trace: string;
  /** The record's `info` (a map; empty when it gave none). */
  info: LMap;
  branches: BranchEntry[];
}

/** One branch entry of a record: its branch index and its streams, as given. */
export interface BranchEntry {
  index: number;
  streams: Array<[string, StreamValue[]]>;
}

/** A trace's merged annotations: what the relay keeps. */
export interface TraceAnnotations {
  trace: string;
  info: LMap;
  /** Every record's branch entries, in the order the records came. */
  branches: BranchEntry[];
}

/**
 * The records in a body: one record (a map) or an array of them, decoded (msgpack, or JSON read
 * into msgpack values). Throws DeltaError naming the field on anything else.
 */
export function parseAnnotationRecords(v: LValue): AnnotationRecord[] {
  if (Array.isArray(v)) {
    if (v.length === 0) throw new DeltaError("wrong_type", "annotations", "an empty array holds no record");
    return v.map((r, i) => parseRecord(r, `annotations[${i}]`, true));
  }
  return [parseRecord(v, "annotations", true)];
}

/** A record checked; `capped`: its info's keys too (a stored merged record was checked as it was merged). */
function parseRecord(v: LValue, field: string, capped: boolean): AnnotationRecord {
  if (!(v instanceof LMap))
    throw new DeltaError("wrong_type", field, "a record is a map {version, trace_id, info, branches}");
  const version = v.get("version");
  if (version !== undefined && version !== ANNOTATION_VERSION) {
    throw new DeltaError("wrong_type", `${field}.version`, `must be ${ANNOTATION_VERSION} (prime-rl's record version)`);
  }
  const trace = v.get("trace_id");
  if (typeof trace !== "string" || trace.length === 0 || trace.length > 256)
    throw new DeltaError("wrong_type", `${field}.trace_id`, "must be a str of 1-256 characters");
  const info = v.get("info") ?? null;
  if (info !== null && !(info instanceof LMap)) throw new DeltaError("wrong_type", `${field}.info`, "must be a map");
  if (capped && info !== null && keyCount(info, MAX_INFO_KEYS) > MAX_INFO_KEYS) {
    throw new DeltaError(
      "malformed",
      `${field}.info`,
      `holds more than ${MAX_INFO_KEYS} keys (counted at every level)`,
    );
  }
  const raw = v.get("branches") ?? [];
  if (!Array.isArray(raw)) throw new DeltaError("wrong_type", `${field}.branches`, "must be an array");
  const branches = raw.map((b, i) => {
    const where = `${field}.branches[${i}]`;
    if (!(b instanceof LMap)) throw new DeltaError("wrong_type", where, "a branch is a map {index, <stream>: [...]}");
    const index = b.get("index");
    if (typeof index !== "number" || !Number.isSafeInteger(index) || index < 0 || index >= MAX_BRANCH_INDEX) {
      throw new DeltaError("wrong_type", `${where}.index`, `must be an int from 0 to ${MAX_BRANCH_INDEX - 1}`);
    }
    const streams: Array<[string, StreamValue[]]> = [];
    for (const [k, s] of b.entries) {
      if (k === "index") continue;
      if (typeof k !== "string") throw new DeltaError("wrong_type", `${where} key`, "keys must be str");
      if (s === null) continue; // a stream the record does not give
      streams.push([k, streamOf(s, `${where}.${k}`)]);
    }
    return { index, streams };
  });
  return { trace, info: info ?? new LMap(), branches };
}

function streamOf(s: LValue, field: string): StreamValue[] {
  if (!Array.isArray(s))
    throw new DeltaError("wrong_type", field, "a stream is an array of numbers, flags or nulls (one per token)");
  if (s.length > MAX_STREAM_VALUES)
    throw new DeltaError("malformed", field, `a stream holds at most ${MAX_STREAM_VALUES} values`);
  const out: StreamValue[] = new Array(s.length);
  for (let i = 0; i < s.length; i++) {
    const x = s[i]!;
    if (x === null || typeof x === "boolean") out[i] = x;
    else if (x instanceof F64) out[i] = x.value;
    else if (typeof x === "number") out[i] = x;
    else if (typeof x === "bigint") out[i] = Number(x);
    else throw new DeltaError("wrong_type", `${field}[${i}]`, "must be a number, a bool or null");
  }
  return out;
}

/**
 * `held` with `rec` merged in (a new object; `held` is not changed), in time linear in both. Refused
 * (DeltaError) when it would add keys past MAX_INFO_KEYS.
 */
export function mergeRecord(held: TraceAnnotations | null, rec: AnnotationRecord): TraceAnnotations {
  // prime-rl merges a record's info only when it has one (`if update.info`)
  let info = held?.info ?? new LMap();
  if (rec.info.entries.length > 0) {
    const before = keyCount(info);
    info = deepMerge(info, rec.info);
    const after = keyCount(info);
    // a trace held past the cap (stored before it) still takes records that add no key
    if (after > MAX_INFO_KEYS && after > before) {
      throw new DeltaError(
        "malformed",
        "annotations.info",
        `the trace's merged info would hold ${after} keys, over the limit of ${MAX_INFO_KEYS} (counted at every level)`,
      );
    }
  }
  return { trace: rec.trace, info, branches: [...(held?.branches ?? []), ...rec.branches] };
}

/**
 * prime-rl's `_deep_merge`: maps merge key by key, recursively; anything else is replaced (a key keeps its place, the
 * first of its name). One Map of places per level: a key is found in constant time.
 */
function deepMerge(a: LMap, b: LMap): LMap {
  const entries: Array<[LValue, LValue]> = a.entries.map(([k, v]) => [k, v]);
  const places = new Map<LValue, number>();
  for (let i = entries.length - 1; i >= 0; i--) places.set(entries[i]![0], i);
  for (const [k, v] of b.entries) {
    const at = places.get(k);
    if (at === undefined) {
      places.set(k, entries.length);
      entries.push([k, v]);
    } else {
      const old = entries[at]![1];
      entries[at] = [k, old instanceof LMap && v instanceof LMap ? deepMerge(old, v) : v];
    }
  }
  return new LMap(entries);
}

/** The keys of `m` at every level (maps inside arrays too); counting stops once past `stop`. */
function keyCount(m: LMap, stop = Number.POSITIVE_INFINITY): number {
  let n = 0;
  const todo: LValue[] = [m];
  while (todo.length > 0 && n <= stop) {
    const v = todo.pop()!;
    if (v instanceof LMap) {
      n += v.entries.length;
      for (const [, x] of v.entries) if (x instanceof LMap || Array.isArray(x)) todo.push(x);
    } else if (Array.isArray(v)) for (const x of v) if (x instanceof LMap || Array.isArray(x)) todo.push(x);
  }
  return n;
}

/** A trace's merged annotations as one record in prime-rl's shape, msgpack (what the relay stores and serves). */
export function encodeTraceAnnotations(t: TraceAnnotations): Uint8Array {
  const branches = t.branches.map(
    (b) => new LMap([["index", b.index], ...b.streams.map(([n, v]): [LValue, LValue] => [n, v.map(wireValue)])]),
  );
  return encodeLossless(
    new LMap([
      ["version", ANNOTATION_VERSION],
      ["trace_id", t.trace],
      ["info", t.info],
      ["branches", branches],
    ]),
  );
}

/** A stored merged record, read as it is: it was merged when it was written, and is never merged again. */
export function decodeTraceAnnotations(bytes: Uint8Array): TraceAnnotations {
  const { trace, info, branches } = parseRecord(decodeLossless(bytes), "annotations", false);
  return { trace, info, branches };
}

function wireValue(v: StreamValue): LValue {
  return typeof v === "number" ? new F64(v) : v;
}

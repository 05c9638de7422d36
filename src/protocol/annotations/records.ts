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
    return v.map((r, i) => parseRecord(r, `annotations[${i}]`));
  }
  return [parseRecord(v, "annotations")];
}

function parseRecord(v: LValue, field: string): AnnotationRecord {
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

/** `held` with `rec` merged in (a new object; `held` is not changed). */
export function mergeRecord(held: TraceAnnotations | null, rec: AnnotationRecord): TraceAnnotations {
  // prime-rl merges a record's info only when it has one (`if update.info`)
  const info =
    rec.info.entries.length === 0 ? (held?.info ?? new LMap()) : deepMerge(held?.info ?? new LMap(), rec.info);
  return { trace: rec.trace, info, branches: [...(held?.branches ?? []), ...rec.branches] };
}

/** prime-rl's `_deep_merge`: maps merge key by key, recursively; anything else is replaced (a key keeps its place). */
function deepMerge(a: LMap, b: LMap): LMap {
  const entries: Array<[LValue, LValue]> = a.entries.map(([k, v]) => [k, v]);
  for (const [k, v] of b.entries) {
    const at = entries.findIndex(([ek]) => ek === k);
    if (at < 0) entries.push([k, v]);
    else {
      const old = entries[at]![1];
      entries[at] = [k, old instanceof LMap && v instanceof LMap ? deepMerge(old, v) : v];
    }
  }
  return new LMap(entries);
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

export function decodeTraceAnnotations(bytes: Uint8Array): TraceAnnotations {
  const rec = parseRecord(decodeLossless(bytes), "annotations");
  return mergeRecord(null, rec);
}

function wireValue(v: StreamValue): LValue {
  return typeof v === "number" ? new F64(v) : v;
}

// One upstream delta, read once into spans: the keys the assembly acts on, each value checked
// for type, every byte validated as canonical msgpack. Nothing here looks at assembly state.

import { WireError } from "../wire/errors.js";
import { Reader } from "../wire/reader.js";
import { ChunkWriter } from "../wire/writer.js";
import { DeltaError } from "./errors.js";
import { isHeaderField, isListField, isScalarField, LIST_FIELDS, type ListField } from "./fields.js";
import { type NdArray, parseNdArray } from "./ndarray.js";
import { arrayItems, type NodeState, readNode } from "./node.js";

/** A map entry kept as spans: the decoded key, its encoded bytes, the value's bytes. */
export interface Entry {
  key: string;
  keySpan: Uint8Array;
  value: Uint8Array;
}

export interface ParsedDelta {
  readonly bytes: Uint8Array;
  trace: string;
  discard: boolean;
  /** Every top-level entry in wire order (for re-encoding a trimmed delta). */
  readonly entries: Entry[];
  open?: Entry[];
  links?: Array<{ index: number; items: Uint8Array[] }>;
  repairs?: Array<{ index: number; row: NdArray; span: Uint8Array }>;
  nodes?: NodeState[];
  /** The other list fields' items, by field. */
  lists: Partial<Record<Exclude<ListField, "nodes">, Uint8Array[]>>;
  set?: Entry[];
  pending?: Uint8Array;
  /**
   * A top-level `dispatch` value (the trainer's identity for the rollout, as prime-rl's live files
   * carry it on a trace's first line): not part of the delta, the ingest takes it off before
   * applying (src/protocol/envelope/ingest.ts).
   */
  dispatch?: Uint8Array;
  /**
   * Top-level keys the relay does not know whose value is an array: list keys of a newer
   * reference, appended to the trace's list of that name (src/protocol/assembly/trace.ts).
   */
  readonly extra: Entry[];
  /**
   * What the relay does not know, named so that an upgrade of the producer never loses data quietly:
   * top-level keys (`foo`), scalar fields in `set` (`set.foo`) and header fields in `open` (`open.foo`).
   */
  readonly unknown: string[];
}

/** Keys the assembly reads, each with a bit (for the duplicate check). */
const KNOWN = new Map<string, number>(
  ["trace", "discard", "open", "links", "routing_repairs", ...LIST_FIELDS, "set", "pending", "dispatch"].map((k, i) => [
    k,
    1 << i,
  ]),
);

/**
 * Parse and check one delta frame. Throws DeltaError naming the field. `trusted`: the bytes
 * were validated before (a logged frame, a delta the relay wrote itself) — skip UTF-8 checks.
 */
export function parseDelta(bytes: Uint8Array, trusted = false): ParsedDelta {
  const r = new Reader(bytes, 0, bytes.length, trusted);
  let n: number;
  try {
    n = r.mapHeader();
  } catch (e) {
    throw asDeltaError(e, "delta");
  }
  if (n < 0) {
    try {
      new Reader(bytes).span();
    } catch (e) {
      throw asDeltaError(e, "delta");
    }
    throw new DeltaError("wrong_type", "delta", "a delta must be a msgpack map");
  }
  const entries: Entry[] = [];
  let seen = 0;
  // One object with every field present from the start: a stable shape, no copy at the end.
  const d: ParsedDelta = {
    bytes,
    trace: "",
    discard: false,
    entries,
    open: undefined,
    links: undefined,
    repairs: undefined,
    nodes: undefined,
    lists: {},
    set: undefined,
    pending: undefined,
    dispatch: undefined,
    extra: [],
    unknown: [],
  };
  let unknownKeys: Set<string> | undefined;
  let hasTrace = false;
  for (let i = 0; i < n; i++) {
    const keyStart = r.pos;
    let key: string | undefined;
    try {
      key = r.str();
    } catch (e) {
      throw asDeltaError(e, `delta key ${i}`);
    }
    if (key === undefined) throw new DeltaError("wrong_type", `delta key ${i}`, "delta keys must be str");
    const bit = KNOWN.get(key) ?? 0;
    if (seen & bit) throw new DeltaError("malformed", key, "duplicate key");
    seen |= bit;
    if (bit === 0) unknownKey(d, key, (unknownKeys ??= new Set()));
    if (key === "trace") hasTrace = true;
    const keySpan = bytes.subarray(keyStart, r.pos);
    const valueStart = r.pos;
    try {
      readField(r, key, d);
    } catch (e) {
      throw asDeltaError(e, key);
    }
    const entry = { key, keySpan, value: bytes.subarray(valueStart, r.pos) };
    entries.push(entry);
    if (bit === 0 && entry.value[0] !== undefined && isArrayByte(entry.value[0])) d.extra.push(entry);
  }
  if (!r.atEnd()) throw new DeltaError("malformed", "delta", `trailing bytes after the delta (at byte ${r.pos})`);
  if (!hasTrace) throw new DeltaError("wrong_type", "trace", "missing: every delta names its trace");
  return d;
}

function readField(r: Reader, key: string, d: ParsedDelta): void {
  switch (key) {
    case "trace": {
      const t = r.str();
      if (t === undefined) throw new DeltaError("wrong_type", "trace", "must be a str");
      d.trace = t;
      return;
    }
    case "discard": {
      const x = r.bool();
      if (x === undefined) throw new DeltaError("wrong_type", "discard", "must be a bool");
      d.discard = x;
      return;
    }
    case "open":
      d.open = mapEntries(r, "open");
      for (const e of d.open) if (!isHeaderField(e.key)) d.unknown.push(`open.${e.key}`);
      return;
    case "set":
      d.set = mapEntries(r, "set");
      for (const e of d.set) {
        if (isListField(e.key) || e.key === "pending") {
          throw new DeltaError("wrong_type", `set.${e.key}`, "set may only carry scalar fields");
        }
        if (!isScalarField(e.key)) d.unknown.push(`set.${e.key}`);
      }
      return;
    case "links": {
      d.links = [];
      for (const index of intKeyedMap(r, "links")) {
        d.links.push({ index, items: arrayItems(r, `links[${index}]`) });
      }
      return;
    }
    case "routing_repairs": {
      d.repairs = [];
      for (const index of intKeyedMap(r, "routing_repairs")) {
        const span = r.span();
        d.repairs.push({ index, row: parseNdArray(span, `routing_repairs[${index}]`), span });
      }
      return;
    }
    case "nodes":
      d.nodes = readNodes(r);
      return;
    case "pending": {
      const start = r.pos;
      if (r.arrayHeader() < 0) throw new DeltaError("wrong_type", "pending", "must be an array");
      r.pos = start;
      d.pending = r.span();
      return;
    }
    case "dispatch": {
      const start = r.pos;
      if (r.mapHeader() < 0)
        throw new DeltaError("wrong_type", "dispatch", "must be a map (the rollout's dispatch identity)");
      r.pos = start;
      d.dispatch = r.span();
      return;
    }
    default:
      if (isListField(key)) {
        d.lists[key as Exclude<ListField, "nodes">] = arrayItems(r, key);
        return;
      }
      // An unknown key travels in the frame untouched (and is named). An array is a newer
      // reference's list key (the assembly appends it); anything else only the frame keeps, as
      // today's reference ignores it and no rule says what a newer one would do with it.
      r.span();
  }
}

/** A top-level key the relay does not know: named; a second one of that name is refused, as a known key's is. */
function unknownKey(d: ParsedDelta, key: string, seen: Set<string>): void {
  if (seen.has(key)) throw new DeltaError("malformed", key, "duplicate key");
  seen.add(key);
  d.unknown.push(key);
}

/** Whether a msgpack value starting with this byte is an array (fixarray, array 16, array 32). */
function isArrayByte(b: number): boolean {
  return (b & 0xf0) === 0x90 || b === 0xdc || b === 0xdd;
}

/** The `nodes` array at the reader, each node parsed. */
function readNodes(r: Reader): NodeState[] {
  const count = r.arrayHeader();
  if (count < 0) throw new DeltaError("wrong_type", "nodes", "must be an array");
  const nodes: NodeState[] = new Array(count);
  for (let i = 0; i < count; i++) {
    try {
      nodes[i] = readNode(r, `nodes[${i}]`);
    } catch (e) {
      throw asDeltaError(e, `nodes[${i}]`);
    }
  }
  return nodes;
}

/** Entries of a str-keyed map at the reader. */
export function mapEntries(r: Reader, field: string): Entry[] {
  const n = r.mapHeader();
  if (n < 0) throw new DeltaError("wrong_type", field, "must be a map");
  const out: Entry[] = [];
  for (let i = 0; i < n; i++) {
    const k = r.pos;
    const key = r.str();
    if (key === undefined) throw new DeltaError("wrong_type", `${field} key ${i}`, "keys must be str");
    const keySpan = r.bytes.subarray(k, r.pos);
    out.push({ key, keySpan, value: r.span() });
  }
  return out;
}

/**
 * Keys of a map keyed by node index, leaving the reader at each value in turn. The wire uses
 * int keys; the reference does `int(index)`, so a decimal str key is accepted too.
 */
function* intKeyedMap(r: Reader, field: string): Generator<number> {
  const n = r.mapHeader();
  if (n < 0) throw new DeltaError("wrong_type", field, "must be a map keyed by node index");
  const seen = new Set<number>();
  for (let i = 0; i < n; i++) {
    let index = r.int();
    if (index === undefined) {
      const s = r.str();
      if (s !== undefined && /^(0|[1-9][0-9]{0,8})$/.test(s)) index = Number(s);
      else throw new DeltaError("wrong_type", `${field} key ${i}`, "keys must be node indices (int)");
    }
    if (index < 0) throw new DeltaError("index_out_of_range", `${field}[${index}]`, "node index must not be negative");
    if (seen.has(index)) throw new DeltaError("malformed", `${field}[${index}]`, "duplicate node index");
    seen.add(index);
    yield index;
  }
}

/** The delta's bytes without its top-level `dispatch` entry (the other entries' bytes as they were). */
export function withoutDispatch(d: ParsedDelta): Uint8Array {
  const kept = d.entries.filter((e) => e.key !== "dispatch");
  const w = new ChunkWriter();
  w.mapHeader(kept.length);
  for (const e of kept) {
    w.raw(e.keySpan);
    w.raw(e.value);
  }
  return w.bytes();
}

export function asDeltaError(e: unknown, field: string): DeltaError {
  if (e instanceof DeltaError) return e;
  if (e instanceof WireError) return new DeltaError("malformed", field, e.message);
  if (e instanceof RangeError) return new DeltaError("malformed", field, e.message);
  throw e;
}

/** The `trace` of a delta already known to be valid (a cheap read for routing by trace). */
export function traceOf(frame: Uint8Array): string {
  const r = new Reader(frame);
  const n = r.mapHeader();
  for (let i = 0; i < n; i++) {
    const key = r.str();
    if (key === undefined) r.span(); // a non-str key: skip it (its value is skipped below)
    const value = key === "trace" ? r.str() : undefined;
    if (value !== undefined) return value;
    if (key !== "trace") r.span();
  }
  throw new DeltaError("wrong_type", "trace", "missing: every delta names its trace");
}

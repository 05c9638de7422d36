// One node of a trace as the assembly holds it: the received map as spans, with the two
// parts that can change after arrival (`semantic_parents` grows by links, the last routing
// row is repaired) held apart so the rest is written back byte for byte.

import { equalBytes } from "../wire/bytes.js";
import { Reader } from "../wire/reader.js";
import { ChunkWriter, encodeStr, NIL_BYTE } from "../wire/writer.js";
import { DeltaError } from "./errors.js";
import { type NdArray, parseNdArray, writeNdArray } from "./ndarray.js";

const KEY_PARENTS = encodeStr("semantic_parents");
const KEY_ROUTED = encodeStr("routed_experts");
const KEY_PARENT = encodeStr("parent");
const KEY_MESSAGE = encodeStr("message");

export interface NodeState {
  /** The node exactly as received. */
  readonly span: Uint8Array;
  /** Key spans in output order (`semantic_parents` appended when the node had none). */
  readonly keys: Uint8Array[];
  /** Value spans aligned with `keys`; the parents and routing slots are rendered from state. */
  readonly values: Uint8Array[];
  readonly parentsAt: number;
  parents: Uint8Array[];
  /** Index of `routed_experts` in `keys`, or -1. */
  readonly routedAt: number;
  /** The routing array, or null when the node has none (key absent or nil). */
  routed: NdArray | null;
  /** True while the node's encoding is exactly `span`. */
  pristine: boolean;
}

/**
 * Parse a node map (a span already validated as msgpack). The reference stores a copy
 * `{**node, "semantic_parents": list(node.get("semantic_parents") or [])}`: a nil list becomes
 * `[]` in place and a missing one is appended last.
 */
export function readNode(r: Reader, field: string): NodeState {
  const start = r.pos;
  const n = r.mapHeader();
  if (n < 0) throw new DeltaError("wrong_type", field, "node must be a map");
  const keys: Uint8Array[] = [];
  const values: Uint8Array[] = [];
  let parentsAt = -1;
  let parents: Uint8Array[] = [];
  let routedAt = -1;
  let routed: NdArray | null = null;
  let pristine = true;
  for (let i = 0; i < n; i++) {
    const key = r.span();
    const value = r.span();
    if (equalBytes(key, KEY_PARENTS)) {
      parentsAt = i;
      parents = arrayItems(new Reader(value, 0, value.length, true), `${field}.semantic_parents`, true);
      if (value[0] === NIL_BYTE) pristine = false;
    } else if (equalBytes(key, KEY_ROUTED)) {
      routedAt = i;
      if (value[0] !== NIL_BYTE) routed = parseNdArray(value, `${field}.routed_experts`);
    }
    keys.push(key);
    values.push(value);
  }
  const span = r.bytes.subarray(start, r.pos);
  if (parentsAt < 0) {
    parentsAt = keys.length;
    keys.push(KEY_PARENTS);
    values.push(new Uint8Array(0));
    pristine = false;
  }
  return { span, keys, values, parentsAt, parents, routedAt, routed, pristine };
}

/** Items of the array at the reader as spans; nil counts as an empty array when `nilIsEmpty`. */
export function arrayItems(r: Reader, field: string, nilIsEmpty = false): Uint8Array[] {
  if (nilIsEmpty && r.nil()) return [];
  const n = r.arrayHeader();
  if (n < 0) throw new DeltaError("wrong_type", field, "must be an array");
  const items: Uint8Array[] = new Array(n);
  for (let i = 0; i < n; i++) items[i] = r.span();
  return items;
}

/**
 * What the assembly keeps of a node in its index (the node's bytes are in its Bodies): enough to
 * check a delta against it and to size the episode without reading it.
 */
export interface NodeInfo {
  /** Length of the node's encoding as it stands. */
  readonly bytes: number;
  /** Its `semantic_parents` count. */
  readonly parents: number;
  /** Its routing array's dtype and shape, or null when it has none. */
  readonly routed: { readonly dtype: string; readonly shape: readonly number[] } | null;
  /** The seq of the frame that last wrote it (0 where its Bodies keep no versions). */
  readonly ver: number;
  /**
   * Its `parent` index (null: a root, or not an int) and its `message.role` (null: none): what the
   * run's row counts branches and finds the latest assistant words by (src/protocol/registry/progress-facts.ts).
   * Undefined for a node an older release stored (its body says).
   */
  readonly parent?: number | null;
  readonly role?: string | null;
  /** A routing repair rewrote its last row (the bytes do not say so; the dashboard marks that row). */
  readonly repaired: boolean;
}

export function infoOf(node: NodeState, bytes: number, ver = 0, repaired = false): NodeInfo {
  const { parent, role } = nodeHead(node);
  return {
    bytes,
    parents: node.parents.length,
    routed: node.routed ? { dtype: node.routed.dtype, shape: node.routed.shape } : null,
    ver,
    repaired,
    parent,
    role,
  };
}

/** A node's `parent` (an int ≥ 0, else null) and `message.role` (a str, else null), read off its spans. */
export function nodeHead(node: NodeState): { parent: number | null; role: string | null } {
  let parent: number | null = null;
  let role: string | null = null;
  for (let i = 0; i < node.keys.length; i++) {
    const key = node.keys[i]!;
    if (equalBytes(key, KEY_PARENT)) {
      const v = node.values[i]!;
      // a 64-bit int (uint64, int64) is no node's index, and may be beyond what int() reads
      const p = v[0] === 0xcf || v[0] === 0xd3 ? undefined : new Reader(v, 0, v.length, true).int();
      parent = p !== undefined && p >= 0 ? p : null;
    } else if (equalBytes(key, KEY_MESSAGE)) {
      role = roleOf(node.values[i]!);
    }
  }
  return { parent, role };
}

const KEY_ROLE = encodeStr("role");

function roleOf(message: Uint8Array): string | null {
  const r = new Reader(message, 0, message.length, true);
  const n = r.mapHeader();
  for (let i = 0; i < n; i++) {
    const k = r.span();
    if (equalBytes(k, KEY_ROLE)) return r.str() ?? null;
    r.span();
  }
  return null;
}

/** The node's encoding (its received bytes while it is unchanged). */
export function encodeNode(node: NodeState): Uint8Array {
  if (node.pristine) return node.span;
  const w = new ChunkWriter();
  writeNode(w, node);
  return w.bytes();
}

/** Length of the node's encoding, without building it. */
export function nodeLength(node: NodeState): number {
  if (node.pristine) return node.span.length;
  const w = new ChunkWriter();
  writeNode(w, node);
  return w.length;
}

export function writeNode(w: ChunkWriter, node: NodeState): void {
  if (node.pristine) return w.raw(node.span);
  const { keys, values } = node;
  w.mapHeader(keys.length);
  for (let i = 0; i < keys.length; i++) {
    w.raw(keys[i]!);
    if (i === node.parentsAt) {
      w.arrayHeader(node.parents.length);
      for (const p of node.parents) w.raw(p);
    } else if (i === node.routedAt && node.routed) writeNdArray(w, node.routed);
    else w.raw(values[i]!);
  }
}

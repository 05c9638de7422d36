// The `__nd__` ndarray map (`verifiers.v1.graph._encode_ndarray`) and the routing-row repair.
//
// An array is held as `body` (all rows but the last) and `last` (the final row), both views
// of received frames when possible: a repair of the same dtype swaps `last` and copies
// nothing; only a widening repair converts the body once.

import { Reader } from "../wire/reader.js";
import { type ChunkWriter, encodeStr } from "../wire/writer.js";
import { DeltaError } from "./errors.js";

export type DType = "uint8" | "uint16" | "uint32" | "uint64" | "int8" | "int16" | "int32" | "int64";

const ITEM_SIZE: Record<DType, number> = {
  uint8: 1,
  uint16: 2,
  uint32: 4,
  uint64: 8,
  int8: 1,
  int16: 2,
  int32: 4,
  int64: 8,
};

export function isDType(s: string): s is DType {
  return Object.hasOwn(ITEM_SIZE, s);
}

export interface NdArray {
  dtype: DType;
  shape: number[];
  /** Rows 0 .. n-2, little-endian C order. */
  body: Uint8Array;
  /** Row n-1 (empty when the array has no rows). */
  last: Uint8Array;
  /** The map exactly as received, while the array is unchanged since; re-encoded otherwise. */
  span: Uint8Array | null;
}

const KEY_ND = encodeStr("__nd__");
const KEY_DTYPE = encodeStr("dtype");
const KEY_SHAPE = encodeStr("shape");
const KEY_DATA = encodeStr("data");

/** Parse and check an ndarray map span; `field` names it in errors. */
export function parseNdArray(span: Uint8Array, field: string): NdArray {
  const r = new Reader(span);
  const n = r.mapHeader();
  if (n < 0) throw new DeltaError("wrong_type", field, "ndarray must be a map");
  let nd = false;
  let dtype: string | undefined;
  let shape: number[] | undefined;
  let data: Uint8Array | undefined;
  for (let i = 0; i < n; i++) {
    const key = r.str();
    if (key === undefined) {
      r.span();
      r.span();
      continue;
    }
    if (key === "__nd__") {
      const b = r.bool();
      if (b === undefined) r.span();
      nd = b ?? false;
    } else if (key === "dtype") {
      dtype = r.str();
      if (dtype === undefined) throw new DeltaError("bad_ndarray", `${field}.dtype`, "must be a str");
    } else if (key === "shape") {
      const k = r.arrayHeader();
      if (k < 0) throw new DeltaError("bad_ndarray", `${field}.shape`, "must be an array of ints");
      shape = [];
      for (let j = 0; j < k; j++) {
        const d = r.int();
        if (d === undefined || d < 0)
          throw new DeltaError("bad_ndarray", `${field}.shape[${j}]`, "must be a non-negative int");
        shape.push(d);
      }
    } else if (key === "data") {
      data = r.bin();
      if (data === undefined) throw new DeltaError("bad_ndarray", `${field}.data`, "must be bin");
    } else r.span();
  }
  if (!nd) throw new DeltaError("bad_ndarray", field, "not an ndarray map (`__nd__: true` missing)");
  if (dtype === undefined || shape === undefined || data === undefined) {
    throw new DeltaError("bad_ndarray", field, "ndarray map needs dtype, shape and data");
  }
  if (!isDType(dtype)) throw new DeltaError("bad_ndarray", `${field}.dtype`, `unknown dtype ${JSON.stringify(dtype)}`);
  if (shape.length === 0) throw new DeltaError("bad_ndarray", `${field}.shape`, "must have at least one dimension");
  const rowBytes = shape.slice(1).reduce((a, b) => a * b, ITEM_SIZE[dtype]);
  const rows = shape[0]!;
  if (rows * rowBytes !== data.length) {
    throw new DeltaError(
      "bad_ndarray",
      `${field}.data`,
      `${data.length} bytes do not match shape [${shape.join(", ")}] of ${dtype}`,
    );
  }
  const cut = rows === 0 ? 0 : data.length - rowBytes;
  return { dtype, shape, body: data.subarray(0, cut), last: data.subarray(cut), span };
}

/** numpy's result dtype for concatenating two integer arrays (None where it leaves the ints). */
export function promote(a: DType, b: DType): DType | undefined {
  if (a === b) return a;
  const ua = a.startsWith("u");
  const ub = b.startsWith("u");
  const sa = ITEM_SIZE[a];
  const sb = ITEM_SIZE[b];
  if (ua === ub) return sa >= sb ? a : b;
  const [u, s] = ua ? [sa, sb] : [sb, sa]; // sizes of the unsigned and the signed one
  if (s > u) return `int${s * 8}` as DType;
  if (u >= 8) return undefined; // numpy gives float64: not a routing array any more
  return `int${u * 16}` as DType;
}

/** Apply a routing repair: drop the last row, append `row`, in the promoted dtype. */
export function repairLastRow(current: NdArray, row: NdArray, field: string): NdArray {
  const want = current.shape.slice(1);
  const got = row.shape;
  if (got.length !== want.length + 1 || got[0] !== 1 || want.some((d, i) => got[i + 1] !== d)) {
    throw new DeltaError(
      "bad_ndarray",
      field,
      `repair row has shape [${got.join(", ")}], expected [1, ${want.join(", ")}]`,
    );
  }
  const dtype = promote(current.dtype, row.dtype);
  if (dtype === undefined)
    throw new DeltaError("bad_ndarray", field, `cannot combine ${current.dtype} with ${row.dtype}`);
  const rows = Math.max(current.shape[0]! - 1, 0) + 1;
  return {
    dtype,
    shape: [rows, ...want],
    body: convert(current.body, current.dtype, dtype),
    last: convert(row.last, row.dtype, dtype),
    span: null,
  };
}

/** Element-wise conversion between integer dtypes (values are kept; callers only widen). */
function convert(data: Uint8Array, from: DType, to: DType): Uint8Array {
  if (from === to) return data;
  const n = data.length / ITEM_SIZE[from];
  const src = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(n * ITEM_SIZE[to]);
  const dst = new DataView(out.buffer);
  const read = reader(from);
  const write = writer(to);
  for (let i = 0; i < n; i++) write(dst, i, read(src, i));
  return out;
}

type Get = (v: DataView, i: number) => bigint;
type Set = (v: DataView, i: number, x: bigint) => void;

function reader(t: DType): Get {
  switch (t) {
    case "uint8":
      return (v, i) => BigInt(v.getUint8(i));
    case "uint16":
      return (v, i) => BigInt(v.getUint16(i * 2, true));
    case "uint32":
      return (v, i) => BigInt(v.getUint32(i * 4, true));
    case "uint64":
      return (v, i) => v.getBigUint64(i * 8, true);
    case "int8":
      return (v, i) => BigInt(v.getInt8(i));
    case "int16":
      return (v, i) => BigInt(v.getInt16(i * 2, true));
    case "int32":
      return (v, i) => BigInt(v.getInt32(i * 4, true));
    case "int64":
      return (v, i) => v.getBigInt64(i * 8, true);
  }
}

function writer(t: DType): Set {
  switch (t) {
    case "uint8":
      return (v, i, x) => v.setUint8(i, Number(x));
    case "uint16":
      return (v, i, x) => v.setUint16(i * 2, Number(x), true);
    case "uint32":
      return (v, i, x) => v.setUint32(i * 4, Number(x), true);
    case "uint64":
      return (v, i, x) => v.setBigUint64(i * 8, x, true);
    case "int8":
      return (v, i, x) => v.setInt8(i, Number(x));
    case "int16":
      return (v, i, x) => v.setInt16(i * 2, Number(x), true);
    case "int32":
      return (v, i, x) => v.setInt32(i * 4, Number(x), true);
    case "int64":
      return (v, i, x) => v.setBigInt64(i * 8, x, true);
  }
}

/** Write the array as the reference's fresh `_encode_ndarray` map (or its received bytes if unchanged). */
export function writeNdArray(w: ChunkWriter, a: NdArray): void {
  if (a.span) return w.raw(a.span);
  w.mapHeader(4);
  w.raw(KEY_ND);
  w.bool(true);
  w.raw(KEY_DTYPE);
  w.raw(encodeStr(a.dtype));
  w.raw(KEY_SHAPE);
  w.arrayHeader(a.shape.length);
  for (const d of a.shape) w.int(d);
  w.raw(KEY_DATA);
  w.binHeader(a.body.length + a.last.length);
  w.raw(a.body);
  w.raw(a.last);
}

/** Values of an array as numbers, row-major (for views and tests). */
export function ndValues(a: NdArray): number[] {
  const get = reader(a.dtype);
  const out: number[] = [];
  for (const part of [a.body, a.last]) {
    const v = new DataView(part.buffer, part.byteOffset, part.byteLength);
    for (let i = 0; i < part.length / ITEM_SIZE[a.dtype]; i++) out.push(Number(get(v, i)));
  }
  return out;
}

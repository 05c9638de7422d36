// A type-preserving msgpack value model for everything off the hot path: the JSON view,
// tests, the conformance tool's "first difference" report, control messages built by hand.
//
// @msgpack/msgpack cannot be used for these because it maps float64 `1.0` and int `1` to the
// same JS number, and decodes maps into objects (reordering integer-like keys). Here a float
// is an `F64`, an int is a `number` (or a `bigint` beyond 2^53), a map is an ordered `LMap`,
// and str/bin stay `string`/`Uint8Array`.

import { intAt, kindOf } from "./format.js";
import { Reader } from "./reader.js";
import { decodeStrSpan } from "./utf8.js";
import { ChunkWriter, encodeInt, encodeStr } from "./writer.js";

/** A float64 value (kept apart from ints so `1.0` stays a float). */
export class F64 {
  constructor(readonly value: number) {}
}

/** An ordered msgpack map; keys keep their types (str or int) and their order. */
export class LMap {
  constructor(readonly entries: Array<[LValue, LValue]> = []) {}
  get(key: LValue): LValue | undefined {
    for (const [k, v] of this.entries) if (same(k, key)) return v;
    return undefined;
  }
  has(key: LValue): boolean {
    return this.entries.some(([k]) => same(k, key));
  }
  keys(): LValue[] {
    return this.entries.map(([k]) => k);
  }
}

export type LValue = null | boolean | number | bigint | F64 | string | Uint8Array | LValue[] | LMap;

/** Decode one msgpack document with every distinction kept. */
export function decodeLossless(bytes: Uint8Array): LValue {
  const check = new Reader(bytes);
  check.span(); // validate the whole document once; `read` then trusts the structure
  if (!check.atEnd()) check.fail("trailing bytes after the msgpack value");
  return read(new Reader(bytes));
}

function read(r: Reader, depth = 0): LValue {
  const t = r.bytes[r.pos];
  if (t === undefined) r.fail("truncated: value expected");
  const kind = kindOf(t);
  switch (kind) {
    case "nil":
      r.pos++;
      return null;
    case "bool":
      return r.bool()!;
    case "float": {
      const start = r.pos;
      r.span(depth);
      return new F64(r.view.getFloat64(start + 1));
    }
    case "int": {
      const start = r.pos;
      r.span(depth);
      return intAt(r.view, start, t);
    }
    case "str":
      return decodeStrSpan(r.span(depth));
    case "bin":
      return r.bin()!;
    case "array": {
      const n = r.arrayHeader();
      const out: LValue[] = new Array(n);
      for (let i = 0; i < n; i++) out[i] = read(r, depth + 1);
      return out;
    }
    case "map": {
      const n = r.mapHeader();
      const entries: Array<[LValue, LValue]> = new Array(n);
      for (let i = 0; i < n; i++) {
        const k = read(r, depth + 1);
        entries[i] = [k, read(r, depth + 1)];
      }
      return new LMap(entries);
    }
    default:
      return r.fail(`unsupported msgpack byte 0x${t.toString(16)}`);
  }
}

/**
 * A JSON value (JSON.parse's) as msgpack values: whole numbers as ints, others as float64, objects
 * as maps in their key order (JSON.parse already put integer-like keys first, as JS objects do).
 */
export function fromJson(v: unknown): LValue {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") return Number.isSafeInteger(v) ? v : new F64(v);
  if (Array.isArray(v)) return v.map(fromJson);
  return new LMap(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, fromJson(x)]));
}

/** Encode with minimal formats, float64 for `F64`, map order and key types as given. */
export function encodeLossless(v: LValue): Uint8Array {
  const w = new ChunkWriter();
  write(w, v);
  return w.bytes();
}

function write(w: ChunkWriter, v: LValue): void {
  if (v === null) w.byte(0xc0);
  else if (v === true) w.byte(0xc3);
  else if (v === false) w.byte(0xc2);
  else if (typeof v === "number") {
    if (!Number.isInteger(v)) throw new TypeError(`plain number ${v} is not an int; wrap floats in F64`);
    w.int(v);
  } else if (typeof v === "bigint") w.raw(encodeBigInt(v));
  else if (v instanceof F64) {
    const b = new Uint8Array(9);
    b[0] = 0xcb;
    new DataView(b.buffer).setFloat64(1, v.value);
    w.raw(b);
  } else if (typeof v === "string") w.raw(encodeStr(v));
  else if (v instanceof Uint8Array) {
    w.binHeader(v.length);
    w.raw(v);
  } else if (Array.isArray(v)) {
    w.arrayHeader(v.length);
    for (const x of v) write(w, x);
  } else {
    w.mapHeader(v.entries.length);
    for (const [k, x] of v.entries) {
      write(w, k);
      write(w, x);
    }
  }
}

function encodeBigInt(v: bigint): Uint8Array {
  if (v >= -BigInt(Number.MAX_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) return encodeInt(Number(v));
  const out = new Uint8Array(9);
  const dv = new DataView(out.buffer);
  if (v > 0n) {
    if (v > 0xffffffffffffffffn) throw new RangeError("int beyond uint64");
    out[0] = 0xcf;
    dv.setBigUint64(1, v);
  } else {
    if (v < -(2n ** 63n)) throw new RangeError("int beyond int64");
    out[0] = 0xd3;
    dv.setBigInt64(1, v);
  }
  return out;
}

/** Type-aware equality: int vs float, -0.0 vs 0, NaN == NaN, str vs bin, key order. */
export function same(a: LValue, b: LValue): boolean {
  return firstDifference(a, b) === undefined;
}

/** Path and both sides of the first difference, or undefined when equal. */
export function firstDifference(
  a: LValue,
  b: LValue,
  path = "$",
): { path: string; expected: string; got: string } | undefined {
  const ta = typeName(a);
  const tb = typeName(b);
  if (ta !== tb) return { path, expected: show(a), got: show(b) };
  if (a instanceof F64 && b instanceof F64) {
    return Object.is(a.value, b.value) || (Number.isNaN(a.value) && Number.isNaN(b.value))
      ? undefined
      : { path, expected: show(a), got: show(b) };
  }
  if (a instanceof Uint8Array && b instanceof Uint8Array) {
    if (a.length !== b.length) return { path, expected: show(a), got: show(b) };
    for (let i = 0; i < a.length; i++)
      if (a[i] !== b[i]) return { path: `${path}[byte ${i}]`, expected: String(a[i]), got: String(b[i]) };
    return undefined;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.min(a.length, b.length); i++) {
      const d = firstDifference(a[i]!, b[i]!, `${path}[${i}]`);
      if (d) return d;
    }
    return a.length === b.length
      ? undefined
      : { path: `${path}.length`, expected: String(a.length), got: String(b.length) };
  }
  if (a instanceof LMap && b instanceof LMap) {
    for (let i = 0; i < Math.min(a.entries.length, b.entries.length); i++) {
      const [ka, va] = a.entries[i]!;
      const [kb, vb] = b.entries[i]!;
      const kd = firstDifference(ka, kb, `${path}.<key ${i}>`);
      if (kd) return kd;
      const d = firstDifference(va, vb, `${path}.${typeof ka === "string" ? ka : `[${String(ka)}]`}`);
      if (d) return d;
    }
    if (a.entries.length !== b.entries.length) {
      return { path: `${path}.<keys>`, expected: a.keys().map(show).join(","), got: b.keys().map(show).join(",") };
    }
    return undefined;
  }
  return a === b ? undefined : { path, expected: show(a), got: show(b) };
}

function typeName(v: LValue): string {
  if (v === null) return "nil";
  if (v instanceof F64) return "float";
  if (v instanceof Uint8Array) return "bin";
  if (v instanceof LMap) return "map";
  if (Array.isArray(v)) return "array";
  if (typeof v === "bigint" || typeof v === "number") return "int";
  return typeof v;
}

/** A short human-readable rendering that keeps the type visible. */
export function show(v: LValue): string {
  if (v === null) return "nil";
  if (v instanceof F64)
    return Object.is(v.value, -0) ? "-0.0" : Number.isInteger(v.value) ? `${v.value}.0` : `${v.value}`;
  if (v instanceof Uint8Array) return `bin(${v.length})`;
  if (v instanceof LMap) return `map(${v.entries.length})`;
  if (Array.isArray(v)) return `array(${v.length})`;
  if (typeof v === "string") return JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}…` : v);
  return String(v);
}

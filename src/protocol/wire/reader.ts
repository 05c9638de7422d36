// Raw-span msgpack reader for the data path.
//
// Why not @msgpack/msgpack here: a generic decoder turns `1.0` into the JS number 1 (and
// re-encodes it as an int), folds int map keys into strings or reorders them in plain
// objects, and would copy every value the relay never needs to look into. The relay instead
// walks the bytes, validates them, and keeps each value as a view (`subarray`) of the frame
// it arrived in; those spans are written back out untouched. Only the handful of fields the
// assembly must interpret (delta keys, node keys, ndarray maps, link/repair indices) are read.
//
// Validation done while walking: truncation, reserved byte 0xc1, ext types (never on this
// wire), float32 (never on this wire), nesting depth, UTF-8 of every str, and canonical
// (minimal) formats. The canonical check is what makes "keep the received bytes" equal to
// "what the Python reference would re-encode": msgpack-python always writes minimal formats,
// so a non-minimal value cannot have come from it and would break byte equality downstream.

import { MAX_DEPTH } from "../limits/limits.js";
import { WireError } from "./errors.js";
import { intAt } from "./format.js";
import { checkUtf8, decodeStrRange } from "./utf8.js";
import { FALSE_BYTE, NIL_BYTE, TRUE_BYTE } from "./writer.js";

/** Reads msgpack structure over one frame. All positions are absolute offsets into `bytes`. */
export class Reader {
  readonly bytes: Uint8Array;
  pos: number;
  readonly end: number;
  /** Bytes already validated by this reader's rules: skip the UTF-8 check of str bodies. */
  readonly trusted: boolean;
  private dv: DataView | null = null;

  constructor(bytes: Uint8Array, pos = 0, end = bytes.length, trusted = false) {
    this.bytes = bytes;
    this.pos = pos;
    this.end = end;
    this.trusted = trusted;
  }

  /** A DataView over the frame, made on first use (most small reads never need one). */
  get view(): DataView {
    return (this.dv ??= new DataView(this.bytes.buffer, this.bytes.byteOffset, this.bytes.byteLength));
  }

  fail(message: string, at = this.pos): never {
    throw new WireError(message, at);
  }

  need(n: number): void {
    if (this.pos + n > this.end) this.fail(`truncated: needs ${n} more byte(s)`);
  }

  /** A view of the next complete value. */
  span(depth = 0): Uint8Array {
    const start = this.pos;
    this.skipValue(depth);
    return this.bytes.subarray(start, this.pos);
  }

  private skipValue(depth: number): void {
    if (depth > MAX_DEPTH) this.fail(`nesting deeper than ${MAX_DEPTH}`);
    if (this.pos >= this.end) this.fail("truncated: value expected");
    const t = this.bytes[this.pos]!;
    if (t < 0x80 || t >= 0xe0 || t === 0xc0 || t === 0xc2 || t === 0xc3) {
      this.pos += 1;
      return;
    }
    if (t <= 0x8f) return this.skipValues(2 * (t & 0x0f), depth, 1);
    if (t <= 0x9f) return this.skipValues(t & 0x0f, depth, 1);
    if (t <= 0xbf) return this.skipStr(t & 0x1f, 1);
    if (t >= 0xca && t <= 0xd3) return this.skipNumber(t);
    this.skipSized(t, depth);
  }

  /** A float (float64 only) or an int of 0xcc..0xd3, which must not fit a smaller format. */
  private skipNumber(t: number): void {
    switch (t) {
      case 0xca:
        return this.fail("float32 is not allowed (floats are float64 on this wire)");
      case 0xcb:
        this.need(9);
        this.pos += 9;
        return;
      case 0xcc:
        if (this.u8At(1) < 0x80) this.nonMinimal("uint8");
        this.pos += 2;
        return;
      case 0xcd:
        if (this.u16At(1) < 0x100) this.nonMinimal("uint16");
        this.pos += 3;
        return;
      case 0xce:
        if (this.u32At(1) < 0x10000) this.nonMinimal("uint32");
        this.pos += 5;
        return;
      case 0xcf:
        this.need(9);
        if (this.view.getUint32(this.pos + 1) === 0) this.nonMinimal("uint64");
        this.pos += 9;
        return;
      case 0xd0:
        this.need(2);
        if (this.view.getInt8(this.pos + 1) >= -32) this.nonMinimal("int8");
        this.pos += 2;
        return;
      case 0xd1:
        this.need(3);
        if (this.view.getInt16(this.pos + 1) >= -128) this.nonMinimal("int16");
        this.pos += 3;
        return;
      case 0xd2:
        this.need(5);
        if (this.view.getInt32(this.pos + 1) >= -32768) this.nonMinimal("int32");
        this.pos += 5;
        return;
      case 0xd3:
        this.need(9);
        if (this.view.getBigInt64(this.pos + 1) >= -2147483648n) this.nonMinimal("int64");
        this.pos += 9;
        return;
    }
  }

  /**
   * A bin, str, array or map with its size in its head, which must not fit a smaller format; else 0xc1 or an ext type,
   * refused.
   */
  private skipSized(t: number, depth: number): void {
    switch (t) {
      case 0xc4:
        return this.skipBin(this.u8At(1), 2, 0);
      case 0xc5:
        return this.skipBin(this.u16At(1), 3, 0x100);
      case 0xc6:
        return this.skipBin(this.u32At(1), 5, 0x10000);
      case 0xd9: {
        const n = this.u8At(1);
        if (n < 32) this.nonMinimal("str8");
        return this.skipStr(n, 2);
      }
      case 0xda: {
        const n = this.u16At(1);
        if (n < 0x100) this.nonMinimal("str16");
        return this.skipStr(n, 3);
      }
      case 0xdb: {
        const n = this.u32At(1);
        if (n < 0x10000) this.nonMinimal("str32");
        return this.skipStr(n, 5);
      }
      case 0xdc: {
        const n = this.u16At(1);
        if (n < 16) this.nonMinimal("array16");
        return this.skipValues(n, depth, 3);
      }
      case 0xdd: {
        const n = this.u32At(1);
        if (n < 0x10000) this.nonMinimal("array32");
        return this.skipValues(n, depth, 5);
      }
      case 0xde: {
        const n = this.u16At(1);
        if (n < 16) this.nonMinimal("map16");
        return this.skipValues(2 * n, depth, 3);
      }
      case 0xdf: {
        const n = this.u32At(1);
        if (n < 0x10000) this.nonMinimal("map32");
        return this.skipValues(2 * n, depth, 5);
      }
      case 0xc1:
        return this.fail("reserved byte 0xc1");
      default:
        this.fail(`ext type 0x${t.toString(16)} is not allowed`);
    }
  }

  private nonMinimal(format: string): never {
    this.fail(`non-canonical msgpack: ${format} used for a value that fits a smaller format`);
  }

  private u8At(off: number): number {
    this.need(off + 1);
    return this.bytes[this.pos + off]!;
  }
  private u16At(off: number): number {
    this.need(off + 2);
    const b = this.bytes;
    const i = this.pos + off;
    return (b[i]! << 8) | b[i + 1]!;
  }
  private u32At(off: number): number {
    this.need(off + 4);
    const b = this.bytes;
    const i = this.pos + off;
    return b[i]! * 0x1000000 + ((b[i + 1]! << 16) | (b[i + 2]! << 8) | b[i + 3]!);
  }

  private skipBin(n: number, head: number, min: number): void {
    if (n < min) this.nonMinimal(head === 3 ? "bin16" : "bin32");
    if (this.pos + head + n > this.end) this.fail(`truncated: bin of ${n} bytes`);
    this.pos += head + n;
  }

  private skipStr(n: number, head: number): void {
    const from = this.pos + head;
    const to = from + n;
    if (to > this.end) this.fail(`truncated: str of ${n} bytes`);
    if (this.trusted) {
      this.pos = to;
      return;
    }
    const b = this.bytes;
    for (let i = from; i < to; i++) {
      if (b[i]! >= 0x80) {
        checkUtf8(b, from, to, this.pos);
        break;
      }
    }
    this.pos = to;
  }

  /** The head (`head` bytes) and `count` values of an array (its items) or a map (its keys and values). */
  private skipValues(count: number, depth: number, head: number): void {
    this.pos += head;
    for (let i = 0; i < count; i++) this.skipValue(depth + 1);
  }

  // ---- typed reads of the fields the assembly interprets ----

  /** Map header; returns the entry count or -1 when the next value is not a map. */
  mapHeader(): number {
    return this.header(0x80, 0xde, "map");
  }

  /** Array header; returns the item count or -1 when the next value is not an array. */
  arrayHeader(): number {
    return this.header(0x90, 0xdc, "array");
  }

  /**
   * A map or array header (fix formats from `fix`, 16-bit at `at16`, 32-bit next): its count, or -1 for another type.
   */
  private header(fix: number, at16: number, name: string): number {
    this.need(1);
    const t = this.bytes[this.pos]!;
    if (t >= fix && t <= fix + 0x0f) {
      this.pos += 1;
      return t & 0x0f;
    }
    if (t === at16) {
      const n = this.u16At(1);
      if (n < 16) this.nonMinimal(`${name}16`);
      this.pos += 3;
      return n;
    }
    if (t === at16 + 1) {
      const n = this.u32At(1);
      if (n < 0x10000) this.nonMinimal(`${name}32`);
      this.pos += 5;
      return n;
    }
    return -1;
  }

  /** A str value as a JS string, or undefined (nothing consumed) when the next value is not a str. */
  str(): string | undefined {
    const t = this.bytes[this.pos];
    if (t === undefined) this.fail("truncated: value expected");
    if (!((t >= 0xa0 && t <= 0xbf) || t === 0xd9 || t === 0xda || t === 0xdb)) return undefined;
    const start = this.pos;
    this.skipValue(0);
    const head = t <= 0xbf ? 1 : t === 0xd9 ? 2 : t === 0xda ? 3 : 5;
    return decodeStrRange(this.bytes, start + head, this.pos);
  }

  /** A bin value as a view, or undefined (nothing consumed) when the next value is not a bin. */
  bin(): Uint8Array | undefined {
    const t = this.bytes[this.pos];
    if (t === undefined) this.fail("truncated: value expected");
    if (t !== 0xc4 && t !== 0xc5 && t !== 0xc6) return undefined;
    const start = this.pos;
    this.skipValue(0);
    const head = t === 0xc4 ? 2 : t === 0xc5 ? 3 : 5;
    return this.bytes.subarray(start + head, this.pos);
  }

  /**
   * An integer as a JS number (exact up to 2^53), or undefined (nothing consumed) when the
   * next value is not an int. Larger magnitudes are refused: no index or count gets there.
   */
  int(): number | undefined {
    const t = this.peek();
    if (t === undefined) this.fail("truncated: value expected");
    if (t < 0x80 || t >= 0xe0) {
      this.pos += 1;
      return t < 0x80 ? t : t - 0x100;
    }
    if (t < 0xcc || t > 0xd3) return undefined;
    const at = this.pos;
    this.skipValue(0);
    const v = intAt(this.view, at, t);
    if (typeof v === "bigint") this.fail("integer too large here", at);
    return v;
  }

  /** A bool, or undefined (nothing consumed) when the next value is not a bool. */
  bool(): boolean | undefined {
    const t = this.peek();
    if (t === FALSE_BYTE) {
      this.pos += 1;
      return false;
    }
    if (t === TRUE_BYTE) {
      this.pos += 1;
      return true;
    }
    if (t === undefined) this.fail("truncated: value expected");
    return undefined;
  }

  /** True (and consumed) when the next value is nil. */
  nil(): boolean {
    if (this.peek() === NIL_BYTE) {
      this.pos += 1;
      return true;
    }
    return false;
  }

  atEnd(): boolean {
    return this.pos === this.end;
  }

  /** The next format byte, or undefined at the reader's end. */
  private peek(): number | undefined {
    return this.pos < this.end ? this.bytes[this.pos] : undefined;
  }
}

/** The items of a msgpack array of bin values, as views (e.g. a stored list of frames). */
export function binItems(bytes: Uint8Array): Uint8Array[] {
  const r = new Reader(bytes);
  const n = r.arrayHeader();
  if (n < 0) r.fail("expected an array of bin");
  const out: Uint8Array[] = [];
  for (let i = 0; i < n; i++) {
    const b = r.bin();
    if (b === undefined) return r.fail("expected bin");
    out.push(b);
  }
  return out;
}

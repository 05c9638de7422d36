// Chunked msgpack writer: headers and small values are packed into a scratch buffer, large
// spans of received frames (routing bytes, whole nodes) are passed through as views. The
// output is a list of chunks whose concatenation is the document, so assembling an episode
// never copies the megabytes of routing data it carries.
//
// Every header is written in its minimal format, the same choice msgpack-python makes.

const textEncoder = new TextEncoder();

/** Spans shorter than this are copied into the scratch buffer rather than kept as chunks. */
const INLINE_LIMIT = 512;
/** Scratch buffers start small (most documents written are small) and grow up to SCRATCH. */
const FIRST_SCRATCH = 256;
const SCRATCH = 16 * 1024;

export class ChunkWriter {
  readonly chunks: Uint8Array[] = [];
  length = 0;
  private buf = new Uint8Array(FIRST_SCRATCH);
  private dv: DataView | null = null;
  private start = 0;
  private pos = 0;

  private get view(): DataView {
    return (this.dv ??= new DataView(this.buf.buffer));
  }

  private reserve(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    this.flushScratch();
    const size = Math.max(Math.min(this.buf.length * 4, SCRATCH), n);
    this.buf = new Uint8Array(size);
    this.dv = null;
    this.start = 0;
    this.pos = 0;
  }

  private flushScratch(): void {
    if (this.pos > this.start) {
      this.chunks.push(this.buf.subarray(this.start, this.pos));
      this.start = this.pos;
    }
  }

  /** Append already-encoded bytes (one or more complete values, or a value's body). */
  raw(span: Uint8Array): void {
    const n = span.length;
    this.length += n;
    if (n < INLINE_LIMIT) {
      this.reserve(n);
      this.buf.set(span, this.pos);
      this.pos += n;
    } else {
      this.flushScratch();
      this.chunks.push(span);
    }
  }

  nil(): void {
    this.byte(NIL_BYTE);
  }

  bool(b: boolean): void {
    this.byte(b ? TRUE_BYTE : FALSE_BYTE);
  }

  /** A str, or nil for null. */
  strOrNil(s: string | null): void {
    if (s === null) this.nil();
    else this.str(s);
  }

  byte(b: number): void {
    this.reserve(1);
    this.buf[this.pos++] = b;
    this.length += 1;
  }

  private head(small: number, smallMax: number, t16: number, t32: number, n: number): void {
    this.reserve(5);
    if (n <= smallMax) {
      this.buf[this.pos++] = small | n;
      this.length += 1;
    } else if (n <= 0xffff) {
      this.buf[this.pos] = t16;
      this.view.setUint16(this.pos + 1, n);
      this.pos += 3;
      this.length += 3;
    } else {
      this.buf[this.pos] = t32;
      this.view.setUint32(this.pos + 1, n);
      this.pos += 5;
      this.length += 5;
    }
  }

  mapHeader(n: number): void {
    this.head(0x80, 15, 0xde, 0xdf, n);
  }

  arrayHeader(n: number): void {
    this.head(0x90, 15, 0xdc, 0xdd, n);
  }

  binHeader(n: number): void {
    this.reserve(5);
    if (n <= 0xff) {
      this.buf[this.pos] = 0xc4;
      this.buf[this.pos + 1] = n;
      this.pos += 2;
      this.length += 2;
    } else if (n <= 0xffff) {
      this.buf[this.pos] = 0xc5;
      this.view.setUint16(this.pos + 1, n);
      this.pos += 3;
      this.length += 3;
    } else {
      this.buf[this.pos] = 0xc6;
      this.view.setUint32(this.pos + 1, n);
      this.pos += 5;
      this.length += 5;
    }
  }

  str(s: string): void {
    this.raw(encodeStr(s));
  }

  /** A non-negative or negative integer that fits a JS number exactly. */
  int(v: number): void {
    this.raw(encodeInt(v));
  }

  /**
   * The document as one buffer (a copy only when it spans several chunks: into `into(length)` when
   * given, a buffer the caller uses again, else a new one).
   */
  bytes(into?: (length: number) => Uint8Array): Uint8Array {
    this.flushScratch();
    return concatChunks(this.chunks, this.length, into);
  }

  /** The document as chunks (views; valid as long as the writer is not reused). */
  finish(): Uint8Array[] {
    this.flushScratch();
    return this.chunks;
  }
}

export function concatChunks(
  chunks: readonly Uint8Array[],
  length?: number,
  into?: (length: number) => Uint8Array,
): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const total = length ?? chunks.reduce((n, c) => n + c.length, 0);
  const out = into ? into(total) : new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** A str value in its minimal format. */
export function encodeStr(s: string): Uint8Array {
  const body = textEncoder.encode(s);
  const n = body.length;
  const head = n < 32 ? 1 : n <= 0xff ? 2 : n <= 0xffff ? 3 : 5;
  const out = new Uint8Array(head + n);
  if (head === 1) out[0] = 0xa0 | n;
  else if (head === 2) {
    out[0] = 0xd9;
    out[1] = n;
  } else if (head === 3) {
    out[0] = 0xda;
    out[1] = n >> 8;
    out[2] = n & 0xff;
  } else {
    out[0] = 0xdb;
    new DataView(out.buffer).setUint32(1, n);
  }
  out.set(body, head);
  return out;
}

/** An int in its minimal format (exact for |v| ≤ 2^53). */
export function encodeInt(v: number): Uint8Array {
  if (!Number.isSafeInteger(v)) throw new RangeError(`not a safe integer: ${v}`);
  if (v >= 0) {
    if (v < 0x80) return Uint8Array.of(v);
    if (v <= 0xff) return Uint8Array.of(0xcc, v);
    if (v <= 0xffff) return Uint8Array.of(0xcd, v >> 8, v & 0xff);
    const out = new Uint8Array(v <= 0xffffffff ? 5 : 9);
    const dv = new DataView(out.buffer);
    if (out.length === 5) {
      out[0] = 0xce;
      dv.setUint32(1, v);
    } else {
      out[0] = 0xcf;
      dv.setBigUint64(1, BigInt(v));
    }
    return out;
  }
  if (v >= -32) return Uint8Array.of(v & 0xff);
  if (v >= -128) return Uint8Array.of(0xd0, v & 0xff);
  const out = new Uint8Array(v >= -32768 ? 3 : v >= -2147483648 ? 5 : 9);
  const dv = new DataView(out.buffer);
  if (out.length === 3) {
    out[0] = 0xd1;
    dv.setInt16(1, v);
  } else if (out.length === 5) {
    out[0] = 0xd2;
    dv.setInt32(1, v);
  } else {
    out[0] = 0xd3;
    dv.setBigInt64(1, BigInt(v));
  }
  return out;
}

/** Format bytes of the fixed values (msgpack spec: nil, false, true). */
export const NIL_BYTE = 0xc0;
export const FALSE_BYTE = 0xc2;
export const TRUE_BYTE = 0xc3;

export const NIL = Uint8Array.of(NIL_BYTE);
export const EMPTY_ARRAY = Uint8Array.of(0x90);

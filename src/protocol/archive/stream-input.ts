// A streamed msgpack document as a sliding window (finished-deltas.ts and json-view.ts read an archived
// episode through it): stream offsets, the bytes from the earliest one still needed held in one buffer,
// and complete values found by a resumable scan, then validated by the wire Reader.

import { MAX_DEPTH } from "../limits/limits.js";
import { WireError } from "../wire/errors.js";
import { Reader } from "../wire/reader.js";

/** The archive cannot be read back: truncated, not canonical msgpack, or not a finished episode. */
export class ArchiveError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ArchiveError";
  }
}

/** What the reading took (tests check the memory bound with it). */
export interface FinishedDeltaStats {
  /** Most input bytes held at once (what the buffer kept plus the chunk just added). */
  peakHeld: number;
  /** Chunks pulled from the input. */
  pulls: number;
}

export interface Span {
  start: number;
  end: number;
}

/** The input as a sliding window: stream offsets, the bytes from `keep` on held in one buffer. */
export class Input {
  private buf: Uint8Array = new Uint8Array(0);
  /** Whether `buf` is ours to write into (a chunk adopted as is stays the caller's). */
  private owned = false;
  /** Stream offset of buf[0]. */
  private base = 0;
  private len = 0;
  /** Stream offset of the next byte to parse. */
  pos = 0;
  /** Earliest stream offset the delta being built still needs (null: nothing before `pos`). */
  hold: number | null = null;
  done = false;

  constructor(
    readonly it: AsyncIterator<Uint8Array>,
    private readonly stats: FinishedDeltaStats,
  ) {}

  get end(): number {
    return this.base + this.len;
  }

  /** Pull one chunk; false at the end of the input. */
  async more(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    this.stats.pulls++;
    if (r.done) {
      this.done = true;
      return false;
    }
    const v: unknown = r.value;
    if (!ArrayBuffer.isView(v)) throw new ArchiveError("the episode stream must yield bytes (Uint8Array chunks)");
    this.add(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
    return true;
  }

  private add(chunk: Uint8Array): void {
    const keep = this.hold ?? this.pos;
    const held = this.end - keep;
    const need = held + chunk.length;
    if (held === 0) {
      // nothing held: read the chunk in place (a whole body arrives without a copy)
      this.buf = chunk;
      this.owned = false;
      this.base = keep;
      this.len = chunk.length;
    } else if (!this.owned || need > this.buf.length) {
      const next = new Uint8Array(Math.max(need, 2 * held, 256));
      next.set(this.buf.subarray(keep - this.base, this.len));
      next.set(chunk, held);
      this.buf = next;
      this.owned = true;
      this.base = keep;
      this.len = need;
    } else {
      if (keep - this.base + need > this.buf.length) {
        this.buf.copyWithin(0, keep - this.base, this.len);
        this.base = keep;
        this.len = held;
      }
      this.buf.set(chunk, this.len);
      this.len += chunk.length;
    }
    if (need > this.stats.peakHeld) this.stats.peakHeld = need;
  }

  /** Until `n` bytes from `pos` are held. */
  async ensure(n: number): Promise<void> {
    while (this.end - this.pos < n) if (!(await this.more())) throw this.truncated();
  }

  truncated(): ArchiveError {
    return new ArchiveError(`truncated: the episode ends inside a value (after ${this.end} bytes)`);
  }

  byte(at: number): number {
    return this.buf[at - this.base]!;
  }

  view(from: number, to: number): Uint8Array {
    return this.buf.subarray(from - this.base, to - this.base);
  }

  /** A Reader over the held bytes from stream offset `from` to `to`. */
  reader(from: number, to = this.end): Reader {
    return new Reader(this.buf, from - this.base, to - this.base);
  }

  /** Reader errors, their offsets made stream offsets. */
  wire(e: unknown): unknown {
    return e instanceof WireError
      ? new ArchiveError(`${e.message.replace(/ \(at byte \d+\)$/, "")} (at byte ${this.base + e.offset})`)
      : e;
  }

  /**
   * The next complete value, validated (canonical msgpack, UTF-8, depth) by the Reader. Its end is
   * found first by a scan that resumes where it stopped when more input arrives: no byte is
   * scanned twice however small the chunks, and nothing past the value is asked for.
   */
  async value(): Promise<Span> {
    const start = this.pos;
    let at = start;
    const open: number[] = []; // values still to come in each enclosing container
    for (;;) {
      if (this.end - at < 1) {
        if (!(await this.more())) throw this.truncated();
        continue;
      }
      const t = this.byte(at);
      let head = 1;
      let body = 0;
      let count = 0;
      if (t < 0x80 || t >= 0xe0 || t === 0xc0 || t === 0xc2 || t === 0xc3) {
        // one byte
      } else if (t <= 0x8f) count = (t & 0x0f) * 2;
      else if (t <= 0x9f) count = t & 0x0f;
      else if (t <= 0xbf) body = t & 0x1f;
      else {
        const f = FORMATS[t - 0xc0]!;
        if (f === 0) throw new ArchiveError(`not a value of this wire: byte 0x${t.toString(16)} (at byte ${at})`);
        head = f & 0x0f;
        const kind = f >> 4; // 0 fixed size, 1 str/bin length, 2 array count, 3 map count
        if (kind !== 0) {
          if (this.end - at < head) {
            if (!(await this.more())) throw this.truncated();
            continue;
          }
          const n =
            head === 2
              ? this.byte(at + 1)
              : head === 3
                ? (this.byte(at + 1) << 8) | this.byte(at + 2)
                : lengthAt(this, at + 1);
          if (kind === 1) body = n;
          else count = kind === 3 ? n * 2 : n;
        }
      }
      if (this.end - at < head + body) {
        if (!(await this.more())) throw this.truncated();
        continue;
      }
      at += head + body;
      if (count > 0) {
        if (open.length >= MAX_DEPTH) throw new ArchiveError(`nesting deeper than ${MAX_DEPTH} (at byte ${at})`);
        open.push(count);
        continue;
      }
      for (;;) {
        if (open.length === 0) {
          try {
            this.reader(start, at).span();
          } catch (e) {
            throw this.wire(e);
          }
          this.pos = at;
          return { start, end: at };
        }
        if (--open[open.length - 1]! > 0) break;
        open.pop();
      }
    }
  }

  /** A str key; its text. */
  async key(what: string): Promise<string> {
    const { start } = await this.value();
    const s = this.reader(start).str();
    if (s === undefined) throw new ArchiveError(`${what} keys must be str (at byte ${start})`);
    return s;
  }

  /** A map or array header; its entry count. */
  async header(kind: "map" | "array", what: string): Promise<number> {
    await this.ensure(1);
    const t = this.byte(this.pos);
    const head =
      kind === "map"
        ? (t & 0xf0) === 0x80
          ? 1
          : t === 0xde
            ? 3
            : t === 0xdf
              ? 5
              : 0
        : (t & 0xf0) === 0x90
          ? 1
          : t === 0xdc
            ? 3
            : t === 0xdd
              ? 5
              : 0;
    if (head === 0) throw new ArchiveError(`${what} must be a msgpack ${kind} (at byte ${this.pos})`);
    await this.ensure(head);
    let n: number;
    try {
      const r = this.reader(this.pos);
      n = kind === "map" ? r.mapHeader() : r.arrayHeader();
    } catch (e) {
      throw this.wire(e);
    }
    this.pos += head;
    return n;
  }
}

/** Per format byte 0xc0..0xdf: (kind << 4) | header bytes; 0 = not on this wire (0xc1, ext, float32). */
const FORMATS = [
  0x01, 0, 0x01, 0x01, 0x12, 0x13, 0x15, 0, 0, 0, 0, 0x09, 0x02, 0x03, 0x05, 0x09, 0x02, 0x03, 0x05, 0x09, 0, 0, 0, 0,
  0, 0x12, 0x13, 0x15, 0x23, 0x25, 0x33, 0x35,
];

function lengthAt(input: Input, at: number): number {
  return input.byte(at) * 0x1000000 + ((input.byte(at + 1) << 16) | (input.byte(at + 2) << 8) | input.byte(at + 3));
}

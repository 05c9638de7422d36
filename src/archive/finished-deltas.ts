// A finished episode archived as its msgpack bytes (render.ts writeFinished) back into upstream
// deltas, for a watcher that joins once the SQLite bodies are gone. Per trace: `open` (the entries
// before the lists) and items first, more items, then `set` (the entries after the lists) and
// `pending: []`. Every key and value is copied as its span, so a fresh EpisodeAssembly that applies
// them and finishes with the reply returns the archived bytes exactly.
//
// Parsed as the bytes stream in: the buffer keeps only the input from the start of the delta being
// built (with the trace's header for its first one), so memory is about one delta (`budget`), one
// item (never split) and one input chunk. Set entries count as items: a large `set` spreads over
// deltas (new keys append in order, same result).
//
// Only the layout the assembly writes is accepted (header, the seven lists in order, scalars, no
// `pending`): an `open` holding a list key would give another, which one pass cannot rebuild.

import { LIST_FIELDS, isListField } from "../assembly/fields.js";
import { headerSize } from "../assembly/render.js";
import { DELTA_BYTES } from "../assembly/snapshot.js";
import { WireError } from "../wire/errors.js";
import { MAX_DEPTH, Reader } from "../wire/reader.js";
import { encodeStr } from "../wire/writer.js";

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

export interface FinishedDeltasOptions {
  /**
   * The trace ids the assembly keyed the traces by, in the episode's order (the reply's
   * summaries). Default: each trace map's `id`, which is the delta's `trace` whenever the producer
   * opened it with `open.id` equal to `trace` (the relay does not check that).
   */
  traceIds?: readonly string[];
  stats?: FinishedDeltaStats;
}

const KEY = {
  trace: encodeStr("trace"),
  open: encodeStr("open"),
  set: encodeStr("set"),
  pending: encodeStr("pending"),
};
const LIST_KEYS = LIST_FIELDS.map((f) => encodeStr(f));
/** `pending: []`, reserved in every delta so that the last one stays within the budget too. */
const PENDING_TAIL = KEY.pending.length + 1;

/** The upstream deltas that rebuild a finished episode's traces, read from its msgpack bytes as they stream in. */
export async function* finishedDeltas(
  chunks: AsyncIterable<Uint8Array>,
  budget = DELTA_BYTES,
  options: FinishedDeltasOptions = {},
): AsyncGenerator<Uint8Array> {
  if (!(budget > 0)) throw new RangeError(`budget must be a positive number of bytes, not ${budget}`);
  const input = new Input(chunks[Symbol.asyncIterator](), options.stats ?? { peakHeld: 0, pulls: 0 });
  try {
    yield* new Walker(input, budget, options.traceIds).episode();
  } finally {
    // an R2 body left half read is cancelled, not leaked; its own failure must not hide ours
    if (!input.done) await Promise.resolve(input.it.return?.()).catch(() => undefined);
  }
}

interface Span {
  start: number;
  end: number;
}

/** The input as a sliding window: stream offsets, the bytes from `keep` on held in one buffer. */
class Input {
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
    const live = this.end - keep;
    const need = live + chunk.length;
    if (live === 0) {
      // nothing held: read the chunk in place (a whole body arrives without a copy)
      this.buf = chunk;
      this.owned = false;
      this.base = keep;
      this.len = chunk.length;
    } else if (!this.owned || need > this.buf.length) {
      const next = new Uint8Array(Math.max(need, 2 * live, 256));
      next.set(this.buf.subarray(keep - this.base, this.len));
      next.set(chunk, live);
      this.buf = next;
      this.owned = true;
      this.base = keep;
      this.len = need;
    } else {
      if (keep - this.base + need > this.buf.length) {
        this.buf.copyWithin(0, keep - this.base, this.len);
        this.base = keep;
        this.len = live;
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
    return e instanceof WireError ? new ArchiveError(`${e.message.replace(/ \(at byte \d+\)$/, "")} (at byte ${this.base + e.offset})`) : e;
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
          const n = head === 2 ? this.byte(at + 1) : head === 3 ? (this.byte(at + 1) << 8) | this.byte(at + 2) : lengthAt(this, at + 1);
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
      kind === "map" ? ((t & 0xf0) === 0x80 ? 1 : t === 0xde ? 3 : t === 0xdf ? 5 : 0) : (t & 0xf0) === 0x90 ? 1 : t === 0xdc ? 3 : t === 0xdd ? 5 : 0;
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
  0x01, 0, 0x01, 0x01, 0x12, 0x13, 0x15, 0, 0, 0, 0, 0x09, 0x02, 0x03, 0x05, 0x09, 0x02, 0x03, 0x05, 0x09, 0, 0, 0, 0, 0, 0x12, 0x13, 0x15, 0x23, 0x25, 0x33,
  0x35,
];

function lengthAt(input: Input, at: number): number {
  return input.byte(at) * 0x1000000 + ((input.byte(at + 1) << 16) | (input.byte(at + 2) << 8) | input.byte(at + 3));
}

/** One run of units of a field inside a delta: list items, or set entries (key and value). */
interface Group {
  key: Uint8Array;
  map: boolean;
  start: number;
  end: number;
  count: number;
}

class Walker {
  private id: Uint8Array = new Uint8Array(0);
  /** The trace's header entries while its first delta is not out yet. */
  private open: (Span & { count: number }) | null = null;
  private groups: Group[] = [];
  /** Exact size of the delta being built, without `pending`. */
  private size = 0;
  /** False while a trace named earlier again is read (it is the same trace; only checked). */
  private emitting = true;
  /** Whether the trace's last delta (with `pending`) is out. */
  private closed = false;

  constructor(
    private readonly input: Input,
    private readonly budget: number,
    private readonly traceIds: readonly string[] | undefined,
  ) {}

  async *episode(): AsyncGenerator<Uint8Array> {
    const input = this.input;
    const n = await input.header("map", "the episode");
    let traces = false;
    for (let i = 0; i < n; i++) {
      const key = await input.key("episode");
      if (key === "traces" && !traces) {
        traces = true;
        yield* this.traces();
      } else await input.value(); // a head entry (or a repeated `traces`: the same traces again)
    }
    if (!traces) throw new ArchiveError("not a finished episode: no `traces` key");
    while (input.end === input.pos && (await input.more()));
    if (input.end > input.pos) throw new ArchiveError(`trailing bytes after the episode (at byte ${input.pos})`);
  }

  private async *traces(): AsyncGenerator<Uint8Array> {
    const n = await this.input.header("array", "traces");
    if (this.traceIds && this.traceIds.length !== n) {
      throw new ArchiveError(`the episode holds ${n} trace(s), ${this.traceIds.length} trace id(s) given`);
    }
    const seen = new Set<string>();
    for (let i = 0; i < n; i++) yield* this.trace(i, seen);
  }

  private async *trace(index: number, seen: Set<string>): AsyncGenerator<Uint8Array> {
    const input = this.input;
    const n = await input.header("map", `traces[${index}]`);
    const where = `traces[${index}]`;
    const openStart = input.pos;
    input.hold = openStart;
    let openCount = 0;
    let idText: string | undefined;
    let list = 0; // lists read so far
    for (let i = 0; i < n; i++) {
      const keyStart = input.pos;
      const key = await input.key(where);
      const last = i === n - 1;
      if (list === 0 && !isListField(key)) {
        if (key === "pending") throw new ArchiveError(`${where} holds \`pending\`: not a finished episode`);
        const v = await input.value();
        if (key === "id") idText = input.reader(v.start, v.end).str();
        openCount++;
        continue;
      }
      if (list === 0) this.begin(where, index, idText, { start: openStart, end: keyStart, count: openCount }, seen);
      if (list < LIST_FIELDS.length) {
        if (key !== LIST_FIELDS[list]) {
          throw new ArchiveError(`${where}: \`${key}\` where the assembly writes \`${LIST_FIELDS[list]}\` (at byte ${keyStart})`);
        }
        const count = await input.header("array", `${where}.${key}`);
        for (let j = 0; j < count; j++) yield* this.unit(LIST_KEYS[list]!, false, await input.value(), last && j === count - 1);
        list++;
        continue;
      }
      if (isListField(key) || key === "pending") throw new ArchiveError(`${where}: \`${key}\` after the lists (at byte ${keyStart})`);
      // a set entry is its key and value: keep the key while the value comes in
      const held: number | null = input.hold;
      input.hold ??= keyStart;
      const v = await input.value();
      input.hold = held;
      yield* this.unit(KEY.set, true, { start: keyStart, end: v.end }, last);
    }
    if (list < LIST_FIELDS.length) throw new ArchiveError(`${where}: no \`${LIST_FIELDS[list]}\` list: not a finished episode`);
    // the closing delta, unless the last unit closed the trace already
    if (this.emitting && !this.closed) yield this.emit(true);
    input.hold = null;
  }

  private begin(where: string, index: number, idText: string | undefined, open: Span & { count: number }, seen: Set<string>): void {
    const id = this.traceIds ? this.traceIds[index]! : idText;
    if (id === undefined) throw new ArchiveError(`${where} has no str \`id\` before its lists`);
    this.emitting = !seen.has(id);
    seen.add(id);
    this.id = encodeStr(id);
    this.open = this.emitting ? open : null;
    this.groups = [];
    this.closed = false;
    this.size = this.baseSize();
    if (!this.emitting) this.input.hold = null;
  }

  private baseSize(): number {
    const open = this.open;
    return 1 + KEY.trace.length + this.id.length + (open ? KEY.open.length + headerSize(open.count) + open.end - open.start : 0);
  }

  /** Add one item or set entry; out go the deltas it completes. */
  private *unit(key: Uint8Array, map: boolean, span: Span, last: boolean): Generator<Uint8Array> {
    if (!this.emitting) return;
    const len = span.end - span.start;
    const grow = (): number => {
      const g = this.groups.at(-1);
      return g?.key === key ? headerSize(g.count + 1) - headerSize(g.count) + len : key.length + headerSize(1) + len;
    };
    let add = grow();
    if (this.groups.length > 0 && this.size + add + PENDING_TAIL > this.budget) {
      yield this.emit(false);
      add = grow();
    }
    const g = this.groups.at(-1);
    if (g?.key === key) {
      g.count++;
      g.end = span.end;
    } else {
      if (!this.open && this.groups.length === 0) this.input.hold = span.start;
      this.groups.push({ key, map, start: span.start, end: span.end, count: 1 });
    }
    this.size += add;
    // out at once when nothing more fits: the buffer never holds a full delta and the next item
    if (last || this.size + PENDING_TAIL >= this.budget) yield this.emit(last);
  }

  /** The delta built so far, copied out of the buffer; the next one starts empty. */
  private emit(pending: boolean): Uint8Array {
    const input = this.input;
    const open = this.open;
    const size = this.size + (pending ? PENDING_TAIL : 0);
    const out = new Uint8Array(size);
    let at = 0;
    const put = (b: Uint8Array) => {
      out.set(b, at);
      at += b.length;
    };
    const head = (n: number, map: boolean) => {
      if (n <= 15) out[at++] = (map ? 0x80 : 0x90) | n;
      else if (n <= 0xffff) {
        out[at++] = map ? 0xde : 0xdc;
        out[at++] = n >> 8;
        out[at++] = n & 0xff;
      } else {
        out[at++] = map ? 0xdf : 0xdd;
        new DataView(out.buffer).setUint32(at, n);
        at += 4;
      }
    };
    head(1 + (open ? 1 : 0) + this.groups.length + (pending ? 1 : 0), true);
    put(KEY.trace);
    put(this.id);
    if (open) {
      put(KEY.open);
      head(open.count, true);
      put(input.view(open.start, open.end));
    }
    for (const g of this.groups) {
      put(g.key);
      head(g.count, g.map);
      put(input.view(g.start, g.end));
    }
    if (pending) {
      put(KEY.pending);
      out[at++] = 0x90;
    }
    if (at !== size) throw new Error(`finished-deltas: wrote ${at} bytes of a ${size}-byte delta`);
    this.open = null;
    this.groups = [];
    this.size = this.baseSize();
    this.closed = pending;
    input.hold = null;
    return out;
  }
}

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
// `pending`): an `open` holding a list key would give another, which one pass cannot rebuild. A
// non-empty array right after the lists under a name that is no known scalar is a list the relay did
// not know (trace.ts `extend` puts them there): it goes out under its own key, item by item, as it
// came in, so a watcher names it as the producer's ack did (the bytes are the same either way).

import { isListField, isScalarField, LIST_FIELDS } from "../assembly/fields.js";
import { headerSize } from "../assembly/render.js";
import { DELTA_BYTES } from "../assembly/snapshot.js";
import { encodeStr } from "../wire/writer.js";
import { ArchiveError, type FinishedDeltaStats, Input, type Span } from "./stream-input.js";

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
    let extras = true; // still right after the lists, where unknown lists sit
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
          throw new ArchiveError(
            `${where}: \`${key}\` where the assembly writes \`${LIST_FIELDS[list]}\` (at byte ${keyStart})`,
          );
        }
        const count = await input.header("array", `${where}.${key}`);
        for (let j = 0; j < count; j++)
          yield* this.unit(LIST_KEYS[list]!, false, await input.value(), last && j === count - 1);
        list++;
        continue;
      }
      if (isListField(key) || key === "pending")
        throw new ArchiveError(`${where}: \`${key}\` after the lists (at byte ${keyStart})`);
      if (extras && !isScalarField(key)) {
        const held: number | null = input.hold;
        input.hold ??= keyStart; // the key stays in the buffer while the value's first byte comes in
        const isList = await this.nonEmptyArray();
        const keySpan = input.view(keyStart, input.pos).slice(); // its own bytes: the buffer moves on
        input.hold = held;
        if (isList) {
          const count = await input.header("array", `${where}.${key}`);
          for (let j = 0; j < count; j++)
            yield* this.unit(keySpan, false, await input.value(), last && j === count - 1);
          continue;
        }
      }
      extras = false;
      // a set entry is its key and value: keep the key while the value comes in
      const held: number | null = input.hold;
      input.hold ??= keyStart;
      const v = await input.value();
      input.hold = held;
      yield* this.unit(KEY.set, true, { start: keyStart, end: v.end }, last);
    }
    if (list < LIST_FIELDS.length)
      throw new ArchiveError(`${where}: no \`${LIST_FIELDS[list]}\` list: not a finished episode`);
    // the closing delta, unless the last unit closed the trace already
    if (this.emitting && !this.closed) yield this.emit(true);
    input.hold = null;
  }

  /** Whether the value at the input is an array with items (headers are minimal: fixarray, array 16, array 32). */
  private async nonEmptyArray(): Promise<boolean> {
    await this.input.ensure(1);
    const b = this.input.byte(this.input.pos);
    return (b > 0x90 && b <= 0x9f) || b === 0xdc || b === 0xdd;
  }

  private begin(
    where: string,
    index: number,
    idText: string | undefined,
    open: Span & { count: number },
    seen: Set<string>,
  ): void {
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
    return (
      1 +
      KEY.trace.length +
      this.id.length +
      (open ? KEY.open.length + headerSize(open.count) + open.end - open.start : 0)
    );
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

// Writing the assembled state out: the current traces (the reference's checkpoint form), the
// finished episode (`{**head, traces}`), in msgpack or in the JSON view, from a captured view of
// the index and its Bodies.
//
// The writers are generators: they write into an Out and yield every STEP or so of output, so a
// caller can stream an episode of any size (the relay reads the bodies from SQLite range by range,
// in bounded memory), or drain them at once (clients, in memory). The sizes of the msgpack forms
// are computed from the index alone, without writing (Content-Length, status).

import { jsonText } from "../wire/json-view.js";
import { decodeLossless } from "../wire/lossless.js";
import { decodeStrSpan } from "../wire/utf8.js";
import { ChunkWriter, encodeStr } from "../wire/writer.js";
import type { BodyReader } from "./bodies.js";
import type { Entry } from "./delta.js";
import { ITEM_FIELDS, type ItemField, type ListField } from "./fields.js";
import { encodeNode, type NodeInfo, type NodeState, writeNode } from "./node.js";
import type { ListSize, Slot, TraceState } from "./trace.js";

/** Output between two yields of a writer, about. */
export const STEP = 1 << 20;
/** Items read from the Bodies at a time (items are small; nodes go by their byte size). */
const ITEM_BATCH = 256;

/** A trace as it stood when captured: what the writers need, immutable. */
export interface TraceView {
  readonly id: string;
  readonly tnum: number;
  readonly slots: readonly Slot[];
  readonly pending: Uint8Array;
  readonly nodes: readonly NodeInfo[];
  readonly items: Readonly<Record<ItemField, ListSize>>;
}

export function viewOf(t: TraceState): TraceView {
  const items = {} as Record<ItemField, ListSize>;
  for (const f of ITEM_FIELDS) items[f] = { ...t.items[f] };
  return { id: t.id, tnum: t.tnum, slots: [...t.fields.values()], pending: t.pending, nodes: t.nodes.slice(), items };
}

export function countOf(v: TraceView, field: ListField): number {
  return field === "nodes" ? v.nodes.length : v.items[field].count;
}

// ---- outputs ----

/** Where a writer writes: a msgpack document or its JSON view. */
export interface Out {
  map(n: number): void;
  array(n: number): void;
  /** Closes the innermost map or array (msgpack needs no marker; JSON does). */
  end(): void;
  /** An encoded str map key. */
  key(span: Uint8Array): void;
  /** An encoded value. */
  value(span: Uint8Array): void;
  /** A node, parsed or encoded. */
  node(n: NodeState | Uint8Array): void;
  /** Output written since the last `take`, about (bytes). */
  readonly pending: number;
  /** The output written since the last `take`. */
  take(): Uint8Array[];
}

export class MsgpackOut implements Out {
  private w = new ChunkWriter();
  map(n: number): void {
    this.w.mapHeader(n);
  }
  array(n: number): void {
    this.w.arrayHeader(n);
  }
  end(): void {}
  key(span: Uint8Array): void {
    this.w.raw(span);
  }
  value(span: Uint8Array): void {
    this.w.raw(span);
  }
  node(n: NodeState | Uint8Array): void {
    if (n instanceof Uint8Array) this.w.raw(n);
    else writeNode(this.w, n);
  }
  /** Raw msgpack (headers and values the caller built). */
  get writer(): ChunkWriter {
    return this.w;
  }
  get pending(): number {
    return this.w.length;
  }
  take(): Uint8Array[] {
    const chunks = this.w.finish();
    this.w = new ChunkWriter();
    return chunks;
  }
}

const utf8 = new TextEncoder();

/** The JSON view (src/protocol/wire/json-view.ts), written value by value. */
export class JsonOut implements Out {
  private parts: string[] = [];
  private size = 0;
  /** Per open container: its kind, items written so far, whether a key awaits its value. */
  private readonly stack: Array<{ map: boolean; n: number; keyed: boolean }> = [];

  private put(s: string): void {
    this.parts.push(s);
    this.size += s.length;
  }
  /** The comma before a new item of the innermost container (none for a map's value). */
  private item(): void {
    const top = this.stack.at(-1);
    if (!top) return;
    if (top.keyed) {
      top.keyed = false;
      return;
    }
    if (top.n++ > 0) this.put(",");
  }
  map(): void {
    this.item();
    this.put("{");
    this.stack.push({ map: true, n: 0, keyed: false });
  }
  array(): void {
    this.item();
    this.put("[");
    this.stack.push({ map: false, n: 0, keyed: false });
  }
  end(): void {
    this.put(this.stack.pop()!.map ? "}" : "]");
  }
  key(span: Uint8Array): void {
    this.item();
    this.put(`${JSON.stringify(decodeStrSpan(span))}:`);
    this.stack.at(-1)!.keyed = true;
  }
  value(span: Uint8Array): void {
    this.item();
    this.put(jsonText(decodeLossless(span)));
  }
  node(n: NodeState | Uint8Array): void {
    this.value(n instanceof Uint8Array ? n : encodeNode(n));
  }
  get pending(): number {
    return this.size;
  }
  take(): Uint8Array[] {
    const out = utf8.encode(this.parts.join(""));
    this.parts = [];
    this.size = 0;
    return [out];
  }
}

// ---- writers ----

function* writeList(out: Out, reader: BodyReader, v: TraceView, field: ListField): Generator<void> {
  const count = countOf(v, field);
  out.array(count);
  if (field === "nodes") {
    for (let from = 0; from < count; ) {
      let to = from + 1;
      for (let bytes = v.nodes[from]!.bytes; to < count && bytes + v.nodes[to]!.bytes <= STEP; to++)
        bytes += v.nodes[to]!.bytes;
      for (const n of reader.nodes(v.tnum, from, to)) out.node(n);
      from = to;
      if (out.pending >= STEP) yield;
    }
  } else {
    for (let from = 0; from < count; from += ITEM_BATCH) {
      for (const item of reader.items(v.tnum, field, from, Math.min(count, from + ITEM_BATCH))) out.value(item);
      if (out.pending >= STEP) yield;
    }
  }
  out.end();
}

function* writeTrace(out: Out, reader: BodyReader, v: TraceView, withPending: boolean): Generator<void> {
  out.map(v.slots.length - (withPending ? 0 : 1));
  for (const slot of v.slots) {
    if (slot.from === "pending") {
      if (!withPending) continue;
      out.key(slot.key);
      out.value(v.pending);
    } else if (slot.from === "list") {
      out.key(slot.key);
      yield* writeList(out, reader, v, slot.list);
    } else {
      out.key(slot.key);
      out.value(slot.value);
    }
  }
  out.end();
}

/** The current traces, in arrival order, each with its `pending`: the reference's checkpoint form. */
export function* writeCheckpoint(out: Out, reader: BodyReader, views: readonly TraceView[]): Generator<void> {
  out.array(views.length);
  for (const v of views) yield* writeTrace(out, reader, v, true);
  out.end();
}

const TRACES_KEY = encodeStr("traces");

/** `{**head, "traces": [...]}`, the traces without `pending`: what `EpisodeAssembly.finish` returns. */
export function* writeFinished(
  out: Out,
  reader: BodyReader,
  head: readonly Entry[],
  views: readonly TraceView[],
): Generator<void> {
  const hasTraces = head.some((e) => e.key === "traces");
  out.map(head.length + (hasTraces ? 0 : 1));
  const traces = function* () {
    out.array(views.length);
    for (const v of views) yield* writeTrace(out, reader, v, false);
    out.end();
  };
  for (const e of head) {
    out.key(e.keySpan);
    if (e.key === "traces") yield* traces();
    else out.value(e.value);
  }
  if (!hasTraces) {
    out.key(TRACES_KEY);
    yield* traces();
  }
  out.end();
}

/** Run a writer to its end; its whole output. */
export function drain(out: Out, writer: Generator<void>): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  for (const _ of writer) chunks.push(...out.take());
  chunks.push(...out.take());
  return chunks;
}

// ---- sizes (msgpack), from the index alone ----

/** Bytes of a map or array header for `n` entries. */
export function headerSize(n: number): number {
  return n <= 15 ? 1 : n <= 0xffff ? 3 : 5;
}

export function traceSize(v: TraceView, withPending: boolean): number {
  let size = headerSize(v.slots.length - (withPending ? 0 : 1));
  for (const slot of v.slots) {
    if (slot.from === "pending") {
      if (withPending) size += slot.key.length + v.pending.length;
    } else if (slot.from === "list") {
      const count = countOf(v, slot.list);
      size += slot.key.length + headerSize(count);
      if (slot.list === "nodes") for (const n of v.nodes) size += n.bytes;
      else size += v.items[slot.list].bytes;
    } else size += slot.key.length + slot.value.length;
  }
  return size;
}

export function checkpointSize(views: readonly TraceView[]): number {
  return views.reduce((n, v) => n + traceSize(v, true), headerSize(views.length));
}

export function finishedSize(head: readonly Entry[], views: readonly TraceView[]): number {
  const hasTraces = head.some((e) => e.key === "traces");
  const traces = views.reduce((n, v) => n + traceSize(v, false), headerSize(views.length));
  let size = headerSize(head.length + (hasTraces ? 0 : 1));
  for (const e of head) size += e.keySpan.length + (e.key === "traces" ? traces : e.value.length);
  if (!hasTraces) size += TRACES_KEY.length + traces;
  return size;
}

// The episode's assembled state in the Durable Object's SQLite: the EpisodeStore the relay's
// assembly writes through (src/assembly/store.ts), so the object keeps only the index in memory.
//
// Tables (created by `createStateTables`):
// - `traces`: one row per trace incarnation (tnum): id, arrival order, list sizes; `dropped` is
//   set when a discarded trace must outlive its discard for a reader (see pins).
// - `fields`: its open and set fields (key order by `pos`), values as received, in parts.
// - `pending`: its pending preview, in parts.
// - `node_meta`: per node the NodeInfo (bytes, parents, routing dtype/shape, version).
// - `bodies`: node and item bytes, keyed (tnum, kind, idx, ver, part): kind 0 is nodes, 1..6 the
//   item lists; a body over PART_BYTES is split into parts (SQLite rows stay far below 2 MB);
//   `ver` is the seq of the frame that wrote it (items are written once; nodes are rewritten by
//   links and repairs).
// - `stale`: versions and dropped traces kept for readers, to delete once no reader needs them.
//
// Readers (a GET streamed over several turns, a watcher's catch-up) read the state as of a seq
// while ingest goes on: they `pin` that seq, capture the index (which is small) and read bodies
// as of it. A node rewritten after a pinned seq keeps its old version until the reader is done;
// every other write just replaces. A restart forgets every reader: what `stale` lists goes then.

import type { Entry } from "../assembly/delta.js";
import { ITEM_FIELDS, type ItemField } from "../assembly/fields.js";
import { encodeNode, readNode, type NodeInfo, type NodeState } from "../assembly/node.js";
import type { BodyReader, EpisodeStore } from "../assembly/store.js";
import { TraceState, type ListSize } from "../assembly/trace.js";
import { decodeStrSpan, Reader } from "../wire/reader.js";
import { concatChunks } from "../wire/writer.js";

/** Largest part of a body or frame row. */
export const PART_BYTES = 1 << 20;

const NODES = 0;
const KIND: Record<ItemField, number> = Object.fromEntries(ITEM_FIELDS.map((f, i) => [f, i + 1])) as Record<ItemField, number>;

export function createStateTables(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS traces (tnum INTEGER PRIMARY KEY, id TEXT NOT NULL, ord INTEGER NOT NULL,
    lists TEXT NOT NULL, dropped INTEGER)`);
  sql.exec(`CREATE TABLE IF NOT EXISTS fields (tnum INTEGER NOT NULL, name TEXT NOT NULL, part INTEGER NOT NULL,
    pos INTEGER NOT NULL, src INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tnum, name, part))`);
  sql.exec("CREATE TABLE IF NOT EXISTS pending (tnum INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (tnum, part))");
  sql.exec(`CREATE TABLE IF NOT EXISTS node_meta (tnum INTEGER NOT NULL, idx INTEGER NOT NULL, bytes INTEGER NOT NULL,
    parents INTEGER NOT NULL, dtype TEXT, shape TEXT, ver INTEGER NOT NULL, PRIMARY KEY (tnum, idx))`);
  sql.exec(`CREATE TABLE IF NOT EXISTS bodies (tnum INTEGER NOT NULL, kind INTEGER NOT NULL, idx INTEGER NOT NULL,
    ver INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL)`);
  sql.exec("CREATE UNIQUE INDEX IF NOT EXISTS bodies_key ON bodies (tnum, kind, idx, ver, part)");
  sql.exec(`CREATE TABLE IF NOT EXISTS stale (tnum INTEGER NOT NULL, idx INTEGER NOT NULL, ver INTEGER NOT NULL,
    until INTEGER NOT NULL)`);
}

/** A reader's hold on the state as of `asOf`; `release` when done (idempotent). */
export interface Pin {
  readonly asOf: number;
  release(): void;
}

type Row = Record<string, SqlStorageValue>;

export class SqlStore implements EpisodeStore {
  private readonly pins = new Set<{ asOf: number }>();
  /** Arrival order of the next new trace. */
  private nextOrd = 1;
  /** Whether the tables exist (a watcher may pin an episode nobody has written yet). */
  private tables = false;

  private hasTables(): boolean {
    this.tables ||= this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stale'").toArray().length > 0;
    return this.tables;
  }

  constructor(private readonly sql: SqlStorage) {}

  // ---- the index, as stored ----

  /** After a restart no reader is left: delete what `stale` kept for the readers before it. */
  afterRestart(): void {
    this.collect(true);
  }

  /** The stored traces in arrival order (the index the object keeps in memory), and the lowest trace number not used yet. */
  load(): { traces: TraceState[]; nextTnum: number } {
    const traces = new Map<number, TraceState>();
    const rows = this.sql.exec<Row>("SELECT tnum, id, lists FROM traces WHERE dropped IS NULL ORDER BY ord").toArray();
    // fields in key order, each reassembled from its parts
    const fields = new Map<number, Array<{ src: number; entry: Entry }>>();
    let last: { tnum: number; name: string; src: number; key: Uint8Array; parts: Uint8Array[] } | null = null;
    const flush = () => {
      if (!last) return;
      const list = fields.get(last.tnum) ?? [];
      list.push({ src: last.src, entry: { key: decodeStrSpan(last.key), keySpan: last.key, value: concatChunks(last.parts) } });
      fields.set(last.tnum, list);
    };
    for (const f of this.sql.exec<Row>("SELECT tnum, name, src, key, value FROM fields ORDER BY tnum, pos, part")) {
      if (!last || last.tnum !== f.tnum || last.name !== f.name) {
        flush();
        last = { tnum: f.tnum as number, name: f.name as string, src: f.src as number, key: bytes(f.key), parts: [] };
      }
      last.parts.push(bytes(f.value));
    }
    flush();
    const pending = new Map<number, Uint8Array[]>();
    for (const p of this.sql.exec<Row>("SELECT tnum, data FROM pending ORDER BY tnum, part")) {
      const list = pending.get(p.tnum as number) ?? [];
      list.push(bytes(p.data));
      pending.set(p.tnum as number, list);
    }
    for (const r of rows) {
      const tnum = r.tnum as number;
      const entries = (src: number) => (fields.get(tnum) ?? []).filter((f) => f.src === src).map((f) => f.entry);
      const t = new TraceState(r.id as string, tnum, entries(0));
      t.set(entries(1));
      t.pending = concatChunks(pending.get(tnum) ?? []);
      const lists = JSON.parse(r.lists as string) as Record<ItemField, ListSize>;
      for (const f of ITEM_FIELDS) if (lists[f]) t.items[f] = lists[f];
      traces.set(tnum, t);
    }
    for (const n of this.sql.exec<Row>("SELECT tnum, idx, bytes, parents, dtype, shape, ver FROM node_meta ORDER BY tnum, idx")) {
      const t = traces.get(n.tnum as number);
      if (!t) continue;
      t.nodes[n.idx as number] = {
        bytes: n.bytes as number,
        parents: n.parents as number,
        routed: n.dtype === null ? null : { dtype: n.dtype as string, shape: JSON.parse(n.shape as string) as number[] },
        ver: n.ver as number,
      };
    }
    const max = this.sql.exec<{ t: number | null; o: number | null }>("SELECT MAX(tnum) AS t, MAX(ord) AS o FROM traces").one();
    this.nextOrd = (max.o ?? 0) + 1;
    return { traces: [...traces.values()], nextTnum: (max.t ?? 0) + 1 };
  }

  // ---- readers ----

  /** Hold the state as of `asOf` for a reader (node versions and discarded traces it may read stay). */
  pin(asOf: number): Pin {
    const p = { asOf };
    this.pins.add(p);
    let released = false;
    return {
      asOf,
      release: () => {
        if (released) return;
        released = true;
        this.pins.delete(p);
        this.collect(false);
      },
    };
  }

  /** The oldest pinned seq, or null when no reader holds the state. */
  oldestPin(): number | null {
    let min: number | null = null;
    for (const p of this.pins) if (min === null || p.asOf < min) min = p.asOf;
    return min;
  }

  /** Whether a reader may still read what was current from `from` until (not including) `until`. */
  private needed(from: number, until: number): boolean {
    for (const p of this.pins) if (p.asOf >= from && p.asOf < until) return true;
    return false;
  }

  /** Delete kept versions and dropped traces no reader needs (all of them after a restart). */
  private collect(all: boolean): void {
    if (!this.hasTables()) return;
    const rows = this.sql.exec<{ tnum: number; idx: number; ver: number; until: number }>("SELECT tnum, idx, ver, until FROM stale").toArray();
    for (const s of rows) {
      if (!all && this.needed(s.ver, s.until)) continue;
      if (s.idx < 0) this.deleteTrace(s.tnum);
      else this.sql.exec("DELETE FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ?", s.tnum, s.idx, s.ver);
      this.sql.exec("DELETE FROM stale WHERE tnum = ? AND idx = ? AND ver = ?", s.tnum, s.idx, s.ver);
    }
  }

  /** Bodies as of `asOf` (a pinned seq), for the writers. */
  reader(asOf: number): BodyReader {
    return {
      nodes: (tnum, from, to) => this.readNodes(tnum, from, to, asOf),
      items: (tnum, field, from, to) => this.items(tnum, field, from, to),
    };
  }

  // ---- EpisodeStore: reads ----

  node(t: TraceState, index: number): NodeState {
    const ver = t.nodes[index]!.ver;
    const parts = this.sql.exec<{ data: ArrayBuffer }>(
      "SELECT data FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ? ORDER BY part", t.tnum, index, ver,
    ).toArray();
    const data = concatChunks(parts.map((p) => new Uint8Array(p.data)));
    // stored bodies were validated when they arrived
    return readNode(new Reader(data, 0, data.length, true), `nodes[${index}]`);
  }

  /** Current nodes [from, to): the newest version of each. */
  nodes(tnum: number, from: number, to: number): Uint8Array[] {
    return this.readNodes(tnum, from, to, Number.MAX_SAFE_INTEGER);
  }

  private readNodes(tnum: number, from: number, to: number, asOf: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    let idx = -1;
    let ver = -1;
    let parts: Uint8Array[] = [];
    const flush = () => {
      if (idx >= 0) out[idx - from] = concatChunks(parts);
    };
    for (const r of this.sql.exec<{ idx: number; ver: number; data: ArrayBuffer }>(
      "SELECT idx, ver, data FROM bodies WHERE tnum = ? AND kind = 0 AND idx >= ? AND idx < ? AND ver <= ? ORDER BY idx, ver, part",
      tnum, from, to, asOf,
    )) {
      if (r.idx !== idx || r.ver !== ver) {
        if (r.idx !== idx) flush();
        idx = r.idx;
        ver = r.ver;
        parts = [];
      }
      parts.push(new Uint8Array(r.data));
    }
    flush();
    return out;
  }

  items(tnum: number, field: ItemField, from: number, to: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    let idx = -1;
    let parts: Uint8Array[] = [];
    for (const r of this.sql.exec<{ idx: number; data: ArrayBuffer }>(
      "SELECT idx, data FROM bodies WHERE tnum = ? AND kind = ? AND idx >= ? AND idx < ? ORDER BY idx, part",
      tnum, KIND[field], from, to,
    )) {
      if (r.idx !== idx && idx >= 0) out.push(concatChunks(parts));
      if (r.idx !== idx) parts = [];
      idx = r.idx;
      parts.push(new Uint8Array(r.data));
    }
    if (idx >= 0) out.push(concatChunks(parts));
    return out;
  }

  // ---- EpisodeStore: the assembly's commit steps ----

  opened(t: TraceState): void {
    this.sql.exec("INSERT INTO traces (tnum, id, ord, lists, dropped) VALUES (?, ?, ?, ?, NULL)", t.tnum, t.id, this.nextOrd++, listsJson(t));
    this.fieldsSet(t, [...t.fields.keys()].filter((k) => t.fields.get(k)!.from === "open"));
    this.pendingSet(t);
  }

  dropped(t: TraceState): void {
    if (this.pins.size > 0) {
      // a reader that started before now may still read it: keep it, out of the index, until then
      this.sql.exec("UPDATE traces SET dropped = 1 WHERE tnum = ?", t.tnum);
      this.sql.exec("INSERT INTO stale VALUES (?, -1, 0, ?)", t.tnum, Number.MAX_SAFE_INTEGER);
    } else this.deleteTrace(t.tnum);
  }

  restored(): void {
    // only in a refused batch, whose transaction rolls the drop back
  }

  private deleteTrace(tnum: number): void {
    for (const table of ["traces", "fields", "pending", "node_meta", "bodies"]) this.sql.exec(`DELETE FROM ${table} WHERE tnum = ?`, tnum);
  }

  nodesAdded(t: TraceState, from: number, nodes: NodeState[]): void {
    nodes.forEach((node, k) => {
      const idx = from + k;
      this.writeMeta(t.tnum, idx, t.nodes[idx]!);
      this.writeBody(t.tnum, NODES, idx, t.nodes[idx]!.ver, encodeNode(node));
    });
  }

  nodesRemoved(): void {
    // only in a refused batch: the transaction rolls the rows back
  }

  nodeChanged(t: TraceState, index: number, node: NodeState, before: NodeInfo): void {
    const info = t.nodes[index]!;
    if (before.ver !== info.ver) {
      if (this.needed(before.ver, info.ver)) {
        this.sql.exec("INSERT INTO stale VALUES (?, ?, ?, ?)", t.tnum, index, before.ver, info.ver);
      } else this.sql.exec("DELETE FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ?", t.tnum, index, before.ver);
    }
    this.sql.exec("DELETE FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ?", t.tnum, index, info.ver);
    this.writeMeta(t.tnum, index, info);
    this.writeBody(t.tnum, NODES, index, info.ver, encodeNode(node));
  }

  nodeRestored(): void {
    // only in a refused batch: the transaction rolls the rows back
  }

  itemsAdded(t: TraceState, field: ItemField, from: number, items: Uint8Array[]): void {
    items.forEach((item, k) => this.writeBody(t.tnum, KIND[field], from + k, 0, item));
    this.sql.exec("UPDATE traces SET lists = ? WHERE tnum = ?", listsJson(t), t.tnum);
  }

  itemsRemoved(): void {
    // only in a refused batch: the transaction rolls the rows back
  }

  fieldsSet(t: TraceState, keys: string[]): void {
    if (keys.length === 0) return;
    const order = [...t.fields.keys()];
    for (const name of keys) {
      const slot = t.fields.get(name);
      this.sql.exec("DELETE FROM fields WHERE tnum = ? AND name = ?", t.tnum, name);
      if (!slot || (slot.from !== "open" && slot.from !== "set")) continue;
      const pos = order.indexOf(name);
      const src = slot.from === "open" ? 0 : 1;
      eachPart(slot.value, (part, data) => {
        this.sql.exec("INSERT INTO fields (tnum, name, part, pos, src, key, value) VALUES (?, ?, ?, ?, ?, ?, ?)", t.tnum, name, part, pos, src, buffer(slot.key), data);
      });
    }
  }

  pendingSet(t: TraceState): void {
    this.sql.exec("DELETE FROM pending WHERE tnum = ?", t.tnum);
    eachPart(t.pending, (part, data) => this.sql.exec("INSERT INTO pending (tnum, part, data) VALUES (?, ?, ?)", t.tnum, part, data));
  }

  private writeMeta(tnum: number, idx: number, info: NodeInfo): void {
    this.sql.exec(
      "INSERT OR REPLACE INTO node_meta (tnum, idx, bytes, parents, dtype, shape, ver) VALUES (?, ?, ?, ?, ?, ?, ?)",
      tnum, idx, info.bytes, info.parents, info.routed?.dtype ?? null, info.routed ? JSON.stringify(info.routed.shape) : null, info.ver,
    );
  }

  private writeBody(tnum: number, kind: number, idx: number, ver: number, data: Uint8Array): void {
    eachPart(data, (part, chunk) => this.sql.exec("INSERT INTO bodies (tnum, kind, idx, ver, part, data) VALUES (?, ?, ?, ?, ?, ?)", tnum, kind, idx, ver, part, chunk));
  }
}

/** `data` in parts of at most PART_BYTES (at least one part, empty for empty data). */
export function eachPart(data: Uint8Array, write: (part: number, chunk: ArrayBuffer) => void): void {
  for (let part = 0, at = 0; at < data.length || part === 0; part++, at += PART_BYTES) write(part, buffer(data.subarray(at, at + PART_BYTES)));
}

function listsJson(t: TraceState): string {
  return JSON.stringify(t.items);
}

function bytes(v: SqlStorageValue): Uint8Array {
  return new Uint8Array(v as ArrayBuffer);
}

/**
 * A view as a binding. workerd binds any BufferSource (its binding type is `kj::Array<const byte>`,
 * which it copies from the view's bytes), though the type declarations say ArrayBuffer: passing the
 * view saves a copy of every body.
 */
export function buffer(view: Uint8Array): ArrayBuffer {
  return view as unknown as ArrayBuffer;
}

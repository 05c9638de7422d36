// The episode's assembled state in the Durable Object's SQLite: the EpisodeStore the relay's
// assembly writes through (src/assembly/store.ts), so the object keeps only the index in memory.
//
// Every row carries `ver`, the seq of the frame that wrote it (the store's `version` while the
// frame is applied):
// - `traces`: one row per trace incarnation (tnum): id, arrival order, list sizes, the seq that
//   opened it, and the seq that discarded it while something still needed it (`dropped`).
// - `fields`: its open and set fields (key order by `pos`), values as received, in parts.
// - `pending`: its pending preview, in parts.
// - `node_meta`: per node the NodeInfo (bytes, parents, routing dtype/shape).
// - `bodies`: node and item bytes, keyed (tnum, kind, idx, ver, part): kind 0 is nodes, 1..6 the
//   item lists; a body over PART_BYTES is split into parts (SQLite rows stay far below 2 MB).
// The current value of anything is its newest version. A write that supersedes a version deletes
// it, unless someone still needs the state from before: then `stale` lists it until they do not.
//
// Who needs an older state, by seq ("holds"):
// - readers (a GET streamed over several turns, a watcher's catch-up) read the state as of a seq
//   while ingest goes on: they `pin` it (memory only: a restart forgets readers);
// - retraction: a frame that its producer may still retract needs the state before it (`floors`,
//   set by the Episode from its ledger, src/envelope/ledger.ts). `rewind(R)` then deletes every
//   version written after R: what they superseded is current again.

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
    lists TEXT NOT NULL, created INTEGER NOT NULL, dropped INTEGER)`);
  sql.exec(`CREATE TABLE IF NOT EXISTS fields (tnum INTEGER NOT NULL, name TEXT NOT NULL, ver INTEGER NOT NULL, part INTEGER NOT NULL,
    pos INTEGER NOT NULL, src INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tnum, name, ver, part))`);
  sql.exec(`CREATE TABLE IF NOT EXISTS pending (tnum INTEGER NOT NULL, ver INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tnum, ver, part))`);
  sql.exec(`CREATE TABLE IF NOT EXISTS node_meta (tnum INTEGER NOT NULL, idx INTEGER NOT NULL, ver INTEGER NOT NULL, bytes INTEGER NOT NULL,
    parents INTEGER NOT NULL, dtype TEXT, shape TEXT, PRIMARY KEY (tnum, idx, ver))`);
  sql.exec(`CREATE TABLE IF NOT EXISTS bodies (tnum INTEGER NOT NULL, kind INTEGER NOT NULL, idx INTEGER NOT NULL,
    ver INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL)`);
  sql.exec("CREATE UNIQUE INDEX IF NOT EXISTS bodies_key ON bodies (tnum, kind, idx, ver, part)");
  sql.exec("CREATE INDEX IF NOT EXISTS bodies_ver ON bodies (ver)");
  // what: "node" (body and meta of tnum/idx at ver), "field" (tnum/name at ver), "pending", "trace"
  sql.exec(`CREATE TABLE IF NOT EXISTS stale (what TEXT NOT NULL, tnum INTEGER NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL,
    ver INTEGER NOT NULL, until INTEGER NOT NULL)`);
}

/** A reader's hold on the state as of `asOf`; `release` when done (idempotent). */
export interface Pin {
  readonly asOf: number;
  /** False once a retraction rewound the episode to before `asOf`: what it reads is gone. */
  readonly valid: boolean;
  release(): void;
}

type Row = Record<string, SqlStorageValue>;

export class SqlStore implements EpisodeStore {
  private readonly pins = new Set<{ asOf: number; valid: boolean }>();
  /** Seqs whose state a retraction may need (one before each retractable frame). */
  private floors: number[] = [];
  /** The seq of the frame being applied: every row written gets it. */
  version = 0;
  /** Whether `stale` may have rows (false once a collect left it empty, until the next insert). */
  private maybeStale = true;
  /** Arrival order of the next new trace. */
  private nextOrd = 1;
  /** Whether the tables exist (a watcher may pin an episode nobody has written yet). */
  private tables = false;

  constructor(private readonly sql: SqlStorage) {}

  private hasTables(): boolean {
    this.tables ||= this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stale'").toArray().length > 0;
    return this.tables;
  }

  // ---- the index, as stored ----

  /** The stored traces in arrival order (the index the object keeps in memory), and the lowest trace number not used yet. */
  load(): { traces: TraceState[]; nextTnum: number } {
    const traces = new Map<number, TraceState>();
    const rows = this.sql.exec<Row>("SELECT tnum, id, lists FROM traces WHERE dropped IS NULL ORDER BY ord").toArray();
    // the newest version of each field, reassembled from its parts
    const fields = new Map<number, Array<{ src: number; entry: Entry }>>();
    let cur: { tnum: number; name: string; ver: number; pos: number; src: number; key: Uint8Array; parts: Uint8Array[] } | null = null;
    const newest = new Map<string, { pos: number; src: number; entry: Entry; tnum: number }>();
    const flush = () => {
      if (!cur) return;
      newest.set(`${cur.tnum}\n${cur.name}`, {
        tnum: cur.tnum,
        pos: cur.pos,
        src: cur.src,
        entry: { key: decodeStrSpan(cur.key), keySpan: cur.key, value: concatChunks(cur.parts) },
      });
    };
    for (const f of this.sql.exec<Row>("SELECT tnum, name, ver, pos, src, key, value FROM fields ORDER BY tnum, name, ver, part")) {
      if (!cur || cur.tnum !== f.tnum || cur.name !== f.name || cur.ver !== f.ver) {
        flush();
        cur = {
          tnum: f.tnum as number,
          name: f.name as string,
          ver: f.ver as number,
          pos: f.pos as number,
          src: f.src as number,
          key: bytes(f.key),
          parts: [],
        };
      }
      cur.parts.push(bytes(f.value));
    }
    flush();
    for (const f of [...newest.values()].sort((a, b) => a.tnum - b.tnum || a.pos - b.pos)) {
      const list = fields.get(f.tnum) ?? [];
      list.push({ src: f.src, entry: f.entry });
      fields.set(f.tnum, list);
    }
    const pending = new Map<number, { ver: number; parts: Uint8Array[] }>();
    for (const p of this.sql.exec<Row>("SELECT tnum, ver, data FROM pending ORDER BY tnum, ver, part")) {
      const have = pending.get(p.tnum as number);
      if (!have || have.ver !== p.ver) pending.set(p.tnum as number, { ver: p.ver as number, parts: [bytes(p.data)] });
      else have.parts.push(bytes(p.data));
    }
    for (const r of rows) {
      const tnum = r.tnum as number;
      const entries = (src: number) => (fields.get(tnum) ?? []).filter((f) => f.src === src).map((f) => f.entry);
      const t = new TraceState(r.id as string, tnum, entries(0));
      t.set(entries(1));
      t.pending = concatChunks(pending.get(tnum)?.parts ?? []);
      const lists = JSON.parse(r.lists as string) as Record<ItemField, ListSize>;
      for (const f of ITEM_FIELDS) if (lists[f]) t.items[f] = lists[f];
      traces.set(tnum, t);
    }
    for (const n of this.sql.exec<Row>("SELECT tnum, idx, ver, bytes, parents, dtype, shape FROM node_meta ORDER BY tnum, idx, ver")) {
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

  // ---- holds: readers and retraction ----

  /** Hold the state as of `asOf` for a reader (versions and discarded traces it may read stay). */
  pin(asOf: number): Pin {
    const p = { asOf, valid: true };
    this.pins.add(p);
    let released = false;
    return {
      asOf,
      get valid() {
        return p.valid;
      },
      release: () => {
        if (released) return;
        released = true;
        this.pins.delete(p);
        this.collect();
      },
    };
  }

  /** Hold the state as of each of these seqs for a retraction (the Episode sets them from its ledger). */
  setFloors(seqs: number[]): void {
    this.floors = seqs;
  }

  /** Also hold the state as of `seq` (the seq before a frame being applied, which may yet be retracted). */
  addFloor(seq: number): void {
    this.floors.push(seq);
  }

  /** The oldest held seq, or null when nothing holds an older state. */
  oldestHold(): number | null {
    let min: number | null = null;
    for (const p of this.pins) if (min === null || p.asOf < min) min = p.asOf;
    for (const f of this.floors) if (min === null || f < min) min = f;
    return min;
  }

  /** Whether something holds a state in which a version current from `from` until (not including) `until` is seen. */
  private needed(from: number, until: number): boolean {
    for (const p of this.pins) if (p.asOf >= from && p.asOf < until) return true;
    for (const f of this.floors) if (f >= from && f < until) return true;
    return false;
  }

  /** Delete the kept versions and dropped traces nothing holds any more. */
  collect(): void {
    // runs after every commit: nothing to do unless something was kept; rows still held (the
    // `needed` test, in SQL) stay in SQLite, unread
    if (!this.maybeStale || !this.hasTables()) return;
    const holds = JSON.stringify([...[...this.pins].map((p) => p.asOf), ...this.floors]);
    const rows = this.sql
      .exec<{ what: string; tnum: number; idx: number; name: string; ver: number; until: number }>(
        "SELECT * FROM stale WHERE NOT EXISTS (SELECT 1 FROM json_each(?) AS h WHERE h.value >= stale.ver AND h.value < stale.until)",
        holds,
      )
      .toArray();
    for (const s of rows) {
      if (s.what === "trace") this.deleteTrace(s.tnum);
      else this.deleteVersion(s.what, s.tnum, s.idx, s.name, s.ver);
      this.sql.exec("DELETE FROM stale WHERE what = ? AND tnum = ? AND idx = ? AND name = ? AND ver = ?", s.what, s.tnum, s.idx, s.name, s.ver);
    }
    this.maybeStale = this.sql.exec("SELECT 1 FROM stale LIMIT 1").toArray().length > 0;
  }

  /** Readers holding a state now (GETs and catch-ups streaming from SQLite). */
  readers(): number {
    return this.pins.size;
  }

  /**
   * The episode is archived (src/episode/archive.ts): its node and item bodies, previews and old
   * versions leave SQLite. The index rows stay (traces, scalar fields, node sizes and shapes), so
   * the object still knows the episode; what reads bodies reads the archive from now on.
   */
  dropBodies(): void {
    if (!this.hasTables()) return;
    for (const table of ["bodies", "pending", "stale"]) this.sql.exec(`DELETE FROM ${table}`);
    this.sql.exec("DELETE FROM node_meta WHERE (tnum, idx, ver) NOT IN (SELECT tnum, idx, MAX(ver) FROM node_meta GROUP BY tnum, idx)");
    this.maybeStale = false;
  }

  /** After a restart no reader is left: what was kept only for readers can go. */
  afterRestart(): void {
    this.pins.clear();
    this.collect();
  }

  /**
   * Rewind to the state as of `seq`: every version written after it goes, what those superseded
   * is current again, traces opened after it go and traces discarded after it come back. Readers
   * holding a later state are told (`Pin.valid`). The caller reads the index back (`load`).
   */
  rewind(seq: number): void {
    for (const p of this.pins) if (p.asOf > seq) p.valid = false;
    for (const { tnum } of this.sql.exec<{ tnum: number }>("SELECT tnum FROM traces WHERE created > ?", seq).toArray()) this.deleteTrace(tnum);
    for (const table of ["bodies", "node_meta", "fields", "pending"]) this.sql.exec(`DELETE FROM ${table} WHERE ver > ?`, seq);
    this.sql.exec("UPDATE traces SET dropped = NULL WHERE dropped > ?", seq);
    this.sql.exec("DELETE FROM stale WHERE until > ?", seq);
    // list sizes, from the items that are left
    const sizes = new Map<number, Record<string, ListSize>>();
    for (const r of this.sql.exec<{ tnum: number; kind: number; count: number; bytes: number }>(
      `SELECT tnum, kind, COUNT(DISTINCT idx) AS count, SUM(LENGTH(data)) AS bytes FROM bodies WHERE kind > 0 GROUP BY tnum, kind`,
    )) {
      const s = sizes.get(r.tnum) ?? {};
      s[ITEM_FIELDS[r.kind - 1]!] = { count: r.count, bytes: r.bytes };
      sizes.set(r.tnum, s);
    }
    for (const { tnum } of this.sql.exec<{ tnum: number }>("SELECT tnum FROM traces").toArray()) {
      const s = sizes.get(tnum) ?? {};
      const lists = Object.fromEntries(ITEM_FIELDS.map((f) => [f, s[f] ?? { count: 0, bytes: 0 }]));
      this.sql.exec("UPDATE traces SET lists = ? WHERE tnum = ?", JSON.stringify(lists), tnum);
    }
  }

  /** Bodies as of `asOf` (a held seq), for the writers. */
  reader(asOf: number): BodyReader {
    return {
      nodes: (tnum, from, to) => this.readNodes(tnum, from, to, asOf),
      items: (tnum, field, from, to) => this.items(tnum, field, from, to),
    };
  }

  // ---- EpisodeStore: reads ----

  node(t: TraceState, index: number): NodeState {
    const ver = t.nodes[index]!.ver;
    const parts = this.sql
      .exec<{ data: ArrayBuffer }>("SELECT data FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ? ORDER BY part", t.tnum, index, ver)
      .toArray();
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
      tnum,
      from,
      to,
      asOf,
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
      tnum,
      KIND[field],
      from,
      to,
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
    this.sql.exec(
      "INSERT INTO traces (tnum, id, ord, lists, created, dropped) VALUES (?, ?, ?, ?, ?, NULL)",
      t.tnum,
      t.id,
      this.nextOrd++,
      listsJson(t),
      this.version,
    );
    this.fieldsSet(
      t,
      [...t.fields.keys()].filter((k) => t.fields.get(k)!.from === "open"),
    );
    this.pendingSet(t);
  }

  dropped(t: TraceState): void {
    const created = this.sql.exec<{ c: number }>("SELECT created AS c FROM traces WHERE tnum = ?", t.tnum).toArray()[0]?.c ?? 0;
    if (this.needed(created, this.version)) {
      // something holds a state with this trace in it: keep it, out of the index, until then
      this.sql.exec("UPDATE traces SET dropped = ? WHERE tnum = ?", this.version, t.tnum);
      this.sql.exec("INSERT INTO stale VALUES ('trace', ?, -1, '', ?, ?)", t.tnum, created, this.version);
      this.maybeStale = true;
    } else this.deleteTrace(t.tnum);
  }

  restored(): void {
    // only in a refused batch, whose transaction rolls the drop back
  }

  private deleteTrace(tnum: number): void {
    for (const table of ["traces", "fields", "pending", "node_meta", "bodies", "stale"]) this.sql.exec(`DELETE FROM ${table} WHERE tnum = ?`, tnum);
  }

  private deleteVersion(what: string, tnum: number, idx: number, name: string, ver: number): void {
    if (what === "node") {
      this.sql.exec("DELETE FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ?", tnum, idx, ver);
      this.sql.exec("DELETE FROM node_meta WHERE tnum = ? AND idx = ? AND ver = ?", tnum, idx, ver);
    } else if (what === "field") this.sql.exec("DELETE FROM fields WHERE tnum = ? AND name = ? AND ver = ?", tnum, name, ver);
    else if (what === "pending") this.sql.exec("DELETE FROM pending WHERE tnum = ? AND ver = ?", tnum, ver);
  }

  /** A new version of something whose current version is `old`: keep the old one if it is needed, else delete it. */
  private supersede(what: string, tnum: number, idx: number, name: string, old: number | undefined): void {
    if (old === undefined) return;
    if (old === this.version) return this.deleteVersion(what, tnum, idx, name, old); // rewritten within the frame
    if (this.needed(old, this.version)) {
      this.sql.exec("INSERT INTO stale VALUES (?, ?, ?, ?, ?, ?)", what, tnum, idx, name, old, this.version);
      this.maybeStale = true;
    } else this.deleteVersion(what, tnum, idx, name, old);
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
    this.supersede("node", t.tnum, index, "", before.ver);
    this.writeMeta(t.tnum, index, info);
    this.writeBody(t.tnum, NODES, index, info.ver, encodeNode(node));
  }

  nodeRestored(): void {
    // only in a refused batch: the transaction rolls the rows back
  }

  itemsAdded(t: TraceState, field: ItemField, from: number, items: Uint8Array[]): void {
    items.forEach((item, k) => {
      this.writeBody(t.tnum, KIND[field], from + k, this.version, item);
    });
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
      const old = this.sql.exec<{ v: number | null }>("SELECT MAX(ver) AS v FROM fields WHERE tnum = ? AND name = ?", t.tnum, name).one().v;
      this.supersede("field", t.tnum, -1, name, old ?? undefined);
      if (!slot || (slot.from !== "open" && slot.from !== "set")) continue;
      const pos = order.indexOf(name);
      const src = slot.from === "open" ? 0 : 1;
      eachPart(slot.value, (part, data) => {
        this.sql.exec(
          "INSERT INTO fields (tnum, name, ver, part, pos, src, key, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
          t.tnum,
          name,
          this.version,
          part,
          pos,
          src,
          buffer(slot.key),
          data,
        );
      });
    }
  }

  pendingSet(t: TraceState): void {
    const old = this.sql.exec<{ v: number | null }>("SELECT MAX(ver) AS v FROM pending WHERE tnum = ?", t.tnum).one().v;
    this.supersede("pending", t.tnum, -1, "", old ?? undefined);
    eachPart(t.pending, (part, data) => this.sql.exec("INSERT INTO pending (tnum, ver, part, data) VALUES (?, ?, ?, ?)", t.tnum, this.version, part, data));
  }

  private writeMeta(tnum: number, idx: number, info: NodeInfo): void {
    this.sql.exec(
      "INSERT OR REPLACE INTO node_meta (tnum, idx, ver, bytes, parents, dtype, shape) VALUES (?, ?, ?, ?, ?, ?, ?)",
      tnum,
      idx,
      info.ver,
      info.bytes,
      info.parents,
      info.routed?.dtype ?? null,
      info.routed ? JSON.stringify(info.routed.shape) : null,
    );
  }

  private writeBody(tnum: number, kind: number, idx: number, ver: number, data: Uint8Array): void {
    eachPart(data, (part, chunk) =>
      this.sql.exec("INSERT INTO bodies (tnum, kind, idx, ver, part, data) VALUES (?, ?, ?, ?, ?, ?)", tnum, kind, idx, ver, part, chunk),
    );
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

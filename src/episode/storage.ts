// The episode's SQLite storage: one place for the schema and every query.
//
// - `meta`: one row (id, status, counters, timestamps, the reply's outcome).
// - `frames`: the log of deltas as applied (after exactly-once trimming), in seq order. A frame
//   is split into parts of at most PART_BYTES so no row nears SQLite's 2 MB row limit.
// - `producers`: the highest applied seq per producer (envelope dedup).
// - `reply`: the upstream reply bytes once the run ended (parts, like frames).
// - `base`: after a compaction, the state at `meta.base` as snapshot deltas; the log then holds
//   only the frames after it.
// - `index_state`: when the episode index was last sent this episode's row, and when the next
//   (throttled) update is due (0: none pending).
//
// Replaying `base` then `frames` into a fresh assembly rebuilds the live state byte for byte; the reply
// rebuilds the finished episode. Callers wrap writes in `transactionSync`.

import { concatChunks } from "../wire/writer.js";

export const PART_BYTES = 1 << 20;

export type EpisodeStatus = "live" | "finished" | "failed";

export interface Meta {
  id: string;
  status: EpisodeStatus;
  seq: number;
  bytes: number;
  traces: number;
  nodes: number;
  calls: number;
  created: number;
  updated: number;
  error: string | null;
  /** Seq the stored base snapshot stands at (0: none; the log holds every frame). */
  base: number;
}

/** Throttling of the episode index's updates (see Episode.markIndexDirty). */
export interface IndexState {
  /** When the index was last sent this episode's row (ms), 0 if never. */
  lastFlush: number;
  /** When the pending update is due (ms); 0 when nothing is pending. */
  due: number;
}

export class EpisodeStore {
  private ready = false;
  private cached: Meta | null = null;
  private indexTable = false;
  private indexCache: IndexState | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /** True once the episode has been created (storage untouched otherwise). */
  exists(): boolean {
    if (this.ready) return true;
    const found = this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").toArray().length > 0;
    this.ready = found && this.sql.exec("SELECT 1 FROM meta").toArray().length > 0;
    return this.ready;
  }

  /** After deleteAll: the next access sees no episode. */
  forget(): void {
    this.ready = false;
    this.cached = null;
    this.indexTable = false;
    this.indexCache = null;
  }

  indexState(): IndexState {
    if (this.indexCache) return { ...this.indexCache };
    if (!this.exists()) return { lastFlush: 0, due: 0 };
    this.ensureIndexTable();
    const row = this.sql.exec<{ last_flush: number; due: number }>("SELECT last_flush, due FROM index_state").toArray()[0];
    this.indexCache = row ? { lastFlush: row.last_flush, due: row.due } : { lastFlush: 0, due: 0 };
    return { ...this.indexCache };
  }

  saveIndexState(s: IndexState): void {
    this.ensureIndexTable();
    this.indexCache = { ...s };
    this.sql.exec("DELETE FROM index_state");
    this.sql.exec("INSERT INTO index_state VALUES (?, ?)", s.lastFlush, s.due);
  }

  private ensureIndexTable(): void {
    if (this.indexTable) return;
    this.sql.exec("CREATE TABLE IF NOT EXISTS index_state (last_flush INTEGER NOT NULL, due INTEGER NOT NULL)");
    this.indexTable = true;
  }

  /** Create the schema and the meta row (first write of a new episode). */
  create(id: string, now: number): Meta {
    this.sql.exec(`CREATE TABLE IF NOT EXISTS meta (
      id TEXT NOT NULL, status TEXT NOT NULL, seq INTEGER NOT NULL, bytes INTEGER NOT NULL,
      traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
      created INTEGER NOT NULL, updated INTEGER NOT NULL, error TEXT, base INTEGER NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS frames (
      seq INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (seq, part))`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS producers (name TEXT PRIMARY KEY, seq INTEGER NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS reply (part INTEGER PRIMARY KEY, data BLOB NOT NULL)`);
    this.sql.exec(`CREATE TABLE IF NOT EXISTS base (part INTEGER PRIMARY KEY, data BLOB NOT NULL)`);
    const meta: Meta = { id, status: "live", seq: 0, bytes: 0, traces: 0, nodes: 0, calls: 0, created: now, updated: now, error: null, base: 0 };
    this.sql.exec("INSERT INTO meta VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", id, "live", 0, 0, 0, 0, 0, now, now, null, 0);
    this.ready = true;
    this.cached = { ...meta };
    return meta;
  }

  /** A copy of the meta row (read from SQLite once, then kept: every write goes through here). */
  meta(): Meta | null {
    if (this.cached) return { ...this.cached };
    if (!this.exists()) return null;
    this.cached = this.sql.exec<Record<string, SqlStorageValue>>("SELECT * FROM meta").one() as unknown as Meta;
    return { ...this.cached };
  }

  saveMeta(m: Meta): void {
    this.sql.exec(
      "UPDATE meta SET status = ?, seq = ?, bytes = ?, traces = ?, nodes = ?, calls = ?, updated = ?, error = ?, base = ?",
      m.status, m.seq, m.bytes, m.traces, m.nodes, m.calls, m.updated, m.error, m.base,
    );
    this.cached = { ...m };
  }

  /** Drop the kept meta row (after a failed transaction, which rolled the row back). */
  invalidate(): void {
    this.cached = null;
  }

  /** Bytes in the log (the frames after the base) and in the base snapshot. */
  sizes(): { log: number; base: number } {
    if (!this.exists()) return { log: 0, base: 0 };
    const log = this.sql.exec<{ n: number }>("SELECT COALESCE(SUM(LENGTH(data)), 0) AS n FROM frames").one().n;
    const base = this.sql.exec<{ n: number }>("SELECT COALESCE(SUM(LENGTH(data)), 0) AS n FROM base").one().n;
    return { log, base };
  }

  appendFrame(seq: number, frame: Uint8Array): void {
    for (let part = 0, at = 0; at < frame.length || part === 0; part++, at += PART_BYTES) {
      this.sql.exec("INSERT INTO frames VALUES (?, ?, ?)", seq, part, toBuffer(frame.subarray(at, at + PART_BYTES)));
    }
  }

  /** Frames with seq > after, in order, reassembled from their parts. */
  *frames(after = 0): Generator<{ seq: number; frame: Uint8Array }> {
    if (!this.exists()) return;
    let seq = -1;
    let parts: Uint8Array[] = [];
    for (const row of this.sql.exec<{ seq: number; part: number; data: ArrayBuffer }>(
      "SELECT seq, part, data FROM frames WHERE seq > ? ORDER BY seq, part", after,
    )) {
      if (row.seq !== seq && parts.length) {
        yield { seq, frame: concatChunks(parts) };
        parts = [];
      }
      seq = row.seq;
      parts.push(new Uint8Array(row.data));
    }
    if (parts.length) yield { seq, frame: concatChunks(parts) };
  }

  /** Lowest seq still in the log (the log may be trimmed at the front), or null when empty. */
  firstSeq(): number | null {
    if (!this.exists()) return null;
    const row = this.sql.exec<{ s: number | null }>("SELECT MIN(seq) AS s FROM frames").one();
    return row.s;
  }

  producers(): Map<string, number> {
    const out = new Map<string, number>();
    if (!this.exists()) return out;
    for (const row of this.sql.exec<{ name: string; seq: number }>("SELECT name, seq FROM producers")) out.set(row.name, row.seq);
    return out;
  }

  saveProducer(name: string, seq: number): void {
    this.sql.exec("INSERT INTO producers VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET seq = excluded.seq", name, seq);
  }

  saveReply(reply: Uint8Array): void {
    this.saveBlob("reply", reply);
  }

  reply(): Uint8Array | null {
    return this.blob("reply");
  }

  /**
   * Compact the log: store `snapshot` (a msgpack array of upstream deltas rebuilding the state
   * at `seq`) as the base and drop the frames it covers.
   */
  saveBase(seq: number, snapshot: Uint8Array): void {
    this.saveBlob("base", snapshot);
    this.sql.exec("DELETE FROM frames WHERE seq <= ?", seq);
  }

  base(): Uint8Array | null {
    return this.blob("base");
  }

  private saveBlob(table: "reply" | "base", bytes: Uint8Array): void {
    this.sql.exec(`DELETE FROM ${table}`);
    for (let part = 0, at = 0; at < bytes.length || part === 0; part++, at += PART_BYTES) {
      this.sql.exec(`INSERT INTO ${table} VALUES (?, ?)`, part, toBuffer(bytes.subarray(at, at + PART_BYTES)));
    }
  }

  private blob(table: "reply" | "base"): Uint8Array | null {
    if (!this.exists()) return null;
    const parts = this.sql.exec<{ data: ArrayBuffer }>(`SELECT data FROM ${table} ORDER BY part`).toArray();
    return parts.length ? concatChunks(parts.map((p) => new Uint8Array(p.data))) : null;
  }
}

function toBuffer(view: Uint8Array): ArrayBuffer {
  if (view.byteOffset === 0 && view.byteLength === view.buffer.byteLength) return view.buffer as ArrayBuffer;
  return view.slice().buffer;
}


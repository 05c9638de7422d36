// The episode's record: its tables in SQLite besides the assembled state (src/objects/episode/sql-store.ts),
// kept by RecordStore, the one place for every query of them.
//
// - `meta`: one row: id, status, counters, timestamps, the reply's outcome, `base` (the log starts
//   after this seq: frames up to it were trimmed), and once finished the episode's size and ETag.
// - `frames`: the log of deltas as applied (retracted ones removed), in seq order, for
//   catch-up streams (viewer hubs' watchers that resume with `?after=` or catch up) and the hubs'
//   feeds. A frame is split into parts (parts.ts), each a row keyed by `seq << 16 | part` alone
//   (`firstKey`). It is trimmed from the front (log-trim.ts).
// - `meta.producers` (JSON, from version 9; a table of its own before): per producer, the highest
//   seq applied (de-duplication) and its frames not yet confirmed by its cursor (retraction:
//   src/protocol/envelope/ledger.ts). It changes with every message, as the rest of meta does, so
//   it is written in meta's one UPDATE: a row of its own was one more row written per turn.
// - `frames.turn` (version 10): what a message changes in meta at every turn (seq, bytes, counters,
//   `updated`, the producers' ledger: a `Turn`) goes on its last frame's row, which the message
//   writes anyway; the meta row is written only when something else changes (status, the reply,
//   dispatch, unknown keys, a retraction, the log's base...). Meta as read is the row, then the turn
//   of the newest frame after the row's seq, if any.
// - `rewinds`: the retractions so far: a watcher resuming from a seq one of them rewound past
//   gets a snapshot.
// - `reply`: the upstream reply bytes once the run ended, or the last refused one while none
//   ended it (finish_refused; parts, like frames).
// - `index_sync`: when the run's index was last sent this episode's row, when a retried update is
//   due (0: none; a throttled one is due in memory, the alarm set for it is what storage keeps), the
//   interval the index asked for.
// - `tombstone`: after a delete, the id whose row the run's index has yet to drop (retried by
//   alarm); written in the erase's own transaction, the storage freed once the row is gone.
//
// The tables are declared, version by version, in schema.ts. Callers wrap writes in `transactionSync`.

import type { ProducerLedger } from "../../protocol/envelope/ledger.js";
import { eachPart } from "../../protocol/episode/parts.js";
import type { ProgressFacts } from "../../protocol/registry/entry.js";
import { concatChunks } from "../../protocol/wire/writer.js";
import type { SchemaState } from "../storage/schema.js";
import { emptyTable } from "./layout.js";
import { ledgerJson, ledgerOf, sameButTurn, type Turn } from "./turn.js";

export type EpisodeStatus = "live" | "finished" | "failed";

export interface Meta {
  id: string;
  status: EpisodeStatus;
  seq: number;
  /** Bytes of every frame logged so far (what MAX_EPISODE_BYTES limits). */
  bytes: number;
  traces: number;
  nodes: number;
  calls: number;
  created: number;
  updated: number;
  error: string | null;
  /** The log holds the frames after this seq. */
  base: number;
  /** The finished episode's size in bytes (msgpack), once finished. */
  size: number | null;
  /** The finished episode's ETag (without the representation), once finished. */
  etag: string | null;
  /** The reference's message when a reply was refused (409 finish_mismatch) and no reply finished the run since. */
  refused: string | null;
  /** When the finished episode was archived in R2 and its bodies and log left SQLite (archive.ts); null before. */
  archived: number | null;
  /**
   * The rollout's dispatch identity in the trainer (msgpack map, src/protocol/envelope/dispatch.ts), set once; null
   * before.
   */
  dispatch: Uint8Array | null;
  /**
   * The row's progress facts as they stood when the run ended (row-facts.ts; the archive takes the bodies they come
   * from), with its turns and truncation (kept here, sent as the row's own fields; absent: kept by an older release);
   * null before. Kept in the column `live`, the row's field for them on the wire.
   */
  progress: (ProgressFacts & { turns?: number | null; is_truncated?: boolean | null }) | null;
  /** Trainer annotation records merged so far (annotations.ts), and the bytes the merged ones take. */
  annotations: number;
  annotationBytes: number;
  /**
   * The delta keys the relay does not know that this episode's producer sent, in the order first seen
   * (src/protocol/assembly/delta.ts `unknown`): what an upgrade of the producer brought; empty before.
   */
  unknown: string[];
}

/** The status the API shows: `finish_refused` is a live episode whose reply was refused. */
export function publicStatus(m: Meta): EpisodeStatus | "finish_refused" {
  return m.status === "live" && m.refused !== null ? "finish_refused" : m.status;
}

/** A rollout the trainer announced (`POST .../dispatch`) that has streamed nothing yet. */
export function isPending(m: Meta): boolean {
  return m.status === "live" && m.seq === 0;
}

/**
 * The episode's row in its run's index: when it was sent, when the next is due (src/objects/episode/run-row-sync.ts).
 */
export interface IndexState {
  /** When the index was last sent this episode's row (ms), 0 if never. */
  lastFlush: number;
  /** When the pending update is due (ms); 0 when nothing is pending. */
  due: number;
  /** Least ms between updates, as the run's index last asked (0: the configured default). */
  flushMs: number;
  /** Failed sends in a row (the retry backs off by it). */
  attempts: number;
}

const NO_INDEX_STATE: IndexState = { lastFlush: 0, due: 0, flushMs: 0, attempts: 0 };

const COLUMNS =
  "id, status, seq, bytes, traces, nodes, calls, created, updated, error, base, size, etag, refused, archived, dispatch, live, annotations, annotation_bytes, unknown";

/**
 * The log's key of a frame's first part (schema.ts, version 8: `seq << 16 | part`, the table's
 * rowid). Seqs past 2^36 (none is: a seq counts messages) are taken as 2^36, so a range's end
 * "everything" (MAX_SAFE_INTEGER) stays a key JS and SQLite hold exactly.
 */
function firstKey(seq: number): number {
  return Math.min(Math.max(seq, 0), 2 ** 36) * 65536;
}

/** The log's key of a frame's last possible part. */
function lastKey(seq: number): number {
  return firstKey(seq) + 65535;
}

/** The episode's record (the tables above) and every query on them; EpisodeState holds it as `record`. */
export class RecordStore {
  private ready = false;
  private cached: Meta | null = null;
  private indexCache: IndexState | null = null;
  /** The index state as storage holds it (set with indexCache). */
  private indexSaved: IndexState | null = null;
  private rewinds: number | null = null;
  /** The producers' ledger as last written (meta's column or a turn), JSON; null: none yet. */
  private ledgerCached: string | null = null;
  /** The checkpoint (sql-store.ts), and whether it changed since a meta row or a turn last carried it. */
  private checkpointCached: number | null = null;
  private checkpointMoved = false;

  constructor(
    private readonly sql: SqlStorage,
    private readonly schema: SchemaState,
  ) {}

  /** True once the episode has been created (storage untouched otherwise). */
  exists(): boolean {
    if (this.ready) return true;
    const found =
      this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").toArray().length > 0;
    this.ready = found && this.sql.exec("SELECT 1 FROM meta").toArray().length > 0;
    return this.ready;
  }

  /**
   * Drop what is kept of the rows: after deleteAll (the next access sees no episode), or after a
   * failed transaction, which rolled them back (maybe the whole episode).
   */
  forget(): void {
    this.schema.forget();
    this.ready = false;
    this.cached = null;
    this.indexCache = null;
    this.indexSaved = null;
    this.rewinds = null;
    this.ledgerCached = null;
    this.checkpointCached = null;
    this.checkpointMoved = false;
  }

  /** Create the schema and the meta row (first write of a new episode). */
  create(id: string, now: number): Meta {
    this.schema.ensure();
    const meta: Meta = {
      id,
      status: "live",
      seq: 0,
      bytes: 0,
      traces: 0,
      nodes: 0,
      calls: 0,
      created: now,
      updated: now,
      error: null,
      base: 0,
      size: null,
      etag: null,
      refused: null,
      archived: null,
      dispatch: null,
      progress: null,
      annotations: 0,
      annotationBytes: 0,
      unknown: [],
    };
    this.sql.exec(
      `INSERT INTO meta (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      id,
      "live",
      0,
      0,
      0,
      0,
      0,
      now,
      now,
      null,
      0,
      null,
      null,
      null,
      null,
      null,
      null,
      0,
      0,
      null,
    );
    this.ready = true;
    this.cached = { ...meta };
    this.ledgerCached = null;
    this.checkpointCached = null;
    return meta;
  }

  /** A copy of the meta row (read from SQLite once, then kept: every write goes through here). */
  meta(): Meta | null {
    if (this.cached) return { ...this.cached };
    if (!this.exists()) return null;
    const row = this.sql
      .exec<Record<string, SqlStorageValue>>(`SELECT ${COLUMNS}, producers, checkpoint FROM meta`)
      .one();
    const dispatch = row.dispatch instanceof ArrayBuffer ? new Uint8Array(row.dispatch) : null;
    const { annotation_bytes, live, producers, checkpoint, ...rest } = row;
    this.cached = {
      ...(rest as unknown as Meta),
      dispatch,
      progress: typeof live === "string" ? (JSON.parse(live) as ProgressFacts) : null,
      annotations: Number(row.annotations ?? 0),
      annotationBytes: Number(annotation_bytes ?? 0),
      unknown: typeof row.unknown === "string" ? (JSON.parse(row.unknown) as string[]) : [],
    };
    this.ledgerCached = typeof producers === "string" ? producers : null;
    this.checkpointCached = typeof checkpoint === "number" ? checkpoint : null;
    this.checkpointMoved = false;
    // the turns logged after the row was written: the newest one holds what they changed
    const turn = this.sql
      .exec<{ turn: string }>(
        "SELECT turn FROM frames WHERE k > ? AND turn IS NOT NULL ORDER BY k DESC LIMIT 1",
        lastKey(this.cached.seq),
      )
      .toArray()[0];
    if (turn) {
      const { producers: ledger, checkpoint: at, ...counters } = JSON.parse(turn.turn) as Turn;
      Object.assign(this.cached, counters);
      this.ledgerCached = ledger;
      if (at !== undefined) this.checkpointCached = at;
    }
    return { ...this.cached };
  }

  /**
   * A message's meta: when it changed only what a turn carries (and logged frames), it goes on its last frame
   * (`turnOf`, which the caller passes to `appendFrame`) and this only keeps it; else the meta row is written.
   * Whether it was: the caller logs its frames after asking (`turnOnFrame`).
   */
  turnOnFrame(m: Meta): boolean {
    const held = this.meta();
    return held !== null && sameButTurn(held, m);
  }

  /** The `frames.turn` of a message that changed only what a turn carries (see `turnOnFrame`); kept as meta. */
  turnOf(m: Meta, ledger: ProducerLedger): string {
    const producers = ledgerJson(ledger);
    const turn: Turn = {
      seq: m.seq,
      bytes: m.bytes,
      traces: m.traces,
      nodes: m.nodes,
      calls: m.calls,
      updated: m.updated,
      producers,
      checkpoint: this.checkpointCached,
    };
    this.cached = { ...m };
    this.ledgerCached = producers;
    this.checkpointMoved = false;
    return JSON.stringify(turn);
  }

  /**
   * The meta row, and with it (in the same UPDATE: one row written) the producers' ledger: the one given, else the
   * one last written (a turn's may be newer than the row's, and the frame holding it may be trimmed).
   */
  saveMeta(m: Meta, ledger?: ProducerLedger): void {
    if (this.cached === null) this.meta(); // the ledger as it stands
    const producers = ledger ? ledgerJson(ledger) : this.ledgerCached;
    this.sql.exec(
      `UPDATE meta SET status = ?, seq = ?, bytes = ?, traces = ?, nodes = ?, calls = ?, updated = ?, error = ?, base = ?, size = ?, etag = ?, refused = ?, archived = ?, dispatch = ?, live = ?, annotations = ?, annotation_bytes = ?, unknown = ?, producers = ?, checkpoint = ?`,
      m.status,
      m.seq,
      m.bytes,
      m.traces,
      m.nodes,
      m.calls,
      m.updated,
      m.error,
      m.base,
      m.size,
      m.etag,
      m.refused,
      m.archived,
      m.dispatch,
      m.progress === null ? null : JSON.stringify(m.progress),
      m.annotations,
      m.annotationBytes,
      m.unknown.length ? JSON.stringify(m.unknown) : null,
      producers,
      this.checkpointCached,
    );
    this.cached = { ...m };
    this.ledgerCached = producers;
    this.checkpointMoved = false;
  }

  // ---- the assembled state's checkpoint (sql-store.ts CheckpointKeeper) ----

  /** Up to which seq the state's tables hold every frame's effects (null: all). */
  checkpoint(): number | null {
    if (this.cached === null && this.exists()) this.meta();
    return this.checkpointCached;
  }

  /** Kept in memory; written by the transaction's turn or meta row, else by `saveCheckpoint` at its end. */
  setCheckpoint(seq: number | null): void {
    this.checkpointCached = seq;
    this.checkpointMoved = true;
  }

  /** At the end of a transaction: the checkpoint, when it moved and no turn or meta row of it carried it. */
  saveCheckpoint(): void {
    if (!this.checkpointMoved) return;
    this.sql.exec("UPDATE meta SET checkpoint = ?", this.checkpointCached);
    this.checkpointMoved = false;
  }

  // ---- the log ----

  /** A frame logged, with the message's `Turn` (`turnOf`) on its first part when it is the message's last frame. */
  appendFrame(seq: number, frame: Uint8Array, turn: string | null = null): void {
    eachPart(frame, (part, data) =>
      this.sql.exec(
        "INSERT INTO frames (k, data, turn) VALUES (?, ?, ?)",
        firstKey(seq) + part,
        data,
        part === 0 ? turn : null,
      ),
    );
  }

  /**
   * Frames with after < seq ≤ upTo, in order, reassembled from their parts; at most about `maxBytes` (at least one).
   */
  *frames(
    after = 0,
    upTo = Number.MAX_SAFE_INTEGER,
    maxBytes = Number.MAX_SAFE_INTEGER,
  ): Generator<{ seq: number; frame: Uint8Array }> {
    if (!this.exists()) return;
    // seqs first (from the primary key's index), then each frame's parts: a read that stops at
    // `maxBytes` reads no frame it does not give (one query over the range would have read the next)
    let total = 0;
    let from = after;
    for (;;) {
      const seqs = this.sql
        .exec<{ seq: number }>(
          "SELECT seq FROM frames WHERE k > ? AND k <= ? AND part = 0 ORDER BY k LIMIT 64",
          lastKey(from),
          lastKey(upTo),
        )
        .toArray();
      for (const { seq } of seqs) {
        const parts = this.sql
          .exec<{ data: ArrayBuffer }>(
            "SELECT data FROM frames WHERE k BETWEEN ? AND ? ORDER BY k",
            firstKey(seq),
            lastKey(seq),
          )
          .toArray();
        const frame = concatChunks(parts.map((r) => new Uint8Array(r.data)));
        yield { seq, frame };
        total += frame.length;
        if (total >= maxBytes) return;
      }
      if (seqs.length < 64) return;
      from = seqs.at(-1)!.seq;
    }
  }

  /**
   * Seqs and sizes of the logged frames, newest first, read 128 parts at a time as iterated (the byte rule stops at its
   * bound). Parts are summed here: GROUP BY the virtual seq sorted them, reading every blob (2 s a 200 MiB log).
   */
  *logSizes(): Generator<{ seq: number; bytes: number }> {
    let last = { seq: -1, bytes: 0 };
    for (let k = Number.MAX_SAFE_INTEGER, n = 128; n === 128 && this.exists(); ) {
      const q = "SELECT k, LENGTH(data) AS n FROM frames WHERE k < ? ORDER BY k DESC LIMIT 128";
      const page = this.sql.exec<{ k: number; n: number }>(q, k).toArray();
      for (const part of page) {
        const seq = Math.floor(part.k / 65536);
        if (last.seq !== seq && last.seq >= 0) yield last;
        last = last.seq === seq ? { seq, bytes: last.bytes + part.n } : { seq, bytes: part.n };
      }
      [k, n] = [page.at(-1)?.k ?? 0, page.length];
    }
    if (last.seq >= 0) yield last;
  }

  /** Forget every frame (the archive: the log then starts after the last seq). */
  dropLog(): void {
    emptyTable(this.sql, "frames");
  }

  /** Forget the frames up to `seq` (the log then starts after it). */
  trimLog(seq: number): void {
    this.sql.exec("DELETE FROM frames WHERE k <= ?", lastKey(seq));
  }

  /** Retracted frames leave the log; their total size. */
  removeFrames(seqs: number[]): number {
    let bytes = 0;
    for (const seq of seqs) {
      bytes +=
        this.sql
          .exec<{ n: number | null }>(
            "SELECT SUM(LENGTH(data)) AS n FROM frames WHERE k BETWEEN ? AND ?",
            firstKey(seq),
            lastKey(seq),
          )
          .one().n ?? 0;
      this.sql.exec("DELETE FROM frames WHERE k BETWEEN ? AND ?", firstKey(seq), lastKey(seq));
    }
    return bytes;
  }

  /** A retraction rewound the episode to `base` when it stood at `upto`. */
  saveRewind(base: number, upto: number): void {
    this.sql.exec("INSERT INTO rewinds VALUES (?, ?)", base, upto);
    this.rewinds = null;
  }

  /** How many retractions the episode had (a hub that saw fewer restarts its watchers). */
  rewindCount(): number {
    if (this.rewinds !== null) return this.rewinds;
    if (!this.exists()) return 0;
    return (this.rewinds = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM rewinds").one().n);
  }

  /** Whether a watcher that held the state as of `seq` may have seen frames a retraction took back since. */
  rewoundPast(seq: number): boolean {
    if (!this.exists()) return false;
    return this.sql.exec("SELECT 1 FROM rewinds WHERE base < ? AND upto >= ?", seq, seq).toArray().length > 0;
  }

  // ---- producers and reply ----

  producers(): ProducerLedger {
    if (!this.exists()) return new Map();
    if (this.cached === null) this.meta();
    return ledgerOf(this.ledgerCached);
  }

  saveReply(reply: Uint8Array): void {
    this.sql.exec("DELETE FROM reply");
    eachPart(reply, (part, data) => this.sql.exec("INSERT INTO reply VALUES (?, ?)", part, data));
  }

  reply(): Uint8Array | null {
    if (!this.exists()) return null;
    const parts = this.sql.exec<{ data: ArrayBuffer }>("SELECT data FROM reply ORDER BY part").toArray();
    return parts.length ? concatChunks(parts.map((p) => new Uint8Array(p.data))) : null;
  }

  // ---- the run index's row ----

  indexState(): IndexState {
    if (this.indexCache) return { ...this.indexCache };
    if (!this.exists()) return { ...NO_INDEX_STATE };
    const row = this.sql
      .exec<{ last_flush: number; due: number; flush_ms: number; attempts: number }>(
        "SELECT last_flush, due, flush_ms, attempts FROM index_sync",
      )
      .toArray()[0];
    this.indexCache = row
      ? { lastFlush: row.last_flush, due: row.due, flushMs: row.flush_ms, attempts: row.attempts }
      : { ...NO_INDEX_STATE };
    this.indexSaved = { ...this.indexCache };
    return { ...this.indexCache };
  }

  /** The index state in memory only (storage keeps what it held: see saveIndexState). */
  holdIndexState(s: IndexState): void {
    this.indexState();
    this.indexCache = { ...s };
  }

  /**
   * Kept in memory at once; written (in place) only when the pending update, the interval or the
   * attempts differ from what storage holds. `lastFlush` alone stays in memory: it only throttles,
   * and a woken object that reads an older one sends its next update sooner, which is harmless.
   */
  saveIndexState(s: IndexState): void {
    this.indexState(); // what storage holds, read once
    this.indexCache = { ...s };
    const held = this.indexSaved ?? NO_INDEX_STATE;
    if (held.due === s.due && held.flushMs === s.flushMs && held.attempts === s.attempts) return;
    this.indexSaved = { ...s };
    const args = [s.lastFlush, s.due, s.flushMs, s.attempts];
    if (
      this.sql.exec("UPDATE index_sync SET last_flush = ?, due = ?, flush_ms = ?, attempts = ?", ...args)
        .rowsWritten === 0
    )
      this.sql.exec("INSERT INTO index_sync VALUES (?, ?, ?, ?)", ...args);
  }

  /** After a delete: the id whose row is still to be dropped from the run's index, and the attempts so far. */
  tombstone(): { id: string; attempts: number } | null {
    if (this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tombstone'").toArray().length === 0)
      return null;
    return this.sql.exec<{ id: string; attempts: number }>("SELECT id, attempts FROM tombstone").toArray()[0] ?? null;
  }

  /**
   * The erase of the episode, in the caller's transaction: every table goes and the tombstone is
   * written at once, so no crash leaves the run's index holding a row nobody will drop. The
   * storage itself is freed once the index has dropped it (run-row-sync.ts `removed`).
   */
  eraseToTombstone(id: string): void {
    this.schema.drop();
    this.forget();
    this.saveTombstone({ id, attempts: 0 });
  }

  saveTombstone(t: { id: string; attempts: number } | null): void {
    this.schema.ensure();
    this.sql.exec("DELETE FROM tombstone");
    if (t) this.sql.exec("INSERT INTO tombstone VALUES (?, ?)", t.id, t.attempts);
  }
}

// The episode's tables in their latest layout (the one schema.ts's migrations leave), table by table: created at
// once on empty storage, and again when a table is emptied by dropping it (the archive).

import { BODY_TABLES } from "./bodies.js";
import { NODE_PACKS_TABLE } from "./node-packs.js";

/**
 * The log's columns from version 8 (record-store.ts): a part's key is `seq << 16 | part`, the
 * table's rowid, so a part is one b-tree entry (a rowid table keyed by (seq, part) wrote two: the
 * row and its key's index); `seq` and `part` are read from it. The log's blobs stay in a rowid table
 * (see schema.ts NODE_META_COLUMNS on WITHOUT ROWID).
 */
export const LOG_COLUMNS = `k INTEGER PRIMARY KEY, data BLOB NOT NULL,
    seq INTEGER AS (k >> 16) VIRTUAL, part INTEGER AS (k & 65535) VIRTUAL`;

/**
 * The log's column of version 10: on the last frame of a message, the meta fields that message set (record-store.ts
 * `Turn`, JSON), so a turn writes its frame row and not the meta row too. NULL on other frames and before.
 */
export const TURN_COLUMN = "turn TEXT";
/**
 * meta's column of version 10: the seq up to which the assembled state's tables hold every frame's effects (a
 * checkpoint, sql-store.ts); the frames after it are replayed on wake. NULL: all of them (every release before).
 */
export const CHECKPOINT_COLUMN = "checkpoint INTEGER";

/** node_meta's record of a routing repair (version 3). */
export const REPAIRED_COLUMN = "repaired INTEGER NOT NULL DEFAULT 0";
/** node_meta's columns of version 4: a node's parent index and message role (sql-store.ts). */
export const NODE_HEAD_COLUMNS = ["parent INTEGER", "role TEXT"];

/**
 * The layout the migrations of schema.ts leave (version 13), table by table: each table's CREATE statements. Created at once
 * on empty storage (`latestLayout`): every new episode's first delta wrote 76 rows of DDL creating tables, then
 * altering, rebuilding and dropping them, now 41. The same tables, columns (in the same order) and indexes;
 * test/workers/schema.test.ts compares the two.
 */
const LATEST: Record<string, string[]> = {
  meta: [
    `CREATE TABLE meta (
    id TEXT NOT NULL, status TEXT NOT NULL, seq INTEGER NOT NULL, bytes INTEGER NOT NULL,
    traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
    created INTEGER NOT NULL, updated INTEGER NOT NULL, error TEXT, base INTEGER NOT NULL,
    size INTEGER, etag TEXT, refused TEXT, archived INTEGER,
    annotations INTEGER NOT NULL DEFAULT 0, annotation_bytes INTEGER NOT NULL DEFAULT 0, dispatch BLOB, live TEXT,
    unknown TEXT, producers TEXT, ${CHECKPOINT_COLUMN})`,
  ],
  frames: [`CREATE TABLE frames (${LOG_COLUMNS}, ${TURN_COLUMN})`],
  rewinds: ["CREATE TABLE rewinds (base INTEGER NOT NULL, upto INTEGER NOT NULL)"],
  reply: ["CREATE TABLE reply (part INTEGER PRIMARY KEY, data BLOB NOT NULL)"],
  index_sync: [
    "CREATE TABLE index_sync (last_flush INTEGER NOT NULL, due INTEGER NOT NULL, flush_ms INTEGER NOT NULL, attempts INTEGER NOT NULL)",
  ],
  tombstone: ["CREATE TABLE tombstone (id TEXT NOT NULL, attempts INTEGER NOT NULL)"],
  hubs: [
    "CREATE TABLE hubs (shard INTEGER PRIMARY KEY, id TEXT NOT NULL, session INTEGER NOT NULL, watchers INTEGER NOT NULL)",
  ],
  traces: [
    `CREATE TABLE traces (tnum INTEGER PRIMARY KEY, id TEXT NOT NULL, ord INTEGER NOT NULL,
    lists TEXT NOT NULL, created INTEGER NOT NULL, dropped INTEGER)`,
  ],
  fields: [
    `CREATE TABLE fields (tnum INTEGER NOT NULL, name TEXT NOT NULL, ver INTEGER NOT NULL, part INTEGER NOT NULL,
    pos INTEGER NOT NULL, src INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tnum, name, ver, part))`,
  ],
  pending: [
    `CREATE TABLE pending (tnum INTEGER NOT NULL, ver INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tnum, ver, part))`,
  ],
  node_meta: [
    `CREATE TABLE node_meta (tnum INTEGER NOT NULL, idx INTEGER NOT NULL, ver INTEGER NOT NULL, bytes INTEGER NOT NULL,
    parents INTEGER NOT NULL, dtype TEXT, shape TEXT, ${REPAIRED_COLUMN}, ${NODE_HEAD_COLUMNS.join(", ")},
    PRIMARY KEY (tnum, idx, ver)) WITHOUT ROWID`,
  ],
  // node-packs.ts (migration 11)
  node_packs: [NODE_PACKS_TABLE],
  // bodies.ts (migration 12; body_runs keyed by scale from 13)
  body_parts: [BODY_TABLES[0]!],
  body_runs: [BODY_TABLES[1]!],
  stale: [
    `CREATE TABLE stale (what TEXT NOT NULL, tnum INTEGER NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL,
    ver INTEGER NOT NULL, until INTEGER NOT NULL)`,
  ],
  annotations: [
    "CREATE TABLE annotations (trace TEXT NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (trace, part))",
  ],
  // archive-upload.ts (created by migration 5 there)
  archive_upload: [
    "CREATE TABLE archive_upload (upload_id TEXT NOT NULL, etag TEXT NOT NULL, part_bytes INTEGER NOT NULL)",
  ],
  archive_parts: ["CREATE TABLE archive_parts (part INTEGER PRIMARY KEY, etag TEXT NOT NULL)"],
  search_sync: [
    "CREATE TABLE search_sync (tnum INTEGER PRIMARY KEY, trace TEXT NOT NULL, nodes INTEGER NOT NULL, task INTEGER NOT NULL, chars INTEGER NOT NULL)",
  ],
};

export function latestLayout(sql: SqlStorage): void {
  for (const statements of Object.values(LATEST)) for (const q of statements) sql.exec(q);
}

/**
 * Every row of `table` goes (the archive's bodies and log, an upload's record). A DELETE bills a row written per row; dropping the table
 * bills none, and creating it again (its latest layout) a few. Where SQLite refuses the drop (a statement still
 * reading the database), the rows are deleted.
 */
export function emptyTable(
  sql: SqlStorage,
  table: "body_parts" | "body_runs" | "pending" | "stale" | "frames" | "archive_upload" | "archive_parts",
): void {
  if (sql.exec(`SELECT 1 FROM ${table} LIMIT 1`).toArray().length === 0) return;
  try {
    sql.exec(`DROP TABLE ${table}`);
  } catch {
    sql.exec(`DELETE FROM ${table}`);
    return;
  }
  for (const q of LATEST[table]!) sql.exec(q);
}

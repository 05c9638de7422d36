// The Episode object's tables, version by version (src/objects/storage/schema.ts runs them). Tables:
// record-store.ts (meta with the producers' ledger, the log, rewinds, reply, index_sync, tombstone), sql-store.ts (the
// assembled state: traces, fields, pending, node_meta, node_packs, bodies, stale), feeds.ts (hubs) and
// archive-upload.ts (archive_upload, archive_parts).

import { EpisodeAssembly } from "../../protocol/assembly/episode-assembly.js";
import { binItems } from "../../protocol/wire/reader.js";
import { concatChunks } from "../../protocol/wire/writer.js";
import { addColumns, checkSchema, type Schema } from "../storage/schema.js";
import { createArchiveUploadTables } from "./archive-upload.js";
import { BODY_TABLES, bodiesIntoRuns, boundRuns } from "./bodies.js";
import {
  CHECKPOINT_COLUMN,
  LOG_COLUMNS,
  latestLayout,
  NODE_HEAD_COLUMNS,
  REPAIRED_COLUMN,
  TURN_COLUMN,
} from "./layout.js";
import { NODE_PACKS_TABLE } from "./node-packs.js";
import { SqlStore } from "./sql-store.js";

function hasTable(sql: SqlStorage, name: string): boolean {
  return sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", name).toArray().length > 0;
}

// Every index entry is billed as a row written. node_meta, written at every turn, is keyed by its
// primary key alone (WITHOUT ROWID): a row is one b-tree entry, where a rowid table with a key
// writes two (the row and its key's index). Only tables of small rows are: a WITHOUT ROWID table
// keeps a row's whole record in its key's b-tree, so a seek or scan over rows with large blobs (the
// log, bodies, fields, pending previews) reads their overflow pages (a bench run stalled on it).
// Storage of releases before version 7 is converted by that migration; new storage is created so
// at once (migration 7 then finds nothing to do). Its columns of versions 3 and 4 are added by
// those migrations, as before.
const NODE_META_COLUMNS = `tnum INTEGER NOT NULL, idx INTEGER NOT NULL, ver INTEGER NOT NULL, bytes INTEGER NOT NULL,
    parents INTEGER NOT NULL, dtype TEXT, shape TEXT, PRIMARY KEY (tnum, idx, ver)`;

/** Whether `table` is stored without rowids (its CREATE statement says so). */
function withoutRowid(sql: SqlStorage, table: string): boolean {
  const row = sql
    .exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", table)
    .toArray()[0];
  return row !== undefined && /WITHOUT\s+ROWID\s*$/i.test(row.sql);
}

/**
 * Rebuild `table` keyed by its primary key alone, its rows and columns as they were (its own
 * indexes go with the old table). Nothing to do when it already is.
 */
function rebuildWithoutRowid(sql: SqlStorage, table: string, columns: string): void {
  if (!hasTable(sql, table) || withoutRowid(sql, table)) return;
  const names = sql
    .exec<{ name: string }>(`SELECT name FROM pragma_table_info('${table}') ORDER BY cid`)
    .toArray()
    .map((c) => c.name)
    .join(", ");
  sql.exec(`CREATE TABLE ${table}_v7 (${columns}) WITHOUT ROWID`);
  addColumns(sql, `${table}_v7`, extraColumns(sql, table, `${table}_v7`));
  sql.exec(`INSERT INTO ${table}_v7 (${names}) SELECT ${names} FROM ${table}`);
  sql.exec(`DROP TABLE ${table}`);
  sql.exec(`ALTER TABLE ${table}_v7 RENAME TO ${table}`);
}

/** The column definitions `from` has beyond those of `to` (columns added by ALTER TABLE), as `addColumns` takes them. */
function extraColumns(sql: SqlStorage, from: string, to: string): string[] {
  type Col = { name: string; type: string; notnull: number; dflt_value: string | null };
  const have = new Set(
    sql
      .exec<Col>(`SELECT name FROM pragma_table_info('${to}')`)
      .toArray()
      .map((c) => c.name),
  );
  return sql
    .exec<Col>(`SELECT name, type, "notnull", dflt_value FROM pragma_table_info('${from}') ORDER BY cid`)
    .toArray()
    .filter((c) => !have.has(c.name))
    .map(
      (c) =>
        `${c.name} ${c.type}${c.notnull ? " NOT NULL" : ""}${c.dflt_value !== null ? ` DEFAULT ${c.dflt_value}` : ""}`,
    );
}

/** The log rebuilt keyed by `k` (LOG_COLUMNS), its frames as they were; nothing to do when it is. */
function rekeyLog(sql: SqlStorage): void {
  if (!hasTable(sql, "frames")) return;
  const keyed = sql.exec("SELECT 1 FROM pragma_table_xinfo('frames') WHERE name = 'k'").toArray().length > 0;
  if (keyed) return;
  sql.exec(`CREATE TABLE frames_v8 (${LOG_COLUMNS})`);
  sql.exec("INSERT INTO frames_v8 (k, data) SELECT (seq << 16) + part, data FROM frames ORDER BY seq, part");
  sql.exec("DROP TABLE frames");
  sql.exec("ALTER TABLE frames_v8 RENAME TO frames");
}

/**
 * The producers' table (version 1) folded into meta's `producers` column (the shape of record-store.ts
 * `ledgerJson`), then dropped; nothing to do once it is gone. A table of rows written before it is kept as it was.
 */
function producersIntoMeta(sql: SqlStorage): void {
  if (hasTable(sql, "meta")) addColumns(sql, "meta", ["producers TEXT"]);
  if (!hasTable(sql, "producers")) return;
  if (hasTable(sql, "meta") && sql.exec("SELECT 1 FROM producers LIMIT 1").toArray().length > 0)
    sql.exec(
      `UPDATE meta SET producers = (SELECT json_group_object(name, json_object('last', seq, 'unconfirmed', json(unconfirmed)))
         FROM producers)`,
    );
  sql.exec("DROP TABLE producers");
}

/** The assembled state's tables (sql-store.ts). */
function createStateTables(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS traces (tnum INTEGER PRIMARY KEY, id TEXT NOT NULL, ord INTEGER NOT NULL,
    lists TEXT NOT NULL, created INTEGER NOT NULL, dropped INTEGER)`);
  sql.exec(`CREATE TABLE IF NOT EXISTS fields (tnum INTEGER NOT NULL, name TEXT NOT NULL, ver INTEGER NOT NULL, part INTEGER NOT NULL,
    pos INTEGER NOT NULL, src INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tnum, name, ver, part))`);
  sql.exec(`CREATE TABLE IF NOT EXISTS pending (tnum INTEGER NOT NULL, ver INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (tnum, ver, part))`);
  sql.exec(`CREATE TABLE IF NOT EXISTS node_meta (${NODE_META_COLUMNS}) WITHOUT ROWID`);
  sql.exec(`CREATE TABLE IF NOT EXISTS bodies (tnum INTEGER NOT NULL, kind INTEGER NOT NULL, idx INTEGER NOT NULL,
    ver INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL)`);
  sql.exec("CREATE UNIQUE INDEX IF NOT EXISTS bodies_key ON bodies (tnum, kind, idx, ver, part)");
  // no index on ver (schema 7): only a retraction's rewind (DELETE ... WHERE ver > ?) filters on it, and it may scan
  // what: "node" (body and meta of tnum/idx at ver), "field" (tnum/name at ver), "pending", "trace"
  sql.exec(`CREATE TABLE IF NOT EXISTS stale (what TEXT NOT NULL, tnum INTEGER NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL,
    ver INTEGER NOT NULL, until INTEGER NOT NULL)`);
}

/**
 * Storage of the releases that kept the episode in memory (a `base` snapshot table, the log, no
 * assembled state): the state is rebuilt into SQLite from the snapshot and the log.
 */
function rebuildState(sql: SqlStorage): void {
  const meta = sql.exec<{ seq: number; base: number }>("SELECT seq, base FROM meta").toArray()[0];
  if (!meta) return;
  // rebuilt by this release's store, which writes the columns later versions add
  addColumns(sql, "node_meta", [REPAIRED_COLUMN, ...NODE_HEAD_COLUMNS]);
  // and bodies as runs (the `bodies` table created above stays empty; migration 12 drops it)
  for (const q of BODY_TABLES) sql.exec(q.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"));
  const deltas: Uint8Array[] = [];
  if (hasTable(sql, "base")) {
    const parts = sql.exec<{ data: ArrayBuffer }>("SELECT data FROM base ORDER BY part").toArray();
    if (parts.length) deltas.push(...binItems(concatChunks(parts.map((p) => new Uint8Array(p.data)))));
    sql.exec("DROP TABLE base");
  }
  let seq = -1;
  let parts: Uint8Array[] = [];
  for (const row of sql.exec<{ seq: number; data: ArrayBuffer }>(
    "SELECT seq, data FROM frames WHERE seq > ? ORDER BY seq, part",
    meta.base,
  )) {
    if (row.seq !== seq && parts.length) {
      deltas.push(concatChunks(parts));
      parts = [];
    }
    seq = row.seq;
    parts.push(new Uint8Array(row.data));
  }
  if (parts.length) deltas.push(concatChunks(parts));
  const store = new SqlStore(sql);
  const asm = new EpisodeAssembly(store);
  asm.version = store.version = meta.seq;
  for (const d of deltas) asm.apply(d, true);
}

export const EPISODE_SCHEMA: Schema = checkSchema({
  object: "Episode",
  fresh: latestLayout,
  migrations: [
    {
      version: 1,
      what: "the layout of the releases before versioned schemas",
      up(sql) {
        const inMemory = hasTable(sql, "meta") && !hasTable(sql, "traces");
        sql.exec(`CREATE TABLE IF NOT EXISTS meta (
          id TEXT NOT NULL, status TEXT NOT NULL, seq INTEGER NOT NULL, bytes INTEGER NOT NULL,
          traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
          created INTEGER NOT NULL, updated INTEGER NOT NULL, error TEXT, base INTEGER NOT NULL,
          size INTEGER, etag TEXT, refused TEXT)`);
        addColumns(sql, "meta", ["size INTEGER", "etag TEXT", "refused TEXT"]);
        sql.exec(
          "CREATE TABLE IF NOT EXISTS frames (seq INTEGER NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (seq, part))",
        );
        sql.exec(
          "CREATE TABLE IF NOT EXISTS producers (name TEXT PRIMARY KEY, seq INTEGER NOT NULL, unconfirmed TEXT NOT NULL DEFAULT '[]')",
        );
        addColumns(sql, "producers", ["unconfirmed TEXT NOT NULL DEFAULT '[]'"]);
        sql.exec("CREATE TABLE IF NOT EXISTS rewinds (base INTEGER NOT NULL, upto INTEGER NOT NULL)");
        sql.exec("CREATE TABLE IF NOT EXISTS reply (part INTEGER PRIMARY KEY, data BLOB NOT NULL)");
        sql.exec(
          "CREATE TABLE IF NOT EXISTS index_sync (last_flush INTEGER NOT NULL, due INTEGER NOT NULL, flush_ms INTEGER NOT NULL, attempts INTEGER NOT NULL)",
        );
        sql.exec("CREATE TABLE IF NOT EXISTS tombstone (id TEXT NOT NULL, attempts INTEGER NOT NULL)");
        sql.exec(
          "CREATE TABLE IF NOT EXISTS hubs (shard INTEGER PRIMARY KEY, id TEXT NOT NULL, session INTEGER NOT NULL, watchers INTEGER NOT NULL)",
        );
        createStateTables(sql);
        if (inMemory) rebuildState(sql);
      },
    },
    {
      version: 2,
      what: "finished episodes archived in R2",
      up(sql) {
        // when the finished episode went to R2 and its bodies and log left SQLite (archive.ts)
        addColumns(sql, "meta", ["archived INTEGER"]);
      },
    },
    {
      version: 3,
      what: "the record of routing-repaired nodes",
      up(sql) {
        // set by the repair that rewrote the node's last row (sql-store.ts); nodes stored before have none
        addColumns(sql, "node_meta", [REPAIRED_COLUMN]);
      },
    },
    {
      version: 4,
      what: "the rollout's dispatch identity, its live facts, the trainer's annotations and the search's text",
      up(sql) {
        // the trainer's annotations, one merged record per trace (annotations.ts), counted in meta
        sql.exec(
          "CREATE TABLE IF NOT EXISTS annotations (trace TEXT NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (trace, part))",
        );
        addColumns(sql, "meta", [
          "annotations INTEGER NOT NULL DEFAULT 0",
          "annotation_bytes INTEGER NOT NULL DEFAULT 0",
        ]);
        // msgpack map (src/protocol/envelope/dispatch.ts), set once; null for episodes written before or without one.
        // `live`: the row's live facts as JSON, kept once the run ended (row-facts.ts: the archive takes the bodies)
        addColumns(sql, "meta", ["dispatch BLOB", "live TEXT"]);
        // per node its parent index (-1: a root) and message role ("": none): branches and the latest
        // assistant words without reading bodies; NULL in rows written before (row-facts.ts reads those bodies)
        addColumns(sql, "node_meta", NODE_HEAD_COLUMNS);
        // per trace, what the run's search holds of its text (search-sync.ts)
        sql.exec(
          "CREATE TABLE IF NOT EXISTS search_sync (tnum INTEGER PRIMARY KEY, trace TEXT NOT NULL, nodes INTEGER NOT NULL, task INTEGER NOT NULL, chars INTEGER NOT NULL)",
        );
      },
    },
    {
      version: 5,
      what: "the archive's multipart upload under way, so a restart resumes it",
      up(sql) {
        createArchiveUploadTables(sql);
      },
    },
    {
      version: 6,
      what: "the delta keys the relay does not know, named in the status",
      up(sql) {
        // a JSON array of names (record-store.ts Meta.unknown); NULL: none, as in every episode written before
        addColumns(sql, "meta", ["unknown TEXT"]);
      },
    },
    {
      version: 7,
      what: "node metadata keyed without rowids, and no index of bodies by version (fewer rows written per turn)",
      up(sql) {
        rebuildWithoutRowid(sql, "node_meta", NODE_META_COLUMNS);
        sql.exec("DROP INDEX IF EXISTS bodies_ver");
      },
    },
    {
      version: 8,
      what: "the log keyed by one integer (a frame's part is one row written, not a row and its key)",
      up(sql) {
        rekeyLog(sql);
      },
    },
    {
      version: 9,
      what: "the producers' ledger in the meta row (written with it: one row per message, not two)",
      up(sql) {
        producersIntoMeta(sql);
      },
    },
    {
      version: 10,
      what: "checkpoints: a turn writes its frame row (with the meta it set), the assembled state is written every so often",
      up(sql) {
        // NULL in both: every frame's effects are in the state's tables and meta is the meta row (as written before)
        if (hasTable(sql, "meta")) addColumns(sql, "meta", [CHECKPOINT_COLUMN]);
        if (hasTable(sql, "frames")) addColumns(sql, "frames", [TURN_COLUMN]);
      },
    },
    {
      version: 11,
      what: "a checkpoint's appended nodes' metadata in one row per trace (node-packs.ts), not a row per node",
      up(sql) {
        // node_meta's rows stay as they are: a node's info is its newest version in either table
        sql.exec(NODE_PACKS_TABLE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"));
      },
    },
    {
      version: 12,
      what: "a checkpoint's bodies of a list as one run of 1 MiB parts (bodies.ts), not a row and a key per body",
      up(sql) {
        bodiesIntoRuns(sql);
      },
    },
    {
      version: 13,
      what: "body runs keyed by their scale, with their last index: a read finds the runs it returns, not all before",
      up(sql) {
        boundRuns(sql);
      },
    },
  ],
});

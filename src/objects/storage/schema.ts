// Versioned SQLite schemas. Durable Objects keep their storage across deploys, so each object's
// tables are declared once (its `schema.ts`), as an ordered list of migrations; the version its
// storage is at lives in a table of its own. At construction the object opens its storage: every
// migration it lacks runs, in order, in one transaction, so storage is at one version or the
// other, never between. A migration that throws leaves the storage as it was and the object
// refusing every request with the reason (503, `storage_upgrade_failed`) until a release fixes it.
//
// Storage nobody has written is left empty (a read of an unknown id must not create tables): the
// tables appear with the first write (`ensure`), at the latest version. Version 0 is storage
// written before versions existed; migration 1 of each schema takes it, whatever it holds, to the
// first versioned layout.

import { isOverload, overloaded, RelayError, STORAGE_UPGRADE_FAILED } from "../../protocol/http/errors.js";

export interface Migration {
  /** The version this migration brings storage to (1, 2, …, in order). */
  readonly version: number;
  /** What it changes, in a few words (logged, and in the refusal if it fails). */
  readonly what: string;
  up(sql: SqlStorage): void;
}

export interface Schema {
  /** The object class it belongs to (for messages). */
  readonly object: string;
  readonly migrations: readonly Migration[];
  /**
   * The latest layout created at once on empty storage, the same tables, columns and indexes the migrations leave
   * (test/workers/schema.test.ts compares them). Optional: without it empty storage runs every migration. Each DDL
   * statement writes rows (SQLite's schema table), billed as any row: a layout whose migrations create then alter
   * tables writes several times what creating it at once does.
   */
  readonly fresh?: (sql: SqlStorage) => void;
}

const VERSION_TABLE = "schema_version";

/** The version a schema's migrations end at. */
export function latestVersion(schema: Schema): number {
  return schema.migrations.length;
}

/** Throws unless the migrations are numbered 1..n in order. */
export function checkSchema(schema: Schema): Schema {
  schema.migrations.forEach((m, i) => {
    if (m.version !== i + 1)
      throw new Error(`${schema.object} schema: migration ${i} is numbered ${m.version}, expected ${i + 1}`);
  });
  return schema;
}

/**
 * Tables of ours in this storage: not SQLite's (`sqlite_`), nor the runtime's (`_cf_KV`, and
 * Miniflare's `__miniflare_do_name` under `wrangler dev`). None of ours starts with `_`.
 */
function userTables(sql: SqlStorage): string[] {
  return sql
    .exec<{ name: string }>(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND substr(name, 1, 1) <> '_'",
    )
    .toArray()
    .map((r) => r.name);
}

/** Add the columns a table lacks (idempotent: a migration may meet storage that already has some). */
export function addColumns(sql: SqlStorage, table: string, columns: string[]): void {
  const have = new Set(
    sql
      .exec<{ name: string }>(`SELECT name FROM pragma_table_info('${table}')`)
      .toArray()
      .map((c) => c.name),
  );
  for (const col of columns) if (!have.has(col.split(" ")[0]!)) sql.exec(`ALTER TABLE ${table} ADD COLUMN ${col}`);
}

/** The version storage is at: null when empty, 0 when written before versions. */
export function storedVersion(sql: SqlStorage): number | null {
  const tables = userTables(sql);
  if (tables.length === 0) return null;
  if (!tables.includes(VERSION_TABLE)) return 0;
  return sql.exec<{ version: number }>(`SELECT version FROM ${VERSION_TABLE}`).one().version;
}

function run(sql: SqlStorage, schema: Schema, from: number): void {
  for (const m of schema.migrations.slice(from)) m.up(sql);
  recordVersion(sql, schema);
}

/** Empty storage: the latest layout, at once where the schema says how (`fresh`), else by every migration. */
export function createLatest(sql: SqlStorage, schema: Schema): void {
  if (!schema.fresh) return run(sql, schema, 0);
  schema.fresh(sql);
  recordVersion(sql, schema);
}

function recordVersion(sql: SqlStorage, schema: Schema): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS ${VERSION_TABLE} (version INTEGER NOT NULL)`);
  sql.exec(`DELETE FROM ${VERSION_TABLE}`);
  sql.exec(`INSERT INTO ${VERSION_TABLE} VALUES (?)`, latestVersion(schema));
}

/** One object's storage under its schema: opened at construction, then checked by every request. */
export class SchemaState {
  /** Why the object refuses requests (a failed or impossible migration), else null. */
  private failure: string | null = null;
  /** Whether the tables are known to exist at the latest version (saves a lookup per write). */
  private ready = false;
  private opened = false;
  /** `open`'s argument, for a retry after a transient failure. */
  private create = false;

  constructor(
    private readonly storage: DurableObjectStorage,
    readonly schema: Schema,
  ) {}

  /**
   * Bring what is stored to the latest version, in one transaction (call once, at construction).
   * `create`: an empty storage gets the tables too (objects that always write). Idempotent.
   */
  open(create = false): void {
    if (this.opened) return;
    this.opened = true;
    this.create = create;
    const sql = this.storage.sql;
    const latest = latestVersion(this.schema);
    let at: number | null;
    try {
      at = storedVersion(sql);
      if (at === null && create) this.storage.transactionSync(() => this.ensure());
    } catch (e) {
      // the runtime short of memory (a local relay with too many objects open): not the storage's
      // fault, so not remembered; the next request opens it again (`check`)
      if (isOverload(e)) {
        this.opened = false;
        return;
      }
      this.failure = `${STORAGE_UPGRADE_FAILED}: ${this.schema.object} storage could not be read: ${e instanceof Error ? e.message : String(e)}`;
      console.error(this.failure, e);
      return;
    }
    if (at === null || at === latest) {
      this.ready = at === latest || create;
      return;
    }
    if (at > latest) {
      this.failure = `${STORAGE_UPGRADE_FAILED}: ${this.schema.object} storage is at schema version ${at}, newer than this release's ${latest}: deploy the release that wrote it (or a later one)`;
      console.error(this.failure);
      return;
    }
    try {
      this.storage.transactionSync(() => run(sql, this.schema, at));
      this.ready = true;
      console.log(`${this.schema.object} storage upgraded from schema version ${at} to ${latest}`);
    } catch (e) {
      if (isOverload(e)) {
        this.opened = false;
        return;
      }
      const failed = this.schema.migrations.find((m) => m.version > at);
      this.failure = `${STORAGE_UPGRADE_FAILED}: ${this.schema.object} storage could not go from schema version ${at} to ${latest} (${failed?.what ?? "?"}): ${e instanceof Error ? e.message : String(e)}; nothing was changed`;
      console.error(this.failure, e);
    }
  }

  /** Throws the refusal if the storage could not be opened. */
  check(): void {
    if (!this.opened) this.open(this.create);
    if (!this.opened) throw overloaded();
    if (this.failure !== null) throw new RelayError("storage_upgrade_failed", this.failure);
  }

  get failed(): string | null {
    return this.failure;
  }

  /** Whether `open` ran to its end (false after a transient failure: `check` opens it again). */
  get isOpen(): boolean {
    return this.opened;
  }

  /**
   * Before a first write: create the tables at the latest version if storage is empty (in the caller's transaction).
   */
  ensure(): void {
    if (this.ready) return;
    const sql = this.storage.sql;
    if (storedVersion(sql) === null) createLatest(sql, this.schema);
    this.ready = true;
  }

  /** Whether the tables exist (storage nobody wrote has none: its reads answer as empty). */
  present(): boolean {
    return this.ready || storedVersion(this.storage.sql) !== null;
  }

  /** Drop every table (nothing is kept): the next write creates them again. */
  drop(): void {
    for (const t of userTables(this.storage.sql)) this.storage.sql.exec(`DROP TABLE IF EXISTS "${t}"`);
    this.ready = false;
  }

  /** After `deleteAll` (or a rolled-back first write): the tables may be gone. */
  forget(): void {
    this.ready = false;
  }
}

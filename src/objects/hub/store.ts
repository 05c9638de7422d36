// A hub's storage: one row (which episode and shard it serves, its session with the episode, its
// view, the hub count) and the upstream reply once the run ended. Small and rewritten with each
// feed, so a hub woken from hibernation knows where its caught-up watchers stand; dropped when its last
// watcher leaves.

import { eachPart } from "../../protocol/episode/parts.js";
import type { HubView } from "../../protocol/hub/feed.js";
import { concatChunks } from "../../protocol/wire/writer.js";
import { checkSchema, type Schema, SchemaState } from "../storage/schema.js";

/** The hub's one row: which episode and shard it serves, its session, its view, the hub count. */
interface HubRow {
  id: string;
  shard: number;
  /** The episode's membership this hub holds (null: not a member). */
  session: number | null;
  view: HubView | null;
  hubs: number;
}

/** The hub's tables, version by version (src/objects/storage/schema.ts). */
export const HUB_SCHEMA: Schema = checkSchema({
  object: "ViewerHub",
  migrations: [
    {
      version: 1,
      what: "the layout of the releases before versioned schemas",
      up(sql) {
        sql.exec(`CREATE TABLE IF NOT EXISTS hub (id TEXT NOT NULL, shard INTEGER NOT NULL, session INTEGER, head INTEGER, epoch INTEGER NOT NULL,
          status TEXT NOT NULL, refused TEXT, error TEXT, hubs INTEGER NOT NULL)`);
        sql.exec("CREATE TABLE IF NOT EXISTS reply (part INTEGER PRIMARY KEY, data BLOB NOT NULL)");
      },
    },
  ],
});

export class HubStore {
  private cached: HubRow | null | undefined;
  private readonly sql: SqlStorage;
  readonly schema: SchemaState;

  constructor(storage: DurableObjectStorage) {
    this.sql = storage.sql;
    this.schema = new SchemaState(storage, HUB_SCHEMA);
  }

  /** Bring storage to this release's schema (in the hub's constructor, before any event; also on first use). */
  open(): void {
    this.schema.open();
  }

  /** The row, or null for a hub that serves nobody yet. */
  row(): HubRow | null {
    this.open();
    this.schema.check();
    if (this.cached !== undefined) return this.cached;
    if (this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'hub'").toArray().length === 0)
      return (this.cached = null);
    const r = this.sql
      .exec<{
        id: string;
        shard: number;
        session: number | null;
        head: number | null;
        epoch: number;
        status: string;
        refused: string | null;
        error: string | null;
        hubs: number;
      }>("SELECT id, shard, session, head, epoch, status, refused, error, hubs FROM hub")
      .toArray()[0];
    if (!r) return (this.cached = null);
    const view: HubView | null =
      r.head === null
        ? null
        : { head: r.head, epoch: r.epoch, status: r.status as HubView["status"], refused: r.refused, error: r.error };
    return (this.cached = { id: r.id, shard: r.shard, session: r.session, view, hubs: r.hubs });
  }

  save(s: HubRow, reply?: Uint8Array | null): void {
    this.schema.ensure();
    const v = s.view;
    const values = [
      s.id,
      s.shard,
      s.session,
      v?.head ?? null,
      v?.epoch ?? 0,
      v?.status ?? "new",
      v?.refused ?? null,
      v?.error ?? null,
      s.hubs,
    ];
    // one row, rewritten with each feed: an UPDATE bills one row written, a DELETE and an INSERT two
    const updated = this.sql.exec(
      "UPDATE hub SET id = ?, shard = ?, session = ?, head = ?, epoch = ?, status = ?, refused = ?, error = ?, hubs = ?",
      ...values,
    ).rowsWritten;
    if (updated !== 1) {
      this.sql.exec("DELETE FROM hub");
      this.sql.exec("INSERT INTO hub VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", ...values);
    }
    if (reply !== undefined) {
      this.sql.exec("DELETE FROM reply");
      if (reply) eachPart(reply, (part, data) => this.sql.exec("INSERT INTO reply VALUES (?, ?)", part, data));
    }
    this.cached = { ...s };
  }

  reply(): Uint8Array | null {
    if (!this.row()) return null;
    const parts = this.sql.exec<{ data: ArrayBuffer }>("SELECT data FROM reply ORDER BY part").toArray();
    return parts.length ? concatChunks(parts.map((p) => new Uint8Array(p.data))) : null;
  }

  /** Nobody is served any more: nothing is kept. */
  clear(): void {
    this.schema.drop();
    this.cached = null;
  }
}

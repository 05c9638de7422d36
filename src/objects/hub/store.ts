// A hub's storage: one row (which episode and shard it serves, its session with the episode, its
// view, the hub count) and the upstream reply once the run ended; dropped when its last watcher
// leaves. The row is written when what must outlive a wake changes (the session, the view's epoch,
// status, refused or error, the hub count, the reply), never for a feed that only moves the head:
// a paced turn writes no row here. Its head is a floor (the head when it was last written); where
// the caught-up watchers stand is in their sockets' attachments (src/objects/hub/fan-out.ts), and a
// woken hub takes the larger of the two (src/objects/hub/hub.ts `row`). The layout is the one the
// releases before wrote: an older release reading this row would re-send frames its watchers have,
// which every client drops by seq.

import { eachPart } from "../../protocol/episode/parts.js";
import type { HubView } from "../../protocol/hub/feed.js";
import { concatChunks } from "../../protocol/wire/writer.js";
import { checkSchema, type Schema, SchemaState } from "../storage/schema.js";

/** The hub's one row: which episode and shard it serves, its session, its view, the hub count. */
export interface HubRow {
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

/** What the row holds beyond the head, as one string (the row is written only when it changes). */
function durable(s: HubRow): string {
  const v = s.view;
  return JSON.stringify([s.id, s.shard, s.session, s.hubs, v && [v.epoch, v.status, v.refused, v.error]]);
}

export class HubStore {
  private cached: HubRow | null | undefined;
  /** `durable` of the row as stored (undefined: not known, so the next save writes). */
  private stored: string | undefined;
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
    this.cached = { id: r.id, shard: r.shard, session: r.session, view, hubs: r.hubs };
    this.stored = durable(this.cached);
    return this.cached;
  }

  /**
   * The row as it is now: written if what it holds beyond the head changed, or with a reply (null: none any more);
   * else kept in memory only (a feed that moved the head writes nothing).
   */
  save(s: HubRow, reply?: Uint8Array | null): void {
    const d = durable(s);
    if (reply === undefined && d === this.stored) {
      this.cached = { ...s };
      return;
    }
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
    // one row: an UPDATE bills one row written, a DELETE and an INSERT two
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
    this.stored = d;
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
    this.stored = undefined;
  }
}

// ArchiveGate: the archive slots of one object class (src/protocol/archive/leases.ts), one object per
// class (named by it). An Episode's alarm asks it for a lease before an archive step and gives
// it back after; with ARCHIVE_SLOTS 0 (production, where every object has a thread of its own)
// nobody asks. The table is in SQLite: the gate may be evicted between two asks, and a lease it
// forgot would let one step too many run.

import { DurableObject } from "cloudflare:workers";
import { checkSchema, type Schema, SchemaState } from "../storage/schema.js";
import { acquire, type Grant, LEASE_MS, type LeaseTable, release } from "../../protocol/archive/leases.js";

/** The gate's tables, version by version (src/objects/storage/schema.ts). */
export const GATE_SCHEMA: Schema = checkSchema({
  object: "ArchiveGate",
  migrations: [
    {
      version: 1,
      what: "archive leases and waiters",
      up(sql) {
        sql.exec("CREATE TABLE IF NOT EXISTS leases (holder TEXT PRIMARY KEY, until INTEGER NOT NULL)");
        sql.exec(
          "CREATE TABLE IF NOT EXISTS waiters (holder TEXT PRIMARY KEY, since INTEGER NOT NULL, seen INTEGER NOT NULL)",
        );
      },
    },
  ],
});

/** The gate of an object class's archive steps. */
export function archiveGateName(objectClass: string): string {
  return `archive:${objectClass}`;
}

export class ArchiveGate extends DurableObject<Env> {
  private readonly schema: SchemaState;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.schema = new SchemaState(ctx.storage, GATE_SCHEMA);
    // storage is brought to this release's schema before any event (SQLite opens synchronously, so
    // the constructor does it, in every object alike: src/objects/storage/schema.ts)
    this.schema.open(true);
  }

  /** `holder` asks for a slot of `slots` (or renews its lease); see leases.ts. `leaseMs`: tests. */
  acquire(holder: string, slots: number, leaseMs = LEASE_MS): Grant {
    this.schema.check();
    const { table, grant } = acquire(this.table(), holder, Date.now(), slots, leaseMs);
    this.save(table);
    return grant;
  }

  /** `holder`'s step ended: its slot is free. */
  release(holder: string): void {
    this.schema.check();
    this.save(release(this.table(), holder, Date.now()));
  }

  /** The leases and waiters now (tests and the bench read them). */
  state(): LeaseTable {
    this.schema.check();
    return this.table();
  }

  private table(): LeaseTable {
    const sql = this.ctx.storage.sql;
    return {
      leases: sql.exec<{ holder: string; until: number }>("SELECT holder, until FROM leases").toArray(),
      waiters: sql
        .exec<{ holder: string; since: number; seen: number }>("SELECT holder, since, seen FROM waiters")
        .toArray(),
    };
  }

  private save(t: LeaseTable): void {
    const sql = this.ctx.storage.sql;
    this.ctx.storage.transactionSync(() => {
      sql.exec("DELETE FROM leases");
      sql.exec("DELETE FROM waiters");
      for (const l of t.leases) sql.exec("INSERT INTO leases VALUES (?, ?)", l.holder, l.until);
      for (const w of t.waiters) sql.exec("INSERT INTO waiters VALUES (?, ?, ?)", w.holder, w.since, w.seen);
    });
  }
}

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
    const before = this.table();
    const { table, grant } = acquire(before, holder, Date.now(), slots, leaseMs);
    this.save(table, before);
    return grant;
  }

  /** `holder`'s step ended: its slot is free. */
  release(holder: string): void {
    this.schema.check();
    const before = this.table();
    this.save(release(before, holder, Date.now()), before);
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

  /**
   * Write what changed from `before` to `t` (not the whole table again: with thousands of episodes
   * waiting, every ask rewrote every waiter, and the writes grew with the square of the queue).
   */
  private save(t: LeaseTable, before: LeaseTable): void {
    const sql = this.ctx.storage.sql;
    const leases = new Map(t.leases.map((l) => [l.holder, l]));
    const waiters = new Map(t.waiters.map((w) => [w.holder, w]));
    const was = {
      leases: new Map(before.leases.map((l) => [l.holder, l])),
      waiters: new Map(before.waiters.map((w) => [w.holder, w])),
    };
    this.ctx.storage.transactionSync(() => {
      for (const h of was.leases.keys()) if (!leases.has(h)) sql.exec("DELETE FROM leases WHERE holder = ?", h);
      for (const h of was.waiters.keys()) if (!waiters.has(h)) sql.exec("DELETE FROM waiters WHERE holder = ?", h);
      for (const l of leases.values()) {
        if (was.leases.get(l.holder)?.until !== l.until)
          sql.exec("INSERT OR REPLACE INTO leases VALUES (?, ?)", l.holder, l.until);
      }
      for (const w of waiters.values()) {
        const o = was.waiters.get(w.holder);
        if (o?.since !== w.since || o.seen !== w.seen)
          sql.exec("INSERT OR REPLACE INTO waiters VALUES (?, ?, ?)", w.holder, w.since, w.seen);
      }
    });
  }
}

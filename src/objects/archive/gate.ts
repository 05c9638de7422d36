// ArchiveGate: the archive slots of one object class (src/protocol/archive/leases.ts), one object per
// class (named by it; the Episode is the one class that archives, so it is the one woken). An Episode's alarm asks it for a lease before an archive step and gives
// it back after; a step that finds no slot free waits in line, and the gate wakes it
// (`Episode.archiveTurn`) once its turn comes, with the slot already leased in its name. With
// ARCHIVE_SLOTS 0 (production, where every object has a thread of its own) nobody asks. The table
// is in SQLite: the gate may be evicted between two asks, and a lease it forgot would let one step
// too many run.

import { DurableObject } from "cloudflare:workers";
import {
  acquire,
  type Grant,
  LEASE_MS,
  type Lease,
  type LeaseStore,
  nextExpiry,
  promote,
  release,
} from "../../protocol/archive/leases.js";
import { limitsFrom } from "../../protocol/limits/limits.js";
import { armAlarm } from "../storage/alarm-window.js";
import { checkSchema, type Schema, SchemaState } from "../storage/schema.js";

/** The gate's tables, version by version (src/objects/storage/schema.ts). */
const GATE_SCHEMA: Schema = checkSchema({
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
    {
      version: 2,
      // waiters are woken in turn instead of polling: the head of the line is read by this index
      // (`seen`, the last poll, is no longer read; kept, so rows of version 1 stay as they are)
      what: "the line of waiters in order",
      up(sql) {
        sql.exec("CREATE INDEX IF NOT EXISTS waiters_line ON waiters (since, holder)");
      },
    },
  ],
});

/** The gate of an object class's archive steps. */
export function archiveGateName(objectClass: string): string {
  return `archive:${objectClass}`;
}

/** The gate's LeaseStore: each call reads at most the leases or the head of the line. */
class SqlLeaseStore implements LeaseStore {
  constructor(private readonly sql: SqlStorage) {}
  leases(): Lease[] {
    return this.sql.exec<{ holder: string; until: number }>("SELECT holder, until FROM leases").toArray();
  }
  putLease(holder: string, until: number): void {
    this.sql.exec("INSERT OR REPLACE INTO leases VALUES (?, ?)", holder, until);
  }
  dropLease(holder: string): void {
    this.sql.exec("DELETE FROM leases WHERE holder = ?", holder);
  }
  waitingSince(holder: string): number | null {
    return (
      this.sql.exec<{ since: number }>("SELECT since FROM waiters WHERE holder = ?", holder).toArray()[0]?.since ?? null
    );
  }
  addWaiter(holder: string, since: number): void {
    this.sql.exec("INSERT OR REPLACE INTO waiters VALUES (?, ?, ?)", holder, since, since);
  }
  dropWaiter(holder: string): void {
    this.sql.exec("DELETE FROM waiters WHERE holder = ?", holder);
  }
  aheadOf(since: number, holder: string): number {
    return this.sql
      .exec<{ n: number }>(
        "SELECT count(*) AS n FROM waiters WHERE since < ? OR (since = ? AND holder < ?)",
        since,
        since,
        holder,
      )
      .one().n;
  }
  firstWaiters(n: number): string[] {
    return this.sql
      .exec<{ holder: string }>("SELECT holder FROM waiters ORDER BY since, holder LIMIT ?", n)
      .toArray()
      .map((r) => r.holder);
  }
}

export class ArchiveGate extends DurableObject<Env> {
  private readonly schema: SchemaState;
  private readonly store: SqlLeaseStore;
  /** ARCHIVE_SLOTS: how many leases a release or the alarm may hand on (an ask says its own). */
  private slots: number;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.schema = new SchemaState(ctx.storage, GATE_SCHEMA);
    // storage is brought to this release's schema before any event (SQLite opens synchronously, so
    // the constructor does it, in every object alike: src/objects/storage/schema.ts)
    this.schema.open(true);
    this.store = new SqlLeaseStore(ctx.storage.sql);
    this.slots = limitsFrom(env).archiveSlots;
  }

  /** `holder` asks for a slot of `slots` (or renews its lease); see leases.ts. `leaseMs`: tests. */
  acquire(holder: string, slots: number, leaseMs = LEASE_MS): Grant {
    this.schema.check();
    const { grant, woken } = this.ctx.storage.transactionSync(() =>
      acquire(this.store, holder, Date.now(), slots, leaseMs),
    );
    this.after(woken);
    return grant;
  }

  /**
   * `holder`'s step ended (or it no longer waits): its slot rests for `tookMs` (the step's time: see
   * leases.ts), then goes to the next in line, who is woken.
   */
  release(holder: string, tookMs = 0): void {
    this.schema.check();
    this.after(
      this.ctx.storage.transactionSync(() => release(this.store, holder, Date.now(), this.slots, LEASE_MS, tookMs)),
    );
  }

  /** A lease expired (its step crashed, or its wake was lost): the slot goes to the next in line. */
  async alarm(): Promise<void> {
    this.schema.check();
    this.after(this.ctx.storage.transactionSync(() => promote(this.store, Date.now(), this.slots)));
  }

  /** The leases and the first waiters in line, in order (tests and the bench read them). */
  state(): { leases: Lease[]; waiters: string[] } {
    this.schema.check();
    return { leases: this.store.leases(), waiters: this.store.firstWaiters(1000) };
  }

  /** Wake the holders just leased, and look again when the soonest lease expires. */
  private after(woken: string[]): void {
    for (const holder of woken) {
      // not awaited: the woken step asks this gate for its lease (already in its name) as it starts
      this.env.EPISODES.getByName(holder)
        .archiveTurn(holder)
        .catch((e) => console.warn(`archive gate: ${holder} not woken (its lease expires, then the next goes)`, e));
    }
    const at = nextExpiry(this.store);
    if (at !== null) void armAlarm(this.ctx.storage, at);
  }
}

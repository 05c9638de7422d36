// Archive slots: at most `slots` archive steps at once per object class (issue 28 item 4: ~40
// overdue archive steps on the local episode tier's one thread starved every live request for a
// minute). An archive step asks for a lease before it starts and gives it back when it ends; a
// step that crashed (or whose object was evicted mid-step) loses its lease when it expires, so no
// slot is held forever. Waiters are served in the order they first asked (one that stopped asking
// for WAITER_TTL_MS is forgotten), so no step waits behind later ones for ever.
//
// Pure: the ArchiveGate object (src/objects/archive/gate.ts) keeps the table in SQLite and applies these.

/** A granted slot: whose, and until when (epoch ms) unless renewed or released. */
export interface Lease {
  readonly holder: string;
  readonly until: number;
}

/** A step waiting for a slot: since when it asks, and when it last asked. */
export interface Waiter {
  readonly holder: string;
  readonly since: number;
  readonly seen: number;
}

export interface LeaseTable {
  readonly leases: readonly Lease[];
  readonly waiters: readonly Waiter[];
}

export type Grant =
  | { readonly granted: true; readonly until: number }
  | { readonly granted: false; readonly retryAt: number; readonly ahead: number };

/** How long a lease lasts unless renewed (a step longer than this renews it as it goes). */
export const LEASE_MS = 30_000;
/** How soon a waiting step asks again (at most; sooner when a lease expires first). */
export const WAIT_POLL_MS = 1_000;
/** A waiter that has not asked for this long has gone (its object crashed, or it was erased). */
export const WAITER_TTL_MS = 10_000;

export const EMPTY: LeaseTable = { leases: [], waiters: [] };

/**
 * `holder` asks for a slot (or renews the one it holds) at `now`: granted when it holds one, or a
 * slot is free and no earlier waiter is still waiting; else it waits (`retryAt`, `ahead` of it).
 * `slots` 0: unlimited.
 */
export function acquire(
  table: LeaseTable,
  holder: string,
  now: number,
  slots: number,
  leaseMs = LEASE_MS,
): { table: LeaseTable; grant: Grant } {
  const leases = table.leases.filter((l) => l.until > now && l.holder !== holder);
  const held = table.leases.some((l) => l.holder === holder && l.until > now);
  const waiters = table.waiters.filter((w) => now - w.seen < WAITER_TTL_MS && w.holder !== holder);
  const me = table.waiters.find((w) => w.holder === holder && now - w.seen < WAITER_TTL_MS);
  const ahead = me
    ? waiters.filter((w) => w.since < me.since || (w.since === me.since && w.holder < holder)).length
    : waiters.length;
  const free = slots <= 0 || leases.length < slots;
  if (held || (free && ahead < (slots <= 0 ? Number.POSITIVE_INFINITY : slots - leases.length))) {
    const until = now + leaseMs;
    return { table: { leases: [...leases, { holder, until }], waiters }, grant: { granted: true, until } };
  }
  // further back in the line asks less often (the gate is one object's thread), never past the waiter TTL
  const poll = Math.min(WAIT_POLL_MS * (1 + ahead), WAITER_TTL_MS / 2);
  const soonest = leases.reduce((t, l) => Math.min(t, l.until), now + poll);
  const waiter: Waiter = { holder, since: me?.since ?? now, seen: now };
  return {
    table: { leases, waiters: [...waiters, waiter] },
    grant: { granted: false, retryAt: Math.max(now + 1, soonest), ahead },
  };
}

/** `holder`'s step ended (done, failed or stopped): its slot is free. */
export function release(table: LeaseTable, holder: string, now: number): LeaseTable {
  return {
    leases: table.leases.filter((l) => l.holder !== holder && l.until > now),
    waiters: table.waiters.filter((w) => w.holder !== holder && now - w.seen < WAITER_TTL_MS),
  };
}

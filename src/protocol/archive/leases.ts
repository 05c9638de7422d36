// Archive slots: at most `slots` archive steps at once per object class (issue 28 item 4: ~40
// overdue archive steps on the local episode tier's one thread starved every live request for a
// minute). An archive step asks for a lease before it starts and gives it back when it ends; a
// step that crashed (or whose object was evicted mid-step) loses its lease when it expires, so no
// slot is held forever.
//
// A step that finds no slot free joins a line and is *called* when its turn comes: the gate hands
// the freed slot to the first in line (a lease in its name) and wakes it (`woken`). Waiters do not
// poll. Polling kept every waiting object awake (it asked again every second or few, sooner than a
// runtime evicts an idle object), and a local runtime's SQLite heap, shared by every object of the
// process, ran out with a few thousand open at once (SQLITE_NOMEM). A waiter that is never woken
// (its wake was lost) asks again by its own alarm after ASK_AGAIN_MS and keeps its place in line.
//
// Steps are paced: a step's slot rests after it for as long as the step took (a pause lease in the
// slot, `pause:<holder>`, up to MAX_PAUSE_MS), so archive work takes at most about half of a local
// runtime's one thread. Handed on back to back, steps kept the thread busy for tens of seconds and
// `/v1/health` waited up to 10 s behind them (the cost bench, case (b)).
//
// Pure: the rules run against a LeaseStore; the ArchiveGate object (src/objects/archive/gate.ts)
// keeps it in SQLite, where each rule reads a bounded number of rows (the leases, at most `slots`
// of them, and the head of the line), however long the line.

/** A granted slot: whose, and until when (epoch ms) unless renewed or released. */
export interface Lease {
  readonly holder: string;
  readonly until: number;
}

export type Grant =
  | { readonly granted: true; readonly until: number }
  | { readonly granted: false; readonly retryAt: number; readonly ahead: number };

/** What the gate keeps: the leases and the line of waiters, in the order they first asked. */
export interface LeaseStore {
  /** Every lease, expired ones included (at most `slots` plus those not yet dropped). */
  leases(): Lease[];
  putLease(holder: string, until: number): void;
  dropLease(holder: string): void;
  /** When `holder` joined the line, or null when it is not in it. */
  waitingSince(holder: string): number | null;
  addWaiter(holder: string, since: number): void;
  dropWaiter(holder: string): void;
  /** How many waiters are ahead of one that joined at `since` (earlier, or as early with a smaller name). */
  aheadOf(since: number, holder: string): number;
  /** The first `n` waiters in line. */
  firstWaiters(n: number): string[];
}

/** How long a lease lasts unless renewed (a step longer than this renews it as it goes). */
export const LEASE_MS = 30_000;
/**
 * How soon a waiter asks again by itself, in case its wake was lost (ms). Beyond the local
 * runtime's eviction window (src/objects/storage/alarm-window.ts) and long enough that the waiter
 * has been evicted meanwhile: a line of thousands costs no memory.
 */
export const ASK_AGAIN_MS = 300_000;

/**
 * Hand free slots to the first waiters in line (expired leases dropped first). Returns the holders
 * now leased, for the gate to wake. `slots` 0: unlimited (nobody waits).
 */
export function promote(store: LeaseStore, now: number, slots: number, leaseMs = LEASE_MS): string[] {
  const current = dropExpired(store, now);
  if (slots <= 0) return [];
  const free = slots - current.length;
  if (free <= 0) return [];
  const next = store.firstWaiters(free);
  for (const holder of next) {
    store.dropWaiter(holder);
    store.putLease(holder, now + leaseMs);
  }
  return next;
}

/**
 * `holder` asks for a slot (or renews the one it holds) at `now`: granted when it holds one, or a
 * slot is free once the line ahead of it is served; else it joins (or keeps its place in) the line
 * and is woken when its turn comes. `woken`: others the ask leased (their lease had expired).
 */
export function acquire(
  store: LeaseStore,
  holder: string,
  now: number,
  slots: number,
  leaseMs = LEASE_MS,
): { grant: Grant; woken: string[] } {
  const woken = promote(store, now, slots, leaseMs);
  const until = now + leaseMs;
  const held = store.leases().some((l) => l.holder === holder && l.until > now);
  if (held || slots <= 0) {
    store.putLease(holder, until);
    return { grant: { granted: true, until }, woken: woken.filter((h) => h !== holder) };
  }
  // promote served the line: a slot still free means nobody waits
  if (store.leases().length < slots) {
    store.dropWaiter(holder);
    store.putLease(holder, until);
    return { grant: { granted: true, until }, woken };
  }
  let since = store.waitingSince(holder);
  if (since === null) {
    since = now;
    store.addWaiter(holder, since);
  }
  return { grant: { granted: false, retryAt: now + ASK_AGAIN_MS, ahead: store.aheadOf(since, holder) }, woken };
}

/** The longest rest a slot takes after a step (ms). */
export const MAX_PAUSE_MS = 10_000;

/** The holder of the rest a slot takes after `holder`'s step. */
export function pauseHolder(holder: string): string {
  return `pause:${holder}`;
}

/**
 * `holder`'s step ended (done, failed or stopped), or it no longer waits: its slot rests for
 * `tookMs` (how long the step took, up to MAX_PAUSE_MS; 0: no rest), then goes to the next in line.
 * Returns the holders leased now (none while the slot rests: the gate looks again at its expiry).
 */
export function release(
  store: LeaseStore,
  holder: string,
  now: number,
  slots: number,
  leaseMs = LEASE_MS,
  tookMs = 0,
): string[] {
  const held = store.leases().some((l) => l.holder === holder && l.until > now);
  store.dropLease(holder);
  store.dropWaiter(holder);
  const pause = Math.min(Math.max(0, tookMs), MAX_PAUSE_MS);
  if (held && pause > 0 && slots > 0) store.putLease(pauseHolder(holder), now + pause);
  return promote(store, now, slots, leaseMs);
}

/** When the gate must look again: the soonest lease expiry (its slot then goes to the next in line), or null. */
export function nextExpiry(store: LeaseStore): number | null {
  const leases = store.leases();
  return leases.length === 0 ? null : Math.min(...leases.map((l) => l.until));
}

function dropExpired(store: LeaseStore, now: number): Lease[] {
  const current: Lease[] = [];
  for (const l of store.leases()) {
    if (l.until > now) current.push(l);
    else store.dropLease(l.holder);
  }
  return current;
}

/** A LeaseStore in memory (the tests; the gate's is SQLite). */
export class MemoryLeaseStore implements LeaseStore {
  private readonly leased = new Map<string, number>();
  private readonly line = new Map<string, number>();
  leases(): Lease[] {
    return [...this.leased].map(([holder, until]) => ({ holder, until }));
  }
  putLease(holder: string, until: number): void {
    this.leased.set(holder, until);
  }
  dropLease(holder: string): void {
    this.leased.delete(holder);
  }
  waitingSince(holder: string): number | null {
    return this.line.get(holder) ?? null;
  }
  addWaiter(holder: string, since: number): void {
    this.line.set(holder, since);
  }
  dropWaiter(holder: string): void {
    this.line.delete(holder);
  }
  aheadOf(since: number, holder: string): number {
    return [...this.line].filter(([h, s]) => s < since || (s === since && h < holder)).length;
  }
  firstWaiters(n: number): string[] {
    return [...this.line]
      .sort(([ha, a], [hb, b]) => a - b || (ha < hb ? -1 : ha > hb ? 1 : 0))
      .slice(0, n)
      .map(([h]) => h);
  }
  waiting(): string[] {
    return this.firstWaiters(this.line.size);
  }
}

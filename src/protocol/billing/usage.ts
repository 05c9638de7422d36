// Cloudflare's billing units, counted by the relay itself, per Durable Object instance (pure: no
// `cloudflare:*` import; src/objects/billing/metered.ts feeds it from inside the objects, bench/cost.ts
// prices it with bench/prices.ts).
//
//   requests     incoming fetch, RPC calls and alarms (an RPC call is one billed request; calls on
//                an RpcTarget it returned, e.g. a catch-up cursor, are part of its session: free)
//   wsIn         inbound WebSocket messages (billed 20:1 as requests; outbound ones are free)
//   rowsRead,    summed from every SQL cursor's `rowsRead` / `rowsWritten`, plus one row written
//   rowsWritten  per `setAlarm` (billed so); deleteAll's rows are not seen here. workerd counts a
//                statement's index entries in its rowsWritten, but not the rows FTS5 writes to its
//                own shadow tables (its own statements, and its flush at a savepoint or commit):
//                the code writing FTS5 counts those (SQLite's total_changes()) and adds them here
//   written      rowsWritten by table: each cursor's count under the table its statement writes
//                (`writtenTable`), setAlarm's under "alarm", FTS5's shadow rows under their index's
//   sqliteBytes  `sql.databaseSize` when read
//   r2           counters the archive code bumps (`usageOf(this)?.r2Put(bytes)`, see metered.ts)
//   wakes        constructions (first start, and every wake after hibernation or eviction)
//   activeMs     billed duration, as a MODEL: Cloudflare bills wall-clock time while an object runs
//                or idles in memory unable to hibernate. Here: the union of [event start, event
//                end + IDLE_MS], SQL activity outside events (stream pulls, catch-up cursors)
//                counting as events. The docs (durable-objects/concepts/durable-object-lifecycle,
//                read 2026-12-01) say an object hibernates after 10 s idle, and that idle time that
//                could hibernate is not billed (so the tail overstates), while one that cannot (a
//                pending timer or outgoing call) stays, billed, until evicted 70-140 s later (so it
//                understates). busyMs is the floor: the union of [start, end] only. workerd's
//                clock advances only at I/O, so synchronous work reads as 0 ms.
//
// The counts live in memory, in one record per object kept in the isolate (`meterFor`): a
// hibernated or evicted object finds its record again when it wakes in the same isolate; a new
// isolate (deploy, restart, move) starts from zero, which `since` shows.

/** The table of rows written by a statement that names none `writtenTable` knows (DDL, a SELECT). */
export const OTHER = "other";

const WRITE_TARGET =
  /^\s*(?:INSERT(?:\s+OR\s+[A-Z]+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+[A-Z]+)?|DELETE\s+FROM)\s+["'`[]?([A-Za-z_][A-Za-z0-9_]*)/i;

/** The table a statement writes (its first statement's INSERT, REPLACE, UPDATE or DELETE target), else OTHER. */
export function writtenTable(query: string): string {
  return WRITE_TARGET.exec(query)?.[1] ?? OTHER;
}

/** After its last event, an object stays in memory (billed, in this model) this long. */
export const IDLE_MS = 10_000;
/** Cursors whose counts are still read (a cursor's counts grow while it is iterated). */
export const CURSOR_RING = 64;
/** Records kept per isolate (the oldest constructed goes first). */
export const MAX_RECORDS = 4096;

export interface R2Usage {
  /** PutObject, ListObjects, CreateMultipartUpload, UploadPart, CompleteMultipartUpload, CopyObject. */
  classA: number;
  /** GetObject, HeadObject. */
  classB: number;
  /** DeleteObject: free, counted anyway. */
  deletes: number;
  bytesWritten: number;
  /** What this object keeps in R2 now, as the archive code last said (undefined: never said). */
  bytesStored?: number;
}

/** One object's usage, as `usage()` answers it. */
export interface Usage {
  /** The class (Episode, ViewerHub, EpisodeIndex, RunDirectory). */
  object: string;
  /** The object's id (hex). */
  id: string;
  /** When these counts started (ms since the epoch): the first construction in this isolate. */
  since: number;
  /** When they were read. */
  at: number;
  wakes: number;
  requests: number;
  wsIn: number;
  rowsRead: number;
  rowsWritten: number;
  /** rowsWritten by table (see the head of this file); the values sum to rowsWritten. */
  written: Record<string, number>;
  sqliteBytes: number;
  r2: R2Usage;
  activeMs: number;
  busyMs: number;
  /** Names of objects whose usage belongs with this one's (an episode: its viewer hubs). */
  peers?: string[];
}

/** What an event counts as. */
export type EventKind = "request" | "wsIn" | "none";

/** The part of a SQL cursor read here (its counts grow as it is iterated). */
export interface CountedCursor {
  readonly rowsRead: number;
  readonly rowsWritten: number;
}

export class UsageMeter {
  private wakes = 0;
  private requests = 0;
  private wsIn = 0;
  private rowsRead = 0;
  private rowsWritten = 0;
  private readonly written: Record<string, number> = {};
  private readonly r2: R2Usage = { classA: 0, classB: 0, deletes: 0, bytesWritten: 0 };
  // cursors of this instance, with the counts already added (a bounded ring: no unbounded references)
  private readonly ring: Array<CountedCursor | null> = new Array(CURSOR_RING).fill(null);
  private readonly seenRead = new Float64Array(CURSOR_RING);
  private readonly seenWritten = new Float64Array(CURSOR_RING);
  private readonly tables: string[] = new Array<string>(CURSOR_RING).fill(OTHER);
  private next = 0;
  // the duration model: the current span [spanStart, spanEnd] (open while events run), and the closed ones
  private pending = 0;
  private spanStart = -1;
  private spanEnd = -1;
  private closedMs = 0;
  private busyStart = 0;
  private busyMs = 0;

  constructor(
    readonly object: string,
    readonly id: string,
    readonly since: number,
  ) {}

  /** A construction: the previous instance's cursors are counted and let go. */
  wake(now: number): void {
    this.wakes++;
    this.foldAll(true);
    this.touch(now);
  }

  /** An event (fetch, RPC call, alarm, socket message) starts. */
  begin(now: number, kind: EventKind): void {
    used(this);
    if (kind === "request") this.requests++;
    else if (kind === "wsIn") this.wsIn++;
    if (this.pending === 0) {
      if (this.spanStart < 0 || now > this.spanEnd) this.openSpan(now);
      this.busyStart = now;
    }
    this.pending++;
    this.spanEnd = Number.POSITIVE_INFINITY;
  }

  /** An event ended (its promise settled). */
  end(now: number): void {
    if (this.pending === 0) return;
    this.pending--;
    if (this.pending > 0) return;
    this.spanEnd = now + IDLE_MS;
    this.busyMs += Math.max(0, now - this.busyStart);
  }

  /** Work outside an event (a SQL statement from a stream pull or a cursor call) keeps the object active. */
  touch(now: number): void {
    if (this.pending > 0) return;
    if (this.spanStart < 0 || now > this.spanEnd) this.openSpan(now);
    this.spanEnd = Math.max(this.spanEnd, now + IDLE_MS);
  }

  /**
   * A SQL cursor was opened (its statement writes `table`: `writtenTable`): its counts are read
   * when it leaves the ring, or when usage is read.
   */
  cursor(c: CountedCursor, table = OTHER): void {
    const i = this.next;
    if (this.ring[i] !== null) this.fold(i);
    this.ring[i] = c;
    this.seenRead[i] = 0;
    this.seenWritten[i] = 0;
    this.tables[i] = table;
    this.next = (i + 1) % CURSOR_RING;
  }

  /** Rows written outside SQL cursors (a `setAlarm` is billed as one; FTS5's shadow rows), under `table`. */
  rows(read: number, written: number, table = OTHER): void {
    this.rowsRead += read;
    this.addWritten(table, written);
  }

  private addWritten(table: string, n: number): void {
    if (n === 0) return;
    this.rowsWritten += n;
    this.written[table] = (this.written[table] ?? 0) + n;
  }

  // ---- R2, for the archive code ----

  /** One PutObject of `bytes` (class A); `replaced`: the bytes of an object it overwrote. */
  r2Put(bytes: number, replaced = 0): void {
    this.r2.classA++;
    this.r2.bytesWritten += bytes;
    this.r2.bytesStored = (this.r2.bytesStored ?? 0) + bytes - replaced;
  }

  /**
   * One operation of a multipart upload as it happens (class A: the create, a part of `bytes`,
   * the complete, which also stores `stored` bytes): an upload a restart cut, resumed later, is
   * counted once per operation R2 really did.
   */
  r2MultipartOp(bytes = 0, stored = 0): void {
    this.r2.classA++;
    this.r2.bytesWritten += bytes;
    this.r2.bytesStored = (this.r2.bytesStored ?? 0) + stored;
  }

  /** One GetObject (class B). */
  r2Get(): void {
    this.r2.classB++;
  }

  /** One HeadObject (class B). */
  r2Head(): void {
    this.r2.classB++;
  }

  /** One ListObjects (class A). */
  r2List(): void {
    this.r2.classA++;
  }

  /** One DeleteObject (free) of an object of `bytes`. */
  r2Delete(bytes = 0): void {
    this.r2.deletes++;
    if (this.r2.bytesStored !== undefined) this.r2.bytesStored = Math.max(0, this.r2.bytesStored - bytes);
  }

  /** What this object keeps in R2 now, when the archive code knows it better than the sum of its puts. */
  r2Stored(bytes: number): void {
    this.r2.bytesStored = bytes;
  }

  /** The counts as of `now` (the ring's cursors are read, and kept). */
  snapshot(now: number, sqliteBytes: number): Usage {
    this.foldAll(false);
    const end = this.pending > 0 ? now : this.spanEnd;
    return {
      object: this.object,
      id: this.id,
      since: this.since,
      at: now,
      wakes: this.wakes,
      requests: this.requests,
      wsIn: this.wsIn,
      rowsRead: this.rowsRead,
      rowsWritten: this.rowsWritten,
      written: { ...this.written },
      sqliteBytes,
      r2: { ...this.r2 },
      activeMs: this.closedMs + (this.spanStart < 0 ? 0 : Math.max(0, end - this.spanStart)),
      busyMs: this.busyMs + (this.pending > 0 ? Math.max(0, now - this.busyStart) : 0),
    };
  }

  private openSpan(now: number): void {
    if (this.spanStart >= 0) this.closedMs += Math.max(0, this.spanEnd - this.spanStart);
    this.spanStart = now;
    this.spanEnd = now;
  }

  private fold(i: number): void {
    const c = this.ring[i]!;
    try {
      const r = c.rowsRead;
      const w = c.rowsWritten;
      this.rowsRead += r - this.seenRead[i]!;
      this.addWritten(this.tables[i]!, w - this.seenWritten[i]!);
      this.seenRead[i] = r;
      this.seenWritten[i] = w;
    } catch {
      this.ring[i] = null; // a cursor the runtime no longer answers for: what it had is counted
    }
  }

  private foldAll(release: boolean): void {
    for (let i = 0; i < CURSOR_RING; i++) {
      if (this.ring[i] === null) continue;
      this.fold(i);
      if (release) this.ring[i] = null;
    }
  }
}

/** The records, least recently used first (a Map keeps its insertion order). */
const records = new Map<string, UsageMeter>();
/** Meters kept as records (a meter a test constructs itself is not). */
const kept = new WeakSet<UsageMeter>();
/** The key last moved to the end of `records` (an object's events in a row move nothing). */
let lastKey = "";

/**
 * The record of object `id` of class `object` in this isolate, woken (a construction). At most
 * MAX_RECORDS are kept: the least recently used goes first. (Dropping the least recently
 * constructed instead lost a busy object's counts: a run's index, constructed first, was dropped
 * once 4,096 episodes had been, and its next wake started again from zero.)
 */
export function meterFor(object: string, id: string, now: number): UsageMeter {
  const key = `${object}:${id}`;
  const m = records.get(key) ?? new UsageMeter(object, id, now);
  kept.add(m);
  used(m);
  m.wake(now);
  return m;
}

/** `m` was used now: its record goes last in line to be dropped (back in, if it was dropped while its object lived). */
function used(m: UsageMeter): void {
  if (!kept.has(m)) return;
  const key = `${m.object}:${m.id}`;
  if (records.get(key) === m && lastKey === key) return;
  records.delete(key);
  records.set(key, m);
  lastKey = key;
  while (records.size > MAX_RECORDS) records.delete(records.keys().next().value!);
}

/** Sum of several objects' usage (the bench's totals). */
export function sumUsage(us: readonly Usage[]): Omit<Usage, "object" | "id" | "since" | "at" | "peers"> {
  const t = { wakes: 0, requests: 0, wsIn: 0, rowsRead: 0, rowsWritten: 0, sqliteBytes: 0, activeMs: 0, busyMs: 0 };
  const r2: R2Usage = { classA: 0, classB: 0, deletes: 0, bytesWritten: 0, bytesStored: 0 };
  const written: Record<string, number> = {};
  for (const u of us) {
    for (const k of Object.keys(t) as Array<keyof typeof t>) t[k] += u[k];
    for (const [table, n] of Object.entries(u.written)) written[table] = (written[table] ?? 0) + n;
    r2.classA += u.r2.classA;
    r2.classB += u.r2.classB;
    r2.deletes += u.r2.deletes;
    r2.bytesWritten += u.r2.bytesWritten;
    r2.bytesStored! += u.r2.bytesStored ?? 0;
  }
  return { ...t, written, r2 };
}

// Limits from wrangler.toml [vars] (each a string, or absent): the one parser every limit goes
// through, and the limits more than one side reads. An episode's row is paced by three of them: the
// Episode object sends it at most every INDEX_FLUSH_MS (limits.ts), and its run's
// index answers each send with the interval that keeps the run's live episodes under
// INDEX_WRITES_PER_S together, or INDEX_IDLE_FLUSH_MS while nobody attends the run
// (src/objects/registry/episode-index.ts, attention.ts); the runscale bench reads them to
// say what the index told. Pure: no runtime imports.

/** A limit's value: a positive finite number, else (absent, empty, zero, negative, not a number) `fallback`. */
export function limitFrom(value: string | undefined, fallback: number): number {
  const n = value === undefined || value === "" ? Number.NaN : Number(value);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

/**
 * `INDEX_FLUSH_MS`'s default: the least time between two throttled sends of an episode's row, ms. A running
 * episode's counters in the list may lag this much (a product decision: each send writes rows in the run's index,
 * billed per row); what a reader decides on (creation, finish, failure, deletion, flags) goes at once.
 */
export const DEFAULT_INDEX_FLUSH_MS = 30_000;
/**
 * `SEARCH_FLUSH_MS`'s default: how long a running episode's text may wait in its run's index before it is searchable,
 * ms (a product decision: every write to the search's FTS5 index writes several rows of its own, so a running
 * episode's text goes in once per interval, not with every row; text that replaces text, an episode's first text
 * and an ended episode's text go at once).
 */
export const DEFAULT_SEARCH_FLUSH_MS = 300_000;
/** `SEARCH_FLUSH_MS` at most (a larger value is taken as this): a running episode's text is found within the hour. */
export const MAX_SEARCH_FLUSH_MS = 3_600_000;

/** How long a running episode's text may wait before its run's search takes it, ms (`SEARCH_FLUSH_MS`). */
export function searchFlushMsFrom(vars: { SEARCH_FLUSH_MS?: string }): number {
  return Math.min(MAX_SEARCH_FLUSH_MS, limitFrom(vars.SEARCH_FLUSH_MS, DEFAULT_SEARCH_FLUSH_MS));
}

/** `INDEX_WRITES_PER_S`'s default: the row updates a run's live episodes send per second together, at most. */
export const DEFAULT_INDEX_WRITES_PER_S = 250;

/**
 * `INDEX_IDLE_FLUSH_MS`'s default: the least time between two throttled sends of an episode's row while nobody attends
 * its run (no run socket open, no read of its rows within ATTENTION_MS: src/objects/registry/attention.ts), ms. A
 * live row's counters only matter to someone looking at them, and each send writes ~3.8 rows (the episode's alarm and
 * `search_sync`, the index's row and its live entry: the cost bench). Its paced episode (a turn every 20 s) writes
 * 1,107 rows at 120 s ($0.00196), 1,489 at 30 s; 90 s would sit at its $0.002 target, 300 s save 76 rows more.
 */
export const DEFAULT_INDEX_IDLE_FLUSH_MS = 120_000;
/** `INDEX_IDLE_FLUSH_MS` at most (a larger value is taken as this): an unattended run's live rows lag within the hour. */
export const MAX_INDEX_IDLE_FLUSH_MS = 3_600_000;

/** How often an episode's row may be sent to its run's index. */
export interface IndexPacing {
  /** Least ms between two throttled sends of one episode's row (`INDEX_FLUSH_MS`). */
  flushMs: number;
  /** The same while nobody attends the run (`INDEX_IDLE_FLUSH_MS`; never less than `flushMs`). */
  idleFlushMs: number;
  /** Row updates per second a run's live episodes send together at most (`INDEX_WRITES_PER_S`). */
  writesPerS: number;
}

export function indexPacingFrom(vars: {
  INDEX_FLUSH_MS?: string;
  INDEX_IDLE_FLUSH_MS?: string;
  INDEX_WRITES_PER_S?: string;
}): IndexPacing {
  const flushMs = limitFrom(vars.INDEX_FLUSH_MS, DEFAULT_INDEX_FLUSH_MS);
  const idle = Math.min(MAX_INDEX_IDLE_FLUSH_MS, limitFrom(vars.INDEX_IDLE_FLUSH_MS, DEFAULT_INDEX_IDLE_FLUSH_MS));
  return {
    flushMs,
    idleFlushMs: Math.max(flushMs, idle),
    writesPerS: limitFrom(vars.INDEX_WRITES_PER_S, DEFAULT_INDEX_WRITES_PER_S),
  };
}

/**
 * The interval a run's index tells each episode: INDEX_FLUSH_MS while someone attends the run (else
 * INDEX_IDLE_FLUSH_MS), or longer so `live` episodes together stay under INDEX_WRITES_PER_S.
 */
export function flushIntervalMs(pacing: IndexPacing, live: number, attended: boolean): number {
  const base = attended ? pacing.flushMs : pacing.idleFlushMs;
  return Math.max(base, Math.ceil((live * 1000) / pacing.writesPerS));
}

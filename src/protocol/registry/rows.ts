// A run index's rows and the pure parts of its queries (parameters, scope checks; the cursors are list-cursors.ts'),
// kept apart from the Durable Object so they can be reasoned about (and tested) on their own.

import { inScope } from "../http/auth.js";
import { RelayError } from "../http/errors.js";
import { type RowPosition, readPosition } from "./list-cursors.js";

export { entryOf, INDEX_STATUSES, type IndexEntry, type IndexRow, type IndexStatus, keptRow } from "./entry.js";

import { INDEX_STATUSES, type IndexEntry, type IndexStatus } from "./entry.js";
import { parseRowFilter, type RowFilter } from "./row-filter.js";

/** Header the Worker sets on requests to the index: the viewer's `episodes` patterns as JSON. */
export const SCOPE_HEADER = "x-episode-scope";

/** Who may see what: null = everything (a `*` pattern, or auth off on loopback). */
export type Scope = string[] | null;

export function scopeOf(patterns: readonly string[]): Scope {
  return patterns.includes("*") ? null : [...patterns];
}

export function visible(scope: Scope, id: string, prefix: string | null = null): boolean {
  if (prefix !== null && !id.startsWith(prefix)) return false;
  return scope === null || inScope(scope, id);
}

// ---- listing parameters ----

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 500;

/**
 * Newest-updated first, best reward first, or latest training step first (episodes without a reward or a step last).
 */
export type SortKey = "updated" | "reward" | "step";
export const SORT_KEYS: readonly SortKey[] = ["updated", "reward", "step"];

export interface ListQuery {
  status: IndexStatus | null;
  /** Task, stop condition, truncated, errored, reward ranges, turns and tokens (row-filter.ts). */
  filter: RowFilter;
  /** Only ids starting with this. */
  prefix: string | null;
  limit: number;
  sort: SortKey;
  /** Continue after this row, in the sort's order. */
  after: RowPosition | null;
}

/** What a page of a run's finished episodes (the bulk fetch) selects beside the scope: the list's filters, and whether each item carries its row. */
export interface FinishedSelection {
  filter: RowFilter;
  withRows: boolean;
}

/** One page of a run's episodes (`GET /v1/runs/{run}/episodes`); the clients use this type too. */
export interface EpisodesPage {
  /** At most `limit` episodes, in the sort's order: possibly fewer, even none, with a cursor (see `cursor`). */
  episodes: IndexEntry[];
  /** Pass as `options.cursor` for the next page; null on the last one. A short page with a cursor is not the end. */
  cursor: string | null;
  /** Index rows the relay walked past (matching or not) to make this page. */
  searched: number;
}

const PREFIX = /^[A-Za-z0-9._:-]{0,128}$/;

/**
 * `?status=&prefix=&sort=&limit=&cursor=` and the filters (row-filter.ts); throws a RelayError (400, naming the
 * parameter) on a bad value.
 */
export function parseListQuery(params: URLSearchParams, defaultLimit = DEFAULT_LIMIT): ListQuery {
  const status = params.get("status") || null;
  if (status !== null && !(INDEX_STATUSES as readonly string[]).includes(status)) {
    throw new RelayError("bad_status", `status must be one of ${INDEX_STATUSES.join(", ")}`, "status");
  }
  const prefix = params.get("prefix") || null;
  if (prefix !== null && !PREFIX.test(prefix)) {
    throw new RelayError("bad_prefix", "prefix must be up to 128 characters of [A-Za-z0-9._:-]", "prefix");
  }
  const sort = params.get("sort") || "updated";
  if (!(SORT_KEYS as readonly string[]).includes(sort))
    throw new RelayError("bad_sort", `sort must be one of ${SORT_KEYS.join(", ")}`, "sort");
  const rawLimit = params.get("limit");
  let limit = defaultLimit;
  if (rawLimit !== null && rawLimit !== "") {
    limit = /^\d+$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!Number.isSafeInteger(limit) || limit < 1)
      throw new RelayError("bad_limit", `limit must be an integer from 1 to ${MAX_LIMIT}`, "limit");
    limit = Math.min(limit, MAX_LIMIT);
  }
  const cursor = params.get("cursor") || null;
  const filter = parseRowFilter(params);
  return {
    status: status as IndexStatus | null,
    filter,
    prefix,
    limit,
    sort: sort as SortKey,
    after: cursor === null ? null : readPosition("episodes", cursor),
  };
}

/**
 * The refusal for a run with no episode, and for a run the viewer's token covers no episode of:
 * the same bytes both ways, so a token learns nothing of runs that are not its own.
 */
export function noSuchRun(run: string): RelayError {
  return new RelayError(
    "not_found",
    `no run ${JSON.stringify(run)} (no episode of it is within this token's episodes, or none was written)`,
  );
}

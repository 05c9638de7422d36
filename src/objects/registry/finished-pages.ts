// A run's finished episodes in bulk-fetch order, a page at a time (the bulk fetch's source:
// src/worker/run-routes.ts). The order is the one their rows became finished in the run's index
// (`finished_seq`, assigned by the index), so an update that lands late still comes after a cursor
// handed out before it, whatever the episodes' clocks said. A viewer covering the whole run walks
// that order; one covering part of it gets its own finished rows (scoped-rows.ts), or past
// SCOPED_BUDGET of them walks the order too, at most `budget` rows per page.
//
// With the list's filters (row-filter.ts; an export of a selection), the rows walked are checked
// against them in SQL (episode-pages.ts `conditions`) and the walk reads at most `budget` rows per
// page, matching or not: a rare filter gives short pages, never a scan of the run.

import { entryOf, type IndexEntry } from "../../protocol/registry/entry.js";
import { isFiltered, NO_FILTER } from "../../protocol/registry/row-filter.js";
import { type FinishedSelection, type Scope, visible } from "../../protocol/registry/rows.js";
import { conditions } from "./episode-pages.js";
import { rowsInScope } from "./scoped-rows.js";
import { ROW_COLUMNS, rowOf, type SqlRow } from "./sql-row.js";

/** A finished episode in bulk-fetch order. */
export interface FinishedItem {
  id: string;
  /** Its `finished_seq`: the bulk fetch's cursor position after it. */
  seq: number;
  /** Its index row as the list shows it (only when asked for: `withRows`). */
  row?: IndexEntry;
}

export interface FinishedPage {
  /** At most the page's limit, in order. */
  items: FinishedItem[];
  /** Where the next page starts (a `finished_seq`), or null when none follows. */
  next: number | null;
  /**
   * Rows read that are not in `items` (outside the scope, or not passing the filter): the caller's budget of idle work.
   */
  unsent: number;
}

/** Rows a page may walk past in the run's finished order. */
export const FINISHED_WALK_BUDGET = 1000;

export const ALL_FINISHED: FinishedSelection = Object.freeze({ filter: NO_FILTER, withRows: false });

type Walked = SqlRow & { f: number; ok: number };

/** The finished episodes after `after` within `scope` that pass the selection's filter: at most `limit`. */
export function finishedPage(
  sql: SqlStorage,
  after: number,
  limit: number,
  scope: Scope,
  budget = FINISHED_WALK_BUDGET,
  selection: FinishedSelection = ALL_FINISHED,
): FinishedPage {
  const filtered = isFiltered(selection.filter);
  const check = conditions({ status: null, prefix: null, filter: selection.filter });
  const columns = `${selection.withRows ? `${ROW_COLUMNS}, ` : "rows.id AS id, "}rows.finished_seq AS f, COALESCE(${check.sql}, 0) AS ok`;
  const item = (r: Walked): FinishedItem =>
    selection.withRows ? { id: r.id, seq: r.f, row: entryOf(rowOf(r)) } : { id: r.id, seq: r.f };
  if (scope !== null) {
    const mine = rowsInScope<Walked>(sql, scope, columns, check.args);
    if (mine !== null) {
      const items = mine.filter((r) => r.f !== null && r.f > after && r.ok === 1).sort((a, b) => a.f - b.f);
      const page = items.slice(0, limit);
      return {
        items: page.map(item),
        next: items.length > limit ? page.at(-1)!.f : null,
        unsent: mine.length - page.length,
      };
    }
  }
  const walk = scope === null && !filtered ? limit : budget;
  const walked = sql
    .exec<Walked>(
      `SELECT ${columns} FROM rows WHERE finished_seq > ? ORDER BY finished_seq LIMIT ?`,
      ...check.args,
      after,
      walk,
    )
    .toArray();
  const items: FinishedItem[] = [];
  let read = 0;
  for (const r of walked) {
    read++;
    if (r.ok !== 1 || !visible(scope, r.id)) continue;
    items.push(item(r));
    if (items.length === limit) break;
  }
  const full = walked.length === walk;
  const next = read < walked.length || full ? walked[read - 1]!.f : null;
  return { items, next, unsent: read - items.length };
}

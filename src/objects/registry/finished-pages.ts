// A run's finished episodes in bulk-fetch order, a page at a time (the bulk fetch's source:
// src/worker/run-routes.ts). The order is the one their rows became finished in the run's index
// (`finished_seq`, assigned by the index), so an update that lands late still comes after a cursor
// handed out before it, whatever the episodes' clocks said. A viewer covering the whole run walks
// that order; one covering part of it gets its own finished rows (scoped-rows.ts), or past
// SCOPED_BUDGET of them walks the order too, at most `budget` rows per page.

import type { Scope } from "../../protocol/registry/rows.js";
import { rowsInScope } from "./scoped-rows.js";
import { visible } from "../../protocol/registry/rows.js";

/** A finished episode in bulk-fetch order. */
export interface FinishedItem {
  id: string;
  /** Its `finished_seq`: the bulk fetch's cursor position after it. */
  seq: number;
}

export interface FinishedPage {
  /** At most the page's limit, in order. */
  items: FinishedItem[];
  /** Where the next page starts (a `finished_seq`), or null when none follows. */
  next: number | null;
  /** Rows read that are not in `items` (outside the scope): the caller's budget of idle work. */
  unsent: number;
}

/** Rows a page may walk past in the run's finished order. */
export const FINISHED_WALK_BUDGET = 1000;

/** The finished episodes after `after` within `scope`: at most `limit`. */
export function finishedPage(sql: SqlStorage, after: number, limit: number, scope: Scope, budget = FINISHED_WALK_BUDGET): FinishedPage {
  if (scope !== null) {
    const mine = rowsInScope<{ id: string; f: number | null }>(sql, scope, "id, finished_seq AS f", []);
    if (mine !== null) {
      const items = mine
        .filter((r): r is { id: string; f: number } => r.f !== null && r.f > after)
        .sort((a, b) => a.f - b.f)
        .map((r) => ({ id: r.id, seq: r.f }));
      const page = items.slice(0, limit);
      return { items: page, next: items.length > limit ? page.at(-1)!.seq : null, unsent: mine.length - page.length };
    }
  }
  const walked = sql
    .exec<{ id: string; f: number }>(
      "SELECT id, finished_seq AS f FROM rows WHERE finished_seq > ? ORDER BY finished_seq LIMIT ?",
      after,
      scope === null ? limit : budget,
    )
    .toArray();
  const items: FinishedItem[] = [];
  let read = 0;
  for (const r of walked) {
    read++;
    if (!visible(scope, r.id)) continue;
    items.push({ id: r.id, seq: r.f });
    if (items.length === limit) break;
  }
  const full = walked.length === (scope === null ? limit : budget);
  const next = read < walked.length || full ? walked[read - 1]!.f : null;
  return { items, next, unsent: read - items.length };
}

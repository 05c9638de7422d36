// A page of a run's episode list, read from SQLite without scanning the run (a run may hold
// 100,000 rows). Each page walks one index in the list's order from the cursor on:
//  - sorted by update, the index of the most selective filter given (task, stop condition,
//    truncated, errored, status: schemas.ts v4), so a page of those reads about a page of rows;
//  - sorted by reward, the reward index (rewarded rows, then those without a reward);
//  - sorted by step, the step index (rows with a step, within a step range when one is given, then
//    those without one).
// Every other condition (the rest of the filters, a prefix) is checked on the rows the walk passes,
// and a walk stops after SCAN_BUDGET rows: a rare match then gives a short page whose cursor
// continues where the walk stopped, instead of a request that reads the run.
//
// A viewer covering part of the run (scope not null) gets its page from the rows it covers only,
// read by primary key and sorted here (scoped-rows.ts), so `searched` and the cursor say nothing of
// the others; past SCOPED_BUDGET such rows it walks as above, `searched` counting the rows in its
// scope only (the Worker seals every cursor: a position may then be a row outside it).

import type { IndexRow } from "../../protocol/registry/entry.js";
import type { RowPosition } from "../../protocol/registry/list-cursors.js";
import type { RowFilter } from "../../protocol/registry/row-filter.js";
import { type ListQuery, type Scope, visible } from "../../protocol/registry/rows.js";
import { ENDED, LIVE } from "./live-rows.js";
import { rowsInScope } from "./scoped-rows.js";
import { ROW_COLUMNS, rowOf, type SqlRow } from "./sql-row.js";

/** Rows one page may walk past (matching or not). */
export const SCAN_BUDGET = 1000;

export interface EpisodePage {
  /** At most `q.limit` rows, in the sort's order. */
  rows: IndexRow[];
  /** Where the next page starts; null when the walk reached the end. */
  next: RowPosition | null;
  /** Rows in the viewer's scope walked past to make this page. */
  searched: number;
}

/**
 * One index walk: its index, its range (a filter's value and the cursor), its order. Sorted by update, the ended
 * rows' index and the live rows (`live`: `rows_live`, sorted here) are walked as one, merged in the list's order.
 */
interface Walk {
  index: string;
  where: string[];
  args: SqlStorageValue[];
  order: string;
  /** Whether the walk's rows are the ended ones (its index is one of live-rows.ts ENDED_INDEXES). */
  ended?: boolean;
  /**
   * The live rows merged in: by `rows_live` in the list's order (the filter checked on each row walked), or by an
   * index on the filter's value (a task's or a step's few rows, then sorted).
   */
  live?: { index: string; where: string[]; args: SqlStorageValue[] } | null;
}

/** The row as walked: all columns, and whether it passes every condition but the scope (checked on the row). */
type WalkedRow = SqlRow & { ok: number };

export function episodePage(sql: SqlStorage, q: ListQuery, scope: Scope, budget = SCAN_BUDGET): EpisodePage {
  if (scope !== null) {
    const scoped = scopedPage(sql, q, scope);
    if (scoped !== null) return scoped;
  }
  // the scope is checked here, on each row walked (no SQL lookup per pattern and row)
  const check = conditions(q);
  const rows: IndexRow[] = [];
  let walkedAll = 0;
  let searched = 0;
  let last: RowPosition | null = null;
  for (const walk of walksOf(q)) {
    const room = budget - walkedAll;
    const { query, args } = walkSql(walk, check, room);
    const cursor = sql.exec<WalkedRow>(query, ...args);
    let walked = 0;
    for (const r of cursor) {
      walked++;
      const mine = visible(scope, r.id);
      if (mine) searched++;
      if (r.ok === 1 && mine) {
        // one match past the page only says there is more: the page ends at the one before
        if (rows.length === q.limit) return { rows, next: last, searched };
        rows.push(rowOf(r));
      }
      last = { key: keyOf(q, r), id: r.id };
    }
    walkedAll += walked;
    // the walk stopped on the budget, not at the end of its index: the next page goes on from here
    if (walked === room) return { rows, next: last, searched };
  }
  return { rows, next: null, searched };
}

/**
 * A walk's statement: its index in its order, at most `room` rows. Sorted by update, the ended rows' index and the
 * live rows' are merged in the list's order (SQLite merges the two sides as it reads them; each stops at `room` too).
 */
function walkSql(
  walk: Walk,
  check: { sql: string; args: SqlStorageValue[] },
  room: number,
): { query: string; args: SqlStorageValue[] } {
  const side = (index: string, terms: string[]) =>
    `SELECT ${ROW_COLUMNS}, COALESCE(${check.sql}, 0) AS ok FROM rows INDEXED BY ${index}
     ${terms.length ? `WHERE ${terms.join(" AND ")}` : ""}`;
  const sides: Array<{ query: string; args: SqlStorageValue[] }> = [];
  if (walk.ended !== false)
    sides.push({
      query: side(walk.index, walk.ended ? [ENDED, ...walk.where] : walk.where),
      args: [...check.args, ...walk.args],
    });
  const live = walk.live;
  if (live) sides.push({ query: side(live.index, [LIVE, ...live.where]), args: [...check.args, ...live.args] });
  // one compound ordered as a whole: SQLite merges its sides as it reads them, so the LIMIT bounds what is read
  return {
    query: `${sides.map((x) => x.query).join(" UNION ALL ")} ORDER BY ${walk.order} LIMIT ?`,
    args: [...sides.flatMap((x) => x.args), room],
  };
}

/** The page of a partial scope from its own rows (null: it covers too many, walk instead). */
function scopedPage(sql: SqlStorage, q: ListQuery, scope: readonly string[]): EpisodePage | null {
  const check = conditions(q);
  const mine = rowsInScope<WalkedRow>(sql, scope, `${ROW_COLUMNS}, COALESCE(${check.sql}, 0) AS ok`, check.args);
  if (mine === null) return null;
  const matching = mine.filter((r) => r.ok === 1 && follows(q, r)).sort((a, b) => order(q, a, b));
  const page = matching.slice(0, q.limit);
  const last = page.at(-1);
  return {
    rows: page.map(rowOf),
    next: matching.length > q.limit && last ? { key: keyOf(q, last), id: last.id } : null,
    searched: mine.length,
  };
}

function keyOf(q: ListQuery, r: SqlRow): number | null {
  return q.sort === "updated" ? r.updated : q.sort === "reward" ? r.reward : r.step;
}

/**
 * The list's order, as the walks' ORDER BY gives it: by update (newest first), or by reward or step (highest first,
 * rows without one last), then by id, descending.
 */
function order(q: ListQuery, a: SqlRow, b: SqlRow): number {
  const ka = keyOf(q, a);
  const kb = keyOf(q, b);
  if (ka !== kb) {
    if (ka === null) return 1;
    if (kb === null) return -1;
    return kb - ka;
  }
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

/** Whether `r` comes after the cursor `q.after` in the list's order. */
function follows(q: ListQuery, r: SqlRow): boolean {
  if (q.after === null) return true;
  return (
    order(q, { ...r, updated: q.after.key ?? 0, reward: q.after.key, step: q.after.key, id: q.after.id } as SqlRow, r) <
    0
  );
}

/** The walks a page makes, in order, from `q.after` on. */
function walksOf(q: ListQuery): Walk[] {
  const after = q.after;
  if (q.sort === "updated") {
    const walk = drivingWalk(q.filter, q.status);
    if (after !== null) {
      for (const w of [walk, walk.live]) {
        w?.where.push("(updated, id) < (?, ?)");
        w?.args.push(after.key, after.id);
      }
    }
    return [walk];
  }
  // reward, step: SQLite orders NULL last under DESC, so the rows with a value come first, then the rest by id
  const column = q.sort;
  const order = `${column} DESC, id DESC`;
  const index = column === "reward" ? "rows_by_reward" : "rows_by_step";
  const valued: Walk = { index, where: [`${column} IS NOT NULL`], args: [], order };
  const unvalued: Walk = { index, where: [`${column} IS NULL`], args: [], order };
  const range = column === "step" ? q.filter.step : null;
  if (range !== null) {
    // a step range bounds the walk itself (rows without a step never match one); its upper end is
    // where the walk starts, unless a cursor says where (one bound for SQLite to seek by, not two)
    if (range.min !== null) {
      valued.where.push("step >= ?");
      valued.args.push(range.min);
    }
    if (range.max !== null && after?.key == null) {
      valued.where.push("step <= ?");
      valued.args.push(range.max);
    }
  }
  const walks = range !== null ? [valued] : [valued, unvalued];
  if (after === null) return walks;
  if (after.key === null) {
    unvalued.where.push("id < ?");
    unvalued.args.push(after.id);
    return range !== null ? [] : [unvalued];
  }
  valued.where.push(`(${column}, id) < (?, ?)`);
  valued.args.push(after.key, after.id);
  return walks;
}

/**
 * Sorted by update: the index of the first filter given that has one, else all rows by update; those hold the ended
 * rows, and the live ones are merged in (live-rows.ts), unless the status asked says which.
 */
function drivingWalk(f: RowFilter, status: string | null): Walk {
  const walk = endedWalk(f, status);
  if (status !== null && status !== "live") return { ...walk, ended: true, live: null };
  // a task's or a step's live rows by their value (a group's or a batch's: few); the others in the list's order, the
  // filter checked on each row walked
  const byValue = walk.index === "rows_by_task" || walk.index === "rows_by_step_updated";
  const live = byValue
    ? {
        index: walk.index === "rows_by_task" ? "rows_of_task" : "rows_by_step",
        where: [...walk.where],
        args: [...walk.args],
      }
    : { index: "rows_live", where: [], args: [] };
  return { ...walk, ended: status === null, live };
}

function endedWalk(f: RowFilter, status: string | null): Walk {
  const order = "updated DESC, id DESC";
  if (f.task !== null) return { index: "rows_by_task", where: ["task = ?"], args: [f.task], order };
  if (f.stop !== null) return { index: "rows_by_stop", where: ["stop = ?"], args: [f.stop], order };
  if (f.isTruncated === true) return { index: "rows_is_truncated", where: ["is_truncated = 1"], args: [], order };
  if (f.isTimeout === true) return { index: "rows_is_timeout", where: ["is_timeout = 1"], args: [], order };
  if (f.errored === true) return { index: "rows_errored", where: ["error IS NOT NULL"], args: [], order };
  if (f.step !== null && f.step.min !== null && f.step.min === f.step.max) {
    return { index: "rows_by_step_updated", where: ["step = ?"], args: [f.step.min], order };
  }
  if (f.kind !== null) return { index: "rows_by_kind", where: ["kind = ?"], args: [f.kind], order };
  if (status !== null) return { index: "rows_by_status", where: ["status = ?"], args: [status], order };
  return { index: "rows_by_updated", where: [], args: [], order };
}

/**
 * Every condition of the query but the scope as one SQL expression on `rows` (checked on each walked row; "1" when
 * none): the list's and the search's.
 */
export function conditions(q: Pick<ListQuery, "status" | "prefix" | "filter">): {
  sql: string;
  args: SqlStorageValue[];
} {
  const parts: string[] = [];
  const args: SqlStorageValue[] = [];
  const add = (part: string, ...values: SqlStorageValue[]) => {
    parts.push(part);
    args.push(...values);
  };
  const f = q.filter;
  if (q.status !== null) add("rows.status = ?", q.status);
  if (q.prefix !== null) add("substr(rows.id, 1, ?) = ?", q.prefix.length, q.prefix);
  if (f.task !== null) add("rows.task = ?", f.task);
  if (f.stop !== null) add("rows.stop = ?", f.stop);
  // an uncounted truncation (NULL) matches neither value
  if (f.isTruncated !== null) add(f.isTruncated ? "rows.is_truncated = 1" : "rows.is_truncated = 0");
  if (f.isTimeout !== null) add(f.isTimeout ? "rows.is_timeout = 1" : "COALESCE(rows.is_timeout, 0) = 0");
  if (f.errored !== null) add(f.errored ? "rows.error IS NOT NULL" : "rows.error IS NULL");
  if (f.minTurns !== null) add("rows.turns >= ?", f.minTurns);
  if (f.minTokens !== null) add("rows.tokens >= ?", f.minTokens);
  if (f.kind !== null) add("rows.kind = ?", f.kind);
  if (f.env !== null) add("rows.env = ?", f.env);
  if (f.policyVersion !== null) add("rows.policy_version = ?", f.policyVersion);
  if (f.flag !== null) add("EXISTS (SELECT 1 FROM flags WHERE flags.episode = rows.id AND flags.rule = ?)", f.flag);
  if (f.flagged !== null) add(f.flagged ? "rows.flags IS NOT NULL" : "rows.flags IS NULL");
  if (f.step !== null) {
    add("rows.step IS NOT NULL");
    if (f.step.min !== null) add("rows.step >= ?", f.step.min);
    if (f.step.max !== null) add("rows.step <= ?", f.step.max);
  }
  for (const r of f.rewards) {
    // scores holds each row's scores by key (index-store.ts): one primary-key lookup per walked row
    add(
      "EXISTS (SELECT 1 FROM scores s WHERE s.id = rows.id AND s.key = ? AND s.score >= ? AND s.score <= ?)",
      r.key,
      r.min ?? -Number.MAX_VALUE,
      r.max ?? Number.MAX_VALUE,
    );
  }
  return { sql: parts.length ? `(${parts.join(" AND ")})` : "1", args };
}

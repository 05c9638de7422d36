// A run index's `rows` table row as SQLite holds it, and its conversion to an IndexRow.

import type { Flag, IndexRow, ProgressFacts } from "../../protocol/registry/entry.js";
import { stopTruncates } from "../../protocol/registry/truncation.js";
import type { Json, JsonObject } from "../../protocol/wire/json-view.js";

/**
 * A row as SQLite holds it: rewards, the dispatch identity and the progress facts as JSON text, the
 * sort key `reward` beside them, and the identity's keys the list filters by (`kind`, `env`,
 * `step`, `policy_version`) as columns of their own.
 */
export type SqlRow = Omit<
  IndexRow,
  | "status"
  | "rewards"
  | "trace_rewards"
  | "task"
  | "group"
  | "stop_condition"
  | "is_truncated"
  | "is_timeout"
  | "truncated"
  | "run_name"
  | "dispatch"
  | "live"
  | "flags"
  | "turns"
> & {
  status: string;
  rewards: string | null;
  /** JSON; NULL in rows written before INDEX_SCHEMA version 8 (see `traceRewardsOf`). */
  trace_rewards: string | null;
  reward: number | null;
  task: string | null;
  grp: string | null;
  stop: string | null;
  /** The first trace's `is_timeout` (a column named `truncated` before INDEX_SCHEMA 13). */
  is_timeout: number | null;
  /** The trainer's truncation; NULL: not counted (INDEX_SCHEMA 13, truncation-recount.ts). */
  is_truncated: number | null;
  run_name: string | null;
  dispatch: string | null;
  kind: string | null;
  env: string | null;
  step: number | null;
  policy_version: number | null;
  live: string | null;
  flags: string | null;
  /** NULL: not counted (rows written before INDEX_SCHEMA version 12, until their episode sends them again). */
  turns: number | null;
} & Record<string, SqlStorageValue>;

/**
 * The `rows` columns as listed (INDEX_SCHEMA 16 on): all but the text waiting for the search (text_since, text_waiting),
 * which may be large and is read only by the search's own statements. Migrations before it read `SELECT *` (rowPages).
 * A migration that adds a column to `rows` adds it here (test/workers/index-store.test.ts holds the two equal).
 */
export const ROW_COLUMNS = [
  "id",
  "run",
  "status",
  "created",
  "updated",
  "ended",
  "seq",
  "traces",
  "nodes",
  "calls",
  "tokens",
  "rewards",
  "reward",
  "error",
  "finished_seq",
  "task",
  "grp",
  "stop",
  "is_timeout",
  "run_name",
  "dispatch",
  "kind",
  "env",
  "step",
  "policy_version",
  "live",
  "flags",
  "trace_rewards",
  "turns",
  "is_truncated",
  "seg_base",
]
  .map((c) => `rows.${c}`)
  .join(", ");

export function rowOf(r: SqlRow): IndexRow {
  return {
    id: r.id,
    run: r.run,
    status: r.status as IndexRow["status"],
    created: r.created,
    updated: r.updated,
    ended: r.ended,
    seq: r.seq,
    traces: r.traces,
    nodes: r.nodes,
    calls: r.calls,
    turns: r.turns ?? null,
    tokens: r.tokens,
    rewards: r.rewards === null ? null : (JSON.parse(r.rewards) as Json),
    error: r.error,
    task: r.task,
    group: r.grp,
    stop_condition: r.stop,
    // storage before INDEX_SCHEMA 13 (read by the migrations before it): `truncated` was is_timeout, and
    // truncation was counted from the stop condition alone
    is_truncated:
      r.is_truncated === undefined
        ? stopTruncates(r.stop)
          ? true
          : null
        : r.is_truncated === null
          ? null
          : r.is_truncated === 1,
    is_timeout: (r.is_timeout ?? r.truncated) === 1,
    run_name: r.run_name,
    dispatch: r.dispatch === null || r.dispatch === undefined ? null : (JSON.parse(r.dispatch) as JsonObject),
    live: r.live === null || r.live === undefined ? null : (JSON.parse(r.live) as ProgressFacts),
    flags: r.flags === null || r.flags === undefined ? [] : (JSON.parse(r.flags) as Flag[]),
    // absent as sent: a row of an older release (or written before INDEX_SCHEMA 8) has none
    ...(r.trace_rewards === null || r.trace_rewards === undefined
      ? {}
      : { trace_rewards: JSON.parse(r.trace_rewards) as Json[] }),
  };
}

/**
 * Write `values` as the row of `table` whose `key` columns hold `keys` (inside the caller's
 * transaction), writing only what changed: no statement when the row holds them all already, else an
 * UPDATE of the changed columns (so only the indexes on those columns are written: each index entry
 * is a row written), or an INSERT for a new row. `held` is the row as stored (null: none).
 * Answers whether anything was written.
 */
export function writeChanged(
  sql: SqlStorage,
  table: string,
  keys: Record<string, SqlStorageValue>,
  values: Record<string, SqlStorageValue>,
  held: Record<string, SqlStorageValue> | null,
): boolean {
  if (held === null) {
    const all = { ...keys, ...values };
    const names = Object.keys(all);
    sql.exec(
      `INSERT INTO ${table} (${names.join(", ")}) VALUES (${names.map(() => "?").join(", ")})`,
      ...Object.values(all),
    );
    return true;
  }
  const changed = Object.keys(values).filter((k) => !sameValue(held[k] ?? null, values[k] ?? null));
  if (changed.length === 0) return false;
  sql.exec(
    `UPDATE ${table} SET ${changed.map((k) => `${k} = ?`).join(", ")} WHERE ${Object.keys(keys)
      .map((k) => `${k} = ?`)
      .join(" AND ")}`,
    ...changed.map((k) => values[k] ?? null),
    ...Object.values(keys),
  );
  return true;
}

/** SQLite values as stored and as about to be written (an INTEGER column answers a whole REAL as a number too). */
function sameValue(a: SqlStorageValue, b: SqlStorageValue): boolean {
  if (a instanceof ArrayBuffer || b instanceof ArrayBuffer) return false;
  return a === b;
}

/** Rows read per page by a walk over every row (a migration's recount): memory stays a page, however large the run. */
export const ROW_PAGE = 500;

/** Every row, a page at a time in id order (the primary key: each page one seek). */
export function* rowPages(sql: SqlStorage, size = ROW_PAGE): Generator<IndexRow[]> {
  let after: string | null = null;
  for (;;) {
    const page: IndexRow[] = sql
      .exec<SqlRow>(
        `SELECT * FROM rows ${after === null ? "" : "WHERE id > ?"} ORDER BY id LIMIT ?`,
        ...(after === null ? [size] : [after, size]),
      )
      .toArray()
      .map(rowOf);
    if (page.length) yield page;
    if (page.length < size) return;
    after = page.at(-1)!.id;
  }
}

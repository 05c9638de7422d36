// INDEX_SCHEMA version 15: a live episode's update writes its row and one index entry. Every update moves the row's
// `updated` (and its counts), and every index holding `updated` wrote an entry for it (a row written each: three for
// a plain row, six for one with a task, kind and step). So the list's indexes by update hold the ended rows only
// (`status <> 'live'`), and the live rows are in one index of their own in the same order (`rows_live`); a page sorted
// by update merges the two (episode-pages.ts). A filter by task or step finds its live rows by indexes whose key a
// live row never moves (`rows_of_task`, `rows_by_step`). The run's counters are kept the same way: what is saved
// (`settled`) is the ended rows' part, changed only when a row ends or an ended row changes; the live rows' part is
// added from the rows themselves when the object loads (index-store.ts `loadCounters`). Safe to run again: indexes
// dropped and created by name, the counters moved only while the old key is held.

import { applyContribution, type Counters, contributionOf, emptyCounters } from "../../protocol/registry/aggregates.js";
import { rowOf, type SqlRow } from "./sql-row.js";

/** The state key of the ended rows' counters (the live rows' part is recounted on load). */
export const SETTLED_STATE = "settled";

/** The list's indexes by update, each for the ended rows only (schemas.ts versions 1, 4, 6 and 13 made them). */
export const ENDED_INDEXES: ReadonlyArray<[name: string, on: string, where: string | null]> = [
  ["rows_by_updated", "(updated DESC, id DESC)", null],
  ["rows_by_status", "(status, updated DESC, id DESC)", null],
  ["rows_by_task", "(task, updated DESC, id DESC)", "task IS NOT NULL"],
  ["rows_by_stop", "(stop, updated DESC, id DESC)", "stop IS NOT NULL"],
  ["rows_errored", "(updated DESC, id DESC)", "error IS NOT NULL"],
  ["rows_by_kind", "(kind, updated DESC, id DESC)", "kind IS NOT NULL"],
  ["rows_by_step_updated", "(step, updated DESC, id DESC)", "step IS NOT NULL"],
  ["rows_is_timeout", "(updated DESC, id DESC)", "is_timeout = 1"],
  ["rows_is_truncated", "(updated DESC, id DESC)", "is_truncated = 1"],
];

/**
 * The term a query on one of ENDED_INDEXES carries, as written in its WHERE (SQLite uses a partial index only for a
 * query whose terms hold its condition as written).
 */
export const ENDED = "status <> 'live'";
/** The term a query on `rows_live` carries. */
export const LIVE = "status = 'live'";

/** The indexes of the latest layout (the migration, and schemas.ts `fresh`). */
export function createLiveIndexes(sql: SqlStorage): void {
  for (const [name, on, where] of ENDED_INDEXES) {
    sql.exec(
      `CREATE INDEX IF NOT EXISTS ${name} ON rows ${on} WHERE ${where === null ? ENDED : `${where} AND ${ENDED}`}`,
    );
  }
  sql.exec(`CREATE INDEX IF NOT EXISTS rows_live ON rows (updated DESC, id DESC) WHERE ${LIVE}`);
  // a task's rows, live ones too (its recount in group-store.ts, a task's live rows in the list): keyed by the task,
  // which a live row's update does not move
  sql.exec("CREATE INDEX IF NOT EXISTS rows_of_task ON rows (task) WHERE task IS NOT NULL");
}

export function settleLiveRows(sql: SqlStorage): void {
  for (const [name] of ENDED_INDEXES) sql.exec(`DROP INDEX IF EXISTS ${name}`);
  createLiveIndexes(sql);
  const saved = sql.exec<{ v: string }>("SELECT v FROM state WHERE k = 'counters'").toArray()[0]?.v;
  if (saved === undefined) return;
  // the counters held every row's part: the live rows' is taken out (exact: scores are summed in integer units)
  const settled: Counters = { ...emptyCounters(), ...(JSON.parse(saved) as Counters) };
  for (const c of liveContributions(sql)) applyContribution(settled, c, -1);
  sql.exec(
    "INSERT INTO state VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
    SETTLED_STATE,
    JSON.stringify(settled),
  );
  sql.exec("DELETE FROM state WHERE k = 'counters'");
}

/** What each live row adds to the run's counters (read by `rows_live`: the live rows only). */
export function* liveContributions(sql: SqlStorage): Generator<ReturnType<typeof contributionOf>> {
  for (const r of sql.exec<SqlRow>(`SELECT * FROM rows INDEXED BY rows_live WHERE ${LIVE}`)) {
    yield contributionOf(rowOf(r));
  }
}

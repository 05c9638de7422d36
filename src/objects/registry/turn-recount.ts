// Migration 9 of a run's index (schemas.ts): `turns` becomes prime-rl's, the rollout's assistant nodes over
// all its traces (src/protocol/registry/entry.ts), a column of the row beside `calls` (what the pages called
// turns before: model calls). The index holds no node roles, so no row can be counted here: each starts
// uncounted (NULL) and its episode is asked to send its row again, which counts them (the alarm's resends,
// reward-recount.ts `resendDue`: RESEND_BATCH rows by id per alarm, never every row at once). The
// migration itself reads no row. What stays uncounted (the episode gone, or archived by a release that
// kept no node roles) shows as not counted (null, "–") and is left out of every mean (docs/storage.md).

import { addColumns } from "../storage/schema.js";
import { RESEND_STATE } from "./reward-recount.js";

export function addTurns(sql: SqlStorage): void {
  addColumns(sql, "rows", ["turns INTEGER"]);
  // `min_turns` walks the list's order and skips rows under the bound; no index of its own (as `min_tokens`)
  // per task: Σ turns over its counted rows and how many those are (group-store.ts `recountTask`)
  addColumns(sql, "tasks", ["turns INTEGER NOT NULL DEFAULT 0", "turned INTEGER NOT NULL DEFAULT 0"]);
  // the run's counters likewise (aggregates.ts): none counted yet
  sql.exec("UPDATE state SET v = json_set(v, '$.turns', 0, '$.turned', 0) WHERE k = 'counters'");
  // every row is to be sent again from the first (a resend migration 8 left under way is covered: it starts over)
  if (sql.exec("SELECT 1 FROM rows LIMIT 1").toArray().length)
    sql.exec(`INSERT OR REPLACE INTO state VALUES ('${RESEND_STATE}', '')`);
}

// Migration 8 of a run's index (schemas.ts): the reward becomes the trainer's (src/protocol/registry/rewards.ts),
// so every number kept from it is recounted from the rows, inside the migration's transaction: each row's
// `reward` and scores, the counters, the reward minutes, the steps, the groups (and the run's group counts
// and minutes) and the reward rules' flags. A row now holds every trace's rewards (`trace_rewards`);
// one written before holds the first trace's only. For a one-trace episode that is all of them. An
// episode of several traces is asked by the index's alarm to send its row again (`resendDue`), and
// its row stands on the first trace's rewards until it does (docs/storage.md).

import { contributionOf, recount } from "../../protocol/registry/aggregates.js";
import { recountRewardMinutes } from "../../protocol/registry/reward-trend.js";
import { rowReward, rowScores } from "../../protocol/registry/rewards.js";
import { addColumns } from "../storage/schema.js";
import { FlagStore } from "./flag-store.js";
import { GroupStore } from "./group-store.js";
import { rowOf, type SqlRow } from "./sql-row.js";
import { StepStore } from "./step-store.js";

/** The state key whose presence says rows of several traces are still to be sent again (its value: the last id asked). */
export const RESEND_STATE = "reward_resend";

/** Rows asked to be sent again per alarm. */
export const RESEND_BATCH = 50;

export function recountRewards(sql: SqlStorage): void {
  addColumns(sql, "rows", ["trace_rewards TEXT"]);
  // a row of one trace holds all its rewards; the others wait for their episode (RESEND_STATE)
  sql.exec("UPDATE rows SET trace_rewards = '[' || COALESCE(rewards, 'null') || ']' WHERE traces <= 1");
  const rows = sql.exec<SqlRow>("SELECT * FROM rows ORDER BY id").toArray().map(rowOf);
  if (rows.some((r) => !r.trace_rewards)) sql.exec(`INSERT OR REPLACE INTO state VALUES ('${RESEND_STATE}', '')`);

  sql.exec("DELETE FROM scores");
  const insert = "INSERT INTO scores (id, key, score, status) VALUES (?, ?, ?, ?)";
  for (const r of rows) {
    sql.exec("UPDATE rows SET reward = ? WHERE id = ?", rowReward(r), r.id);
    for (const [key, score] of rowScores(r)) sql.exec(insert, r.id, key, score, r.status);
  }
  if (rows.length)
    sql.exec("INSERT OR REPLACE INTO state VALUES ('counters', ?)", JSON.stringify(recount(rows).counters));

  sql.exec("DELETE FROM reward_minutes");
  const finished = rows.filter((r) => r.status === "finished").map(contributionOf);
  for (const m of recountRewardMinutes(finished)) {
    sql.exec("INSERT INTO reward_minutes (minute, key, n, units) VALUES (?, ?, ?, ?)", m.minute, m.key, m.n, m.units);
  }

  // the steps and groups from nothing, as the stores keep them row by row
  sql.exec("DELETE FROM steps");
  sql.exec("DELETE FROM groups");
  sql.exec("DELETE FROM group_minutes");
  sql.exec("DELETE FROM state WHERE k = 'group_counts'");
  const steps = new StepStore(sql);
  for (const r of rows) steps.replaceRow(null, r);
  const groups = new GroupStore(sql, steps);
  for (const g of new Set(rows.map((r) => r.group))) groups.recount(g);

  // the reward rules again (a text flag stays: the text did not change)
  const flags = new FlagStore(sql);
  for (const r of rows) {
    const now = flags.update(r, null);
    sql.exec("UPDATE rows SET flags = ? WHERE id = ?", now.length ? JSON.stringify(now) : null, r.id);
  }
}

/** The next rows whose episode is to send its row again (none: done), from after the last one asked. */
export function resendDue(sql: SqlStorage): string[] | null {
  const after = sql.exec<{ v: string }>(`SELECT v FROM state WHERE k = '${RESEND_STATE}'`).toArray()[0]?.v;
  if (after === undefined) return null;
  return sql
    .exec<{ id: string }>(
      "SELECT id FROM rows WHERE trace_rewards IS NULL AND id > ? ORDER BY id LIMIT ?",
      after,
      RESEND_BATCH,
    )
    .toArray()
    .map((r) => r.id);
}

/** The episodes up to `last` were asked (null: every one was: done). */
export function resendAsked(sql: SqlStorage, last: string | null): void {
  if (last === null) sql.exec(`DELETE FROM state WHERE k = '${RESEND_STATE}'`);
  else sql.exec(`INSERT OR REPLACE INTO state VALUES ('${RESEND_STATE}', ?)`, last);
}

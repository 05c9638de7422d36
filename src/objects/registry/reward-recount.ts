// Migration 8 of a run's index (schemas.ts): the reward becomes the trainer's (src/protocol/registry/rewards.ts),
// so every number kept from it is recounted from the rows (a page at a time), inside the migration's transaction: each row's
// `reward` and scores, the counters, the reward minutes, the steps, the groups (and the run's group counts
// and minutes) and the reward rules' flags. A row now holds every trace's rewards (`trace_rewards`);
// one written before holds the first trace's only. For a one-trace episode that is all of them. An
// episode of several traces is asked by the index's alarm to send its row again (`resendDue`), and
// its row stands on the first trace's rewards until it does (docs/storage.md).

import {
  applyContribution,
  type Contribution,
  contributionOf,
  emptyCounters,
} from "../../protocol/registry/aggregates.js";
import { type RewardMinute, recountRewardMinutes } from "../../protocol/registry/reward-trend.js";
import { rowReward, rowScores } from "../../protocol/registry/rewards.js";
import { armAlarm } from "../storage/alarm-window.js";
import { addColumns } from "../storage/schema.js";
import { FlagStore } from "./flag-store.js";
import { GroupStore } from "./group-store.js";
import { ROW_PAGE, rowPages } from "./sql-row.js";
import { StepStore } from "./step-store.js";

/** The state key whose presence says rows of several traces are still to be sent again (its value: the last id asked). */
export const RESEND_STATE = "reward_resend";

/** Rows asked to be sent again per alarm. */
export const RESEND_BATCH = 50;

export function recountRewards(sql: SqlStorage): void {
  addColumns(sql, "rows", ["trace_rewards TEXT"]);
  // a row of one trace holds all its rewards; the others wait for their episode (RESEND_STATE)
  sql.exec("UPDATE rows SET trace_rewards = '[' || COALESCE(rewards, 'null') || ']' WHERE traces <= 1");
  if (sql.exec("SELECT 1 FROM rows WHERE trace_rewards IS NULL LIMIT 1").toArray().length)
    sql.exec(`INSERT OR REPLACE INTO state VALUES ('${RESEND_STATE}', '')`);

  // every number from nothing, the rows read a page at a time (a large run's rows never all in memory at once)
  sql.exec("DELETE FROM scores");
  sql.exec("DELETE FROM reward_minutes");
  sql.exec("DELETE FROM steps");
  sql.exec("DELETE FROM groups");
  sql.exec("DELETE FROM group_minutes");
  sql.exec("DELETE FROM state WHERE k = 'group_counts'");
  const counters = emptyCounters();
  const minutes = new Map<string, RewardMinute>();
  const steps = new StepStore(sql);
  const flags = new FlagStore(sql);
  const insert = "INSERT INTO scores (id, key, score, status) VALUES (?, ?, ?, ?)";
  let any = false;
  for (const page of rowPages(sql)) {
    any = true;
    const finished: Contribution[] = [];
    for (const r of page) {
      sql.exec("UPDATE rows SET reward = ? WHERE id = ?", rowReward(r), r.id);
      for (const [key, score] of rowScores(r)) sql.exec(insert, r.id, key, score, r.status);
      const x = contributionOf(r);
      applyContribution(counters, x, 1);
      if (r.status === "finished") finished.push(x);
      steps.replaceRow(null, r);
      // the reward rules again (a text flag stays: the text did not change)
      const now = flags.update(r, null);
      sql.exec("UPDATE rows SET flags = ? WHERE id = ?", now.length ? JSON.stringify(now) : null, r.id);
    }
    for (const m of recountRewardMinutes(finished)) {
      const k = `${m.minute} ${m.key}`;
      const kept = minutes.get(k);
      if (kept) {
        kept.n += m.n;
        kept.units += m.units;
      } else minutes.set(k, m);
    }
  }
  if (any) sql.exec("INSERT OR REPLACE INTO state VALUES ('counters', ?)", JSON.stringify(counters));
  for (const m of minutes.values()) {
    sql.exec("INSERT INTO reward_minutes (minute, key, n, units) VALUES (?, ?, ?, ?)", m.minute, m.key, m.n, m.units);
  }

  // the groups from their members, a page of group ids at a time
  const groups = new GroupStore(sql, steps);
  let after = "";
  for (;;) {
    const ids = sql
      .exec<{ grp: string }>(
        "SELECT DISTINCT grp FROM rows WHERE grp IS NOT NULL AND grp > ? ORDER BY grp LIMIT ?",
        after,
        ROW_PAGE,
      )
      .toArray()
      .map((g) => g.grp);
    for (const g of ids) groups.recount(g);
    if (ids.length < ROW_PAGE) break;
    after = ids.at(-1)!;
  }
}

/** Whether the rows have column `name` (`turns`: INDEX_SCHEMA 12, turn-recount.ts; `is_truncated`: 13). */
function hasColumn(sql: SqlStorage, name: string): boolean {
  return sql.exec("SELECT 1 FROM pragma_table_info('rows') WHERE name = ?", name).toArray().length > 0;
}

/**
 * The next rows whose episode is to send its row again (rows of several traces on their first trace's rewards,
 * rows whose turns or truncation are not counted: turn-recount.ts, truncation-recount.ts) (none: done), from after the
 * last one asked. */
export function resendDue(sql: SqlStorage): string[] | null {
  const after = sql.exec<{ v: string }>(`SELECT v FROM state WHERE k = '${RESEND_STATE}'`).toArray()[0]?.v;
  if (after === undefined) return null;
  return sql
    .exec<{ id: string }>(
      `SELECT id FROM rows WHERE (trace_rewards IS NULL${hasColumn(sql, "turns") ? " OR turns IS NULL" : ""}${
        hasColumn(sql, "is_truncated") ? " OR is_truncated IS NULL" : ""
      }) AND id > ?
       ORDER BY id LIMIT ?`,
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

/**
 * Ask the next batch of episodes whose rows a migration left to be sent again (`resendDue`), from the index's
 * alarm; an ask that fails is asked again by the alarm `retryMs` later, a full batch goes on `pauseMs` later.
 */
export async function askResends(
  storage: DurableObjectStorage,
  episodes: Env["EPISODES"],
  pauseMs: number,
  retryMs: number,
): Promise<void> {
  const due = resendDue(storage.sql);
  if (due === null) return;
  let asked = 0;
  for (const id of due) {
    try {
      await episodes.getByName(id).resendRow(id);
    } catch (e) {
      console.warn(`episode ${id}: asked to send its row again: ${e instanceof Error ? e.message : String(e)}`);
      break;
    }
    asked++;
  }
  if (asked === due.length && due.length < RESEND_BATCH) return resendAsked(storage.sql, null);
  if (asked > 0) resendAsked(storage.sql, due[asked - 1]!);
  await armAlarm(storage, Date.now() + (asked > 0 ? pauseMs : retryMs));
}

// Migration 5 of a run's index (schemas.ts) fills what the release before it did not keep, from the
// rows it did: the finished-only reward counters, the reward minutes, each complete group's minute
// and the group minutes. One pass over the finished rows, once, inside the migration's
// transaction; afterwards the index keeps them row by row (index-store.ts, group-store.ts).

import { applyScores, type Contribution, type Counters, contributionOf } from "../../protocol/registry/aggregates.js";
import { recountRewardMinutes } from "../../protocol/registry/reward-trend.js";
import type { Json } from "../../protocol/wire/json-view.js";

/** The finished-only reward counters and the reward minutes, recounted from the finished rows. */
export function backfillRewards(sql: SqlStorage): void {
  const finished: Contribution[] = [];
  for (const r of sql.exec<{ calls: number; tokens: number; rewards: string | null; ended: number | null }>(
    "SELECT calls, tokens, rewards, ended FROM rows WHERE status = 'finished'",
  )) {
    const rewards = r.rewards === null ? null : (JSON.parse(r.rewards) as Json);
    finished.push(contributionOf({ status: "finished", calls: r.calls, tokens: r.tokens, rewards, ended: r.ended }));
  }
  const saved = sql.exec<{ v: string }>("SELECT v FROM state WHERE k = 'counters'").toArray()[0]?.v;
  if (saved !== undefined) {
    const c = JSON.parse(saved) as Counters;
    c.finished_rewards = {};
    for (const x of finished) applyScores(c.finished_rewards, x.scores, 1);
    sql.exec("INSERT OR REPLACE INTO state VALUES ('counters', ?)", JSON.stringify(c));
  }
  sql.exec("DELETE FROM reward_minutes");
  for (const m of recountRewardMinutes(finished)) {
    sql.exec("INSERT INTO reward_minutes (minute, key, n, units) VALUES (?, ?, ?, ?)", m.minute, m.key, m.n, m.units);
  }
}

/** Each complete group's minute (its latest end, zero-variance-trend.ts) and the minutes' counts. */
export function backfillGroups(sql: SqlStorage): void {
  // the same minute as minuteOf(): ms are positive, so integer division floors
  sql.exec(`UPDATE groups SET done_minute = (
      SELECT CAST(MAX(COALESCE(ended, updated)) / 60000 AS INTEGER) FROM rows WHERE rows.grp = groups.grp)
    WHERE complete = 1`);
  sql.exec("DELETE FROM group_minutes");
  sql.exec(`INSERT INTO group_minutes (minute, complete, zero)
    SELECT done_minute, COUNT(*), SUM(zero) FROM groups WHERE complete = 1 AND done_minute IS NOT NULL GROUP BY done_minute`);
}

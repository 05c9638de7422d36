// A run index's per-minute trend tables (INDEX_SCHEMA version 5): `reward_minutes` (finished
// episodes and their score sums per minute and reward key, reward-trend.ts) and `group_minutes`
// (groups completed per minute and how many had zero variance, zero-variance-trend.ts). Each is
// kept by adding a part and taking the old one back, inside the caller's transaction; a minute
// whose count falls to 0 goes, so the tables hold only what a recount would.

import { type Contribution, minuteOf, THROUGHPUT_MINUTES } from "../../protocol/registry/aggregates.js";
import {
  type RewardMinute,
  type RewardTrend,
  rewardMinutesOf,
  rewardTrendOf,
} from "../../protocol/registry/reward-trend.js";
import { type RunTimeline, timelineFrame, timelineOf } from "../../protocol/registry/run-timeline.js";
import {
  type GroupMinute,
  type ZeroVarianceTrend,
  zeroVarianceTrendOf,
} from "../../protocol/registry/zero-variance-trend.js";

export class TrendStore {
  constructor(private readonly sql: SqlStorage) {}

  /** Add (1) or take back (-1) one row's part of the reward minutes. */
  addRewards(x: Contribution, sign: 1 | -1): void {
    for (const p of rewardMinutesOf(x)) {
      this.sql.exec(
        `INSERT INTO reward_minutes (minute, key, n, units) VALUES (?, ?, ?, ?)
         ON CONFLICT (minute, key) DO UPDATE SET n = n + excluded.n, units = units + excluded.units`,
        p.minute,
        p.key,
        sign,
        sign * p.units,
      );
      this.sql.exec("DELETE FROM reward_minutes WHERE minute = ? AND key = ? AND n = 0", p.minute, p.key);
    }
  }

  /** The reward trend over the last THROUGHPUT_MINUTES minutes (reads only the window's rows, by the primary key). */
  rewardTrend(now: number): RewardTrend {
    const first = minuteOf(now) - THROUGHPUT_MINUTES + 1;
    const rows = this.sql.exec<RewardMinute & Record<string, SqlStorageValue>>(
      "SELECT minute, key, n, units FROM reward_minutes WHERE minute >= ? AND minute <= ?",
      first,
      first + THROUGHPUT_MINUTES - 1,
    );
    return rewardTrendOf(rows, now);
  }

  /**
   * The run from its first row (`first`, ms) to now (run-timeline.ts): the minute tables summed per point by SQLite, so
   * a long run's minutes cost one pass and no more than TIMELINE_POINTS rows per key reach here.
   */
  timeline(first: number, now: number): RunTimeline {
    const f = timelineFrame(first, now);
    // each point's rows come back at its first minute; timelineOf puts minutes outside [first, now] in the end points
    // (CAST: a bound number may come as a REAL, and then / would not be integer division)
    const point = "MIN(MAX(CAST((minute - ?) / ? AS INTEGER), 0), ?) * ? + ?";
    const args = [f.from, f.width, f.points - 1, f.width, f.from];
    const ended = this.sql.exec<{ minute: number; n: number }>(
      `SELECT ${point} AS minute, SUM(n) AS n FROM throughput GROUP BY 1`,
      ...args,
    );
    const rewards = this.sql.exec<{ minute: number; key: string; n: number; units: number }>(
      `SELECT ${point} AS minute, key, SUM(n) AS n, SUM(units) AS units FROM reward_minutes GROUP BY 1, 2`,
      ...args,
    );
    return timelineOf(first, now, ended, rewards);
  }

  /** Add (1) or take back (-1) one complete group at the minute it completed. */
  addGroup(minute: number, zero: boolean, sign: 1 | -1): void {
    this.sql.exec(
      `INSERT INTO group_minutes (minute, complete, zero) VALUES (?, ?, ?)
       ON CONFLICT (minute) DO UPDATE SET complete = complete + excluded.complete, zero = zero + excluded.zero`,
      minute,
      sign,
      zero ? sign : 0,
    );
    this.sql.exec("DELETE FROM group_minutes WHERE minute = ? AND complete = 0", minute);
  }

  /**
   * The zero-variance trend over the last THROUGHPUT_MINUTES minutes; `totals`: the run's complete and zero-variance
   * groups.
   */
  zeroVarianceTrend(totals: GroupMinute, now: number): ZeroVarianceTrend {
    const last = minuteOf(now);
    const minutes = new Map<number, GroupMinute>();
    for (const r of this.sql.exec<{ minute: number; complete: number; zero: number }>(
      "SELECT minute, complete, zero FROM group_minutes WHERE minute > ? AND minute <= ?",
      last - THROUGHPUT_MINUTES,
      last,
    )) {
      minutes.set(r.minute, { complete: r.complete, zero: r.zero });
    }
    // groups stamped after now (an episode's clock ahead of ours): not yet in the share at any minute shown
    const later = this.sql
      .exec<{ complete: number | null; zero: number | null }>(
        "SELECT SUM(complete) AS complete, SUM(zero) AS zero FROM group_minutes WHERE minute > ?",
        last,
      )
      .one();
    return zeroVarianceTrendOf(minutes, totals, { complete: later.complete ?? 0, zero: later.zero ?? 0 }, now);
  }
}

// The run's reward over time: per minute (the minute an episode ended) and per reward key, how many
// finished episodes ended then and the sum of their scores in SCORE_UNITs. Pure: the run's index
// adds a row's part when it arrives and takes the old part back (index-store.ts), as it does for
// the aggregates, so the minutes equal a recount from the rows, to the unit, in any order. Only
// finished episodes count: a failed or refused one's scores say nothing about what was learnt.

import { type Contribution, minuteOf, type RewardTrend, SCORE_UNIT, THROUGHPUT_MINUTES } from "./aggregates.js";

export type { RewardTrend } from "./aggregates.js";

/** One minute's finished episodes scored on one key: how many, and their score sum in SCORE_UNITs. */
export interface RewardMinute {
  minute: number;
  key: string;
  n: number;
  units: number;
}

/** What one row adds to the minutes: one entry per score, if it finished (with an end time). */
export function rewardMinutesOf(x: Contribution): Array<Omit<RewardMinute, "n">> {
  if (x.status !== "finished" || x.endedMinute === null) return [];
  const minute = x.endedMinute;
  return x.scores.map((s) => ({ minute, key: s.key, units: s.units }));
}

/** The API form of the minutes in the window ending at `now` (others are ignored). */
export function rewardTrendOf(minutes: Iterable<RewardMinute>, now: number): RewardTrend {
  const first = minuteOf(now) - THROUGHPUT_MINUTES + 1;
  const keys: RewardTrend["keys"] = {};
  for (const m of minutes) {
    const i = m.minute - first;
    if (i < 0 || i >= THROUGHPUT_MINUTES || m.n === 0) continue;
    keys[m.key] ??= {
      count: new Array<number>(THROUGHPUT_MINUTES).fill(0),
      mean: new Array<number | null>(THROUGHPUT_MINUTES).fill(null),
    };
    keys[m.key]!.count[i] = m.n;
    keys[m.key]!.mean[i] = (m.units * SCORE_UNIT) / m.n;
  }
  const sorted = Object.fromEntries(Object.entries(keys).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return { start: new Date(first * 60_000).toISOString(), keys: sorted };
}

/**
 * The minutes recounted from contributions (tests compare them with the kept ones; the migration backfills with it).
 */
export function recountRewardMinutes(contributions: Iterable<Contribution>): RewardMinute[] {
  const out = new Map<string, RewardMinute>();
  for (const x of contributions) {
    for (const p of rewardMinutesOf(x)) {
      const k = `${p.minute} ${p.key}`;
      const m = out.get(k) ?? { minute: p.minute, key: p.key, n: 0, units: 0 };
      m.n += 1;
      m.units += p.units;
      out.set(k, m);
    }
  }
  return [...out.values()];
}

// The zero-variance share over time. A rollout group becomes complete when its last rollout ends:
// the minute of the latest `ended` among its members (a member without one counts by `updated`).
// The run's index keeps, per minute, how many groups completed then and how many of those had zero
// variance; a group's recount (group-store.ts) takes its old minute and flag back and adds the new
// ones, so the minutes always equal a recount from the groups. Pure.

import { minuteOf, THROUGHPUT_MINUTES, type ZeroVarianceTrend } from "./aggregates.js";
import type { IndexRow } from "./entry.js";

export type { ZeroVarianceTrend } from "./aggregates.js";

/** One minute's completed groups, and how many of them had zero variance. */
export interface GroupMinute {
  complete: number;
  zero: number;
}

/** The minute a group became complete: its latest end. Call only for a complete group (no live member). */
export function completedMinute(members: ReadonlyArray<Pick<IndexRow, "ended" | "updated">>): number {
  return minuteOf(Math.max(...members.map((m) => m.ended ?? m.updated)));
}

/**
 * The API form. `minutes`: the window's minutes (others ignored); `totals`: every complete group of
 * the run; `later`: the groups completed after the window's last minute (a clock ahead of ours), so
 * the cumulative share at each minute counts exactly the groups completed by then.
 */
export function zeroVarianceTrendOf(
  minutes: ReadonlyMap<number, GroupMinute>,
  totals: GroupMinute,
  later: GroupMinute,
  now: number,
): ZeroVarianceTrend {
  const last = minuteOf(now);
  const first = last - THROUGHPUT_MINUTES + 1;
  const completed: number[] = [];
  const zero: number[] = [];
  for (let m = first; m <= last; m++) {
    completed.push(minutes.get(m)?.complete ?? 0);
    zero.push(minutes.get(m)?.zero ?? 0);
  }
  const cumulative: Array<number | null> = new Array(THROUGHPUT_MINUTES);
  let upTo = { complete: totals.complete - later.complete, zero: totals.zero - later.zero };
  for (let i = THROUGHPUT_MINUTES - 1; i >= 0; i--) {
    cumulative[i] = upTo.complete > 0 ? upTo.zero / upTo.complete : null;
    upTo = { complete: upTo.complete - completed[i]!, zero: upTo.zero - zero[i]! };
  }
  return {
    start: new Date(first * 60_000).toISOString(),
    completed,
    zero_variance: zero,
    share: completed.map((c, i) => (c > 0 ? zero[i]! / c : null)),
    cumulative_share: cumulative,
  };
}

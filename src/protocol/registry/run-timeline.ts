// A run over its whole run time, for the run page's throughput and reward charts: from the minute of
// its first row (the index keeps that row's creation, state `created`) to now, in at most
// TIMELINE_POINTS points of a whole number of minutes each. Pure: built from the per-minute tables
// the index already keeps for every minute it has ever seen (`throughput`, `reward_minutes`, which
// are never trimmed), so the points are a sum of those minutes and add up to the run's counts.
// A minute before the first row or after now (an episode's clock off ours) counts in the first or
// the last point: every ended episode is in exactly one point.

import { minuteOf, type RunTimeline, SCORE_UNIT } from "./aggregates.js";

export type { RunTimeline } from "./aggregates.js";

/** The most points a timeline has (a chart a few hundred pixels wide reads them apart). */
export const TIMELINE_POINTS = 120;

/** Minutes per point, the smallest of these that keeps the run within TIMELINE_POINTS (whole hours and days after). */
const WIDTHS = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440];

/** Minutes per point for a run `span` minutes long. */
export function timelineWidth(span: number): number {
  for (const w of WIDTHS) if (Math.ceil(span / w) <= TIMELINE_POINTS) return w;
  return 1440 * Math.ceil(span / 1440 / TIMELINE_POINTS);
}

/** The first minute, the minutes per point, and how many points, for a run whose first row came at `first` (ms). */
export function timelineFrame(first: number, now: number): { from: number; width: number; points: number } {
  const from = minuteOf(first);
  const span = Math.max(1, minuteOf(now) - from + 1);
  const width = timelineWidth(span);
  return { from, width, points: Math.ceil(span / width) };
}

/** The point a minute counts in. */
export function pointOf(frame: { from: number; width: number; points: number }, minute: number): number {
  return Math.min(frame.points - 1, Math.max(0, Math.floor((minute - frame.from) / frame.width)));
}

/**
 * The timeline of a run whose first row came at `first`: ended episodes per point (from `throughput`: minute → ended)
 * and per reward key the finished episodes' count and mean (from `rewards`: the reward minutes, reward-trend.ts).
 */
export function timelineOf(
  first: number,
  now: number,
  throughput: Iterable<{ minute: number; n: number }>,
  rewards: Iterable<{ minute: number; key: string; n: number; units: number }>,
): RunTimeline {
  const frame = timelineFrame(first, now);
  const ended = new Array<number>(frame.points).fill(0);
  for (const t of throughput) ended[pointOf(frame, t.minute)]! += t.n;
  const sums: Record<string, { n: number[]; units: number[] }> = {};
  for (const r of rewards) {
    if (r.n === 0) continue;
    const k = (sums[r.key] ??= {
      n: new Array<number>(frame.points).fill(0),
      units: new Array<number>(frame.points).fill(0),
    });
    const p = pointOf(frame, r.minute);
    k.n[p]! += r.n;
    k.units[p]! += r.units;
  }
  const keys: RunTimeline["rewards"] = {};
  for (const key of Object.keys(sums).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) {
    const s = sums[key]!;
    keys[key] = { count: s.n, mean: s.n.map((n, i) => (n === 0 ? null : (s.units[i]! * SCORE_UNIT) / n)) };
  }
  return { start: new Date(frame.from * 60_000).toISOString(), minutes: frame.width, ended, rewards: keys };
}

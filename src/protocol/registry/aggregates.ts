// A run's aggregates and what one episode contributes to them. Pure: the run's index applies a
// row's contribution when it arrives and takes the old one back (an update is "minus old, plus
// new"; a delete is "minus old"), so the aggregates are never recounted on read. Sums of scores
// are kept as integers of SCORE_UNIT, so adding and taking back is exact: the aggregates equal a
// recount from the rows, to the unit, whatever the order of updates. The reward statistics are
// kept twice: over every row (`rewards`) and over the finished ones only (`finished_rewards`), so a
// failed or refused episode's scores can be left out without a recount.

import type { IndexRow, IndexStatus } from "./entry.js";
import { rowScores } from "./rewards.js";

/** Scores are summed in units of 1e-9 (integers: exact under any order of add and take back). */
export const SCORE_UNIT = 1e-9;
/** Histogram: HISTOGRAM_BINS bins over [0, 1] (1.0 falls in the last), plus below and above. */
export const HISTOGRAM_BINS = 20;
/** Throughput: ended episodes per minute, this many minutes back. */
export const THROUGHPUT_MINUTES = 60;

/** The bin of a score: -1 below 0, HISTOGRAM_BINS above 1, else 0..HISTOGRAM_BINS-1. */
export function binOf(score: number): number {
  if (score < 0) return -1;
  if (score > 1) return HISTOGRAM_BINS;
  return Math.min(HISTOGRAM_BINS - 1, Math.floor(score * HISTOGRAM_BINS));
}

export function unitsOf(score: number): number {
  return Math.round(score / SCORE_UNIT);
}

export function minuteOf(ms: number): number {
  return Math.floor(ms / 60_000);
}

/** What one row adds to its run's aggregates. */
export interface Contribution {
  status: IndexStatus;
  calls: number;
  /** Assistant nodes (entry.ts `turns`); null: not counted. */
  turns: number | null;
  tokens: number;
  /** Minute (ms / 60000) it ended in, for throughput; null while not ended. */
  endedMinute: number | null;
  scores: Array<{ key: string; units: number; bin: number; score: number }>;
}

/** A row's part: its counts, and its scores as rewards.ts `rowScores` gives them (the total under "reward", per-key means). */
export function contributionOf(
  row: Pick<IndexRow, "status" | "calls" | "turns" | "tokens" | "rewards" | "trace_rewards" | "ended">,
): Contribution {
  return {
    status: row.status,
    calls: row.calls,
    turns: typeof row.turns === "number" ? row.turns : null,
    tokens: row.tokens,
    endedMinute: row.ended === null ? null : minuteOf(row.ended),
    scores: rowScores(row).map(([key, score]) => ({ key, score, units: unitsOf(score), bin: binOf(score) })),
  };
}

/** One reward key's kept numbers: count, sum in SCORE_UNITs, histogram (index 0 = below, 1..BINS, BINS+1 = above). */
export interface RewardCounter {
  count: number;
  units: number;
  bins: number[];
}

/** The counters kept per run (the score extremes come from an index of the scores). */
export interface Counters {
  episodes: number;
  live: number;
  finished: number;
  failed: number;
  finish_refused: number;
  calls: number;
  /** Σ turns over the rows whose turns are counted, and how many those are (counters saved before: 0). */
  turns: number;
  turned: number;
  tokens: number;
  /** Per reward key, over every row. */
  rewards: Record<string, RewardCounter>;
  /** Per reward key, over the finished rows only (what a trainer learns from: no failed, refused or live rows). */
  finished_rewards: Record<string, RewardCounter>;
}

export function emptyCounters(): Counters {
  return {
    episodes: 0,
    live: 0,
    finished: 0,
    failed: 0,
    finish_refused: 0,
    calls: 0,
    turns: 0,
    turned: 0,
    tokens: 0,
    rewards: {},
    finished_rewards: {},
  };
}

/** Add (`sign` 1) or take back (`sign` -1) a contribution. Throughput is kept apart (per minute). */
export function applyContribution(c: Counters, x: Contribution, sign: 1 | -1): void {
  c.episodes += sign;
  c[x.status] += sign;
  c.calls += sign * x.calls;
  if (x.turns !== null) {
    c.turns += sign * x.turns;
    c.turned += sign;
  }
  c.tokens += sign * x.tokens;
  applyScores(c.rewards, x.scores, sign);
  if (x.status === "finished") applyScores(c.finished_rewards, x.scores, sign);
}

/** Add or take back scores in one table of reward counters (a key whose count falls to 0 goes). */
export function applyScores(table: Record<string, RewardCounter>, scores: Contribution["scores"], sign: 1 | -1): void {
  for (const s of scores) {
    let r = table[s.key];
    if (!r) r = table[s.key] = { count: 0, units: 0, bins: new Array<number>(HISTOGRAM_BINS + 2).fill(0) };
    r.count += sign;
    r.units += sign * s.units;
    r.bins[s.bin + 1]! += sign;
    if (r.count === 0) delete table[s.key];
  }
}

/** Per reward key, the mean score over the finished rows (what the run directory lists). */
export function finishedMeans(c: Counters): Record<string, number> {
  return Object.fromEntries(sortedKeys(c.finished_rewards).map((k) => [k, meanOf(c.finished_rewards[k]!)]));
}

function meanOf(r: RewardCounter): number {
  return (r.units * SCORE_UNIT) / r.count;
}

function sortedKeys(table: Record<string, unknown>): string[] {
  return Object.keys(table).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** One reward key's statistics as the API shows them. */
export interface RewardStats {
  count: number;
  mean: number;
  min: number | null;
  max: number | null;
  histogram: { edges: number[]; counts: number[]; below: number; above: number };
}

/** A run's aggregates as the API shows them. */
export interface RunAggregates {
  run: string;
  episodes: number;
  counts: Record<IndexStatus, number>;
  /** Episodes ended (finished or failed) per minute over the last 10 minutes. */
  episodes_per_minute: number;
  /** Ended episodes per minute, oldest first, the last entry being the current minute. */
  throughput: { start: string; per_minute: number[] };
  /** Assistant nodes per episode (entry.ts `turns`), over the episodes whose turns are counted; null: none is. */
  mean_turns: number | null;
  mean_tokens: number | null;
  /**
   * Per reward key, over every episode (live, failed and finish-refused ones too): "reward" is the episode's total
   * (rewards.ts), each other key the mean of its scores over the episode's traces.
   */
  rewards: Record<string, RewardStats>;
  /** Per reward key, over the finished episodes only. */
  finished_rewards: Record<string, RewardStats>;
  /**
   * Per minute over the last hour, per reward key: finished episodes that ended in it and their mean (reward-trend.ts).
   */
  reward_trend?: RewardTrend;
  /**
   * The whole run time, from the minute of the run's first row to now (run-timeline.ts): ended episodes and, per reward
   * key, the finished ones' mean, per point of `minutes` minutes. Absent before the first row.
   */
  timeline?: RunTimeline;
  /** Rollouts flagged, per rule of the run's (src/protocol/flags/rules.ts). */
  flags?: Record<string, number>;
  /**
   * The run's rollout groups (src/protocol/registry/groups.ts): how many, how many complete, and the complete ones with
   * zero reward variance.
   */
  groups?: {
    total: number;
    finished: number;
    zero_variance: number;
    zero_variance_share: number | null;
    trend?: ZeroVarianceTrend;
  };
}

/** The run's reward trend (reward-trend.ts): the last THROUGHPUT_MINUTES minutes, oldest first. */
export interface RewardTrend {
  /** The first minute's start (ISO); the last entry of each list is the current minute. */
  start: string;
  /** Per reward key: finished episodes that ended in each minute, and their mean score (null: none). */
  keys: Record<string, { count: number[]; mean: Array<number | null> }>;
}

/** A run over its whole run time (run-timeline.ts): at most TIMELINE_POINTS points, oldest first, the last holding now. */
export interface RunTimeline {
  /** The start of the minute of the run's first row (ISO): run time 0. */
  start: string;
  /** Minutes per point (1, 2, 5, 10, 15, 30, 60, …): point i covers run time [i × minutes, (i + 1) × minutes). */
  minutes: number;
  /** Episodes that ended (finished or failed) in each point. */
  ended: number[];
  /** Per reward key (the trainer's total under "reward"): finished episodes that ended in each point, their mean (null: none). */
  rewards: Record<string, { count: number[]; mean: Array<number | null> }>;
}

/**
 * The zero-variance trend (zero-variance-trend.ts): the last THROUGHPUT_MINUTES minutes, oldest first, the last the
 * current one.
 */
export interface ZeroVarianceTrend {
  start: string;
  /** Groups that became complete in each minute. */
  completed: number[];
  /** Of those, the ones with zero variance. */
  zero_variance: number[];
  /** zero_variance / completed per minute (null: none completed). */
  share: Array<number | null>;
  /**
   * The run's zero-variance share as it stood at the end of each minute: over every group completed by then (null: none
   * yet).
   */
  cumulative_share: Array<number | null>;
}

export const HISTOGRAM_EDGES: readonly number[] = Array.from(
  { length: HISTOGRAM_BINS + 1 },
  (_, i) => i / HISTOGRAM_BINS,
);

/** A key's smallest and largest score, over every row or the finished ones only (`finished`). */
export type Extremes = (key: string, finished: boolean) => { min: number | null; max: number | null };

function rewardStatsOf(
  table: Record<string, RewardCounter>,
  extremes: (key: string) => { min: number | null; max: number | null },
): Record<string, RewardStats> {
  const out: Record<string, RewardStats> = {};
  for (const key of sortedKeys(table)) {
    const r = table[key]!;
    out[key] = {
      count: r.count,
      mean: meanOf(r),
      ...extremes(key),
      histogram: {
        edges: [...HISTOGRAM_EDGES],
        counts: r.bins.slice(1, HISTOGRAM_BINS + 1),
        below: r.bins[0]!,
        above: r.bins[HISTOGRAM_BINS + 1]!,
      },
    };
  }
  return out;
}

export function aggregatesOf(
  run: string,
  c: Counters,
  throughput: ReadonlyMap<number, number>,
  now: number,
  extremes: Extremes,
): RunAggregates {
  const last = minuteOf(now);
  const perMinute: number[] = [];
  for (let m = last - THROUGHPUT_MINUTES + 1; m <= last; m++) perMinute.push(throughput.get(m) ?? 0);
  return {
    run,
    episodes: c.episodes,
    counts: { live: c.live, finished: c.finished, failed: c.failed, finish_refused: c.finish_refused },
    episodes_per_minute: perMinute.slice(-10).reduce((a, b) => a + b, 0) / 10,
    throughput: { start: new Date((last - THROUGHPUT_MINUTES + 1) * 60_000).toISOString(), per_minute: perMinute },
    mean_turns: c.turned > 0 ? c.turns / c.turned : null,
    mean_tokens: c.episodes > 0 ? c.tokens / c.episodes : null,
    rewards: rewardStatsOf(c.rewards, (key) => extremes(key, false)),
    finished_rewards: rewardStatsOf(c.finished_rewards, (key) => extremes(key, true)),
  };
}

/** The same counters recounted from rows (tests and the bench compare them with the kept ones). */
export function recount(
  rows: Iterable<Pick<IndexRow, "status" | "calls" | "turns" | "tokens" | "rewards" | "trace_rewards" | "ended">>,
): {
  counters: Counters;
  throughput: Map<number, number>;
} {
  const counters = emptyCounters();
  const throughput = new Map<number, number>();
  for (const row of rows) {
    const x = contributionOf(row);
    applyContribution(counters, x, 1);
    if (x.endedMinute !== null) throughput.set(x.endedMinute, (throughput.get(x.endedMinute) ?? 0) + 1);
  }
  return { counters, throughput };
}

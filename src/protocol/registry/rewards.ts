// An episode's reward, as the trainer counts it (prime-rl `summarize_episode`; ../docs/training.md):
// each trace's `rewards` scalar (verifiers: `{name: {score, weight}}`, entries may be null; a bare
// number is one reward named "reward") gives Σ score × weight (weight absent = 1); the episode's
// reward is the mean of that over the traces that have rewards (a reward-less trace, e.g. a judge's
// seat, is skipped); each reward key's score is the mean of its scores over the traces that have
// it. Every number the relay shows for a reward (rows, sort, filters, groups, steps, tasks, runs,
// flags, clients, export, pages) comes from here. Pure.

import type { Json } from "../wire/json-view.js";

/** The definition in words, as the pages and the CLI state it where the number is shown. */
export const REWARD_DEFINITION =
  "the trainer's reward: per trace Σ score × weight (weight 1 when absent), the mean over the traces with rewards; " +
  "per key, the mean of its score over the traces";

/** The key the episode's total reward is kept and selected under beside the per-key means. */
export const TOTAL_KEY = "reward";

/** One trace's scores by key: `{score, weight}` entries (verifiers) or a bare number (key "reward"). */
export function scoresOf(rewards: Json): Array<[string, number]> {
  return weightedScoresOf(rewards).map(([k, s]) => [k, s]);
}

/** One trace's scores with their weights (absent or not a finite number: 1). */
function weightedScoresOf(rewards: Json): Array<[string, number, number]> {
  if (typeof rewards === "number") return Number.isFinite(rewards) ? [[TOTAL_KEY, rewards, 1]] : [];
  if (typeof rewards !== "object" || rewards === null || Array.isArray(rewards)) return [];
  const out: Array<[string, number, number]> = [];
  for (const [k, v] of Object.entries(rewards)) {
    if (typeof v === "number") {
      if (Number.isFinite(v)) out.push([k, v, 1]);
      continue;
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) continue;
    const { score, weight } = v as Record<string, Json>;
    if (typeof score !== "number" || !Number.isFinite(score)) continue;
    out.push([k, score, typeof weight === "number" && Number.isFinite(weight) ? weight : 1]);
  }
  return out;
}

/** One trace's reward: Σ score × weight, or null when it has no score. */
export function rewardOf(rewards: Json): number | null {
  const s = weightedScoresOf(rewards);
  return s.length ? s.reduce((sum, [, score, weight]) => sum + score * weight, 0) : null;
}

/** An episode's reward and per-key scores over its traces. */
export interface EpisodeReward {
  /** The mean over the rewarded traces of their reward (rewardOf); null when no trace has one. */
  reward: number | null;
  /** Per key (sorted), the mean of its scores over the traces that have it. */
  scores: Array<[string, number]>;
}

/** The episode's reward from each trace's `rewards` scalar (null or absent for a trace without). */
export function episodeReward(traceRewards: readonly Json[]): EpisodeReward {
  let sum = 0;
  let rewarded = 0;
  const byKey = new Map<string, { sum: number; n: number }>();
  for (const r of traceRewards) {
    const t = rewardOf(r);
    if (t === null) continue;
    sum += t;
    rewarded++;
    for (const [k, s] of scoresOf(r)) {
      const e = byKey.get(k) ?? { sum: 0, n: 0 };
      e.sum += s;
      e.n++;
      byKey.set(k, e);
    }
  }
  const keys = [...byKey.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return {
    reward: rewarded ? sum / rewarded : null,
    scores: keys.map((k) => [k, byKey.get(k)!.sum / byKey.get(k)!.n]),
  };
}

/** What a row holds of its traces' rewards (entry.ts IndexRow). */
export interface RewardFields {
  /** The first trace's `rewards` scalar. */
  rewards: Json;
  /** Each trace's `rewards` scalar, in trace order (absent in rows of older releases: then `rewards` stands alone). */
  trace_rewards?: Json[] | null;
}

/** The traces' rewards a row holds. */
export function traceRewardsOf(row: RewardFields): readonly Json[] {
  return row.trace_rewards ?? [row.rewards];
}

/** A row's reward: the trainer's (episodeReward). */
export function rowReward(row: RewardFields): number | null {
  return episodeReward(traceRewardsOf(row)).reward;
}

/**
 * A row's scores as kept and selected by key (aggregates, steps, tasks, filters, flags): the total under TOTAL_KEY
 * first, then each key's mean over the traces (a reward named TOTAL_KEY by its producer is shown as the total; for
 * bare-number rewards the two are the same).
 */
export function rowScores(row: RewardFields): Array<[string, number]> {
  const e = episodeReward(traceRewardsOf(row));
  const perKey = e.scores.filter(([k]) => k !== TOTAL_KEY);
  return e.reward === null ? perKey : [[TOTAL_KEY, e.reward], ...perKey];
}

/** One key of `rowScores` (the total for TOTAL_KEY), or undefined: what a per-key read (tasks) needs, without the rest. */
export function rowScore(row: RewardFields, key: string): number | undefined {
  if (key === TOTAL_KEY) return rowReward(row) ?? undefined;
  let sum = 0;
  let n = 0;
  for (const r of traceRewardsOf(row)) {
    if (rewardOf(r) === null) continue;
    const s = scoresOf(r).find(([k]) => k === key);
    if (s) {
      sum += s[1];
      n++;
    }
  }
  return n ? sum / n : undefined;
}

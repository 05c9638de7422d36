// A run's training steps: per step and kind (train, eval) of the dispatch identity, its rollouts,
// how they ended, their mean rewards, the zero-variance share of its groups, mean turns and tokens,
// and how stale the policy they were sampled with was (step − policy_version). Pure. The run's
// index keeps one counter per step by adding each row's part and taking the old one back (and a
// group's state likewise), in integer units, so a step's numbers equal a recount from the rows,
// whatever the order of updates (`recountSteps`).

import { SCORE_UNIT, unitsOf } from "./aggregates.js";
import { type IndexRow, type IndexStatus, identityOf } from "./entry.js";
import { rowScores, TOTAL_KEY } from "./rewards.js";
import {
  applyOutcomeRow,
  type OutcomeCounters,
  type OutcomeJson,
  type OutcomeRow,
  outcomeJson,
} from "./step-outcomes.js";

/** `GET /v1/runs/{run}/steps?kind=` takes these kinds (a step of a rollout without a kind is listed with kind null). */
export const STEP_KINDS = ["train", "eval"] as const;

/** A step as the API shows it (`GET /v1/runs/{run}/steps`, pushed on the run socket); the clients use this type too. */
export interface StepJson extends OutcomeJson {
  step: number;
  /** The identity's kind (train or eval); null for rollouts whose identity names none. */
  kind: string | null;
  episodes: number;
  live: number;
  finished: number;
  failed: number;
  /**
   * The trainer's reward (src/protocol/registry/rewards.ts) over the step's finished rollouts with one: its mean and
   * population std (null: none).
   */
  mean_reward: number | null;
  std_reward: number | null;
  /** Per reward key, the mean score over the step's finished rollouts ("reward": the total, as `mean_reward`). */
  mean_rewards: Record<string, number>;
  /** Of the step's complete groups, the share with zero reward variance (null while none is complete). */
  zero_variance_share: number | null;
  /** Complete groups and the zero-variance ones among them. */
  groups: { complete: number; zero_variance: number };
  mean_turns: number | null;
  mean_tokens: number | null;
  /** step − policy_version over the rollouts that name both (null: none). */
  staleness: { mean: number | null; max: number | null };
}

/** One page of steps, by step then kind (`GET /v1/runs/{run}/steps`). */
export interface StepsPage {
  steps: StepJson[];
  /** Pass as `cursor` for the next page; null on the last one. */
  cursor: string | null;
}

/** What the index keeps per step (JSON in its `steps` row). */
export interface StepCounters extends OutcomeCounters {
  episodes: number;
  live: number;
  finished: number;
  failed: number;
  finish_refused: number;
  calls: number;
  /** Σ turns over the rollouts whose turns are counted, and how many those are (entry.ts `turns`); absent: 0. */
  turns?: number;
  turned?: number;
  tokens: number;
  /** Per reward key over the finished rollouts: count and sum in SCORE_UNITs. */
  rewards: Record<string, { count: number; units: number }>;
  /** Σ reward² over the finished rollouts, each square rounded to SCORE_UNITs (for `std_reward`); absent: 0. */
  reward_squares?: number;
  /** Rollouts per staleness value. */
  staleness: Record<string, number>;
  groups_complete: number;
  groups_zero: number;
}

/** A step's key: its number and kind ("" for none, as the table stores it). */
export interface StepKey {
  step: number;
  kind: string;
}

export function emptyStep(): StepCounters {
  return {
    episodes: 0,
    live: 0,
    finished: 0,
    failed: 0,
    finish_refused: 0,
    calls: 0,
    tokens: 0,
    rewards: {},
    staleness: {},
    groups_complete: 0,
    groups_zero: 0,
  };
}

export type StepRow = Pick<
  IndexRow,
  "status" | "calls" | "turns" | "tokens" | "rewards" | "trace_rewards" | "dispatch"
> &
  OutcomeRow;

/** The step a row counts in (null: its identity names no step). */
export function stepKeyOf(row: Pick<IndexRow, "dispatch">): StepKey | null {
  const id = identityOf(row);
  return id.step === null ? null : { step: id.step, kind: id.kind ?? "" };
}

/** Add (1) or take back (-1) one row's part of its step's counters. */
export function applyStepRow(c: StepCounters, row: StepRow, sign: 1 | -1): void {
  c.episodes += sign;
  c[row.status as IndexStatus] += sign;
  c.calls += sign * row.calls;
  if (typeof row.turns === "number") {
    c.turns = (c.turns ?? 0) + sign * row.turns;
    c.turned = (c.turned ?? 0) + sign;
  }
  c.tokens += sign * row.tokens;
  if (row.status === "finished") {
    for (const [key, score] of rowScores(row)) {
      const r = (c.rewards[key] ??= { count: 0, units: 0 });
      r.count += sign;
      r.units += sign * unitsOf(score);
      if (r.count === 0) delete c.rewards[key];
      if (key === TOTAL_KEY) c.reward_squares = (c.reward_squares ?? 0) + sign * unitsOf(score * score);
    }
  }
  applyOutcomeRow(c, row, sign);
  const { staleness } = identityOf(row);
  if (staleness !== null) {
    const k = String(staleness);
    c.staleness[k] = (c.staleness[k] ?? 0) + sign;
    if (c.staleness[k] === 0) delete c.staleness[k];
  }
}

/** Add (1) or take back (-1) one complete group of the step. */
export function applyStepGroup(c: StepCounters, zero: boolean, sign: 1 | -1): void {
  c.groups_complete += sign;
  if (zero) c.groups_zero += sign;
}

/** Whether nothing counts in the step any more (its row goes). */
export function isEmptyStep(c: StepCounters): boolean {
  return c.episodes === 0 && c.groups_complete === 0;
}

export function stepJson(key: StepKey, c: StepCounters): StepJson {
  let n = 0;
  let sum = 0;
  let max: number | null = null;
  for (const [v, count] of Object.entries(c.staleness)) {
    const s = Number(v);
    n += count;
    sum += s * count;
    if (count > 0) max = max === null ? s : Math.max(max, s);
  }
  const keys = Object.keys(c.rewards).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const total = c.rewards[TOTAL_KEY];
  const mean = total ? (total.units * SCORE_UNIT) / total.count : null;
  // population variance E[x²] − E[x]²: the squares are rounded to SCORE_UNITs, so below that it is rounding, read as 0
  const raw = total && mean !== null ? ((c.reward_squares ?? 0) * SCORE_UNIT) / total.count - mean * mean : null;
  const variance = raw === null ? null : raw < SCORE_UNIT ? 0 : raw;
  return {
    step: key.step,
    kind: key.kind === "" ? null : key.kind,
    episodes: c.episodes,
    live: c.live + c.finish_refused,
    finished: c.finished,
    failed: c.failed,
    mean_reward: mean,
    std_reward: variance === null ? null : Math.sqrt(variance),
    mean_rewards: Object.fromEntries(keys.map((k) => [k, (c.rewards[k]!.units * SCORE_UNIT) / c.rewards[k]!.count])),
    zero_variance_share: c.groups_complete > 0 ? c.groups_zero / c.groups_complete : null,
    groups: { complete: c.groups_complete, zero_variance: c.groups_zero },
    mean_turns: c.turned ? (c.turns ?? 0) / c.turned : null,
    mean_tokens: c.episodes > 0 ? c.tokens / c.episodes : null,
    staleness: { mean: n > 0 ? sum / n : null, max },
    ...outcomeJson(c, c.finished + c.failed),
  };
}

/** The same counters recounted from rows and complete groups (tests compare them with the kept ones). */
export function recountSteps(
  rows: Iterable<StepRow>,
  completeGroups: Iterable<{ key: StepKey | null; zero: boolean }>,
): Map<string, { key: StepKey; counters: StepCounters }> {
  const out = new Map<string, { key: StepKey; counters: StepCounters }>();
  const at = (key: StepKey) => {
    const k = `${key.step}\u0000${key.kind}`;
    let e = out.get(k);
    if (!e) out.set(k, (e = { key, counters: emptyStep() }));
    return e.counters;
  };
  for (const r of rows) {
    const key = stepKeyOf(r);
    if (key) applyStepRow(at(key), r, 1);
  }
  for (const g of completeGroups) if (g.key) applyStepGroup(at(g.key), g.zero, 1);
  return out;
}

// Rollout groups (GRPO and its relatives sample a group of rollouts per task and learn from the
// reward differences inside it). A group is the episodes of a run sharing the reply head's
// `group.id`, or while live their first trace's task key. Pure: the run's index recounts a group
// from its members whenever one of them changes (index-store.ts), so a group's numbers always
// equal a recount, whatever the order rows arrive, finish, fail or go.

import { dispatchFacts } from "../envelope/dispatch.js";
import type { Json } from "../wire/json-view.js";
import type { ZeroVarianceTrend } from "./aggregates.js";
import { type IndexRow, type IndexStatus, timedOut } from "./entry.js";
import { episodeReward, rowReward, traceRewardsOf } from "./rewards.js";

/**
 * The rollout group an episode is in: the trainer's dispatch identity's `group` when it names one,
 * else the reply head's `group.id` (once a reply came), else (live) the first trace's task key.
 */
export function rolloutGroup(
  dispatchGroup: string | null,
  headGroupId: string | null,
  taskKey: string | null,
): string | null {
  return dispatchGroup ?? headGroupId ?? taskKey;
}

/**
 * A row's group once it is the rollout's for good: its `group`, except while it is live without a dispatch group
 * (the task key stands in until the reply names the group; null), so a rollout shown live and ended names one group.
 */
export function settledGroup(r: Pick<IndexRow, "group" | "status" | "dispatch">): string | null {
  if (r.status === "live" && dispatchFacts(r.dispatch).group === null) return null;
  return r.group ?? null;
}

/** One reward key over a group's finished rollouts: population std (what GRPO normalises by). */
export interface GroupRewardStats {
  mean: number;
  std: number;
  min: number;
  max: number;
}

/** How a run's groups are listed: by reward spread (largest first), size (largest first) or task. */
export type GroupSort = "spread" | "size" | "task";
export const GROUP_SORTS: readonly GroupSort[] = ["spread", "size", "task"];

/** A group as the API answers it (`GET /v1/runs/{run}/groups`); the clients use this type too. */
export interface GroupJson {
  id: string;
  task: string | null;
  /** Rollouts in the group, and by status. */
  size: number;
  finished: number;
  failed: number;
  live: number;
  /**
   * The trainer's reward (src/protocol/registry/rewards.ts) over the finished rollouts with one: mean and population
   * std (what GRPO normalises the advantage on the total by); null without any.
   */
  mean_reward: number | null;
  std_reward: number | null;
  /** Per reward key (each rollout's mean over its traces), over the finished rollouts that have it. */
  rewards: Record<string, GroupRewardStats>;
  /** Max − min of the finished rollouts' reward (null without one): how much signal the group carries. */
  spread: number | null;
  /** The training step and kind its rollouts were dispatched for (their identity's; null without one). */
  step: number | null;
  kind: string | null;
}

/** One page of a run's groups, with the run's numbers (`GET /v1/runs/{run}/groups`). */
export interface GroupsPage {
  run: string;
  groups_total: number;
  /** Groups with no live rollout. */
  finished_groups: number;
  /** Finished groups with at least 2 finished rollouts whose every reward key has std 0 (no learning signal). */
  zero_variance_groups: number;
  /** zero_variance_groups / finished_groups; null while no group finished. */
  zero_variance_share: number | null;
  /**
   * Per minute over the last hour: groups completed, how many with zero variance, that share, and the run's share as it
   * stood then.
   */
  zero_variance_trend: ZeroVarianceTrend;
  groups: GroupJson[];
  /** Pass as `options.cursor` for the next page; null on the last one. */
  cursor: string | null;
}

/** An advantage in the group: reward − the group's mean, and divided by its std where that is not 0. */
export interface Advantage {
  raw: number;
  normalized: number | null;
}

/** A group's rollout as the API shows it: its reward, its advantage on it, and per reward key the same. */
export interface RolloutJson {
  /** What the group page shows beside the numbers: its task, stage and last words, its identity. */
  task: string | null;
  dispatch: IndexRow["dispatch"];
  live: IndexRow["live"];
  id: string;
  status: IndexStatus;
  rewards: Json;
  /** Each trace's `rewards` (absent in rows of older releases). */
  trace_rewards?: Json[] | null;
  /** The trainer's reward (rewards.ts). */
  reward: number | null;
  /** On `reward`, against the group's `mean_reward` and `std_reward` (GRPO's); null without a reward or group mean. */
  advantage: Advantage | null;
  /** Per reward key, on the key's mean over the traces against the group's `rewards[key]`. */
  key_advantages: Record<string, Advantage>;
  /** Model calls, all traces. */
  calls: number;
  /** Assistant nodes, all traces (entry.ts `turns`); null: not counted. */
  turns: number | null;
  tokens: number;
  stop_condition: string | null;
  /** The trainer's truncation (entry.ts `is_truncated`); null: not counted. */
  is_truncated: boolean | null;
  /** The first trace's `is_timeout`. */
  is_timeout: boolean;
  /** Deprecated alias of `is_timeout` (one release). */
  truncated: boolean;
  error: string | null;
}

/** One group with its rollouts, best first by the tie rule (ranking.ts) (`GET /v1/runs/{run}/groups/{group}`). */
export interface GroupDetailJson extends GroupJson {
  rollouts: RolloutJson[];
}

/** One task's results over the run's rollouts (`GET /v1/runs/{run}/tasks`). */
export interface TaskSummary {
  task: string;
  rollouts: number;
  finished: number;
  failed: number;
  /** Over the rollouts whose turns are counted (entry.ts `turns`); null: none is. */
  mean_turns: number | null;
  mean_tokens: number;
  /** Over the finished rollouts with the chosen reward key; null without any. */
  mean_reward: number | null;
  solve_rate: number | null;
}

/** A page of a run's tasks by name: the solve rate is the share of `key`'s scores at or above `threshold`. */
export interface TasksPage {
  key: string;
  threshold: number;
  tasks: TaskSummary[];
  cursor: string | null;
}

/** A group as the index keeps it: the API's fields, and two flags the run's counts are kept by. */
export interface GroupSummary extends GroupJson {
  /** No rollout is still running. */
  complete: boolean;
  /** Complete, at least two finished rollouts with a reward, and their rewards equal: its advantages are all 0. */
  zeroVariance: boolean;
}

/**
 * What a group's numbers are computed from: each member's status, rewards and task, and its identity's step and kind.
 */
export type GroupMember = Pick<IndexRow, "status" | "rewards" | "trace_rewards" | "task"> & {
  step?: number | null;
  kind?: string | null;
};

const LIVE: ReadonlySet<IndexStatus> = new Set(["live", "finish_refused"]);

export function groupSummary(id: string, members: readonly GroupMember[]): GroupSummary {
  const scores = new Map<string, number[]>();
  let finished = 0;
  let failed = 0;
  let live = 0;
  const totals: number[] = [];
  let task: string | null = null;
  let step: number | null = null;
  let kind: string | null = null;
  for (const m of members) {
    task ??= m.task ?? null;
    if (step === null && m.step != null) {
      step = m.step;
      kind = m.kind ?? null;
    }
    if (LIVE.has(m.status)) live++;
    else if (m.status === "failed") failed++;
    else {
      finished++;
      const e = episodeReward(traceRewardsOf(m));
      if (e.reward !== null) totals.push(e.reward);
      for (const [k, v] of e.scores) scores.set(k, [...(scores.get(k) ?? []), v]);
    }
  }
  const rewards: Record<string, GroupRewardStats> = {};
  for (const k of [...scores.keys()].sort()) rewards[k] = statsOf(scores.get(k)!);
  const total = totals.length ? statsOf(totals) : null;
  const complete = live === 0;
  return {
    id,
    task,
    size: members.length,
    finished,
    failed,
    live,
    mean_reward: total?.mean ?? null,
    std_reward: total?.std ?? null,
    rewards,
    spread: total ? total.max - total.min : null,
    step,
    kind,
    complete,
    zeroVariance: complete && totals.length >= 2 && total !== null && total.min === total.max,
  };
}

/** Mean, population std, min and max of a non-empty list. */
function statsOf(v: readonly number[]): GroupRewardStats {
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const std = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / v.length);
  return { mean, std, min: Math.min(...v), max: Math.max(...v) };
}

/** `x` − mean, and divided by std where that is not 0. */
function advantageOf(x: number, mean: number, std: number): Advantage {
  const raw = x - mean;
  return { raw, normalized: std > 0 ? raw / std : null };
}

/** A rollout's advantage on its reward (GRPO's: on the total), or null without a reward or a group mean. */
export function advantageOnReward(
  row: Pick<IndexRow, "rewards" | "trace_rewards">,
  group: GroupJson,
): Advantage | null {
  const r = rowReward(row);
  return r === null || group.mean_reward === null || group.std_reward === null
    ? null
    : advantageOf(r, group.mean_reward, group.std_reward);
}

/** A rollout's advantage per reward key: its key's mean over its traces against the group's numbers for the key. */
export function advantagesOf(
  row: Pick<IndexRow, "rewards" | "trace_rewards">,
  group: GroupJson,
): Record<string, Advantage> {
  const out: Record<string, Advantage> = {};
  for (const [k, v] of episodeReward(traceRewardsOf(row)).scores) {
    const s = group.rewards[k];
    if (s) out[k] = advantageOf(v, s.mean, s.std);
  }
  return out;
}

/** A group as the API shows it. */
export function groupJson(g: GroupSummary): GroupJson {
  const { complete: _c, zeroVariance: _z, ...rest } = g;
  return rest;
}

/** A group's rollout as the API shows it (the caller ranks them: ranking.ts). */
export function rolloutJson(r: IndexRow, g: GroupSummary): RolloutJson {
  return {
    task: r.task ?? null,
    dispatch: r.dispatch ?? null,
    live: r.live ?? null,
    id: r.id,
    status: r.status,
    rewards: r.rewards,
    trace_rewards: r.trace_rewards ?? null,
    reward: rowReward(r),
    advantage: advantageOnReward(r, g),
    key_advantages: advantagesOf(r, g),
    calls: r.calls,
    turns: r.turns ?? null,
    tokens: r.tokens,
    stop_condition: r.stop_condition ?? null,
    is_truncated: r.is_truncated ?? null,
    is_timeout: timedOut(r),
    truncated: timedOut(r),
    error: r.error,
  };
}

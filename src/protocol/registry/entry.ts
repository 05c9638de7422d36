// An episode index row and its API form: types and a pure conversion with no runtime imports,
// shared by the index, the Episode object, the dashboard and tests.

import { dispatchFacts } from "../envelope/dispatch.js";
import type { Json, JsonObject } from "../wire/json-view.js";
import { episodeReward, traceRewardsOf } from "./rewards.js";
import { stopTruncates } from "./truncation.js";

export type IndexStatus = "live" | "finished" | "failed" | "finish_refused";
export const INDEX_STATUSES: readonly IndexStatus[] = ["live", "finished", "failed", "finish_refused"];

/** One episode as its run's index holds it (what the Episode object sends; times in ms since epoch). */
export interface IndexRow {
  id: string;
  /** The run it belongs to (src/protocol/registry/run.ts). */
  run: string;
  status: IndexStatus;
  created: number;
  updated: number;
  /** When it finished or failed, else null. */
  ended: number | null;
  seq: number;
  traces: number;
  nodes: number;
  /** Model calls, all traces. */
  calls: number;
  /**
   * Turns as prime-rl counts them: assistant nodes, all traces (src/protocol/registry/progress-facts.ts `turnCount`).
   * Null: not counted, a row of an older release whose episode could not count them again (its node roles gone with
   * its bodies, or the episode gone); absent from rows sent by older releases.
   */
  turns?: number | null;
  /** Sum of the traces' `num_total_tokens`. */
  tokens: number;
  /** The first (orchestrator) trace's `rewards` scalar as JSON, null when it has none yet. */
  rewards: Json;
  /**
   * Each trace's `rewards` scalar in trace order (null: none), what the episode's reward is counted from
   * (src/protocol/registry/rewards.ts). Absent from rows sent by older releases: `rewards` then stands alone.
   */
  trace_rewards?: Json[] | null;
  error: string | null;
  /** The first trace's task key (`open.task.key`), null without one. (Absent from rows sent by older releases.) */
  task?: string | null;
  /** The rollout group: the reply head's `group.id`, else (live) the task key (src/protocol/registry/groups.ts). */
  group?: string | null;
  /** The first trace's `stop_condition` (null: none). */
  stop_condition?: string | null;
  /**
   * Truncated by the trainer's definition (truncation.ts: a trace's stop condition is a framework limit, or its last
   * successful call finished with `length`; any trace). Null: not counted, a row of an older release whose episode
   * could not count it again (its calls gone with its bodies, or the episode gone); absent from rows sent by older
   * releases.
   */
  is_truncated?: boolean | null;
  /** The first trace's `is_timeout` (absent from rows sent by older releases: they sent it as `truncated`). */
  is_timeout?: boolean;
  /**
   * Deprecated alias of `is_timeout`, for one release: what older releases named it (the API still answers it, and
   * the index reads it from rows older episodes send). Not the trainer's truncation: that is `is_truncated`.
   */
  truncated?: boolean;
  /** The reply head's `run.name`, once finished. */
  run_name?: string | null;
  /** The rollout's dispatch identity in the trainer (src/protocol/envelope/dispatch.ts), null without one. */
  dispatch?: JsonObject | null;
  /** Where the rollout stands (src/protocol/registry/progress-facts.ts), with what it has done so far (all traces). */
  live?: ProgressFacts | null;
  /**
   * The run's flag rules this rollout meets, with their evidence (src/protocol/flags/rules.ts; kept by its run's index,
   * not sent).
   */
  flags?: Flag[];
}

/**
 * A rollout's flag (src/protocol/flags/rules.ts): its rule and the evidence (a segment's node and an excerpt; the row's
 * own for a reward rule).
 */
export interface Flag {
  rule: string;
  trace: string | null;
  /** The node (-1: the task); null for a reward rule. */
  node: number | null;
  excerpt: string;
}

/** A rollout's stage, as prime-rl reads it off its first trace's `timing` spans and `errors`. */
export type Stage = "pending" | "boot" | "setup" | "running" | "finalize" | "scoring" | "done" | "error";

/** What a row says of the rollout's progress, live or ended (src/objects/episode/row-facts.ts). */
export interface ProgressFacts {
  stage: Stage;
  /** When it started (s since the epoch): the dispatch's `started`, else its timing's `start`; null when neither. */
  started: number | null;
  /** Seconds from `started` to the row's last update (or to its end); null without a start. */
  elapsed: number | null;
  /** Branches (sampled paths from the root to a leaf), all traces. */
  branches: number;
  /** Sums of the traces' `num_input_tokens` and `num_output_tokens`. */
  input_tokens: number;
  output_tokens: number;
  /** Sum of the calls' `usage.cost`, null when no call gave one. */
  cost: number | null;
  /** The latest assistant text, whitespace collapsed, at most LAST_CHARS characters; null before any. */
  last: string | null;
  /** Trainer annotation records merged (GET /v1/episodes/{id}/annotations); absent in rows of earlier releases. */
  annotations?: number;
}

/** `last` is cut to this many characters. */
export const LAST_CHARS = 160;

/** A row as the API shows it (lists, run sockets): times as ISO strings, and the reward to sort by. */
export interface IndexEntry extends Omit<IndexRow, "created" | "updated" | "ended"> {
  created: string;
  updated: string;
  ended: string | null;
  /**
   * The trainer's reward: per rewarded trace Σ score × weight, the mean over those traces
   * (src/protocol/registry/rewards.ts `rowReward`), or null.
   */
  reward: number | null;
  /** Per reward key, the mean of its score over the traces that have it (rewards.ts `episodeReward`). */
  scores: Record<string, number>;
  /** From the dispatch identity (null without one): what the list filters and sorts by. */
  kind: string | null;
  env: string | null;
  step: number | null;
  policy_version: number | null;
  /** step − policy_version: how many steps behind the policy it was sampled with was (null unless both). */
  staleness: number | null;
}

/** The identity's keys a row is filtered and grouped by, and its staleness. */
export function identityOf(
  r: Pick<IndexRow, "dispatch">,
): Pick<IndexEntry, "kind" | "env" | "step" | "policy_version" | "staleness"> {
  const f = dispatchFacts(r.dispatch);
  const staleness = f.step !== null && f.policy_version !== null ? f.step - f.policy_version : null;
  return { kind: f.kind, env: f.env, step: f.step, policy_version: f.policy_version, staleness };
}

/** A row's `is_timeout`: as sent, or (a row sent by an older release) its `truncated`. */
export function timedOut(r: Pick<IndexRow, "is_timeout" | "truncated">): boolean {
  return (r.is_timeout ?? r.truncated) === true;
}

/**
 * A row as the index keeps it: `is_timeout` by its own name (older releases' episodes send it as `truncated`), and
 * `is_truncated` as sent, or (sent by an older release, which counted none) true when its stop condition alone
 * truncates, else not counted (null) until its episode sends it again.
 */
export function keptRow(r: IndexRow): IndexRow {
  const { truncated: _, ...rest } = r;
  const isTruncated = r.is_truncated !== undefined ? r.is_truncated : stopTruncates(r.stop_condition) ? true : null;
  return { ...rest, is_truncated: isTruncated, is_timeout: timedOut(r) };
}

export function entryOf(r: IndexRow): IndexEntry {
  const e = episodeReward(traceRewardsOf(r));
  const isTimeout = timedOut(r);
  return {
    ...r,
    is_truncated: r.is_truncated ?? null,
    is_timeout: isTimeout,
    // deprecated alias, one release (docs/http-api.md)
    truncated: isTimeout,
    created: new Date(r.created).toISOString(),
    updated: new Date(r.updated).toISOString(),
    ended: r.ended === null ? null : new Date(r.ended).toISOString(),
    reward: e.reward,
    scores: Object.fromEntries(e.scores),
    ...identityOf(r),
  };
}

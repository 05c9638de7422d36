// An episode index row and its API form: types and a pure conversion with no runtime imports,
// shared by the index, the Episode object, the dashboard and tests.

import type { Json } from "../wire/json-view.js";
import { rewardOf } from "./rewards.js";

export type IndexStatus = "live" | "finished" | "failed" | "finish_refused";
export const INDEX_STATUSES: readonly IndexStatus[] = ["live", "finished", "failed", "finish_refused"];

/** One episode as its run's index holds it (what the Episode object sends; times in ms since epoch). */
export interface IndexRow {
  id: string;
  /** The run it belongs to (src/registry/run.ts). */
  run: string;
  status: IndexStatus;
  created: number;
  updated: number;
  /** When it finished or failed, else null. */
  ended: number | null;
  seq: number;
  traces: number;
  nodes: number;
  /** Model calls, all traces (the run's "turns"). */
  calls: number;
  /** Sum of the traces' `num_total_tokens`. */
  tokens: number;
  /** The first (orchestrator) trace's `rewards` scalar as JSON, null when it has none yet. */
  rewards: Json;
  error: string | null;
  /** The first trace's task key (`open.task.key`), null without one. (Absent from rows sent by older releases.) */
  task?: string | null;
  /** The rollout group: the reply head's `group.id`, else (live) the task key (src/registry/groups.ts). */
  group?: string | null;
  /** The first trace's `stop_condition` (null: none). */
  stop_condition?: string | null;
  /** The first trace's `is_timeout`. */
  truncated?: boolean;
  /** The reply head's `run.name`, once finished. */
  run_name?: string | null;
}

/** A row as the API shows it (lists, run sockets): times as ISO strings, and the reward to sort by. */
export interface IndexEntry extends Omit<IndexRow, "created" | "updated" | "ended"> {
  created: string;
  updated: string;
  ended: string | null;
  /** The weighted mean of the reward scores (src/registry/rewards.ts `rewardOf`), or null. */
  reward: number | null;
}

export function entryOf(r: IndexRow): IndexEntry {
  return {
    ...r,
    created: new Date(r.created).toISOString(),
    updated: new Date(r.updated).toISOString(),
    ended: r.ended === null ? null : new Date(r.ended).toISOString(),
    reward: rewardOf(r.rewards),
  };
}

// The run and runs sockets' protocol (run-sockets.ts), both directions, encode and decode side by
// side: the registry objects encode, the dashboard and clients decode with `parseRunMessage` /
// `parseRunsMessage`.
//
// `GET /v1/runs/{run}` upgraded to a WebSocket (the run's index), JSON text:
//   {type: "snapshot", run, aggregates, episodes: [entry...], truncated, limit}   at connect
//   {type: "changes", upserts: [entry...], deletes: [id...], aggregates,          coalesced, at most
//    steps?: [step...], steps_gone?: [{step, kind}...]}                           every PUSH_MS
// `GET /v1/runs` upgraded (the run directory), JSON text:
//   {type: "runs", runs: [summary...], truncated, limit}                          at connect
//   {type: "run_changes", upserts: [summary...], deletes: [run...]}               coalesced
// `aggregates` is null for a viewer whose token does not cover the whole run (it sees only its
// episodes); so are `steps` and `steps_gone` (the training steps that changed, steps.ts: only
// for a viewer covering the run, and only when some changed). Client → server: only "ping" (answered "pong" by the
// platform); anything else
// closes the socket (1008).

import type { RunAggregates } from "./aggregates.js";
import type { IndexEntry } from "./entry.js";
import type { StepJson } from "./steps.js";

/** Pushes to one socket are coalesced: at most one message per this many ms. */
export const PUSH_MS = 250;

/** A run as the directory lists it (times ISO). */
export interface RunSummary {
  run: string;
  created: string;
  updated: string;
  episodes: number;
  live: number;
  finished: number;
  failed: number;
  finish_refused: number;
  /**
   * Per reward key, the mean score over the run's finished episodes (absent until the run's index writes its row with
   * them).
   */
  mean_rewards?: Record<string, number>;
}

export type RunMessage =
  | {
      type: "snapshot";
      run: string;
      aggregates: RunAggregates | null;
      episodes: IndexEntry[];
      truncated: boolean;
      limit: number;
    }
  | {
      type: "changes";
      upserts: IndexEntry[];
      deletes: string[];
      aggregates: RunAggregates | null;
      steps?: StepJson[];
      steps_gone?: Array<Pick<StepJson, "step" | "kind">>;
    };

export type RunsMessage =
  | { type: "runs"; runs: RunSummary[]; truncated: boolean; limit: number }
  | { type: "run_changes"; upserts: RunSummary[]; deletes: string[] };

export function encodeRunMessage(m: RunMessage): string {
  return JSON.stringify(m);
}

export function encodeRunsMessage(m: RunsMessage): string {
  return JSON.stringify(m);
}

/** One run-socket message; throws on anything else. */
export function parseRunMessage(text: string): RunMessage {
  const m = parseObject(text);
  const aggregatesOk = m.aggregates === null || isObject(m.aggregates);
  if (
    m.type === "snapshot" &&
    typeof m.run === "string" &&
    aggregatesOk &&
    isList(m.episodes, isEntry) &&
    typeof m.truncated === "boolean"
  ) {
    return m as unknown as RunMessage;
  }
  if (
    m.type === "changes" &&
    aggregatesOk &&
    isList(m.upserts, isEntry) &&
    isList(m.deletes, (x) => typeof x === "string")
  ) {
    return m as unknown as RunMessage;
  }
  throw new Error(`not a run message: ${text.slice(0, 80)}`);
}

/** One directory-socket message; throws on anything else. */
export function parseRunsMessage(text: string): RunsMessage {
  const m = parseObject(text);
  if (m.type === "runs" && isList(m.runs, isSummary) && typeof m.truncated === "boolean")
    return m as unknown as RunsMessage;
  if (m.type === "run_changes" && isList(m.upserts, isSummary) && isList(m.deletes, (x) => typeof x === "string"))
    return m as unknown as RunsMessage;
  throw new Error(`not a runs message: ${text.slice(0, 80)}`);
}

function parseObject(text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`not an index message (not JSON): ${text.slice(0, 80)}`);
  }
  if (!isObject(v)) throw new Error(`not an index message: ${text.slice(0, 80)}`);
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isList(v: unknown, item: (x: unknown) => boolean): boolean {
  return Array.isArray(v) && v.every(item);
}

function isEntry(v: unknown): boolean {
  return (
    isObject(v) &&
    typeof v.id === "string" &&
    typeof v.run === "string" &&
    typeof v.status === "string" &&
    typeof v.updated === "string"
  );
}

function isSummary(v: unknown): boolean {
  return isObject(v) && typeof v.run === "string" && typeof v.episodes === "number" && typeof v.updated === "string";
}

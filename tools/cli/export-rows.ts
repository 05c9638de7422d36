// An exported rollout's rows, from its index row and its episode's JSON view: one per rollout, or
// one per branch (a sampled path from a trace's root to a leaf). The same columns and rules as the
// Python client's (clients/python/episode_relay/export.py `rollout_record`, `branch_records`):
// identity from the row, the rest counted from the episode (the reward by the one definition,
// src/protocol/registry/rewards.ts). Pure.

import {
  episodeReward,
  episodeTruncated,
  type Json,
  lastSuccessfulFinish,
  type TraceEnd,
  traceTruncated,
} from "../../src/protocol/index.js";

export interface Column {
  name: string;
  type: "STRING" | "INT64" | "DOUBLE" | "BOOLEAN";
}

const s = (name: string): Column => ({ name, type: "STRING" });
const i = (name: string): Column => ({ name, type: "INT64" });
const f = (name: string): Column => ({ name, type: "DOUBLE" });
const b = (name: string): Column => ({ name, type: "BOOLEAN" });

/** A rollout's columns in order; `rewards`, `metrics` and `flags` are JSON text (their keys vary by run). */
export const ROLLOUT_COLUMNS: readonly Column[] = [
  s("id"),
  s("run"),
  s("status"),
  s("kind"),
  s("env"),
  s("group"),
  s("task"),
  i("step"),
  i("policy_version"),
  i("staleness"),
  f("reward"),
  s("rewards"),
  s("metrics"),
  s("final_answer"),
  s("expected_answer"),
  i("turns"),
  i("calls"),
  i("traces"),
  i("branches"),
  i("input_tokens"),
  i("output_tokens"),
  i("tokens"),
  s("stop_condition"),
  b("is_truncated"),
  b("is_timeout"),
  s("error"),
  s("flags"),
  s("ended"),
];

export const BRANCH_COLUMNS: readonly Column[] = [
  s("id"),
  s("run"),
  s("kind"),
  s("env"),
  s("group"),
  s("task"),
  i("step"),
  i("policy_version"),
  f("reward"),
  s("trace"),
  i("branch"),
  i("leaf"),
  i("nodes"),
  i("tokens"),
  s("final_answer"),
  s("stop_condition"),
  b("is_truncated"),
  b("is_timeout"),
];

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const int = (v: unknown): number => (typeof v === "number" && Number.isSafeInteger(v) ? v : 0);
const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

function parentsOf(t: Obj): Array<number | null> {
  return arr(t.nodes).map((n) => (isObj(n) && typeof n.parent === "number" ? n.parent : null));
}

/** Nodes no node names as its parent, in node order: a branch ends at each. */
function leaves(parents: ReadonlyArray<number | null>): number[] {
  const hasChild = new Uint8Array(parents.length);
  for (const p of parents) if (p !== null && p >= 0 && p < parents.length) hasChild[p] = 1;
  const out: number[] = [];
  for (let k = 0; k < parents.length; k++) if (!hasChild[k]) out.push(k);
  return out;
}

function pathTo(parents: ReadonlyArray<number | null>, leaf: number): number[] {
  const out: number[] = [];
  const seen = new Set<number>();
  for (
    let at: number | null = leaf;
    at !== null && at >= 0 && at < parents.length && !seen.has(at);
    at = parents[at] ?? null
  ) {
    seen.add(at);
    out.push(at);
  }
  return out.reverse();
}

function textOf(content: unknown): string | null {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    const parts = content.filter((p): p is Obj => isObj(p) && typeof p.text === "string").map((p) => p.text as string);
    return parts.length ? parts.join("") : null;
  }
  return null;
}

/** The last assistant message's text on the path. */
function answerOn(nodes: unknown[], path: number[]): string | null {
  for (let k = path.length - 1; k >= 0; k--) {
    const n = nodes[path[k]!];
    const m = isObj(n) ? n.message : undefined;
    if (isObj(m) && m.role === "assistant") {
      const t = textOf(m.content);
      if (t !== null) return t;
    }
  }
  return null;
}

/**
 * The task's expected answer: the episode's task (the reply head's), else the first trace's `open.task` that has one
 * (a reply head may name its task without the data).
 */
function expectedAnswer(episode: Obj, traces: Obj[]): unknown {
  for (const task of [episode.task, ...traces.map((t) => t.task)]) {
    const data = isObj(task) ? task.data : undefined;
    const answer = isObj(data) ? data.answer : undefined;
    if (answer !== undefined && answer !== null) return answer;
  }
  return undefined;
}

export function rolloutRecord(row: Obj, episode: Obj): Obj {
  const traces = arr(episode.traces).filter(isObj);
  const first: Obj = traces[0] ?? {};
  let branches = 0;
  let final: string | null = null;
  traces.forEach((t, k) => {
    const parents = parentsOf(t);
    const ends = leaves(parents);
    branches += ends.length;
    if (k === 0 && ends.length > 0) final = answerOn(arr(t.nodes), pathTo(parents, ends.at(-1)!));
  });
  const expected = expectedAnswer(episode, traces);
  // the trainer's reward and per-key means over every trace (src/protocol/registry/rewards.ts)
  const reward = episodeReward(traces.map((t) => (t.rewards ?? null) as Json));
  const flags = arr(row.flags)
    .filter(isObj)
    .map((x) => x.rule);
  return {
    id: row.id,
    run: row.run,
    status: row.status,
    kind: row.kind,
    env: row.env,
    group: row.group,
    task: row.task,
    step: row.step,
    policy_version: row.policy_version,
    staleness: row.staleness,
    reward: reward.reward,
    rewards: JSON.stringify(Object.fromEntries(reward.scores)),
    metrics: JSON.stringify(isObj(first.metrics) ? first.metrics : {}),
    final_answer: final,
    expected_answer:
      typeof expected === "string"
        ? expected
        : expected === undefined || expected === null
          ? null
          : JSON.stringify(expected),
    // prime-rl's turns: assistant nodes, all traces; model calls by their own name
    turns: traces.reduce((n, t) => n + arr(t.nodes).filter((x) => isObj(x) && roleOf(x) === "assistant").length, 0),
    calls: traces.reduce((n, t) => n + arr(t.calls).length, 0),
    traces: traces.length,
    branches,
    input_tokens: traces.reduce((n, t) => n + int(t.num_input_tokens), 0),
    output_tokens: traces.reduce((n, t) => n + int(t.num_output_tokens), 0),
    tokens: traces.reduce((n, t) => n + int(t.num_total_tokens), 0),
    stop_condition: str(first.stop_condition),
    // the trainer's truncation over every trace (truncation.ts); the first trace's timeout by its name only (no
    // `truncated` column: the API's deprecated alias of is_timeout would read as the trainer's truncation)
    is_truncated: episodeTruncated(traces.map(traceEnd)),
    is_timeout: first.is_timeout === true,
    error: str(row.error),
    flags: JSON.stringify(flags),
    ended: str(row.ended),
  };
}

/** What decides a trace's truncation: its stop condition and its last successful call's finish reason. */
function traceEnd(t: Obj): TraceEnd {
  return { stop: (t.stop_condition ?? null) as Json, lastFinish: lastSuccessfulFinish(arr(t.calls) as Json[]) };
}

/** A node's `message.role` (null: none). */
function roleOf(node: Obj): string | null {
  return isObj(node.message) && typeof node.message.role === "string" ? node.message.role : null;
}

export function branchRecords(row: Obj, episode: Obj): Obj[] {
  const out: Obj[] = [];
  const traces = arr(episode.traces).filter(isObj);
  const reward = episodeReward(traces.map((t) => (t.rewards ?? null) as Json)).reward;
  for (const t of traces) {
    const nodes = arr(t.nodes);
    const parents = parentsOf(t);
    leaves(parents).forEach((leaf, k) => {
      const path = pathTo(parents, leaf);
      out.push({
        id: row.id,
        run: row.run,
        kind: row.kind,
        env: row.env,
        group: row.group,
        task: row.task,
        step: row.step,
        policy_version: row.policy_version,
        reward,
        trace: str(t.id),
        branch: k,
        leaf,
        nodes: path.length,
        tokens: path.reduce((n, p) => {
          const node = nodes[p];
          return n + (isObj(node) ? arr(node.token_ids).length : 0);
        }, 0),
        final_answer: answerOn(nodes, path),
        stop_condition: str(t.stop_condition),
        is_truncated: traceTruncated(traceEnd(t)),
        is_timeout: t.is_timeout === true,
      });
    });
  }
  return out;
}

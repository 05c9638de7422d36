// What a row says of a rollout's progress, read off its traces the way prime-rl's live table reads
// them (monitors/file/traces/live.py `stage`, `trace_row`): the stage from the first trace's timing
// spans and errors, the branches (leaves of the node tree), the tokens, the calls' cost and the
// latest assistant words. Pure: the episode object feeds it what it holds (src/objects/episode/row-facts.ts),
// the dashboard and tests call the same functions.

import type { Json, JsonObject } from "../wire/json-view.js";
import { LAST_CHARS, type Stage } from "./entry.js";

/**
 * Spans checked in this order; the first that has started names the stage (prime-rl's priority order, not the latest by
 * time).
 */
const SPANS: ReadonlyArray<[string, Stage]> = [
  ["scoring", "scoring"],
  ["finalize", "finalize"],
  ["agent", "running"],
  ["setup", "setup"],
  ["boot", "boot"],
];

/**
 * A trace's stage: `error` when it has errors, `done` once `timing.scoring.end` is set, else the
 * first of scoring, finalize, agent (`running`), setup, boot whose `start` is set, else `pending`.
 * Unset spans are 0.0 upstream, which counts as not set.
 */
export function stageOf(timing: Json | undefined, errors: number): Stage {
  if (errors > 0) return "error";
  const t = isObject(timing) ? timing : {};
  if (truthy(spanAt(t, "scoring")?.end)) return "done";
  for (const [name, stage] of SPANS) if (truthy(spanAt(t, name)?.start)) return stage;
  return "pending";
}

/** The timing's overall `start` (s since the epoch), null when unset. */
export function timingStart(timing: Json | undefined): number | null {
  const s = isObject(timing) ? timing.start : undefined;
  return typeof s === "number" && Number.isFinite(s) && s > 0 ? s : null;
}

/**
 * Branches of a node tree given each node's parent index (null: a root): the nodes no node names
 * as its parent (verifiers' `graph.leaves`). An empty trace has none.
 */
export function branchCount(parents: ReadonlyArray<number | null>): number {
  const isParent = new Uint8Array(parents.length);
  for (const p of parents) if (p !== null && p >= 0 && p < parents.length) isParent[p] = 1;
  let leaves = 0;
  for (let i = 0; i < parents.length; i++) if (!isParent[i]) leaves++;
  return leaves;
}

/**
 * Turns as prime-rl counts them (`turns` of its episode index; verifiers' `Episode.num_turns` sums its traces'):
 * the assistant nodes, given every node's role over all traces (undefined: unknown). Null when a role is unknown.
 */
export function turnCount(roles: Iterable<string | null | undefined>): number | null {
  let n = 0;
  for (const r of roles) {
    if (r === undefined) return null;
    if (r === "assistant") n++;
  }
  return n;
}

/** A call's `usage.cost` when it gives one (a finite number), else null. */
export function callCost(call: Json): number | null {
  const usage = isObject(call) ? call.usage : undefined;
  const cost = isObject(usage) ? usage.cost : undefined;
  return typeof cost === "number" && Number.isFinite(cost) ? cost : null;
}

/**
 * A message's words, as prime-rl's `message_text` reads them: a str `content` as is, a list of
 * parts as their `text`s joined by spaces, anything else nothing; then whitespace collapsed and cut
 * to LAST_CHARS code points. Null when nothing is left.
 */
export function messageWords(message: Json | undefined): string | null {
  if (!isObject(message)) return null;
  const c = message.content;
  let text = "";
  if (typeof c === "string") text = c;
  else if (Array.isArray(c)) text = c.map((p) => (isObject(p) && typeof p.text === "string" ? p.text : "")).join(" ");
  const words = text.split(/\s+/).filter(Boolean).join(" ");
  if (words === "") return null;
  const points = Array.from(words);
  return points.length > LAST_CHARS ? points.slice(0, LAST_CHARS).join("") : words;
}

function spanAt(t: JsonObject, name: string): JsonObject | null {
  const s = t[name];
  return isObject(s) ? s : null;
}

function truthy(v: Json | undefined): boolean {
  return typeof v === "number" ? v !== 0 && !Number.isNaN(v) : v !== null && v !== undefined && v !== false && v !== "";
}

function isObject(v: Json | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

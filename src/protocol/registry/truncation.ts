// Whether a rollout was truncated, by the trainer's definition (prime-rl `summarize_episode`, verifiers'
// `Trace.is_truncated`): a trace is truncated when its stop condition is a framework limit, or when its last
// successful model call (the last one without an `error`) finished with `length`. An episode is truncated when
// any of its traces is (a judge's trace that ran out of tokens cut the rollout's score short too). Timing out
// (`is_timeout`) is a different fact, kept under its own name. Pure: the episode object feeds it its traces'
// fields and calls (src/objects/episode/row-facts.ts), tests and the dashboard the same.

import type { Json } from "../wire/json-view.js";

/** The definition in one sentence, shown where the pages show truncation. */
export const TRUNCATION_DEFINITION =
  "truncated as the trainer counts it: a trace stopped at max_turns, max_input_tokens, max_output_tokens, " +
  "max_total_tokens or compaction_failed, or its last successful model call finished with `length`";

/** Stop conditions the trainer counts as truncated (prime-rl `summarize_episode`; docs/training.md). */
export const TRUNCATING_STOPS: ReadonlySet<string> = new Set([
  "max_turns",
  "max_input_tokens",
  "max_output_tokens",
  "max_total_tokens",
  "compaction_failed",
]);

/** Whether a stop condition alone makes a trace truncated. */
export function stopTruncates(stop: Json | undefined): boolean {
  return typeof stop === "string" && TRUNCATING_STOPS.has(stop);
}

/**
 * The `finish_reason` of the last successful call among `calls` (in order), starting from `before` (what the calls
 * before these gave: a trace's calls are read a batch at a time). A call with an `error` (not null) is skipped; a
 * successful one without a string `finish_reason` gives null.
 */
export function lastSuccessfulFinish(calls: Iterable<Json>, before: string | null = null): string | null {
  let last = before;
  for (const c of calls) {
    if (typeof c !== "object" || c === null || Array.isArray(c)) continue;
    const error = (c as Record<string, Json>).error;
    if (error !== undefined && error !== null) continue;
    const f = (c as Record<string, Json>).finish_reason;
    last = typeof f === "string" ? f : null;
  }
  return last;
}

/** What decides one trace's truncation: its stop condition and its last successful call's finish reason. */
export interface TraceEnd {
  stop: Json | undefined;
  lastFinish: string | null;
}

/** Whether a trace is truncated (verifiers `Trace.is_truncated`, with prime-rl's stop conditions). */
export function traceTruncated(t: TraceEnd): boolean {
  return stopTruncates(t.stop) || t.lastFinish === "length";
}

/** Whether an episode is truncated: any of its traces is. */
export function episodeTruncated(traces: Iterable<TraceEnd>): boolean {
  for (const t of traces) if (traceTruncated(t)) return true;
  return false;
}

// The list's filters as command-line flags, shared by `episodes` and `export`: the options, and the
// flags turned into the relay's parameters and read by the relay's own parser
// (src/protocol/registry/row-filter.ts), so a bad value is a usage error here, with the relay's
// rule, before anything is sent.
import { parseRowFilter, RelayError, type RowFilter } from "../../src/protocol/index.js";
import { UsageError } from "../parse-options.js";

/** The filter flags, as parseOptions takes them. */
export const FILTER_OPTIONS = {
  task: { type: "string" },
  stop: { type: "string" },
  truncated: { type: "boolean" },
  "not-truncated": { type: "boolean" },
  "timed-out": { type: "boolean" },
  "not-timed-out": { type: "boolean" },
  errored: { type: "boolean" },
  "no-error": { type: "boolean" },
  reward: { type: "string", multiple: true },
  "min-turns": { type: "string" },
  "min-tokens": { type: "string" },
  kind: { type: "string" },
  env: { type: "string" },
  step: { type: "string" },
  "policy-version": { type: "string" },
  flag: { type: "string" },
  flagged: { type: "boolean" },
  "not-flagged": { type: "boolean" },
} as const;

/** The filter flags' values as parseOptions gives them. */
export type FilterFlagValues = {
  [K in keyof typeof FILTER_OPTIONS]?: (typeof FILTER_OPTIONS)[K] extends { multiple: true }
    ? string[]
    : (typeof FILTER_OPTIONS)[K] extends { type: "boolean" }
      ? boolean
      : string;
};

/** The relay's parameter → the flag that sets it (for the parser's messages). */
const FLAG_OF: Record<string, string> = {
  task: "--task",
  stop: "--stop",
  is_truncated: "--truncated",
  is_timeout: "--timed-out",
  truncated: "--timed-out",
  errored: "--errored",
  reward: "--reward",
  min_turns: "--min-turns",
  min_tokens: "--min-tokens",
  kind: "--kind",
  env: "--env",
  step: "--step",
  policy_version: "--policy-version",
  flag: "--flag",
  flagged: "--flagged",
};

/** The row filter the flags ask for; throws UsageError. */
export function filterFromFlags(o: FilterFlagValues): RowFilter {
  for (const [a, b] of [
    ["truncated", "not-truncated"],
    ["timed-out", "not-timed-out"],
    ["errored", "no-error"],
    ["flagged", "not-flagged"],
  ] as const) {
    if (o[a] && o[b]) throw new UsageError(`--${a} and --${b} exclude each other`);
  }
  const params = new URLSearchParams();
  for (const name of ["task", "stop", "kind", "env", "step", "flag"] as const) {
    const v = o[name];
    if (v === "") throw new UsageError(`--${name} needs a value`);
    if (v !== undefined) params.set(name, v);
  }
  // --truncated is the trainer's truncation (is_truncated); a timeout is --timed-out (is_timeout)
  if (o.truncated || o["not-truncated"]) params.set("is_truncated", o.truncated ? "1" : "0");
  if (o["timed-out"] || o["not-timed-out"]) params.set("is_timeout", o["timed-out"] ? "1" : "0");
  if (o.errored || o["no-error"]) params.set("errored", o.errored ? "1" : "0");
  if (o.flagged || o["not-flagged"]) params.set("flagged", o.flagged ? "1" : "0");
  for (const r of o.reward ?? []) params.append("reward", r);
  if (o["min-turns"] !== undefined) params.set("min_turns", o["min-turns"]);
  if (o["min-tokens"] !== undefined) params.set("min_tokens", o["min-tokens"]);
  if (o["policy-version"] !== undefined) params.set("policy_version", o["policy-version"]);
  try {
    return parseRowFilter(params);
  } catch (e) {
    if (!(e instanceof RelayError)) throw e;
    throw new UsageError(`${FLAG_OF[e.field ?? ""] ?? e.field}: ${e.message}`);
  }
}

// What raises an alert (rules: config.ts), decided from numbers the run's index already keeps, and
// the crossing state of a threshold: it fires once when its number goes over, and again only after
// the number came back (cleared). A flag fires once per flag rule and rollout (the index remembers
// which fired). Pure: the run's index (src/objects/registry/alert-store.ts) reads the numbers and
// keeps the state.

import type { Flag, IndexRow } from "../registry/entry.js";
import { identityOf, timedOut } from "../registry/entry.js";
import type { StepJson } from "../registry/steps.js";
import type { AlertRule, RateKind } from "./config.js";

/** An ended rollout as the rate rules count it (per env). */
export interface Outcome {
  episode: string;
  env: string;
  failed: boolean;
  /** The first trace's `is_timeout`. */
  timeout: boolean;
  /** Truncated by the trainer's definition (`is_truncated`; not counted: not truncated). */
  truncated: boolean;
}

/** Why an alert fired: its rule, what it is about (`subject`), what crossed, and the evidence. */
export interface Finding {
  rule: AlertRule;
  /** What the rule's state is kept for: a rollout and flag, a step, an env. */
  subject: string;
  /** One sentence: what crossed. */
  what: string;
  value: number | null;
  threshold: number | null;
  evidence: Evidence;
}

export interface Evidence {
  episodes: string[];
  step: number | null;
  step_kind: string | null;
  env: string | null;
  /** A flag's rule and excerpt, or what the numbers were. */
  flag: string | null;
  excerpt: string | null;
}

/** A threshold's move: over and not crossed fires; not over and crossed clears; else nothing. null: cannot tell yet. */
export function crossing(crossed: boolean, over: boolean | null): "fire" | "clear" | null {
  if (over === null) return null;
  if (over && !crossed) return "fire";
  if (!over && crossed) return "clear";
  return null;
}

/** The outcome of a row that just ended (finished or failed), else null (live, or it had ended already). */
export function endedOutcome(row: IndexRow, old: IndexRow | null): Outcome | null {
  const ended = (r: IndexRow | null) => r !== null && (r.status === "finished" || r.status === "failed");
  if (!ended(row) || ended(old)) return null;
  return {
    episode: row.id,
    env: identityOf(row).env ?? "",
    failed: row.status === "failed",
    timeout: timedOut(row),
    truncated: row.is_truncated === true,
  };
}

const RATE_FIELD: Record<RateKind, "failed" | "timeout" | "truncated"> = {
  failure_rate: "failed",
  timeout_rate: "timeout",
  truncation_rate: "truncated",
};
/** What the counted rollouts did, as a verb phrase after their count (one rollout, several). */
const RATE_WORDS: Record<RateKind, [string, string]> = {
  failure_rate: ["failed", "failed"],
  timeout_rate: ["timed out", "timed out"],
  truncation_rate: ["was truncated", "were truncated"],
};

/** The flag rules a `flag` alert rule covers. */
export function flagCovered(rule: Extract<AlertRule, { kind: "flag" }>, flag: string): boolean {
  return rule.flags === null || rule.flags.includes(flag);
}

export function flagFinding(rule: Extract<AlertRule, { kind: "flag" }>, row: IndexRow, flag: Flag): Finding {
  const id = identityOf(row);
  return {
    rule,
    subject: `flag:${flag.rule}:${row.id}`,
    what: `rollout ${row.id} was flagged by ${flag.rule}`,
    value: null,
    threshold: null,
    evidence: {
      episodes: [row.id],
      step: id.step,
      step_kind: id.kind,
      env: id.env,
      flag: flag.rule,
      excerpt: flag.excerpt,
    },
  };
}

/**
 * A rate rule on an env's last outcomes (newest first): over when more than `above` of the last `window` count; null
 * until the env has `window` ended rollouts.
 */
export function rateCheck(
  rule: Extract<AlertRule, { kind: RateKind }>,
  env: string,
  newestFirst: readonly Outcome[],
): { over: boolean | null; finding: Finding } {
  const last = newestFirst.slice(0, rule.window);
  const field = RATE_FIELD[rule.kind];
  const hits = last.filter((o) => o[field]);
  const value = last.length ? hits.length / last.length : 0;
  // "2 of the last 10 rollouts of env gsm8k were truncated": the rollouts are counted, not the env
  const counted = `${plural(last.length, "rollout")} ${env === "" ? "without an env" : `of env ${env}`}`;
  const [one, several] = RATE_WORDS[rule.kind];
  return {
    over: last.length < rule.window ? null : value > rule.above,
    finding: {
      rule,
      subject: `env:${env}`,
      what: `${hits.length} of the last ${counted} ${hits.length === 1 ? one : several} (${pct(value)}, above ${pct(rule.above)})`,
      value,
      threshold: rule.above,
      evidence: {
        episodes: hits.map((o) => o.episode),
        step: null,
        step_kind: null,
        env: env === "" ? null : env,
        flag: null,
        excerpt: null,
      },
    },
  };
}

/** Whether a step-rule covers a step of this kind. */
export function stepCovered(rule: { step_kind: string | null }, step: Pick<StepJson, "kind">): boolean {
  return rule.step_kind === null || rule.step_kind === step.kind;
}

/** A step's zero-variance share against the rule: null until the step has `min_groups` complete groups. */
export function zeroVarianceCheck(
  rule: Extract<AlertRule, { kind: "zero_variance_share" }>,
  step: StepJson,
): { over: boolean | null; finding: Finding } {
  const share = step.zero_variance_share;
  const ready = share !== null && step.groups.complete >= rule.min_groups;
  return {
    over: ready ? share > rule.above : null,
    finding: {
      rule,
      subject: stepSubject(step),
      what: `${stepName(step)}: ${step.groups.zero_variance} of ${plural(step.groups.complete, "complete group")} ${step.groups.zero_variance === 1 ? "has" : "have"} zero reward variance (${pct(share ?? 0)}, above ${pct(rule.above)})`,
      value: share,
      threshold: rule.above,
      evidence: stepEvidence(step),
    },
  };
}

/**
 * A step's mean reward against the mean of the previous steps' means (those with a mean, nearest first, at most
 * `rule.steps`): over when below it by more than `by`; null until the step has `min_rollouts` finished rollouts and a
 * previous step has a mean.
 */
export function rewardDropCheck(
  rule: Extract<AlertRule, { kind: "reward_drop" }>,
  step: StepJson,
  previousNearestFirst: readonly StepJson[],
): { over: boolean | null; finding: Finding } {
  const prev = previousNearestFirst
    .filter((s) => s.mean_reward !== null)
    .slice(0, rule.steps)
    .map((s) => s.mean_reward!);
  const baseline = prev.length ? prev.reduce((a, b) => a + b, 0) / prev.length : null;
  const ready = step.mean_reward !== null && baseline !== null && step.finished >= rule.min_rollouts;
  const threshold = baseline === null ? null : baseline - rule.by;
  return {
    over: ready ? step.mean_reward! < threshold! : null,
    finding: {
      rule,
      subject: stepSubject(step),
      what: `${stepName(step)}: mean reward ${num(step.mean_reward)} is more than ${num(rule.by)} below ${baselineName(prev.length, baseline)}`,
      value: step.mean_reward,
      threshold,
      evidence: stepEvidence(step),
    },
  };
}

/** The baseline a step's mean reward is held against, by what it is the mean of. */
function baselineName(steps: number, baseline: number | null): string {
  if (steps === 0) return "a baseline: no previous step has a mean reward";
  return `${num(baseline)}, ${steps === 1 ? "the previous step's" : `the mean of the previous ${steps} steps`}`;
}

function stepSubject(step: Pick<StepJson, "step" | "kind">): string {
  return `step:${step.step}:${step.kind ?? ""}`;
}

function stepName(step: Pick<StepJson, "step" | "kind">): string {
  return `step ${step.step}${step.kind ? ` (${step.kind})` : ""}`;
}

function stepEvidence(step: StepJson): Evidence {
  return {
    episodes: [],
    step: step.step,
    step_kind: step.kind,
    env: null,
    flag: null,
    excerpt: `${step.finished} finished, ${step.failed} failed, mean reward ${num(step.mean_reward)}, zero-variance share ${step.zero_variance_share === null ? "none" : pct(step.zero_variance_share)}`,
  };
}

/** "1 rollout", "10 rollouts". */
function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

function pct(x: number): string {
  return `${Math.round(x * 1000) / 10}%`;
}

function num(x: number | null): string {
  return x === null ? "none" : String(Math.round(x * 10_000) / 10_000);
}

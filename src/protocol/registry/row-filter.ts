// The episode list's filters (`GET
// /v1/runs/{run}/episodes?task=&stop=&is_truncated=&is_timeout=&errored=&reward=&min_turns=&min_tokens=`,
// `truncated=` a deprecated alias of `is_timeout=` for one release)
// and the dispatch identity's `kind=&env=&step=&policy_version=`):
// their parameters, and what a row must hold to match. Pure: the index turns a filter into SQL
// (episode-pages.ts), the dashboard and clients match pushed rows with `rowMatches` and build
// query strings with `filterParams`, so the three agree on what a filter means.

import { RelayError } from "../http/errors.js";
import { type IndexRow, identityOf, timedOut } from "./entry.js";
import { rowScores } from "./rewards.js";

/** One reward key's range, both ends inclusive (null: open). */
export interface RewardRange {
  key: string;
  min: number | null;
  max: number | null;
}

/** Every filter besides `status` and `prefix` (rows.ts); null or empty: not filtered. */
export interface RowFilter {
  /** The first trace's task key. */
  task: string | null;
  /** The first trace's `stop_condition`. */
  stop: string | null;
  /** Truncated by the trainer's definition (truncation.ts) or not; a row whose truncation is not counted matches neither. */
  isTruncated: boolean | null;
  /** `is_timeout` set (true) or not (false); also given as `truncated=` (deprecated alias, one release). */
  isTimeout: boolean | null;
  /** With an error (failed, finish refused, or an error reported at finish) or without. */
  errored: boolean | null;
  /** Every range must hold (a row without a score for the key matches none). */
  rewards: RewardRange[];
  /** Turns (assistant nodes, all traces: entry.ts `turns`) at least this; a row whose turns are not counted matches none. */
  minTurns: number | null;
  /** Tokens, all traces, at least this. */
  minTokens: number | null;
  /** The dispatch identity's kind (train, eval) and env. */
  kind: string | null;
  env: string | null;
  /** The identity's step within this range, both ends inclusive (`step=N` is N..N; null: open). */
  step: { min: number | null; max: number | null } | null;
  /** The identity's policy_version. */
  policyVersion: number | null;
  /** Flagged by this rule (src/protocol/flags/rules.ts), or flagged by any (true) or none (false). */
  flag: string | null;
  flagged: boolean | null;
}

/** Reward ranges in one query. */
export const MAX_REWARD_RANGES = 4;

export const NO_FILTER: RowFilter = Object.freeze({
  task: null,
  stop: null,
  isTruncated: null,
  isTimeout: null,
  errored: null,
  rewards: [],
  minTurns: null,
  minTokens: null,
  kind: null,
  env: null,
  step: null,
  policyVersion: null,
  flag: null,
  flagged: null,
}) as RowFilter;

const TEXT_VALUE = /^[^\u0000-\u001f]{1,256}$/;
const REWARD_KEY = /^[^\u0000-\u001f]{1,128}$/;

/** The filters in `params`; throws a RelayError (400 bad_filter, naming the parameter) on a bad value. */
export function parseRowFilter(params: URLSearchParams): RowFilter {
  return {
    task: text(params, "task"),
    stop: text(params, "stop"),
    isTruncated: flag(params, "is_truncated"),
    isTimeout: timeoutFlag(params),
    errored: flag(params, "errored"),
    rewards: rewardRanges(params),
    minTurns: count(params, "min_turns"),
    minTokens: count(params, "min_tokens"),
    kind: text(params, "kind"),
    env: text(params, "env"),
    step: stepRange(params),
    policyVersion: count(params, "policy_version"),
    flag: text(params, "flag"),
    flagged: flag(params, "flagged"),
  };
}

/** The query parameters of `f` (the inverse of `parseRowFilter`). */
export function filterParams(f: RowFilter): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  if (f.task !== null) out.push(["task", f.task]);
  if (f.stop !== null) out.push(["stop", f.stop]);
  if (f.isTruncated !== null) out.push(["is_truncated", f.isTruncated ? "1" : "0"]);
  if (f.isTimeout !== null) out.push(["is_timeout", f.isTimeout ? "1" : "0"]);
  if (f.errored !== null) out.push(["errored", f.errored ? "1" : "0"]);
  for (const r of f.rewards) out.push(["reward", `${r.key}:${r.min ?? ""}..${r.max ?? ""}`]);
  if (f.minTurns !== null) out.push(["min_turns", String(f.minTurns)]);
  if (f.minTokens !== null) out.push(["min_tokens", String(f.minTokens)]);
  if (f.kind !== null) out.push(["kind", f.kind]);
  if (f.env !== null) out.push(["env", f.env]);
  if (f.step !== null) {
    const { min, max } = f.step;
    out.push(["step", min !== null && min === max ? String(min) : `${min ?? ""}..${max ?? ""}`]);
  }
  if (f.policyVersion !== null) out.push(["policy_version", String(f.policyVersion)]);
  if (f.flag !== null) out.push(["flag", f.flag]);
  if (f.flagged !== null) out.push(["flagged", f.flagged ? "1" : "0"]);
  return out;
}

export function isFiltered(f: RowFilter): boolean {
  return filterParams(f).length > 0;
}

type FilteredRow = Pick<
  IndexRow,
  | "turns"
  | "tokens"
  | "rewards"
  | "trace_rewards"
  | "error"
  | "task"
  | "stop_condition"
  | "is_truncated"
  | "is_timeout"
  | "truncated"
  | "dispatch"
  | "flags"
>;

/** Whether `row` passes `f` (what the index's SQL selects, row by row). */
export function rowMatches(row: FilteredRow, f: RowFilter): boolean {
  const flags = row.flags ?? [];
  if (f.flag !== null && !flags.some((x) => x.rule === f.flag)) return false;
  if (f.flagged !== null && flags.length > 0 !== f.flagged) return false;
  if (f.kind !== null || f.env !== null || f.step !== null || f.policyVersion !== null) {
    const id = identityOf(row);
    if (f.kind !== null && id.kind !== f.kind) return false;
    if (f.env !== null && id.env !== f.env) return false;
    if (f.policyVersion !== null && id.policy_version !== f.policyVersion) return false;
    if (
      f.step !== null &&
      (id.step === null ||
        (f.step.min !== null && id.step < f.step.min) ||
        (f.step.max !== null && id.step > f.step.max))
    )
      return false;
  }
  if (f.task !== null && (row.task ?? null) !== f.task) return false;
  if (f.stop !== null && (row.stop_condition ?? null) !== f.stop) return false;
  if (f.isTruncated !== null && (row.is_truncated ?? null) !== f.isTruncated) return false;
  if (f.isTimeout !== null && timedOut(row) !== f.isTimeout) return false;
  if (f.errored !== null && (row.error !== null) !== f.errored) return false;
  if (f.minTurns !== null && (typeof row.turns !== "number" || row.turns < f.minTurns)) return false;
  if (f.minTokens !== null && row.tokens < f.minTokens) return false;
  if (f.rewards.length > 0) {
    const scores = new Map(rowScores(row));
    for (const r of f.rewards) {
      const s = scores.get(r.key);
      if (s === undefined || (r.min !== null && s < r.min) || (r.max !== null && s > r.max)) return false;
    }
  }
  return true;
}

function text(params: URLSearchParams, name: string): string | null {
  const v = params.get(name);
  if (v === null || v === "") return null;
  if (!TEXT_VALUE.test(v)) throw bad(name, `${name} must be 1-256 characters without control characters`);
  return v;
}

function flag(params: URLSearchParams, name: string): boolean | null {
  const v = params.get(name);
  if (v === null || v === "") return null;
  if (v === "1" || v === "true") return true;
  if (v === "0" || v === "false") return false;
  throw bad(name, `${name} must be 1 or 0`);
}

/** `is_timeout=`, or its deprecated alias `truncated=` (both given: they must agree). */
function timeoutFlag(params: URLSearchParams): boolean | null {
  const named = flag(params, "is_timeout");
  const alias = flag(params, "truncated");
  if (named !== null && alias !== null && named !== alias)
    throw bad("truncated", "truncated (a deprecated alias of is_timeout) disagrees with is_timeout");
  return named ?? alias;
}

function count(params: URLSearchParams, name: string): number | null {
  const v = params.get(name);
  if (v === null || v === "") return null;
  const n = /^\d{1,15}$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n)) throw bad(name, `${name} must be a whole number`);
  return n;
}

/** `step=N` or `step=MIN..MAX` (either bound may be left out). */
function stepRange(params: URLSearchParams): RowFilter["step"] {
  const v = params.get("step");
  if (v === null || v === "") return null;
  const m = /^(\d{1,15})?(?:(\.\.)(\d{1,15})?)?$/.exec(v);
  if (!m || (m[2] === undefined && m[1] === undefined))
    throw bad("step", "step must be N or MIN..MAX (whole numbers; either bound may be empty)");
  const min = m[1] === undefined ? null : Number(m[1]);
  const max = m[2] === undefined ? min : m[3] === undefined ? null : Number(m[3]);
  if (min !== null && max !== null && min > max) throw bad("step", "step: MIN is above MAX");
  return { min, max };
}

/** `reward=KEY:MIN..MAX`, repeatable; either bound may be left out (`correct:1..`, `reward:..0.5`). */
function rewardRanges(params: URLSearchParams): RewardRange[] {
  const all = params.getAll("reward").filter((v) => v !== "");
  if (all.length > MAX_REWARD_RANGES) throw bad("reward", `at most ${MAX_REWARD_RANGES} reward ranges`);
  const keys = new Set<string>();
  return all.map((v) => {
    const colon = v.lastIndexOf(":");
    const key = v.slice(0, colon);
    const [lo, hi, ...rest] = v.slice(colon + 1).split("..");
    if (
      colon < 1 ||
      !REWARD_KEY.test(key) ||
      lo === undefined ||
      hi === undefined ||
      rest.length > 0 ||
      keys.has(key)
    ) {
      throw bad("reward", "reward must be KEY:MIN..MAX (either bound may be empty), one per key");
    }
    keys.add(key);
    const range = { key, min: bound(lo), max: bound(hi) };
    if (range.min !== null && range.max !== null && range.min > range.max)
      throw bad("reward", `reward ${key}: MIN is above MAX`);
    return range;
  });
}

function bound(s: string): number | null {
  if (s === "") return null;
  const n = /^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(s) ? Number(s) : NaN;
  if (!Number.isFinite(n)) throw bad("reward", "reward bounds must be numbers");
  return n;
}

function bad(field: string, message: string): RelayError {
  return new RelayError("bad_filter", message, field);
}

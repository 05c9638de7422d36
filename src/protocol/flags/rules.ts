// A run's flag rules (`PUT /v1/runs/{run}/rules`): what marks a rollout as worth a look while it
// streams. Two sorts:
//   - a text match (a word or a regular expression) on a role's text, a tool's name, its arguments
//     or its result: evaluated on each text segment the run's index receives (src/protocol/search/segments.ts);
//   - a reward condition (a key above or below a value; rewarded but truncated; rewarded with few
//     output tokens): evaluated on each row the index receives.
// A flag names its rule and its evidence (the node and an excerpt). Pure: the run's index keeps
// the rules and the flags (src/objects/registry/flag-store.ts). DEFAULT_RULES hold for a run that set none.

import { RelayError } from "../http/errors.js";
import type { Flag, IndexRow } from "../registry/entry.js";
import { rowScores } from "../registry/rewards.js";
import type { Segment, SegmentKind } from "../search/segments.js";
import { compilePattern, type Pattern } from "./pattern.js";

export const MAX_RULES = 32;
const MAX_PATTERN_CHARS = 200;
const EXCERPT_CHARS = 160;
const RULE_ID = /^[a-z0-9][a-z0-9_-]{0,47}$/;

/** Where a text rule looks: a message's text or reasoning, a tool call's arguments, a tool's result, or any. */
export type TextField = "text" | "reasoning" | "arguments" | "result" | "any";
const FIELD_KINDS: Record<TextField, readonly SegmentKind[]> = {
  text: ["text"],
  reasoning: ["reasoning"],
  arguments: ["call"],
  result: ["result"],
  any: ["text", "reasoning", "call", "result", "task"],
};

export type Rule = {
  id: string;
  description: string;
} & (
  | { match: { pattern: string; regex: boolean; role: string | null; tool: string | null; in: TextField } }
  | { reward: { key: string; above: number | null; below: number | null } }
  | { rewarded_truncated: { key: string; min: number } }
  | { rewarded_short: { key: string; min: number; max_output_tokens: number } }
);

export type { Flag } from "../registry/entry.js";

/**
 * Reward hacks reported in the field (verl, TRL, TorchRL issues; prime-rl's own examples); see docs for their false
 * positives.
 */
export const DEFAULT_RULES: readonly Rule[] = [
  {
    id: "touches-grader",
    description: "a tool call names a grader, verifier, reward or test file",
    match: {
      pattern: String.raw`[\w./-]*(grader|verifier|reward|evaluat\w*|conftest|test_\w+|\w+_test)\.(py|json|ya?ml|txt|sh|js|ts)\b`,
      regex: true,
      role: null,
      tool: null,
      in: "arguments",
    },
  },
  {
    id: "writes-reward",
    description: "a tool call writes a reward or score file",
    match: {
      pattern: String.raw`(>{1,2}\s*[\w./-]*(reward|score)[\w./-]*|open\([^)]*(reward|score)[^)]*,\s*['"][wa])`,
      regex: true,
      role: null,
      tool: null,
      in: "arguments",
    },
  },
  {
    id: "many-candidates",
    description: "forty or more numbers in a row: printing every candidate answer",
    match: {
      pattern: String.raw`(\b-?\d+(\.\d+)?\b[\s,;]+){39}\b-?\d+(\.\d+)?\b`,
      regex: true,
      role: null,
      tool: null,
      in: "any",
    },
  },
  {
    id: "quotes-grader",
    description: "the assistant reasons about what the grader checks",
    match: {
      pattern: String.raw`\b(grader|verifier|reward (function|model)|test harness|checker)\b[^.\n]{0,60}\b(only |just )?(checks?|looks? for|verif(y|ies)|match(es)?|accepts?)\b`,
      regex: true,
      role: "assistant",
      tool: null,
      in: "any",
    },
  },
  {
    id: "rewarded-truncated",
    description: "a full reward on a truncated rollout",
    rewarded_truncated: { key: "*", min: 1 },
  },
  {
    id: "rewarded-short",
    description: "a full reward with at most 3 output tokens (judged where the producer sends token counts)",
    rewarded_short: { key: "*", min: 1, max_output_tokens: 3 },
  },
];

/**
 * Steps (src/protocol/flags/pattern.ts: a character through the DFA, a DFA state built, an NFA run at its bound) the
 * text rules may take on one segment; a check is stopped at what is left of it, and the rules past it are skipped there,
 * counted. The defaults on ordinary text take about a step per character and rule (their DFA states are built once).
 */
export const SEGMENT_STEPS = 2_000_000;

/**
 * Steps one object turn may take on text rules: all the segments of one index upsert (past it their checks are skipped,
 * counted), or one rescan step (which ends before a segment could pass it). The defaults on ordinary text take ~3,000 a
 * segment.
 */
export const TURN_STEPS = 4_000_000;

/** Rules from `PUT .../rules`' JSON (`{"rules": [...]}`); throws 400 bad_rules naming what is wrong. */
export function parseRules(body: unknown): Rule[] {
  if (!isObject(body) || !Array.isArray(body.rules)) throw bad("rules", 'the body is {"rules": [...]}');
  if (body.rules.length > MAX_RULES) throw bad("rules", `at most ${MAX_RULES} rules`);
  const seen = new Set<string>();
  return body.rules.map((r, i) => {
    const at = `rules[${i}]`;
    if (!isObject(r)) throw bad(at, "a rule is an object");
    if (typeof r.id !== "string" || !RULE_ID.test(r.id))
      throw bad(`${at}.id`, "an id is 1-48 of [a-z0-9_-], starting with a letter or digit");
    if (seen.has(r.id)) throw bad(`${at}.id`, `rule ${r.id} is given twice`);
    seen.add(r.id);
    const description = typeof r.description === "string" ? r.description.slice(0, 200) : "";
    const sorts = ["match", "reward", "rewarded_truncated", "rewarded_short"].filter((k) => k in r);
    if (sorts.length !== 1)
      throw bad(at, "a rule has exactly one of match, reward, rewarded_truncated, rewarded_short");
    const base = { id: r.id, description };
    if (isObject(r.match)) return { ...base, match: matchOf(r.match, `${at}.match`) };
    if (isObject(r.reward)) {
      const key = keyOf(r.reward.key, `${at}.reward.key`);
      const above = numberOr(r.reward.above, `${at}.reward.above`);
      const below = numberOr(r.reward.below, `${at}.reward.below`);
      if (above === null && below === null) throw bad(`${at}.reward`, "give above, below or both");
      return { ...base, reward: { key, above, below } };
    }
    if (isObject(r.rewarded_truncated)) {
      return {
        ...base,
        rewarded_truncated: {
          key: keyOf(r.rewarded_truncated.key, `${at}.rewarded_truncated.key`),
          min: numberOr(r.rewarded_truncated.min, `${at}.rewarded_truncated.min`) ?? 1,
        },
      };
    }
    if (isObject(r.rewarded_short)) {
      const s = r.rewarded_short;
      const max = s.max_output_tokens;
      if (typeof max !== "number" || !Number.isSafeInteger(max) || max < 0)
        throw bad(`${at}.rewarded_short.max_output_tokens`, "a whole number");
      return {
        ...base,
        rewarded_short: {
          key: keyOf(s.key, `${at}.rewarded_short.key`),
          min: numberOr(s.min, `${at}.rewarded_short.min`) ?? 1,
          max_output_tokens: max,
        },
      };
    }
    throw bad(at, "the rule's condition is an object");
  });
}

/** A compiled text rule: what it looks at, and its test (null: a stored pattern the engine refuses, never run). */
export interface TextRule {
  id: string;
  role: string | null;
  tool: string | null;
  kinds: readonly SegmentKind[];
  test: Pattern | null;
}

export function textRules(rules: readonly Rule[]): TextRule[] {
  return rules.flatMap((r) => {
    if (!("match" in r)) return [];
    let test: Pattern | null = null;
    try {
      test = compilePattern(r.match.pattern, r.match.regex, r.id);
    } catch {
      // stored before patterns ran on RE2 (a lookahead, say): every check of it is counted as skipped
    }
    return [{ id: r.id, role: r.match.role, tool: r.match.tool, kinds: FIELD_KINDS[r.match.in], test }];
  });
}

/** Whether `rule` looks at segments like `s` (its kind, role and tool). */
function looksAt(rule: TextRule, s: Segment): boolean {
  return (
    rule.kinds.includes(s.kind) &&
    (rule.role === null || s.role === rule.role) &&
    (rule.tool === null || s.tool === rule.tool)
  );
}

/** The flag `rule` raises on `s`, or null. */
export function matchSegment(rule: TextRule, s: Segment): Flag | null {
  if (!looksAt(rule, s) || rule.test === null) return null;
  const m = rule.test.find(s.body);
  if (!m) return null;
  return { rule: rule.id, trace: s.trace, node: s.node, excerpt: excerptAround(s.body, m[0], m[1] - m[0]) };
}

/** What the text rules cost on segments: steps taken, and the checks skipped (over the budget, or never run). */
export interface TextWork {
  /** Checks run (a rule that looks at the segment). */
  checks: number;
  /** Their steps (and those of the checks stopped at the budget). */
  steps: number;
  /** Segments where at least one check was skipped. */
  skippedSegments: number;
  /** Checks skipped. */
  skippedChecks: number;
  /** The most the skipped checks would have taken (characters × instructions; 0 for a pattern that never runs). */
  skippedSteps: number;
}

export function noWork(): TextWork {
  return { checks: 0, steps: 0, skippedSegments: 0, skippedChecks: 0, skippedSteps: 0 };
}

/**
 * The flags `rules` raise on `s`, within `budget` steps (rules in order: a check is stopped at what is left of the
 * budget, and skipped once nothing is); what it cost is added to `work`.
 */
export function segmentFlags(rules: readonly TextRule[], s: Segment, work: TextWork, budget = SEGMENT_STEPS): Flag[] {
  const flags: Flag[] = [];
  let spent = 0;
  let skipped = false;
  for (const rule of rules) {
    if (!looksAt(rule, s)) continue;
    const bound = rule.test === null ? 0 : s.body.length * rule.test.instructions;
    const check = rule.test === null || spent >= budget ? null : rule.test.check(s.body, budget - spent);
    if (check) {
      spent += check.steps;
      work.steps += check.steps;
    }
    if (!check?.done) {
      work.skippedChecks++;
      work.skippedSteps += bound;
      skipped = true;
      continue;
    }
    work.checks++;
    if (check.at) {
      const [at, end] = check.at;
      flags.push({ rule: rule.id, trace: s.trace, node: s.node, excerpt: excerptAround(s.body, at, end - at) });
    }
  }
  if (skipped) work.skippedSegments++;
  return flags;
}

/** The flags reward rules raise on a row (`counts.rewardChecks`: one more per reward rule checked). */
export function rowFlags(
  rules: readonly Rule[],
  row: Pick<IndexRow, "rewards" | "trace_rewards" | "is_truncated" | "live">,
  counts?: { rewardChecks: number },
): Flag[] {
  // the episode's scores: the trainer's total under "reward", each key's mean over the traces (rewards.ts)
  const scores = rowScores(row);
  const flags: Flag[] = [];
  const score = (key: string): Array<[string, number]> => (key === "*" ? scores : scores.filter(([k]) => k === key));
  for (const r of rules) {
    if (counts && !("match" in r)) counts.rewardChecks++;
    if ("reward" in r) {
      const hit = score(r.reward.key).find(
        ([, v]) => (r.reward.above === null || v > r.reward.above) && (r.reward.below === null || v < r.reward.below),
      );
      if (hit) flags.push({ rule: r.id, trace: null, node: null, excerpt: `${hit[0]} = ${hit[1]}` });
    } else if ("rewarded_truncated" in r) {
      // the trainer's truncation (truncation.ts), not a timeout
      const hit = row.is_truncated
        ? score(r.rewarded_truncated.key).find(([, v]) => v >= r.rewarded_truncated.min)
        : undefined;
      if (hit) flags.push({ rule: r.id, trace: null, node: null, excerpt: `${hit[0]} = ${hit[1]}, truncated` });
    } else if ("rewarded_short" in r) {
      const out = row.live?.output_tokens;
      // a rollout whose producer sent no token counts (both sums 0) is not judged: it is not short, just uncounted
      const counted = typeof out === "number" && (out > 0 || (row.live?.input_tokens ?? 0) > 0);
      const hit =
        counted && out <= r.rewarded_short.max_output_tokens
          ? score(r.rewarded_short.key).find(([, v]) => v >= r.rewarded_short.min)
          : undefined;
      if (hit)
        flags.push({ rule: r.id, trace: null, node: null, excerpt: `${hit[0]} = ${hit[1]} with ${out} output tokens` });
    }
  }
  return flags;
}

/** A text rule's `role` or `tool` is at most this long (a message's role, a tool's name). */
export const MAX_NAME_CHARS = 128;

function matchOf(m: Record<string, unknown>, at: string): Extract<Rule, { match: unknown }>["match"] {
  if (typeof m.pattern !== "string" || m.pattern.length === 0 || m.pattern.length > MAX_PATTERN_CHARS) {
    throw bad(`${at}.pattern`, `a pattern is 1-${MAX_PATTERN_CHARS} characters`);
  }
  const regex = m.regex === true;
  // every pattern, the defaults' too, must compile for the linear-time engine (the refusal names what it cannot run)
  compilePattern(m.pattern, regex, `${at}.pattern`);
  const where = m.in ?? "any";
  if (typeof where !== "string" || !(where in FIELD_KINDS))
    throw bad(`${at}.in`, `one of ${Object.keys(FIELD_KINDS).join(", ")}`);
  const role = m.role ?? null;
  const tool = m.tool ?? null;
  if (role !== null && !(typeof role === "string" && role.length <= MAX_NAME_CHARS))
    throw bad(`${at}.role`, `a role is a str of at most ${MAX_NAME_CHARS} characters`);
  if (tool !== null && !(typeof tool === "string" && tool.length <= MAX_NAME_CHARS))
    throw bad(`${at}.tool`, `a tool is a str of at most ${MAX_NAME_CHARS} characters`);
  return { pattern: m.pattern, regex, role, tool, in: where as TextField };
}

function excerptAround(text: string, at: number, length: number): string {
  const before = 40;
  const start = Math.max(0, at - before);
  const end = Math.min(text.length, Math.max(at + length, start + EXCERPT_CHARS));
  return `${start > 0 ? "…" : ""}${text.slice(start, Math.min(end, start + EXCERPT_CHARS)).replace(/\s+/g, " ")}${end < text.length ? "…" : ""}`;
}

function keyOf(v: unknown, at: string): string {
  if (v === undefined) return "*";
  if (typeof v !== "string" || v.length === 0 || v.length > 128) throw bad(at, 'a reward key (or "*": any)');
  return v;
}

function numberOr(v: unknown, at: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "number" || !Number.isFinite(v)) throw bad(at, "a number");
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function bad(field: string, message: string): RelayError {
  return new RelayError("bad_rules", message, field);
}

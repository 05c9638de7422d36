// Before/after reproduction of issue 39's findings 1-2, in this process (Node's V8 is workerd's engine): the issue's
// hostile patterns on their worst text, run as the index ran them before (V8's backtracking RegExp, flags "iu") at
// growing lengths until one match takes longer than LIMIT_MS, and as it runs them now (RE2 through segmentFlags, within
// SEGMENT_STEPS) at the lengths V8 reached and at a full 2,000-character segment: counted steps, skipped checks, time.
// npx tsx bench/repro/hostile-patterns.ts
// The times are the machine's, for the closing note only; no test reads them.
import {
  DEFAULT_RULES,
  nodeSegments,
  noWork,
  type Rule,
  type Segment,
  segmentFlags,
  textRules,
} from "../../src/protocol/index.js";

/** A V8 match slower than this ends that pattern's walk up the lengths. */
const LIMIT_MS = 3000;

/** A user rule on the assistant's text. */
const user = (id: string, pattern: string): Rule => ({
  id,
  description: "",
  match: { pattern, regex: true, role: null, tool: null, in: "text" },
});
const text = (body: string): Segment => nodeSegments("t", 0, { role: "assistant", content: body })[0]!;
/** The issue's finding 2: a tool call `bash {"cmd": "test_" × k}` (a segment keeps its first 2,000 characters). */
const call = (k: number): Segment =>
  nodeSegments("t", 0, {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "c", name: "bash", arguments: JSON.stringify({ cmd: "test_".repeat(k) }) }],
  })[0]!;

interface Case {
  finding: string;
  rule: Rule;
  /** The worst text at size n. */
  input: (n: number) => Segment;
  sizes: number[];
  /** The size of a whole segment (2,000 characters or as close as the input allows). */
  full: number;
}

const CASES: Case[] = [
  {
    finding: "1",
    rule: user("alt", "(a|a)*$"),
    input: (n) => text(`${"a".repeat(n)}!`),
    sizes: [16, 18, 20, 22, 24, 26, 28, 30],
    full: 1999,
  },
  {
    finding: "1",
    rule: user("class", String.raw`(\w|\d)+$`),
    input: (n) => text(`${"1".repeat(n)}!`),
    sizes: [16, 18, 20, 22, 24, 26, 28, 30],
    full: 1999,
  },
  {
    finding: "1",
    rule: user("bracket", "(a+[)]?)+$"),
    input: (n) => text(`${"a".repeat(n)}!`),
    sizes: [16, 18, 20, 22, 24, 26, 28, 30],
    full: 1999,
  },
  // a segment's text is trimmed: the spaces go between two other characters
  {
    finding: "1",
    rule: user("stacked", `${String.raw`\s*`.repeat(4)}x`),
    input: (n) => text(`a${" ".repeat(n)}!`),
    sizes: [10, 20, 40, 80, 160, 320, 640],
    full: 1998,
  },
  {
    finding: "2",
    rule: DEFAULT_RULES.find((r) => r.id === "touches-grader")!,
    input: call,
    sizes: [25, 50, 100, 200, 400],
    full: 400,
  },
];

const ms = (t: number) => (t < 10 ? t.toFixed(2) : t.toFixed(0));

for (const c of CASES) {
  const pattern = "match" in c.rule ? c.rule.match.pattern : "";
  console.log(`finding ${c.finding}: ${pattern}`);
  // before: V8's RegExp, as src/protocol/flags/rules.ts compiled rules at 17eaf78
  const old = new RegExp(pattern, "iu");
  const reached: number[] = [];
  for (const n of c.sizes) {
    const s = c.input(n);
    const t = performance.now();
    const hit = old.exec(s.body) !== null;
    const took = performance.now() - t;
    reached.push(n);
    console.log(`  before (V8 RegExp): ${s.body.length} characters: ${ms(took)} ms, ${hit ? "a hit" : "no hit"}`);
    if (took > LIMIT_MS) break;
  }
  // now: RE2 as the run's index runs it (segmentFlags within SEGMENT_STEPS), counted in steps
  const rules = textRules([c.rule]);
  for (const n of [...new Set([reached.at(-1)!, c.full])]) {
    const s = c.input(n);
    // the index keeps a run's compiled rules: the first check builds DFA states, later ones reuse them
    const took: number[] = [];
    const steps: number[] = [];
    let work = noWork();
    let hit = false;
    for (let i = 0; i < 6; i++) {
      work = noWork();
      const t = performance.now();
      hit = segmentFlags(rules, s, work).length > 0;
      took.push(performance.now() - t);
      steps.push(work.steps);
    }
    const later = took.slice(1).sort((a, b) => a - b)[2]!;
    console.log(
      `  now (RE2): ${s.body.length} characters: ${steps[0]} steps and ${ms(took[0]!)} ms the first time, ${steps.at(-1)} steps and ${ms(later)} ms (median) the next 5 (${rules[0]!.test!.instructions} instructions), ${work.skippedChecks} skipped, ${hit ? "a hit" : "no hit"}`,
    );
  }
}

// Worst-case wall time of flag rules (issue 39 findings 1-2 follow-up): 32 user rules near the instruction cap, built
// so the lazy DFA's cache thrashes (a[ab]{k}: the DFA must remember the last k characters), on 2,000-character segments
// of random a/b text; per segment, per upsert of a row of many segments, per rescan step's budget. And the default
// rules on ordinary text. Prints ranges over REPEAT rounds (the machine is shared); nothing reads these figures.
// npx tsx bench/flags-worst.ts
import { compilePattern } from "../src/protocol/flags/pattern.js";
import {
  DEFAULT_RULES,
  noWork,
  parseRules,
  SEGMENT_STEPS,
  segmentFlags,
  textRules,
} from "../src/protocol/flags/rules.js";
import type { Segment } from "../src/protocol/search/segments.js";
import { rng } from "./rollout-builders.js";

const REPEAT = 5;
const r = rng(7);
/** 32 patterns of a[ab]{k}c shapes: each position after an `a` opens a new thread, so DFA states are 2^k. */
export const WORST = Array.from({ length: 32 }, (_, i) => `[ab]*a[ab]{${960 + (i % 8)}}c${i}`);
const text = (n: number) => Array.from({ length: n }, () => (r() < 0.5 ? "a" : "b")).join("");
const seg = (body: string): Segment => ({ trace: "t", node: 0, role: "assistant", tool: null, kind: "text", body });

const rules = textRules(
  parseRules({ rules: WORST.map((pattern, i) => ({ id: `w${i}`, match: { pattern, regex: true, in: "text" } })) }),
);
console.log("instructions", rules.map((x) => x.test!.instructions).join(" "));
const segments = Array.from({ length: 20 }, () => seg(text(2000)));

function range(xs: number[]) {
  const s = [...xs].sort((a, b) => a - b);
  return `${s[0]!.toFixed(1)}-${s.at(-1)!.toFixed(1)} ms (median ${s[Math.floor(s.length / 2)]!.toFixed(1)})`;
}
for (const [label, budget] of [
  ["budget SEGMENT_STEPS", SEGMENT_STEPS],
  ["no budget", Number.POSITIVE_INFINITY],
] as const) {
  const perSeg: number[] = [];
  let steps = 0;
  let skipped = 0;
  for (let k = 0; k < REPEAT; k++) {
    for (const s of segments.slice(0, 4)) {
      const w = noWork();
      const t = performance.now();
      segmentFlags(rules, s, w, budget);
      perSeg.push(performance.now() - t);
      steps = w.steps;
      skipped = w.skippedChecks;
    }
  }
  console.log(`32 worst rules, one 2,000-char segment, ${label}: ${range(perSeg)}; steps ${steps}, skipped ${skipped}`);
}
// one pattern alone, to see the per-step cost
const one = compilePattern(WORST[0]!, true, "x");
const t1: number[] = [];
for (let k = 0; k < REPEAT; k++) {
  const t = performance.now();
  one.find(segments[k]!.body);
  t1.push(performance.now() - t);
}
const median = [...t1].sort((a, b) => a - b)[Math.floor(REPEAT / 2)]!;
console.log(
  `one worst rule (${one.instructions} instructions), one segment: ${range(t1)} = ${((median * 1e6) / (2000 * one.instructions)).toFixed(1)} ns/step`,
);
// an upsert: a row of 20 such segments, the budget per segment
const up: number[] = [];
for (let k = 0; k < REPEAT; k++) {
  const w = noWork();
  const t = performance.now();
  for (const s of segments) segmentFlags(rules, s, w);
  up.push(performance.now() - t);
}
console.log(`upsert of 20 hostile segments: ${range(up)}`);
// defaults on ordinary text
const words =
  "the answer is we can check each case so that value of sum then try again next step integer prime list file run output".split(
    " ",
  );
const ordinary = Array.from({ length: 200 }, () =>
  seg(Array.from({ length: 120 }, () => words[Math.floor(r() * words.length)]).join(" ")),
);
const defaults = textRules(DEFAULT_RULES);
const d: number[] = [];
for (let k = 0; k < REPEAT; k++) {
  const w = noWork();
  const t = performance.now();
  for (const s of ordinary) segmentFlags(defaults, s, w);
  d.push(((performance.now() - t) * 1000) / ordinary.length);
}
console.log(`defaults, ordinary ~700-char segment: ${range(d).replace(/ms/g, "µs")} per segment`);

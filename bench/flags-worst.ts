// Worst-case wall time of flag rules (issue 39 findings 1-2 follow-up): 32 user rules near the instruction cap, built
// so the lazy DFA's cache thrashes (a[ab]{k}: the DFA must remember the last k characters, so every character builds a
// new state and the DFA gives up to the NFA), on 2,000-character segments of random a/b text: per segment, per upsert of
// a row of 20 such segments (the index's TURN_STEPS across them), per rescan step (segments while a whole
// SEGMENT_STEPS fits in TURN_STEPS). And the default rules on ordinary text, with what they count. Prints ranges over
// REPEAT rounds (the machine is shared); nothing reads these figures.
// npx tsx bench/flags-worst.ts [small]   (small: 32 rules of ~130 instructions instead of ~970)
import {
  DEFAULT_RULES,
  noWork,
  type Rule,
  SEGMENT_STEPS,
  type Segment,
  segmentFlags,
  TURN_STEPS,
  textRules,
} from "../src/protocol/index.js";
import { rng } from "./rollout-builders.js";

const REPEAT = 5;
const r = rng(7);
const K = process.argv[2] === "small" ? 120 : 960;
const WORST: Rule[] = Array.from({ length: 32 }, (_, i) => ({
  id: `w${i}`,
  description: "",
  match: { pattern: `[ab]*a[ab]{${K + (i % 8)}}c${i}`, regex: true, role: null, tool: null, in: "text" },
}));
const text = (n: number) => Array.from({ length: n }, () => (r() < 0.5 ? "a" : "b")).join("");
const seg = (body: string): Segment => ({ trace: "t", node: 0, role: "assistant", tool: null, kind: "text", body });
const rules = textRules(WORST);
console.log(`instructions ${rules[0]!.test!.instructions}-${rules.at(-1)!.test!.instructions}`);
const segments = Array.from({ length: 20 }, () => seg(text(2000)));

function range(xs: number[], unit = "ms") {
  const s = [...xs].sort((a, b) => a - b);
  const f = (x: number) => x.toFixed(1);
  return `${f(s[0]!)}-${f(s.at(-1)!)} ${unit} (median ${f(s[Math.floor(s.length / 2)]!)})`;
}
const perSeg: number[] = [];
let w = noWork();
for (let k = 0; k < REPEAT; k++)
  for (const s of segments.slice(0, 4)) {
    w = noWork();
    const t = performance.now();
    segmentFlags(rules, s, w);
    perSeg.push(performance.now() - t);
  }
console.log(
  `32 worst rules, one 2,000-char segment: ${range(perSeg)}; steps ${w.steps}, checks ${w.checks}, skipped ${w.skippedChecks}`,
);
const up: number[] = [];
for (let k = 0; k < REPEAT; k++) {
  w = noWork();
  let left = TURN_STEPS;
  const t = performance.now();
  for (const s of segments) {
    const before = w.steps;
    segmentFlags(rules, s, w, Math.min(SEGMENT_STEPS, left));
    left = Math.max(0, left - (w.steps - before));
  }
  up.push(performance.now() - t);
}
console.log(`upsert of 20 hostile segments: ${range(up)}; steps ${w.steps}, skipped ${w.skippedChecks}`);
const step: number[] = [];
let taken = 0;
for (let k = 0; k < REPEAT; k++) {
  w = noWork();
  taken = 0;
  const t = performance.now();
  for (const s of segments) {
    if (taken > 0 && w.steps + SEGMENT_STEPS > TURN_STEPS) break;
    segmentFlags(rules, s, w);
    taken++;
  }
  step.push(performance.now() - t);
}
console.log(`rescan step: ${range(step)}; ${taken} segments, steps ${w.steps}`);
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
  w = noWork();
  const t = performance.now();
  for (const s of ordinary) segmentFlags(defaults, s, w);
  d.push(((performance.now() - t) * 1000) / ordinary.length);
}
console.log(
  `defaults, ordinary ~700-char segment: ${range(d, "µs")} per segment; ${(w.steps / ordinary.length).toFixed(0)} steps a segment, skipped ${w.skippedChecks}`,
);

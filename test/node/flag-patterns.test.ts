// Flag patterns on RE2 (src/protocol/flags/pattern.ts): they keep their JavaScript meaning (the
// default rules find exactly what V8's RegExp found), what RE2 cannot run is refused naming the
// construct, and a segment's checks are counted in steps (characters × instructions) within its budget.
import { describe, expect, it } from "vitest";
import { rollout, segmentsOf } from "../../bench/flags.js";
import { compilePattern, DFA_BYTES, MAX_INSTRUCTIONS, STATE_STEPS } from "../../src/protocol/flags/pattern.js";
import {
  DEFAULT_RULES,
  noWork,
  parseRules,
  SEGMENT_STEPS,
  segmentFlags,
  TURN_STEPS,
  textRules,
} from "../../src/protocol/flags/rules.js";
import { RelayError } from "../../src/protocol/http/errors.js";
import type { Segment } from "../../src/protocol/search/segments.js";

const seg = (body: string, over: Partial<Segment> = {}): Segment => ({
  trace: "t",
  node: 1,
  role: "assistant",
  tool: "bash",
  kind: "call",
  body,
  ...over,
});
const defaultPatterns = DEFAULT_RULES.flatMap((r) => ("match" in r ? [r.match.pattern] : []));

/** A seeded generator of text mixing the words the default rules look for with numbers, spaces and punctuation. */
function corpus(n: number): string[] {
  let s = 12345;
  const r = () => {
    s = (s * 16807) % 2147483647;
    return s / 2147483647;
  };
  const pieces = [
    "grader",
    "Verifier",
    "reward",
    "evaluate_all",
    "conftest",
    "test_x",
    "x_test",
    ".py",
    ".JSON",
    ".yml",
    ".sh",
    " ",
    "\u00a0",
    "\u2028",
    "\u3000",
    "\n",
    ", ",
    ";",
    "> ",
    ">>",
    "open(",
    "'w'",
    '"a"',
    ")",
    "score",
    "-3",
    "4.5",
    "17",
    "only checks",
    "looks for",
    "test harness",
    "reward function",
    "K",
    "s",
    ".",
    "tests/",
    "é",
  ];
  return Array.from({ length: n }, () =>
    Array.from({ length: 1 + Math.floor(r() * 120) }, () => pieces[Math.floor(r() * pieces.length)]!).join(""),
  );
}

describe("flag patterns on RE2", () => {
  it("the default patterns find exactly what V8's RegExp (iu) found, at the same place", () => {
    const texts = [
      ...corpus(3000),
      "cat tests/test_reward.py",
      Array.from({ length: 45 }, (_, i) => i * 7).join(",\u00a0"),
      Array.from({ length: 45 }, (_, i) => i).join("\u2028"),
      "python -c \"open('reward.txt', 'w')\"",
    ];
    let hits = 0;
    for (const p of defaultPatterns) {
      const v8 = new RegExp(p, "iu");
      const re2 = compilePattern(p, true, "p");
      for (const t of texts) {
        const m = v8.exec(t);
        const want = m ? [m.index, m.index + m[0].length] : null;
        expect(re2.find(t), `${p} on ${JSON.stringify(t)}`).toEqual(want);
        if (want) hits++;
      }
    }
    // the corpus holds matches of every rule, not only misses
    expect(hits).toBeGreaterThan(100);
  });

  it("keeps JavaScript's meaning where RE2's differs: \\s, \\S, the dot, a [ inside a class, [] and [^]", () => {
    const same = (p: string, texts: string[]) => {
      const re2 = compilePattern(p, true, "p");
      for (const t of texts) {
        const m = new RegExp(p, "iu").exec(t);
        expect(re2.find(t), `${p} on ${JSON.stringify(t)}`).toEqual(m ? [m.index, m.index + m[0].length] : null);
      }
    };
    const texts = ["a\u00a0b", "a\u2028b", "a\rb", "a\vb", "a b", "axb", "[:", "ab", "a\u3000b", "x"];
    for (const p of [
      String.raw`a\sb`,
      String.raw`a\Sb`,
      "a.b",
      String.raw`a[\s]b`,
      String.raw`a[^\S]b`,
      "[[:]",
      "a[]b",
      "a[^]b",
    ])
      same(p, texts);
    // the one difference left: \b is ASCII on RE2, while V8 (iu) takes the Kelvin sign and the long s as word characters
    expect(compilePattern(String.raw`sh\b`, true, "p").find("sh\u017f")).toEqual([0, 2]);
    expect(/sh\b/iu.exec("sh\u017f")).toBeNull();
    // literal patterns are matched as written, any case
    expect(compilePattern("a.b (x)", false, "p").find("zz A.B (X)")).toEqual([3, 10]);
    expect(compilePattern("a.b", false, "p").find("axb")).toBeNull();
  });

  it("refuses what RE2 cannot run, naming the construct; nested repeats it runs in linear time are taken", () => {
    const refusal = (p: string) => {
      try {
        compilePattern(p, true, "rules[0].match.pattern");
      } catch (e) {
        expect(e).toBeInstanceOf(RelayError);
        expect((e as RelayError).code).toBe("bad_rules");
        expect((e as RelayError).field).toBe("rules[0].match.pattern");
        return (e as RelayError).message;
      }
      throw new Error(`${p} not refused`);
    };
    expect(refusal("(a)\\1")).toMatch(/backreference \(\\1\)/);
    expect(refusal("(?<n>a)\\k<n>")).toMatch(/named backreference/);
    expect(refusal("x(?=y)")).toMatch(/lookahead \(\?=/);
    expect(refusal("x(?!y)")).toMatch(/negative lookahead/);
    expect(refusal("(?<=y)x")).toMatch(/lookbehind \(\?<=/);
    expect(refusal("(?<!y)x")).toMatch(/negative lookbehind/);
    expect(refusal("(")).toMatch(/not a regular expression/);
    expect(refusal("[\\w\\W]{1000}x")).toMatch(new RegExp(`at most ${MAX_INSTRUCTIONS}`));
    for (const p of ["(a|a)*$", String.raw`(\w|\d)+$`, "(a+[)]?)+$", "(a+)+$", "((ab)*c)*", `${"\\s*".repeat(40)}x`])
      expect(compilePattern(p, true, "p").instructions).toBeLessThan(MAX_INSTRUCTIONS);
  });

  it("the default rules pass the same check as any rule, and still flag what they are for", () => {
    expect(parseRules({ rules: DEFAULT_RULES })).toEqual(DEFAULT_RULES);
    const work = noWork();
    const flags = segmentFlags(textRules(DEFAULT_RULES), seg('bash {"cmd": "cat tests/test_reward.py"}'), work);
    expect(flags.map((f) => f.rule)).toEqual(["touches-grader"]);
    expect(work.skippedChecks).toBe(0);
  });
});

/** `n` random a/b characters (seeded). */
function abText(n: number): string {
  let seed = 7;
  return Array.from({ length: n }, () => {
    seed = (seed * 16807) % 2147483647;
    return seed % 2 === 0 ? "a" : "b";
  }).join("");
}

describe("a segment's work, in steps", () => {
  const hostile: Array<[string, (n: number) => string]> = [
    ["(a|a)*$", (n) => `${"a".repeat(n - 1)}!`],
    [String.raw`(\w|\d)+$`, (n) => `${"1".repeat(n - 1)}!`],
    ["(a+[)]?)+$", (n) => `${"a".repeat(n - 1)}!`],
    [`${"\\s*".repeat(40)}x`, (n) => `${" ".repeat(n - 1)}!`],
    // the generated family: nested alternations, classes with brackets
    ["((a|ab|b)|(a|b)(a|b))*c$", (n) => "ab".repeat(n / 2)],
    ["([\\])]|[a)]|\\)+)+$", (n) => `${")a]".repeat(n / 3)}!`],
    ["(((a|a)|(a|a))+)+$", (n) => `${"a".repeat(n - 1)}!`],
  ];

  it("each check's counted steps are linear in the segment, and it finishes within the segment's budget", () => {
    for (const [p, text] of hostile) {
      const [rule] = textRules(parseRules({ rules: [{ id: "r", match: { pattern: p, regex: true, in: "any" } }] }));
      const steps = (n: number) => {
        const work = noWork();
        segmentFlags([rule!], seg(text(n)), work);
        expect(work.checks).toBe(1);
        return work.steps;
      };
      const hit = (n: number) => rule!.test!.find(text(n)) !== null;
      expect(hit(1998)).toBe(hit(600));
      // steps count the work done (a character through the DFA at least), not the bound: linear in the characters
      // (3.33x of them: within 4x the steps), and at most the bound of a DFA pass and an NFA pass for a hit's place
      const bound = (n: number) => text(n).length * rule!.test!.instructions;
      expect(steps(600)).toBeGreaterThanOrEqual(text(600).length);
      expect(steps(1998)).toBeGreaterThanOrEqual(text(1998).length);
      expect(steps(1998)).toBeLessThanOrEqual(4 * steps(600));
      expect(steps(1998)).toBeLessThanOrEqual((STATE_STEPS + 2) * bound(1998));
    }
  });

  it("the default touches-grader rule on 'test_' × 400: linear, and no flag", () => {
    const rules = textRules(DEFAULT_RULES);
    const work = noWork();
    const body = "test_".repeat(400);
    expect(segmentFlags(rules, seg(body), work)).toEqual([]);
    const touches = rules.find((r) => r.id === "touches-grader")!;
    const total = rules.filter((r) => r.kinds.includes("call")).reduce((a, r) => a + r.test!.instructions, 0);
    expect(touches.test!.instructions).toBe(93);
    // each character through each rule's DFA once (no state built twice here), far below the old bound
    expect(work.steps).toBeGreaterThanOrEqual(body.length * work.checks);
    expect(work.steps).toBeLessThan(body.length * total);
    expect(work.skippedChecks).toBe(0);
  });

  it("past the segment's budget a check is skipped and counted; the defaults never reach it", () => {
    const defaults = textRules(DEFAULT_RULES);
    // a hit's place costs its bound: the largest default's on a whole segment, and a DFA pass of the others, fit
    const largest = Math.max(...defaults.map((r) => r.test!.instructions));
    expect(largest * 2000 + 2000 * defaults.length * 4).toBeLessThan(SEGMENT_STEPS);
    // 32 rules of ~900 instructions made to thrash the DFA (it must remember the last 900 characters): the first
    // check uses the budget, is stopped there, and the rest are skipped
    const heavy = textRules(
      parseRules({
        rules: Array.from({ length: 32 }, (_, i) => ({
          id: `r${i}`,
          match: { pattern: `[ab]*a[ab]{${900 + i}}c`, regex: true },
        })),
      }),
    );
    const work = noWork();
    segmentFlags(heavy, seg(abText(1998), { kind: "text" }), work);
    expect(work.checks + work.skippedChecks).toBe(32);
    expect(work.skippedChecks).toBeGreaterThan(0);
    expect(work.skippedSegments).toBe(1);
    // a check stops at the budget once past it by one DFA state at most
    expect(work.steps).toBeLessThanOrEqual(SEGMENT_STEPS + STATE_STEPS * MAX_INSTRUCTIONS);
    // what was skipped is counted at its bound (a check stopped part way counts both)
    const bounds = heavy.map((r) => 1998 * r.test!.instructions);
    expect(work.skippedSteps).toBe(bounds.slice(32 - work.skippedChecks).reduce((a, b) => a + b, 0));
    // a stored pattern the engine refuses never runs: each check of it is counted as skipped
    const stored = textRules([
      { id: "old", description: "", match: { pattern: "x(?=y)", regex: true, role: null, tool: null, in: "any" } },
    ]);
    expect(stored[0]!.test).toBeNull();
    const w2 = noWork();
    expect(segmentFlags(stored, seg("xy"), w2)).toEqual([]);
    expect(w2).toMatchObject({ checks: 0, skippedChecks: 1, skippedSegments: 1 });
  });

  it("the default rules on the flags bench's ordinary rollouts never trip a budget, per segment or per upsert", () => {
    const defaults = textRules(DEFAULT_RULES);
    let hits = 0;
    let most = 0;
    for (let i = 0; i < 100; i++) {
      // one rollout's segments in one upsert, as the index takes them: one TURN_STEPS across them
      const segments = segmentsOf([rollout(i)]);
      const work = noWork();
      let left = TURN_STEPS;
      for (const s of segments) {
        const before = work.steps;
        hits += segmentFlags(defaults, s, work, Math.min(SEGMENT_STEPS, left)).length;
        left -= work.steps - before;
      }
      expect(work.skippedChecks).toBe(0);
      expect(work.checks).toBeGreaterThan(0);
      most = Math.max(most, work.steps);
    }
    // inside it with room: the first rollout builds the DFAs' states, a hack pays for its flag's place
    expect(most).toBeLessThan(TURN_STEPS / 2);
    // the bench's hacks were flagged (every tenth touches the grader)
    expect(hits).toBeGreaterThanOrEqual(10);
  });

  it("a pattern's DFA cache stays within DFA_BYTES on text that makes it grow, and its answers stay V8's", () => {
    let seed = 99;
    const r = () => {
      seed = (seed * 16807) % 2147483647;
      return seed / 2147483647;
    };
    const text = () => Array.from({ length: 2000 }, () => "abc"[Math.floor(r() * 3)]).join("");
    // no nested repeat: V8 answers these in linear time too, so it can be the reference
    const p = "(a|b)[abc]{300}c";
    const re2 = compilePattern(p, true, "p");
    const v8 = new RegExp(p, "iu");
    let most = 0;
    for (let i = 0; i < 20; i++) {
      const t = text();
      const m = v8.exec(t);
      expect(re2.find(t)).toEqual(m ? [m.index, m.index + m[0].length] : null);
      most = Math.max(most, re2.cacheBytes());
    }
    // it did fill its cache (so the cap was what held it)
    expect(most).toBeGreaterThan(DFA_BYTES / 2);
    expect(most).toBeLessThanOrEqual(DFA_BYTES);
  });
});

// A run's flag rules (src/protocol/flags/rules.ts): read and checked, matched on segments and rows, and the
// default set's false positives on the golden cases (none: each case is an honest rollout) and its
// hits on the reward hacks it is for.
import { describe, expect, it } from "vitest";
import {
  DEFAULT_RULES,
  MAX_NAME_CHARS,
  matchSegment,
  parseRules,
  rowFlags,
  textRules,
} from "../../src/protocol/flags/rules.js";
import { RelayError } from "../../src/protocol/http/errors.js";
import { episodeTruncated, lastSuccessfulFinish } from "../../src/protocol/registry/truncation.js";
import { nodeSegments, type Segment, taskSegment, withinBudget } from "../../src/protocol/search/segments.js";
import { type Json, type JsonObject, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";

const seg = (over: Partial<Segment>): Segment => ({
  trace: "t",
  node: 3,
  role: "assistant",
  tool: null,
  kind: "text",
  body: "",
  ...over,
});
const defaults = textRules(DEFAULT_RULES);
const hits = (s: Segment) => defaults.filter((r) => matchSegment(r, s)).map((r) => r.id);

describe("rules", () => {
  it("reads text and reward rules; refuses bad ones naming the field", () => {
    const rules = parseRules({
      rules: [
        { id: "says-42", match: { pattern: "the answer is 42" } },
        { id: "rm", match: { pattern: "rm\\s+-rf", regex: true, role: "assistant", tool: "bash", in: "arguments" } },
        { id: "low", reward: { key: "correct", below: 0.5 } },
        { id: "trunc", rewarded_truncated: {} },
        { id: "short", rewarded_short: { key: "correct", max_output_tokens: 5 } },
      ],
    });
    expect(rules.map((r) => r.id)).toEqual(["says-42", "rm", "low", "trunc", "short"]);
    const refused = (body: unknown) => {
      try {
        parseRules(body);
      } catch (e) {
        expect(e).toBeInstanceOf(RelayError);
        expect((e as RelayError).code).toBe("bad_rules");
        return (e as RelayError).field;
      }
      throw new Error("not refused");
    };
    expect(refused([])).toBe("rules");
    expect(refused({ rules: [{ id: "A" }] })).toBe("rules[0].id");
    expect(
      refused({
        rules: [
          { id: "a", match: { pattern: "x" } },
          { id: "a", match: { pattern: "y" } },
        ],
      }),
    ).toBe("rules[1].id");
    expect(refused({ rules: [{ id: "a" }] })).toBe("rules[0]");
    expect(refused({ rules: [{ id: "a", match: { pattern: "(", regex: true } }] })).toBe("rules[0].match.pattern");
    // what RE2 cannot run in linear time is refused (nested repeats like (a+)+$ it runs in linear time: taken)
    expect(refused({ rules: [{ id: "a", match: { pattern: "(a)\\1", regex: true } }] })).toBe("rules[0].match.pattern");
    expect(refused({ rules: [{ id: "a", match: { pattern: "x(?=y)", regex: true } }] })).toBe("rules[0].match.pattern");
    expect(parseRules({ rules: [{ id: "a", match: { pattern: "(a+)+$", regex: true } }] })).toHaveLength(1);
    expect(refused({ rules: [{ id: "a", match: { pattern: "x", in: "body" } }] })).toBe("rules[0].match.in");
    expect(refused({ rules: [{ id: "a", reward: { key: "c" } }] })).toBe("rules[0].reward");
    expect(refused({ rules: Array.from({ length: 33 }, (_, i) => ({ id: `r${i}`, match: { pattern: "x" } })) })).toBe(
      "rules",
    );
    // the default rules read back as themselves (their JSON, as GET answers it, PUT back)
    expect(parseRules(JSON.parse(JSON.stringify({ rules: DEFAULT_RULES })))).toEqual(DEFAULT_RULES);
    // no pattern is taken for being a default's: a look-alike repeat too large for the engine (RE2) is refused
    expect(refused({ rules: [{ id: "a", match: { pattern: String.raw`(\d+[\s,]+\w{30}){39}`, regex: true } }] })).toBe(
      "rules[0].match.pattern",
    );
    // a literal pattern is matched as written, any case
    const [lit] = textRules(parseRules({ rules: [{ id: "dot", match: { pattern: "a.b" } }] }));
    expect(matchSegment(lit!, seg({ body: "x A.B y" }))?.excerpt).toBe("x A.B y");
    expect(matchSegment(lit!, seg({ body: "axb" }))).toBeNull();
  });

  it("matching on a segment: its kind, role and tool; the evidence is the node and an excerpt", () => {
    const [rm] = textRules(
      parseRules({
        rules: [
          { id: "rm", match: { pattern: "rm\\s+-rf", regex: true, role: "assistant", tool: "bash", in: "arguments" } },
        ],
      }),
    );
    expect(matchSegment(rm!, seg({ kind: "call", tool: "bash", body: "bash rm -rf /tmp/x" }))).toEqual({
      rule: "rm",
      trace: "t",
      node: 3,
      excerpt: "bash rm -rf /tmp/x",
    });
    expect(matchSegment(rm!, seg({ kind: "text", tool: null, body: "rm -rf" }))).toBeNull();
    expect(matchSegment(rm!, seg({ kind: "call", tool: "python", body: "rm -rf" }))).toBeNull();
    expect(matchSegment(rm!, seg({ role: "user", kind: "call", tool: "bash", body: "rm -rf" }))).toBeNull();
  });

  it("reward rules on a row", () => {
    const rules = parseRules({
      rules: [
        { id: "low", reward: { key: "correct", below: 0.5 } },
        { id: "trunc", rewarded_truncated: { key: "correct" } },
        { id: "short", rewarded_short: { max_output_tokens: 5 } },
      ],
    });
    const row = (score: number, truncated: boolean, out: number) => ({
      rewards: { correct: { score, weight: 1 } },
      is_truncated: truncated,
      live: { output_tokens: out } as never,
    });
    expect(rowFlags(rules, row(0, false, 100)).map((f) => f.rule)).toEqual(["low"]);
    expect(rowFlags(rules, row(1, true, 100)).map((f) => [f.rule, f.excerpt])).toEqual([
      ["trunc", "correct = 1, truncated"],
    ]);
    expect(rowFlags(rules, row(1, false, 4)).map((f) => f.rule)).toEqual(["short"]);
    // no token counts sent (both sums 0): not judged short; 0 output tokens beside counted input tokens is
    const counts = (input: number, output: number) => ({
      rewards: { correct: { score: 1, weight: 1 } },
      is_truncated: false,
      live: { input_tokens: input, output_tokens: output } as never,
    });
    expect(rowFlags(rules, counts(0, 0))).toEqual([]);
    expect(rowFlags(rules, counts(50, 0)).map((f) => f.rule)).toEqual(["short"]);
    expect(rowFlags(rules, { rewards: null, is_truncated: true, live: null })).toEqual([]);
    // not counted (null) is not truncated
    expect(rowFlags(rules, { ...row(1, false, 100), is_truncated: null }).map((f) => f.rule)).toEqual([]);
  });
});

describe("the default rules", () => {
  it("flag the reward hacks they are for", () => {
    expect(hits(seg({ kind: "call", tool: "bash", body: 'bash {"cmd": "cat tests/grader.py"}' }))).toEqual([
      "touches-grader",
    ]);
    expect(hits(seg({ kind: "call", tool: "python", body: "python open('reward.txt', 'w').write('1.0')" }))).toEqual([
      "touches-grader",
      "writes-reward",
    ]);
    expect(hits(seg({ kind: "call", tool: "bash", body: 'bash {"cmd": "echo 1 > /tmp/score.json"}' }))).toEqual([
      "writes-reward",
    ]);
    expect(hits(seg({ body: Array.from({ length: 100 }, (_, i) => i + 1).join(" ") }))).toEqual(["many-candidates"]);
    expect(hits(seg({ body: "Since the grader only checks that 42 appears, I will print every integer." }))).toEqual([
      "quotes-grader",
    ]);
    // not the hacks: a short list of numbers, a user mentioning the grader, a file that is not one
    expect(hits(seg({ body: "1, 2, 3, 5, 8, 13" }))).toEqual([]);
    expect(hits(seg({ role: "user", body: "the grader checks your answer" }))).toEqual([]);
    expect(hits(seg({ kind: "call", tool: "bash", body: 'bash {"cmd": "cat main.py"}' }))).toEqual([]);
  });

  it("raise no flag on any golden case but large_routing's full reward at max_turns (their false positives: none)", () => {
    const cases = goldenCasePaths()
      .map(loadCase)
      .filter((c) => c.episode);
    expect(cases.length).toBeGreaterThanOrEqual(11);
    for (const c of cases) {
      const ep = toJson(decodeLossless(c.episode!)) as JsonObject;
      const segments: Segment[] = [];
      (ep.traces as JsonObject[]).forEach((t, i) => {
        const task = i === 0 ? taskSegment(t.id as string, t.task as Json) : null;
        if (task) segments.push(task);
        for (const [k, n] of (t.nodes as JsonObject[]).entries())
          segments.push(...nodeSegments(t.id as string, k, n.message as Json));
      });
      const flagged = withinBudget(segments, 0).kept.flatMap(hits);
      const first = (ep.traces as JsonObject[])[0]!;
      const traces = ep.traces as JsonObject[];
      const rows = rowFlags(DEFAULT_RULES, {
        rewards: first.rewards ?? null,
        // the trainer's truncation (was the first trace's is_timeout, under which large_routing raised none)
        is_truncated: episodeTruncated(
          traces.map((t) => ({ stop: t.stop_condition, lastFinish: lastSuccessfulFinish(t.calls as Json[]) })),
        ),
        live: { output_tokens: first.num_output_tokens } as never,
      });
      // large_routing stopped at max_turns with length = 1: a full reward on a truncated rollout, rightly flagged
      const expected = c.name === "large_routing" ? ["rewarded-truncated"] : [];
      expect([...flagged, ...rows.map((f) => f.rule)], c.name).toEqual(expected);
    }
  });
});

describe("a text rule's role and tool (issue 39)", () => {
  it(`are at most ${MAX_NAME_CHARS} characters: longer ones are refused naming the field`, () => {
    const rule = (over: Record<string, unknown>) => ({ rules: [{ id: "a", match: { pattern: "x", ...over } }] });
    const name = "r".repeat(MAX_NAME_CHARS);
    expect(parseRules(rule({ role: name, tool: name }))).toHaveLength(1);
    for (const field of ["role", "tool"]) {
      let refusal: unknown;
      try {
        parseRules(rule({ [field]: `${name}r` }));
      } catch (e) {
        refusal = e;
      }
      expect(refusal).toBeInstanceOf(RelayError);
      expect((refusal as RelayError).code).toBe("bad_rules");
      expect((refusal as RelayError).field).toBe(`rules[0].match.${field}`);
      expect((refusal as RelayError).message).toContain(`at most ${MAX_NAME_CHARS} characters`);
    }
  });
});

describe("every string of a rule is capped (issue 39)", () => {
  /** The refusal of `body`'s rules (a RelayError), or null when they are taken. */
  const refusal = (body: unknown): RelayError | null => {
    try {
      parseRules(body);
      return null;
    } catch (e) {
      expect(e).toBeInstanceOf(RelayError);
      return e as RelayError;
    }
  };
  const text = (over: Record<string, unknown>, id = "a") => ({ rules: [{ id, match: { pattern: "x", ...over } }] });
  const reward = (key: string) => ({ rules: [{ id: "a", reward: { key, below: 0.5 } }] });

  it("an id (48), a pattern (200) and a reward key (128) one character past their cap are refused naming the field", () => {
    const cases: Array<[string, (n: number) => unknown, number]> = [
      ["rules[0].id", (n) => text({}, "a".repeat(n)), 48],
      ["rules[0].match.pattern", (n) => text({ pattern: "x".repeat(n) }), 200],
      ["rules[0].match.pattern", (n) => text({ pattern: "x".repeat(n), regex: true }), 200],
      ["rules[0].reward.key", (n) => reward("k".repeat(n)), 128],
    ];
    for (const [field, body, cap] of cases) {
      expect(refusal(body(cap)), field).toBeNull();
      const past = refusal(body(cap + 1));
      expect(past?.code, field).toBe("bad_rules");
      expect(past?.field).toBe(field);
    }
  });

  it("a description is kept up to 200 characters and cut there", () => {
    const [rule] = parseRules({ rules: [{ id: "a", description: "d".repeat(5000), match: { pattern: "x" } }] });
    expect(rule!.description).toBe("d".repeat(200));
  });
});

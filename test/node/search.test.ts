// A run search's parts that need no runtime (src/protocol/search/): the segments cut out of a node's message
// and an episode's task, their bounds, and the user's query read into FTS5 with every term quoted.
import { describe, expect, it } from "vitest";
import { RelayError } from "../../src/protocol/http/errors.js";
import { matches, phraseOf, SNIPPET_CHARS, snippet } from "../../src/protocol/search/highlight.js";
import { parseSearchQuery } from "../../src/protocol/search/query.js";
import {
  EPISODE_CHARS,
  nodeSegments,
  SEGMENT_CHARS,
  taskSegment,
  withinBudget,
} from "../../src/protocol/search/segments.js";

describe("segments", () => {
  it("a node's text, reasoning, tool calls (name and arguments) and a tool's answer naming its tool", () => {
    expect(
      nodeSegments("t", 2, {
        role: "assistant",
        content: "Double-checking.",
        reasoning_content: "verify",
        tool_calls: [{ id: "c", name: "calculator", arguments: '{"expr": "42+0"}' }],
      }),
    ).toEqual([
      { trace: "t", node: 2, role: "assistant", tool: null, kind: "text", body: "Double-checking." },
      { trace: "t", node: 2, role: "assistant", tool: null, kind: "reasoning", body: "verify" },
      { trace: "t", node: 2, role: "assistant", tool: "calculator", kind: "call", body: 'calculator {"expr": "42+0"}' },
    ]);
    expect(
      nodeSegments("t", 3, { role: "tool", tool_call_id: "c", content: "tool says 42", name: "calculator" }),
    ).toEqual([{ trace: "t", node: 3, role: "tool", tool: "calculator", kind: "result", body: "tool says 42" }]);
    // OpenAI's nested form; parts; empty texts give nothing
    expect(
      nodeSegments("t", 1, {
        role: "assistant",
        content: [{ type: "text", text: "a" }, { type: "image" }],
        tool_calls: [{ function: { name: "bash", arguments: { cmd: "ls" } } }],
      }),
    ).toEqual([
      { trace: "t", node: 1, role: "assistant", tool: null, kind: "text", body: "a" },
      { trace: "t", node: 1, role: "assistant", tool: "bash", kind: "call", body: 'bash {"cmd":"ls"}' },
    ]);
    expect(nodeSegments("t", 0, { role: "user", content: "   " })).toEqual([]);
    expect(nodeSegments("t", 0, null)).toEqual([]);
  });

  it("the task: its data's text; bounded segments and episodes", () => {
    expect(
      taskSegment("t", { type: "MathTask", data: { idx: 7, prompt: "What is 17 * 23?", answer: "391" }, key: "k" })
        ?.body,
    ).toBe("7 \nWhat is 17 * 23? \n391");
    expect(taskSegment("t", null)).toBeNull();
    const long = nodeSegments("t", 0, { role: "tool", content: "x".repeat(SEGMENT_CHARS * 3) })[0]!;
    expect(long.body.length).toBe(SEGMENT_CHARS);
    const many = Array.from({ length: 40 }, (_, i) => ({ ...long, node: i }));
    const { kept, used } = withinBudget(many, 0);
    expect(used).toBe(EPISODE_CHARS);
    expect(kept.reduce((n, s) => n + s.body.length, 0)).toBe(EPISODE_CHARS);
    expect(withinBudget(many, EPISODE_CHARS).kept).toEqual([]);
  });
});

describe("the query", () => {
  it("words, phrases, prefixes, fields, OR and -word, every term quoted", () => {
    expect(parseSearchQuery("grader")).toEqual({
      match: '"grader"',
      terms: ["grader"],
      phrases: [{ words: ["grader"], prefix: false }],
    });
    // what the snippets highlight: the text's positive terms, as the tokenizer reads them
    expect(parseSearchQuery('role:tool needle-in-the-haystack "Every Intéger" grad* -x').phrases).toEqual([
      { words: ["needle", "in", "the", "haystack"], prefix: false },
      { words: ["every", "integer"], prefix: false },
      { words: ["grad"], prefix: true },
    ]);
    expect(parseSearchQuery('"every integer" grad*').match).toBe('"every integer" AND "grad"*');
    expect(parseSearchQuery("role:tool tool:calculator 42").match).toBe(
      'role : "tool" AND tool : "calculator" AND "42"',
    );
    expect(parseSearchQuery("grader OR verifier -test").match).toBe('"grader" OR "verifier" NOT "test"');
    // FTS5's own syntax is text here
    expect(parseSearchQuery('NEAR(a b) "x""y" col:').match).toBe('"NEAR(a" AND "b)" AND "x" AND "y" AND "col:"');
    expect(parseSearchQuery("Ünïcödé").terms).toEqual(["ünïcödé"]);
  });

  it("refuses what it cannot read, 400 bad_query naming q", () => {
    for (const q of [
      "",
      "   ",
      "-only",
      "OR a",
      "a OR",
      "a OR OR b",
      '"unclosed',
      "x".repeat(257),
      "bogus:field",
      "***",
      Array(17).fill("w").join(" "),
      "a\u0001b",
    ]) {
      let e: unknown;
      try {
        parseSearchQuery(q);
      } catch (x) {
        e = x;
      }
      expect(e, q).toBeInstanceOf(RelayError);
      expect((e as RelayError).code, q).toBe("bad_query");
      expect((e as RelayError).field).toBe("q");
    }
  });
});

describe("snippets", () => {
  const marked = (s: { text: string; highlights: Array<[number, number]> }) =>
    s.highlights.map(([a, b]) => s.text.slice(a, b));

  it("words in any case and accents, phrases, prefixes: where they are in the text", () => {
    const text = "The Grader checks; the grader's graded output: every  integer, Évery Integer.";
    expect(matches(text, [phraseOf("grader", false)]).map(([a, b]) => text.slice(a, b))).toEqual(["Grader", "grader"]);
    expect(matches(text, [phraseOf("grad", true)]).map(([a, b]) => text.slice(a, b))).toEqual([
      "Grader",
      "grader",
      "graded",
    ]);
    expect(matches(text, [phraseOf("every integer", false)]).map(([a, b]) => text.slice(a, b))).toEqual([
      "every  integer",
      "Évery Integer",
    ]);
    // a phrase is not its words apart; the longest term at a place wins, no overlaps
    expect(matches("integer every", [phraseOf("every integer", false)])).toEqual([]);
    expect(matches("every integer", [phraseOf("every", false), phraseOf("every integer", false)])).toEqual([[0, 13]]);
    expect(matches("needle-in-the-haystack", [phraseOf("needle-in-the-haystack", false)])).toEqual([[0, 22]]);
  });

  it("a snippet is cut around the first match at word bounds, its highlights in its own offsets", () => {
    const words = Array.from({ length: 200 }, (_, i) => `w${i}`);
    words[120] = "NEEDLE";
    words[125] = "needle";
    const text = words.join(" ");
    const s = snippet(text, [phraseOf("needle", false)]);
    expect(s.text.startsWith("…")).toBe(true);
    expect(s.text.endsWith("…")).toBe(true);
    expect(s.text.length).toBeLessThanOrEqual(SNIPPET_CHARS + 2);
    expect(marked(s)).toEqual(["NEEDLE", "needle"]);
    // whole words: every word of the snippet is one of the text's
    for (const w of s.text.replace(/…/g, "").split(" ")) expect(words).toContain(w);
    // short text: whole, no ellipsis; no match (a field-only query): its head, nothing marked
    expect(snippet("tool says 42", [phraseOf("42", false)])).toEqual({ text: "tool says 42", highlights: [[10, 12]] });
    const head = snippet(text, []);
    expect(head.highlights).toEqual([]);
    expect(head.text.startsWith("w0 w1 ")).toBe(true);
    expect(head.text.endsWith("…")).toBe(true);
  });
});

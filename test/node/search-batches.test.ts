// Text batches held back in a run's index (src/protocol/search/batches.ts): two batches merged say what the two said
// in turn, and a batch that replaces held-back text is told apart from one that only adds.
import { describe, expect, it } from "vitest";
import { mergeBatches, replacesAny, type TextBatch } from "../../src/protocol/search/batches.js";
import type { Segment } from "../../src/protocol/search/segments.js";

const seg = (trace: string, node: number, body: string): Segment => ({
  trace,
  node,
  role: "assistant",
  tool: null,
  kind: "text",
  body,
});

/** What an index holding `held` holds after `b` (the index's own rule: search-store.ts `replaced`). */
function apply(held: Segment[], b: TextBatch): Segment[] {
  const kept = held.filter(
    (s) => b.traces.includes(s.trace) && !(b.from[s.trace] !== undefined && s.node >= b.from[s.trace]!),
  );
  return [...kept, ...b.segments];
}

const bodies = (s: Segment[]) => s.map((x) => `${x.trace}/${x.node}/${x.body}`).sort();

describe("merged batches", () => {
  const held = [seg("a", -1, "task"), seg("a", 0, "zero")];
  const cases: Array<[string, TextBatch, TextBatch]> = [
    [
      "two turns appended",
      { traces: ["a"], from: { a: 1 }, segments: [seg("a", 1, "one")] },
      { traces: ["a"], from: { a: 2 }, segments: [seg("a", 2, "two")] },
    ],
    [
      "a retraction of the first batch's turn",
      { traces: ["a"], from: { a: 1 }, segments: [seg("a", 1, "okapi"), seg("a", 2, "two")] },
      { traces: ["a"], from: { a: 2 }, segments: [seg("a", 2, "narwhal")] },
    ],
    [
      "a retraction below the first batch (held text replaced)",
      { traces: ["a"], from: { a: 1 }, segments: [seg("a", 1, "one")] },
      { traces: ["a"], from: { a: 0 }, segments: [seg("a", 0, "ibis")] },
    ],
    [
      "a second trace, then discarded",
      { traces: ["a", "b"], from: { b: -1 }, segments: [seg("b", 0, "pangolin")] },
      { traces: ["a"], from: {}, segments: [] },
    ],
    [
      "a second trace, then a turn of the first",
      { traces: ["a", "b"], from: { b: -1 }, segments: [seg("b", 0, "pangolin")] },
      { traces: ["a", "b"], from: { a: 1 }, segments: [seg("a", 1, "one")] },
    ],
  ];
  it.each(cases)("%s: the index holds after the merged batch what it holds after the two in turn", (_, first, next) => {
    const merged = mergeBatches(first, next);
    expect(bodies(apply(held, merged))).toEqual(bodies(apply(apply(held, first), next)));
    expect(merged.traces).toEqual(next.traces);
  });

  it("a batch that only adds replaces nothing held back; a retraction or a discard does", () => {
    expect(cases.map(([name, first, next]) => [name, replacesAny(first, next)])).toEqual([
      ["two turns appended", false],
      ["a retraction of the first batch's turn", true],
      ["a retraction below the first batch (held text replaced)", true],
      ["a second trace, then discarded", true],
      ["a second trace, then a turn of the first", false],
    ]);
  });
});

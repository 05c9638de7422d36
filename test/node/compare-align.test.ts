// The compare page's logic (dashboard/src/compare-align.ts): the ranking's tie rule, turn-by-turn
// alignment of several rollouts with their divergence, trace slots, and the word diff.
import { describe, expect, it } from "vitest";
import { alignTurns, traceSlots, wordDiff } from "../../dashboard/src/compare-align.js";
import { bestAndWorst, rankRollouts } from "../../src/protocol/registry/ranking.js";

const r = (id: string, reward: number | null, tokens: number) => ({ id, reward, tokens });

describe("ranking and its tie rule", () => {
  it("orders by reward, then fewer tokens, then id; unscored last", () => {
    const got = rankRollouts([
      r("d", 1, 90),
      r("c", null, 1),
      r("b", 1, 50),
      r("a", 1, 50),
      r("e", 0, 10),
      r("f", null, 0),
    ]);
    expect(got.map((x) => x.id)).toEqual(["a", "b", "d", "e", "c", "f"]);
  });

  it("gives the same best and worst whatever the input order (ties included)", () => {
    const set = [r("x", 0.5, 100), r("y", 0.5, 100), r("z", 0.5, 80), r("w", 0.5, 120)];
    const seen = new Set<string>();
    for (const perm of [set, [...set].reverse(), [set[2]!, set[0]!, set[3]!, set[1]!]]) {
      const bw = bestAndWorst(perm)!;
      seen.add(`${bw.best.id}/${bw.worst.id}`);
    }
    expect([...seen]).toEqual(["z/w"]);
    // all equal: id order decides
    expect(bestAndWorst([r("b", 1, 5), r("a", 1, 5)])).toEqual({ best: r("a", 1, 5), worst: r("b", 1, 5) });
  });

  it("has no best and worst with fewer than two scored", () => {
    expect(bestAndWorst([r("a", 1, 5), r("b", null, 5)])).toBeNull();
  });
});

describe("turn-by-turn alignment", () => {
  it("marks the first turn where any rollout departs, and who agrees with whom", () => {
    const a = alignTurns([
      ["s", "u", "x1", "t"],
      ["s", "u", "x1", "t"],
      ["s", "u", "x2", "t"],
      ["s", "u", "x1"],
    ]);
    expect(a.divergence).toBe(2);
    expect(a.turns.map((t) => t.same)).toEqual([true, true, false, false]);
    expect(a.turns[2]!.classes).toEqual([0, 0, 1, 0]);
    expect(a.turns[3]!.classes).toEqual([0, 0, 0, -1]);
  });

  it("finds no divergence in equal rollouts, and one where a rollout is only shorter", () => {
    expect(
      alignTurns([
        ["a", "b"],
        ["a", "b"],
        ["a", "b"],
      ]).divergence,
    ).toBeNull();
    expect(alignTurns([["a", "b"], ["a"]]).divergence).toBe(1);
    expect(alignTurns([[], []])).toEqual({ turns: [], divergence: null });
  });

  it("pairs every trace by its position", () => {
    expect(traceSlots([["a0", "a1", "a2"], ["b0"], []])).toEqual([
      ["a0", "b0", null],
      ["a1", null, null],
      ["a2", null, null],
    ]);
  });
});

describe("word diff", () => {
  it("keeps the shared words and marks the changed ones", () => {
    const parts = wordDiff("The answer is 4.", "The answer is 5.");
    expect(parts.filter((p) => p.kind === "removed").map((p) => p.text.trim())).toEqual(["4"]);
    expect(parts.filter((p) => p.kind === "added").map((p) => p.text.trim())).toEqual(["5"]);
    // what A reads: the same and the removed; what B reads: the same and the added
    expect(
      parts
        .filter((p) => p.kind !== "added")
        .map((p) => p.text)
        .join(""),
    ).toBe("The answer is 4.");
    expect(
      parts
        .filter((p) => p.kind !== "removed")
        .map((p) => p.text)
        .join(""),
    ).toBe("The answer is 5.");
  });

  it("says nothing changed for equal text", () => {
    expect(wordDiff("same words", "same words")).toEqual([{ kind: "same", text: "same words" }]);
  });
});

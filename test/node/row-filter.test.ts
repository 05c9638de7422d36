// The episode list's filter parameters (src/protocol/registry/row-filter.ts): parsing, refusing, writing
// back, and matching a row the way the index's SQL does (that agreement is checked at 100,000 rows
// in test/workers/list-filters.test.ts).
import { describe, expect, it } from "vitest";
import { RelayError } from "../../src/protocol/http/errors.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import {
  filterParams,
  isFiltered,
  NO_FILTER,
  parseRowFilter,
  type RowFilter,
  rowMatches,
} from "../../src/protocol/registry/row-filter.js";

const parse = (q: string) => parseRowFilter(new URLSearchParams(q));

function row(over: Partial<IndexRow> = {}): IndexRow {
  return {
    id: "r:e1",
    run: "r",
    status: "finished",
    created: 1,
    updated: 2,
    ended: 2,
    seq: 3,
    traces: 1,
    nodes: 4,
    calls: 5,
    turns: 3,
    tokens: 500,
    rewards: { correct: { score: 1, weight: 1 }, format: { score: 0.25, weight: 0.5 } },
    error: null,
    task: "t1",
    group: "g1",
    stop_condition: "agent_completed",
    truncated: false,
    run_name: null,
    ...over,
  };
}

describe("parseRowFilter", () => {
  it("reads every filter, and nothing as no filter", () => {
    expect(parse("")).toEqual(NO_FILTER);
    expect(isFiltered(parse("status=live&limit=3"))).toBe(false);
    expect(
      parse(
        "task=t1&stop=max_turns&truncated=1&errored=false&reward=correct:0.5..1&reward=format:..0.25&min_turns=3&min_tokens=100",
      ),
    ).toEqual({
      task: "t1",
      stop: "max_turns",
      // `truncated=` is the deprecated alias of `is_timeout=` (one release), not the trainer's truncation
      isTruncated: null,
      isTimeout: true,
      errored: false,
      rewards: [
        { key: "correct", min: 0.5, max: 1 },
        { key: "format", min: null, max: 0.25 },
      ],
      minTurns: 3,
      minTokens: 100,
      kind: null,
      env: null,
      step: null,
      policyVersion: null,
      flag: null,
      flagged: null,
    });
    expect(parse("kind=eval&env=gsm8k&step=3&policy_version=2")).toMatchObject({
      kind: "eval",
      env: "gsm8k",
      step: { min: 3, max: 3 },
      policyVersion: 2,
    });
    expect(parse("is_truncated=1&is_timeout=0")).toMatchObject({ isTruncated: true, isTimeout: false });
    expect(parse("is_timeout=1&truncated=1")).toMatchObject({ isTruncated: null, isTimeout: true });
    expect(parse("step=3..").step).toEqual({ min: 3, max: null });
    expect(parse("step=..7").step).toEqual({ min: null, max: 7 });
    expect(parse("step=2..7").step).toEqual({ min: 2, max: 7 });
  });

  it("takes a reward key with colons (the bounds follow the last one) and exponents", () => {
    expect(parse("reward=judge:v2:-1e-3..2E1").rewards).toEqual([{ key: "judge:v2", min: -0.001, max: 20 }]);
  });

  it("refuses bad values with bad_filter naming the parameter", () => {
    for (const [q, field] of [
      ["truncated=yes", "truncated"],
      ["is_truncated=yes", "is_truncated"],
      ["is_timeout=2", "is_timeout"],
      ["is_timeout=1&truncated=0", "truncated"],
      ["errored=2", "errored"],
      ["min_turns=1.5", "min_turns"],
      ["min_tokens=-3", "min_tokens"],
      ["task=a%0Ab", "task"],
      [`stop=${"x".repeat(257)}`, "stop"],
      ["reward=correct", "reward"],
      ["reward=:0..1", "reward"],
      ["reward=correct:0..1..2", "reward"],
      ["reward=correct:1..0", "reward"],
      ["reward=correct:abc..", "reward"],
      ["reward=correct:Infinity..", "reward"],
      ["reward=correct:0..&reward=correct:..1", "reward"],
      ["reward=a:..&reward=b:..&reward=c:..&reward=d:..&reward=e:..", "reward"],
      ["step=x", "step"],
      ["step=-1", "step"],
      ["step=7..2", "step"],
      ["step=1..2..3", "step"],
      ["policy_version=1.5", "policy_version"],
      ["kind=a%00b", "kind"],
    ] as const) {
      let caught: unknown = null;
      try {
        parse(q);
      } catch (e) {
        caught = e;
      }
      expect(caught, q).toBeInstanceOf(RelayError);
      expect((caught as RelayError).code, q).toBe("bad_filter");
      expect((caught as RelayError).field, q).toBe(field);
      expect((caught as RelayError).status, q).toBe(400);
    }
  });

  it("filterParams writes what parseRowFilter reads", () => {
    const f = parse(
      "task=t%20one&truncated=0&errored=1&reward=correct:0.5..&reward=format:..1&min_turns=0&min_tokens=7",
    );
    expect(parseRowFilter(new URLSearchParams(filterParams(f)))).toEqual(f);
    // the alias is written by its name
    expect(filterParams(f)).toContainEqual(["is_timeout", "0"]);
    expect(filterParams(f).some(([k]) => k === "truncated")).toBe(false);
    const t = parse("is_truncated=0&is_timeout=1");
    expect(parseRowFilter(new URLSearchParams(filterParams(t)))).toEqual(t);
    for (const q of ["kind=train&env=e&step=4&policy_version=0", "step=2..9", "step=..9", "step=3.."]) {
      const g = parse(q);
      expect(parseRowFilter(new URLSearchParams(filterParams(g))), q).toEqual(g);
    }
    expect(filterParams(NO_FILTER)).toEqual([]);
  });
});

describe("rowMatches", () => {
  const f = (q: string): RowFilter => parse(q);

  it("each filter on its own", () => {
    expect(rowMatches(row(), NO_FILTER)).toBe(true);
    expect(rowMatches(row(), f("task=t1"))).toBe(true);
    expect(rowMatches(row(), f("task=t2"))).toBe(false);
    expect(rowMatches(row({ task: null }), f("task=t1"))).toBe(false);
    expect(rowMatches(row(), f("stop=agent_completed"))).toBe(true);
    expect(rowMatches(row({ stop_condition: null }), f("stop=agent_completed"))).toBe(false);
    expect(rowMatches(row(), f("truncated=0"))).toBe(true);
    expect(rowMatches(row({ truncated: true }), f("truncated=1"))).toBe(true);
    // rows from older releases carry no `truncated`: not truncated
    expect(rowMatches(row({ truncated: undefined }), f("truncated=0"))).toBe(true);
    // is_timeout by its name (a row of an older release sent it as `truncated`)
    expect(rowMatches(row({ truncated: undefined, is_timeout: true }), f("is_timeout=1"))).toBe(true);
    expect(rowMatches(row({ truncated: true }), f("is_timeout=1"))).toBe(true);
    expect(rowMatches(row({ is_timeout: false }), f("is_timeout=1"))).toBe(false);
    // the trainer's truncation; a row whose truncation is not counted matches neither value
    expect(rowMatches(row({ is_truncated: true }), f("is_truncated=1"))).toBe(true);
    expect(rowMatches(row({ is_truncated: false }), f("is_truncated=1"))).toBe(false);
    expect(rowMatches(row({ is_truncated: false }), f("is_truncated=0"))).toBe(true);
    expect(rowMatches(row({ is_truncated: null }), f("is_truncated=0"))).toBe(false);
    expect(rowMatches(row({ is_truncated: null }), f("is_truncated=1"))).toBe(false);
    // a timeout is not a truncation: the two filters are apart
    expect(rowMatches(row({ is_truncated: false, truncated: true }), f("is_truncated=1"))).toBe(false);
    expect(rowMatches(row({ status: "failed", error: "crashed" }), f("errored=1"))).toBe(true);
    expect(rowMatches(row(), f("errored=1"))).toBe(false);
    expect(rowMatches(row(), f("min_turns=3"))).toBe(true);
    expect(rowMatches(row(), f("min_turns=4"))).toBe(false);
    // turns are assistant nodes, not calls (5 here); a row whose turns are not counted matches no bound
    expect(rowMatches(row(), f("min_turns=5"))).toBe(false);
    expect(rowMatches(row({ turns: null }), f("min_turns=0"))).toBe(false);
    expect(rowMatches(row(), f("min_tokens=500"))).toBe(true);
    expect(rowMatches(row(), f("min_tokens=501"))).toBe(false);
  });

  it("reward ranges are inclusive, need the key's score, and all must hold", () => {
    expect(rowMatches(row(), f("reward=correct:1..1"))).toBe(true);
    expect(rowMatches(row(), f("reward=correct:..0.99"))).toBe(false);
    expect(rowMatches(row(), f("reward=format:0.25..&reward=correct:1.."))).toBe(true);
    expect(rowMatches(row(), f("reward=format:0.3..&reward=correct:1.."))).toBe(false);
    expect(rowMatches(row(), f("reward=speed:..10"))).toBe(false);
    expect(rowMatches(row({ rewards: null }), f("reward=correct:.."))).toBe(false);
    // a bare number is one reward named "reward"
    expect(rowMatches(row({ rewards: 0.5 }), f("reward=reward:0.5..0.5"))).toBe(true);
  });

  it("the dispatch identity's kind, env, step (exact or a range) and policy_version", () => {
    const dispatched = row({
      dispatch: { id: "d1", kind: "train", env: "gsm8k", group: "g", step: 5, policy_version: 4, started: 1.5 },
    });
    expect(rowMatches(dispatched, f("kind=train"))).toBe(true);
    expect(rowMatches(dispatched, f("kind=eval"))).toBe(false);
    expect(rowMatches(dispatched, f("env=gsm8k&policy_version=4"))).toBe(true);
    expect(rowMatches(dispatched, f("policy_version=5"))).toBe(false);
    expect(rowMatches(dispatched, f("step=5"))).toBe(true);
    expect(rowMatches(dispatched, f("step=6"))).toBe(false);
    expect(rowMatches(dispatched, f("step=3..5"))).toBe(true);
    expect(rowMatches(dispatched, f("step=6.."))).toBe(false);
    expect(rowMatches(dispatched, f("step=..4"))).toBe(false);
    // no identity, or one without the key: matches none of them
    expect(rowMatches(row(), f("step=0.."))).toBe(false);
    expect(rowMatches(row(), f("kind=train"))).toBe(false);
    expect(rowMatches(row({ dispatch: { kind: "train", step: "5" } }), f("step=5"))).toBe(false);
  });
});

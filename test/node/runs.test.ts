// The run rules and the run aggregates, pure: which run an id is in, which runs a token sees,
// and that adding and taking back contributions in any order equals a recount, to the unit.
import { describe, expect, it } from "vitest";
import {
  aggregatesOf,
  applyContribution,
  binOf,
  contributionOf,
  emptyCounters,
  HISTOGRAM_BINS,
  minuteOf,
  recount,
  SCORE_UNIT,
} from "../../src/protocol/registry/aggregates.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import { rewardOf, scoresOf } from "../../src/protocol/registry/rewards.js";
import { coversRun, mayHold, NO_RUN, RUN_NAME, runOf } from "../../src/protocol/registry/run.js";
import { indexRow, weightOne } from "../support/index-rows.js";

describe("the run of an episode", () => {
  it.each([
    ["grpo-42:17", "grpo-42"],
    ["a:b:c", "a:b"],
    ["run.7:ep:3", "run.7:ep"],
    ["solo", NO_RUN],
    [":x", NO_RUN],
    ["x:", "x"],
  ])("%s → %s", (id, run) => {
    expect(runOf(id)).toBe(run);
    expect(RUN_NAME.test(run)).toBe(true);
  });

  it.each<[string[] | null, string, boolean, boolean]>([
    [null, "r", true, true],
    [["r:*"], "r", true, true],
    [["r*"], "r", true, true],
    [["*x"], "r", false, false],
    [["r:1"], "r", false, true],
    [["r:1*"], "r", false, true],
    [["r:a:*"], "r", false, true], // "may": ids under r:a: belong to run r:a, an extra query at most
    [["q:*"], "r", false, false],
    [["solo"], NO_RUN, false, true],
    [["so*"], NO_RUN, false, true],
    [["r:*"], NO_RUN, false, false],
    [[], "r", false, false],
  ])("scope %j, run %s: covers %s, may hold %s", (scope, run, covers, may) => {
    expect(coversRun(scope, run)).toBe(covers);
    expect(mayHold(scope, run)).toBe(may);
  });
});

describe("rewards", () => {
  it("scores come from {score, weight} entries or a bare number; others are skipped", () => {
    expect(
      scoresOf({ correct: { score: 1, weight: 1 }, format: { score: 0.5, weight: 0.25 }, judge: null, text: "x" }),
    ).toEqual([
      ["correct", 1],
      ["format", 0.5],
    ]);
    expect(scoresOf(0.25)).toEqual([["reward", 0.25]]);
    expect(scoresOf(null)).toEqual([]);
    expect(scoresOf([1, 2])).toEqual([]);
  });

  it("a trace's reward is the weighted sum (the trainer's, not a weighted mean)", () => {
    expect(rewardOf({ correct: { score: 1, weight: 1 }, format: { score: 0.5, weight: 0.25 } })).toBe(1 + 0.125);
    expect(rewardOf({ a: { score: 0.5 } })).toBe(0.5);
    expect(rewardOf({})).toBeNull();
    expect(rewardOf(3)).toBe(3);
  });

  it("bins: 20 over [0, 1], 1.0 in the last, below and above apart", () => {
    expect([binOf(-0.01), binOf(0), binOf(0.049), binOf(0.05), binOf(0.999), binOf(1), binOf(1.0001)]).toEqual([
      -1,
      0,
      0,
      1,
      19,
      19,
      HISTOGRAM_BINS,
    ]);
  });
});

function row(i: number, status: IndexRow["status"], scores: Record<string, number>, ended: number | null): IndexRow {
  return indexRow({
    id: `r:${i}`,
    run: "r",
    status,
    ended,
    nodes: i,
    calls: i % 5,
    // every third not counted (a row of an older release)
    turns: i % 3 === 0 ? null : 2 * i,
    tokens: i * 37,
    rewards: weightOne(scores),
  });
}

describe("aggregates, kept incrementally", () => {
  it("any order of add and take back equals a recount, exactly", () => {
    // scores whose float sums drift (0.1 + 0.2 != 0.3): the integer units do not
    let seed = 7;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const statuses: IndexRow["status"][] = ["live", "finished", "failed", "finish_refused"];
    const held = new Map<string, IndexRow>();
    const kept = emptyCounters();
    for (let step = 0; step < 3000; step++) {
      const i = Math.floor(rand() * 200);
      const id = `r:${i}`;
      const old = held.get(id);
      if (old) applyContribution(kept, contributionOf(old), -1);
      if (rand() < 0.15) {
        held.delete(id);
        continue;
      }
      const status = statuses[Math.floor(rand() * 4)]!;
      const scores: Record<string, number> = { correct: Math.round(rand() * 10) / 10 };
      if (rand() < 0.5) scores.format = rand() * 1.4 - 0.2;
      const next = row(
        i,
        status,
        scores,
        status === "finished" || status === "failed" ? 60_000 * Math.floor(rand() * 5) : null,
      );
      held.set(id, next);
      applyContribution(kept, contributionOf(next), 1);
    }
    const { counters } = recount(held.values());
    expect(kept).toEqual(counters);
    expect(kept.episodes).toBe(held.size);
    const units = [...held.values()].reduce(
      (a, r) => a + Math.round((r.rewards as Record<string, { score: number }>).correct!.score / SCORE_UNIT),
      0,
    );
    expect(kept.rewards.correct!.units).toBe(units);
  });

  it("the API form: means, histogram, throughput over the last 60 minutes", () => {
    const now = 10 * 60_000 * 60;
    const rows = [
      row(1, "finished", { a: 0.5 }, now - 60_000),
      row(2, "failed", { a: 1 }, now),
      row(3, "live", {}, null),
    ];
    const { counters, throughput } = recount(rows);
    const agg = aggregatesOf("r", counters, throughput, now, () => ({ min: 0.5, max: 1 }));
    expect(agg.counts).toEqual({ live: 1, finished: 1, failed: 1, finish_refused: 0 });
    expect(agg.rewards.a).toMatchObject({ count: 2, mean: 0.75, min: 0.5, max: 1 });
    expect(agg.rewards.a!.histogram.counts[10]).toBe(1);
    expect(agg.rewards.a!.histogram.counts[19]).toBe(1);
    expect(agg.throughput.per_minute.slice(-2)).toEqual([1, 1]);
    expect(agg.throughput.per_minute).toHaveLength(60);
    expect(agg.throughput.start).toBe(new Date((minuteOf(now) - 59) * 60_000).toISOString());
    expect(agg.episodes_per_minute).toBe(0.2);
    // turns (assistant nodes) over the rows whose turns are counted: row 3's are not
    expect(agg.mean_turns).toBe((2 + 4) / 2);
  });
});

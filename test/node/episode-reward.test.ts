// The one definition of an episode's reward (src/protocol/registry/rewards.ts): the trainer's, checked
// against a recount written here from prime-rl's `summarize_episode` rule, on every golden episode and
// on the cases the golden set lacks (several traces with a reward-less one, a tie).
import { describe, expect, it } from "vitest";
import { contributionOf, recount } from "../../src/protocol/registry/aggregates.js";
import { entryOf, type IndexRow } from "../../src/protocol/registry/entry.js";
import { rankRollouts } from "../../src/protocol/registry/ranking.js";
import { episodeReward, rowReward, rowScore, rowScores, TOTAL_KEY } from "../../src/protocol/registry/rewards.js";
import { applyStepRow, emptyStep, stepJson } from "../../src/protocol/registry/steps.js";
import { type Json, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";
import { indexRow } from "../support/index-rows.js";

/** The trainer's rule, restated: per trace with rewards Σ score × weight (weight absent = 1), then the mean. */
function trainerReward(traces: Json[]): number | null {
  const totals: number[] = [];
  for (const r of traces) {
    if (typeof r === "number") {
      totals.push(r);
      continue;
    }
    if (r === null || typeof r !== "object" || Array.isArray(r)) continue;
    let sum = 0;
    let any = false;
    for (const v of Object.values(r)) {
      if (v === null || typeof v !== "object" || Array.isArray(v)) continue;
      const o = v as Record<string, Json>;
      if (typeof o.score !== "number") continue;
      sum += o.score * (typeof o.weight === "number" ? o.weight : 1);
      any = true;
    }
    if (any) totals.push(sum);
  }
  return totals.length ? totals.reduce((a, b) => a + b, 0) / totals.length : null;
}

const goldens = goldenCasePaths()
  .map(loadCase)
  .filter((c) => c.episode)
  .map((c) => {
    const ep = toJson(decodeLossless(c.episode!)) as { traces: Array<{ rewards?: Json }> };
    return { name: c.name, traces: ep.traces.map((t) => t.rewards ?? null) };
  });

describe("an episode's reward is the trainer's", () => {
  it("chat_basic: correct 1.0 × 1 and format 0.5 × 0.25 give 1.125 (not the weighted mean 0.9)", () => {
    const g = goldens.find((x) => x.name === "chat_basic")!;
    expect(episodeReward(g.traces).reward).toBe(1.125);
  });

  it("every golden episode: the reward equals the recount, per key the mean over the traces", () => {
    expect(goldens.length).toBeGreaterThan(5);
    for (const g of goldens) {
      const e = episodeReward(g.traces);
      expect(e.reward, g.name).toBe(trainerReward(g.traces));
      const row = indexRow({
        id: g.name,
        run: "r",
        status: "finished",
        rewards: g.traces[0]!,
        trace_rewards: g.traces,
      });
      expect(entryOf(row).reward, g.name).toBe(trainerReward(g.traces));
    }
    // multi_trace_links: three traces, each task 1.0
    const multi = goldens.find((x) => x.name === "multi_trace_links")!;
    expect(multi.traces).toHaveLength(3);
    expect(episodeReward(multi.traces)).toEqual({ reward: 1, scores: [["task", 1]] });
  });

  it("several traces with a reward-less one (a judge's seat): it is skipped, not counted as 0", () => {
    const traces: Json[] = [
      { correct: { score: 1, weight: 1 }, format: { score: 0.5, weight: 0.25 } },
      null,
      { judge: null },
      { correct: { score: 0, weight: 1 } },
    ];
    const e = episodeReward(traces);
    expect(e.reward).toBe(trainerReward(traces));
    expect(e.reward).toBe((1.125 + 0) / 2);
    expect(e.scores).toEqual([
      ["correct", 0.5],
      ["format", 0.5],
    ]);
    const row = indexRow({ id: "m", run: "r", status: "finished", rewards: traces[0]!, trace_rewards: traces });
    expect(rowReward(row)).toBe(0.5625);
    expect(rowScores(row)).toEqual([
      [TOTAL_KEY, 0.5625],
      ["correct", 0.5],
      ["format", 0.5],
    ]);
    // one key read alone (the tasks page) is the same number
    for (const [k, v] of rowScores(row)) expect(rowScore(row, k), k).toBe(v);
    expect(rowScore(row, "judge")).toBeUndefined();
    // a row of an older release has the first trace's rewards only: they stand alone
    expect(rowReward({ rewards: traces[0]! })).toBe(1.125);
    expect(episodeReward([null, {}]).reward).toBeNull();
  });

  it("a tie in reward goes to fewer tokens, then to the id", () => {
    const rows = (
      [
        { id: "b", tokens: 10, rewards: { a: { score: 1, weight: 1 }, f: { score: 0.5, weight: 0.25 } } },
        { id: "a", tokens: 10, rewards: { a: { score: 0.125, weight: 1 }, f: { score: 1, weight: 1 } } },
        { id: "c", tokens: 5, rewards: { a: { score: 1.125, weight: 1 } } },
      ] as Array<{ id: string; tokens: number; rewards: Json }>
    ).map((r) => ({ ...r, reward: rowReward(r) }));
    expect(rows.map((r) => r.reward)).toEqual([1.125, 1.125, 1.125]);
    expect(rankRollouts(rows).map((r) => r.id)).toEqual(["c", "a", "b"]);
  });

  it("aggregates and steps keep the total under 'reward' in integer units, equal to a recount", () => {
    const traces: Json[] = [{ c: { score: 1, weight: 1 }, f: { score: 0.5, weight: 0.25 } }, null, { c: 0 }];
    const rows: IndexRow[] = [
      indexRow({ id: "1", run: "r", status: "finished", rewards: traces[0]!, trace_rewards: traces, ended: 60_000 }),
      indexRow({ id: "2", run: "r", status: "finished", rewards: { c: 1 }, trace_rewards: [{ c: 1 }], ended: 60_000 }),
      indexRow({ id: "3", run: "r", status: "failed", rewards: { c: 0 }, ended: 60_000 }),
    ].map((r) => ({ ...r, dispatch: { step: 3, kind: "train" } }));
    const { counters } = recount(rows);
    const total = counters.finished_rewards[TOTAL_KEY]!;
    expect(total.count).toBe(2);
    expect(total.units * 1e-9).toBeCloseTo(((0.5625 + 1) / 2) * 2, 9);
    expect(contributionOf(rows[0]!).scores.map((s) => [s.key, s.score])).toEqual(rowScores(rows[0]!));
    const c = emptyStep();
    for (const r of rows) applyStepRow(c, r, 1);
    const s = stepJson({ step: 3, kind: "train" }, c);
    const mean = (0.5625 + 1) / 2;
    expect(s.mean_reward).toBeCloseTo(mean, 9);
    expect(s.mean_rewards[TOTAL_KEY]).toBe(s.mean_reward);
    expect(s.std_reward).toBeCloseTo(Math.sqrt(((0.5625 - mean) ** 2 + (1 - mean) ** 2) / 2), 8);
    // taking a row back leaves the numbers of the others exactly
    applyStepRow(c, rows[0]!, -1);
    expect(stepJson({ step: 3, kind: "train" }, c)).toMatchObject({ mean_reward: 1, std_reward: 0 });
  });
});

// The pure part of rollout groups (src/protocol/registry/groups.ts): what counts, what does not, advantages.
import { describe, expect, it } from "vitest";
import { advantageOnReward, advantagesOf, groupSummary } from "../../src/protocol/registry/groups.js";

const r = (status: "live" | "finished" | "failed" | "finish_refused", score: number | null, task = "t") => ({
  status,
  task,
  rewards: score === null ? null : { acc: { score, weight: 1 } },
});

describe("groupSummary", () => {
  it("counts by status; rewards over finished rollouts only; population std", () => {
    const g = groupSummary("g", [r("finished", 1), r("finished", 0), r("failed", null), r("live", null)]);
    expect(g).toMatchObject({
      size: 4,
      finished: 2,
      failed: 1,
      live: 1,
      complete: false,
      zeroVariance: false,
      task: "t",
      spread: 1,
    });
    expect(g.rewards.acc).toEqual({ mean: 0.5, std: 0.5, min: 0, max: 1 });
    expect([g.mean_reward, g.std_reward]).toEqual([0.5, 0.5]);
  });

  it("the reward is the trainer's total: spread, zero variance and GRPO's advantage are on it, not per key", () => {
    // both rollouts total 1.125 with different keys: per key they differ, on the total there is no signal
    const a = {
      status: "finished" as const,
      task: "t",
      rewards: { c: { score: 1, weight: 1 }, f: { score: 0.5, weight: 0.25 } },
    };
    const b = {
      status: "finished" as const,
      task: "t",
      rewards: { c: { score: 0.125, weight: 1 }, f: { score: 1, weight: 1 } },
    };
    const g = groupSummary("g", [a, b]);
    expect([g.mean_reward, g.std_reward, g.spread, g.zeroVariance]).toEqual([1.125, 0, 0, true]);
    expect(g.rewards.c).toEqual({ mean: 0.5625, std: 0.4375, min: 0.125, max: 1 });
    expect(advantageOnReward(a, g)).toEqual({ raw: 0, normalized: null });
    expect(advantagesOf(a, g).c).toEqual({ raw: 0.4375, normalized: 1 });
    // a multi-trace rollout counts the mean over its rewarded traces; a reward-less trace is skipped
    const multi = { status: "finished" as const, task: "t", rewards: null, trace_rewards: [{ c: 1 }, null, { c: 0 }] };
    const g2 = groupSummary("g", [multi, b]);
    expect(g2.mean_reward).toBe((0.5 + 1.125) / 2);
    expect(advantageOnReward(multi, g2)).toEqual({ raw: 0.5 - 0.8125, normalized: -1 });
  });

  it("zero variance: complete, at least two finished with rewards, their rewards equal", () => {
    expect(groupSummary("g", [r("finished", 1), r("finished", 1), r("failed", null)]).zeroVariance).toBe(true);
    expect(groupSummary("g", [r("finished", 1)]).zeroVariance, "one rollout is no comparison").toBe(false);
    expect(
      groupSummary("g", [r("finished", 1), r("finished", 1), r("finish_refused", null)]).zeroVariance,
      "still open",
    ).toBe(false);
    expect(groupSummary("g", [r("finished", null), r("finished", null)]).zeroVariance, "no rewards").toBe(false);
    expect(groupSummary("g", [r("finished", 1), r("finished", 0.5)]).zeroVariance).toBe(false);
  });

  it("advantages: reward − mean, normalised by std only where std is not 0", () => {
    const g = groupSummary("g", [r("finished", 1), r("finished", 0), r("finished", 0.5)]);
    const a = advantagesOf({ rewards: { acc: { score: 1, weight: 1 } } }, g).acc!;
    expect(a.raw).toBeCloseTo(0.5, 12);
    expect(a.normalized).toBeCloseTo(0.5 / Math.sqrt(1 / 6), 12);
    const flat = groupSummary("g", [r("finished", 1), r("finished", 1)]);
    expect(advantagesOf({ rewards: { acc: { score: 1, weight: 1 } } }, flat)).toEqual({
      acc: { raw: 0, normalized: null },
    });
    expect(advantagesOf({ rewards: null }, g)).toEqual({});
    expect(advantageOnReward({ rewards: { acc: { score: 1, weight: 1 } } }, g)).toEqual(a);
  });
});

// The pure part of rollout groups (src/protocol/registry/groups.ts): what counts, what does not, advantages.
import { describe, expect, it } from "vitest";
import { advantagesOf, groupSummary } from "../../src/protocol/registry/groups.js";

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
  });

  it("zero variance: complete, at least two finished with rewards, every key equal", () => {
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
    const a = advantagesOf({ acc: { score: 1, weight: 1 } }, g).acc!;
    expect(a.raw).toBeCloseTo(0.5, 12);
    expect(a.normalized).toBeCloseTo(0.5 / Math.sqrt(1 / 6), 12);
    const flat = groupSummary("g", [r("finished", 1), r("finished", 1)]);
    expect(advantagesOf({ acc: { score: 1, weight: 1 } }, flat)).toEqual({ acc: { raw: 0, normalized: null } });
    expect(advantagesOf(null, g)).toEqual({});
  });
});

// The pure parts of the finished-only reward statistics and the two trends: kept by adding and
// taking back parts in any order, they equal a recount, to the unit (aggregates.ts,
// reward-trend.ts, zero-variance-trend.ts); the run timeline's points (run-timeline.ts); the API forms; and the dashboard's choices from them.
import { describe, expect, it } from "vitest";
import { KeyTones, primaryRewardKey, rewardKeyOrder, shownRewards } from "../../dashboard/src/reward-choice.js";
import { stepPath } from "../../dashboard/src/step-path.js";
import {
  applyContribution,
  contributionOf,
  emptyCounters,
  finishedMeans,
  minuteOf,
  recount,
  SCORE_UNIT,
  THROUGHPUT_MINUTES,
} from "../../src/protocol/registry/aggregates.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import {
  type RewardMinute,
  recountRewardMinutes,
  rewardMinutesOf,
  rewardTrendOf,
} from "../../src/protocol/registry/reward-trend.js";
import { TIMELINE_POINTS, timelineFrame, timelineOf, timelineWidth } from "../../src/protocol/registry/run-timeline.js";
import {
  completedMinute,
  type GroupMinute,
  zeroVarianceTrendOf,
} from "../../src/protocol/registry/zero-variance-trend.js";
import { indexRow, weightOne } from "../support/index-rows.js";

const STATUSES: IndexRow["status"][] = ["live", "finished", "failed", "finish_refused"];
const NOW = 1_800_000_000_000;

function rng(seed: number): () => number {
  return () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
}

function row(i: number, status: IndexRow["status"], scores: Record<string, number>, ended: number | null): IndexRow {
  return indexRow({ id: `r:${i}`, run: "r", status, ended, rewards: weightOne(scores) });
}

/** Random rows over the last 70 minutes, with scores whose float sums drift (0.1 + 0.2). */
function randomRow(rand: () => number, i: number): IndexRow {
  const status = STATUSES[Math.floor(rand() * 4)]!;
  const scores: Record<string, number> = { correct: Math.round(rand() * 10) / 10 };
  if (rand() < 0.5) scores.format = rand() * 1.4 - 0.2;
  return row(
    i,
    status,
    scores,
    status === "finished" || status === "failed" ? NOW - Math.floor(rand() * 70) * 60_000 : null,
  );
}

describe("finished-only reward counters", () => {
  it("count only finished rows, and equal a recount after any order of add and take back", () => {
    const rand = rng(11);
    const held = new Map<number, IndexRow>();
    const kept = emptyCounters();
    /** The reward minutes as trend-store.ts keeps them: add, take back, drop at 0. */
    const minutes = new Map<string, RewardMinute>();
    const apply = (r: IndexRow, sign: 1 | -1) => {
      const x = contributionOf(r);
      applyContribution(kept, x, sign);
      for (const p of rewardMinutesOf(x)) {
        const k = `${p.minute} ${p.key}`;
        const m = minutes.get(k) ?? { minute: p.minute, key: p.key, n: 0, units: 0 };
        m.n += sign;
        m.units += sign * p.units;
        if (m.n === 0) minutes.delete(k);
        else minutes.set(k, m);
      }
    };
    for (let step = 0; step < 3000; step++) {
      const i = Math.floor(rand() * 150);
      const old = held.get(i);
      if (old) apply(old, -1);
      if (rand() < 0.15) {
        held.delete(i);
        continue;
      }
      const next = randomRow(rand, i);
      held.set(i, next);
      apply(next, 1);
    }
    const { counters } = recount(held.values());
    expect(kept.finished_rewards).toEqual(counters.finished_rewards);
    const finished = [...held.values()].filter((r) => r.status === "finished");
    expect(kept.finished_rewards.correct!.count).toBe(finished.length);
    expect(kept.finished_rewards.correct!.count).toBeLessThan(kept.rewards.correct!.count);
    const sort = (xs: RewardMinute[]) => [...xs].sort((a, b) => a.minute - b.minute || (a.key < b.key ? -1 : 1));
    expect(sort([...minutes.values()])).toEqual(sort(recountRewardMinutes([...held.values()].map(contributionOf))));
    // units are integers: no drift however many adds and take-backs
    for (const m of minutes.values()) expect(Number.isInteger(m.units)).toBe(true);
  });

  it("finishedMeans: per key, over the finished rows only", () => {
    const { counters } = recount([
      row(1, "finished", { a: 0.5 }, NOW),
      row(2, "failed", { a: 0, b: 1 }, NOW),
      row(3, "finished", { a: 1 }, NOW),
    ]);
    // "reward" is the episode's total (rewards.ts: Σ score × weight), kept beside the keys since issue 40
    expect(finishedMeans(counters)).toEqual({ a: 0.75, reward: 0.75 });
  });
});

describe("the reward trend", () => {
  it("per minute of the last hour and per key: finished count and mean; other minutes and statuses left out", () => {
    const last = minuteOf(NOW);
    const rows = [
      row(1, "finished", { a: 0.5 }, NOW),
      row(2, "finished", { a: 1, b: 0 }, NOW - 30_000),
      row(3, "failed", { a: 0 }, NOW),
      row(4, "finished", { a: 0.25 }, NOW - 59 * 60_000),
      row(5, "finished", { a: 0.25 }, NOW - 60 * 60_000), // before the window
      row(6, "finished", { a: 0.25 }, NOW + 60_000), // after it
      row(7, "live", { a: 1 }, null),
    ];
    const t = rewardTrendOf(recountRewardMinutes(rows.map(contributionOf)), NOW);
    expect(t.start).toBe(new Date((last - THROUGHPUT_MINUTES + 1) * 60_000).toISOString());
    // "reward": the total (rows 1 and 2 total 0.5 and 1), kept beside the keys since issue 40
    expect(Object.keys(t.keys)).toEqual(["a", "b", "reward"]);
    expect(t.keys.reward!.count.reduce((x, y) => x + y, 0)).toBe(3);
    expect(t.keys.a!.count).toHaveLength(THROUGHPUT_MINUTES);
    const nowSlot = THROUGHPUT_MINUTES - 1;
    const sameMinute = minuteOf(NOW - 30_000) === last;
    expect(t.keys.a!.count[nowSlot]).toBe(sameMinute ? 2 : 1);
    expect(t.keys.a!.mean[0]).toBe(0.25);
    expect(t.keys.a!.count.reduce((x, y) => x + y, 0)).toBe(3);
    expect(t.keys.a!.mean.filter((m) => m !== null)).toHaveLength(sameMinute ? 2 : 3);
    expect(t.keys.b!.mean.filter((m) => m !== null)).toEqual([0]);
  });

  it("means come from integer units: 0.1 + 0.2 over 2 is 0.15", () => {
    const rows = [row(1, "finished", { a: 0.1 }, NOW), row(2, "finished", { a: 0.2 }, NOW)];
    const t = rewardTrendOf(recountRewardMinutes(rows.map(contributionOf)), NOW);
    expect(t.keys.a!.mean.at(-1)).toBe(
      (Math.round(0.1 / SCORE_UNIT) + Math.round(0.2 / SCORE_UNIT)) * SCORE_UNIT * 0.5,
    );
  });
});

describe("the zero-variance trend", () => {
  const last = minuteOf(NOW);

  it("per minute completed and zero; the share; the cumulative share counts every group completed by each minute", () => {
    const minutes = new Map<number, GroupMinute>([
      [last - 100, { complete: 4, zero: 4 }], // before the window: in the cumulative share only
      [last - 59, { complete: 2, zero: 0 }],
      [last - 1, { complete: 2, zero: 1 }],
      [last + 3, { complete: 1, zero: 1 }], // ahead of our clock
    ]);
    const totals = { complete: 9, zero: 6 };
    const window = new Map([...minutes].filter(([m]) => m > last - THROUGHPUT_MINUTES && m <= last));
    const t = zeroVarianceTrendOf(window, totals, { complete: 1, zero: 1 }, NOW);
    expect(t.completed[0]).toBe(2);
    expect(t.completed[58]).toBe(2);
    expect(t.zero_variance[58]).toBe(1);
    expect(t.share[0]).toBe(0);
    expect(t.share[58]).toBe(0.5);
    expect(t.share[1]).toBeNull();
    expect(t.cumulative_share[0]).toBe(4 / 6);
    expect(t.cumulative_share[57]).toBe(4 / 6);
    expect(t.cumulative_share[58]).toBe(5 / 8);
    expect(t.cumulative_share[59]).toBe(5 / 8);
    expect(
      zeroVarianceTrendOf(new Map(), { complete: 0, zero: 0 }, { complete: 0, zero: 0 }, NOW).cumulative_share.every(
        (s) => s === null,
      ),
    ).toBe(true);
  });

  it("a group completes at the minute of its latest end (a member without one counts by its update)", () => {
    expect(
      completedMinute([
        { ended: NOW - 120_000, updated: NOW },
        { ended: NOW - 60_000, updated: NOW },
      ]),
    ).toBe(minuteOf(NOW - 60_000));
    expect(
      completedMinute([
        { ended: null, updated: NOW },
        { ended: NOW - 60_000, updated: NOW },
      ]),
    ).toBe(minuteOf(NOW));
  });
});

describe("the dashboard's choices", () => {
  it("the runs list's reward: `reward` when there is one, else the first key", () => {
    expect(primaryRewardKey({ correct: 1, reward: 0.5 })).toBe("reward");
    expect(primaryRewardKey({ format: 1, correct: 0.5 })).toBe("correct");
    expect(primaryRewardKey({})).toBeNull();
    expect(primaryRewardKey(undefined)).toBeNull();
  });

  it("a run's reward keys in its selects: the trainer's `reward` first (the default), then by name", () => {
    expect(rewardKeyOrder(["format", "correct", "reward"])).toEqual(["reward", "correct", "format"]);
    expect(rewardKeyOrder(["format", "correct", "format"])).toEqual(["correct", "format"]);
    expect(rewardKeyOrder([])).toEqual([]);
  });

  it("a reward key's colour: `reward` the first, each key one slot for the page's life, whichever chart asks first", () => {
    const tones = new KeyTones();
    tones.meet(["format", "correct"]);
    expect([tones.tone("correct"), tones.tone("format"), tones.tone("reward")]).toEqual([1, 2, 0]);
    // a key met later takes the next slot: the others keep theirs
    tones.meet(["accuracy", "correct", "reward"]);
    expect([tones.tone("accuracy"), tones.tone("correct"), tones.tone("format")]).toEqual([3, 1, 2]);
  });

  it("a trend's step line: a level per minute, joined when minutes follow, a gap where one has no value", () => {
    expect(stepPath([null, 1, 0.5, null, 0], 50, (v) => 10 - v * 10)).toBe(
      "M10.0,0.0 L20.0,0.0 L20.0,5.0 L30.0,5.0 M40.0,10.0 L50.0,10.0",
    );
    expect(stepPath([null, null], 50, (v) => v)).toBe("");
  });

  it("the run page's statistics: finished only unless asked to include every episode", () => {
    const { counters, throughput } = recount([row(1, "finished", { a: 1 }, NOW), row(2, "failed", { a: 0 }, NOW)]);
    const a = {
      rewards: { a: { count: counters.rewards.a!.count } },
      finished_rewards: { a: { count: counters.finished_rewards.a!.count } },
    };
    expect(throughput.size).toBe(1);
    expect(shownRewards(a, false).a!.count).toBe(1);
    expect(shownRewards(a, true).a!.count).toBe(2);
  });
});

describe("the run timeline: the whole run time in at most TIMELINE_POINTS points", () => {
  const MIN = 60_000;
  const first = 29_000_000 * MIN + 17_000; // 17 s into a minute

  it("a point is the fewest whole minutes that keep the run within the points", () => {
    expect([1, 120, 121, 240, 241, 600, 601, 1800, 7200, 7201, 172_800].map(timelineWidth)).toEqual([
      1, 1, 2, 2, 5, 5, 10, 15, 60, 120, 1440,
    ]);
    expect(timelineWidth(172_801)).toBe(2880);
    // a young run: one point of one minute; ten minutes in: ten
    expect(timelineFrame(first, first)).toEqual({ from: first / MIN - 17 / 60, width: 1, points: 1 });
    expect(timelineFrame(first, first + 9 * MIN).points).toBe(10);
    for (const span of [1, 59, 120, 121, 1000, 10_000, 100_000]) {
      const f = timelineFrame(first, first + (span - 1) * MIN);
      expect(f.points).toBeLessThanOrEqual(TIMELINE_POINTS);
      expect(f.points * f.width).toBeGreaterThanOrEqual(span);
    }
  });

  it("ended episodes and rewards summed per point; minutes outside the run in the end points; any order of rows", () => {
    const from = minuteOf(first);
    const now = first + 299 * MIN; // 300 minutes: points of 5
    const ended = [
      { minute: from - 3, n: 1 }, // an end stamped before the first row: the first point
      { minute: from, n: 2 },
      { minute: from + 4, n: 1 },
      { minute: from + 5, n: 3 },
      { minute: from + 299, n: 1 },
      { minute: from + 302, n: 2 }, // a clock ahead of ours: the last point
    ];
    const u = (v: number) => Math.round(v / SCORE_UNIT);
    const rewards = [
      { minute: from, key: "reward", n: 2, units: u(1.5) },
      { minute: from + 4, key: "reward", n: 1, units: u(0.25) },
      { minute: from + 7, key: "correct", n: 2, units: u(1) },
      { minute: from + 8, key: "correct", n: 0, units: 0 },
    ];
    const t = timelineOf(first, now, ended, rewards);
    expect(t.start).toBe(new Date(from * MIN).toISOString());
    expect(t.minutes).toBe(5);
    expect(t.ended).toHaveLength(60);
    expect(t.ended.slice(0, 2)).toEqual([4, 3]);
    expect(t.ended.at(-1)).toBe(3);
    expect(t.ended.reduce((a, b) => a + b, 0)).toBe(10);
    expect(Object.keys(t.rewards)).toEqual(["correct", "reward"]);
    expect(t.rewards.reward!.count.slice(0, 2)).toEqual([3, 0]);
    expect(t.rewards.reward!.mean[0]).toBeCloseTo(1.75 / 3, 12);
    expect(t.rewards.reward!.mean[1]).toBeNull();
    expect(t.rewards.correct!.mean.slice(0, 2)).toEqual([null, 0.5]);
    // the index sums each point in SQLite and hands its rows at the point's first minute: the same timeline
    const at = (m: number) => from + Math.min(59, Math.max(0, Math.floor((m - from) / 5))) * 5;
    const summed = new Map<number, number>();
    for (const e of ended) summed.set(at(e.minute), (summed.get(at(e.minute)) ?? 0) + e.n);
    const pre = [...summed].map(([minute, n]) => ({ minute, n })).reverse();
    expect(timelineOf(first, now, pre, [...rewards].reverse())).toEqual(t);
  });
});

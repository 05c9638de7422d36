// A row's progress facts as prime-rl's live table reads them (src/protocol/registry/progress-facts.ts), and the
// training steps' counters (src/protocol/registry/steps.ts): kept by adding and taking back, always equal
// to a recount.
import { describe, expect, it } from "vitest";
import type { IndexRow, IndexStatus, ProgressFacts } from "../../src/protocol/registry/entry.js";
import {
  branchCount,
  callCost,
  messageWords,
  stageOf,
  timingStart,
  turnCount,
} from "../../src/protocol/registry/progress-facts.js";
import {
  bucketQuantile,
  lengthBucket,
  stopTruncates,
  TRUNCATING_STOPS,
} from "../../src/protocol/registry/step-outcomes.js";
import {
  applyStepGroup,
  applyStepRow,
  emptyStep,
  recountSteps,
  type StepCounters,
  stepJson,
  stepKeyOf,
} from "../../src/protocol/registry/steps.js";
import type { Json } from "../../src/protocol/wire/json-view.js";

const span = (start: number, end = 0) => ({ start, end });
/** A finished row's progress facts with this many output tokens. */
const liveWith = (output: number): ProgressFacts => ({
  stage: "done",
  started: 100,
  elapsed: 5,
  branches: 1,
  input_tokens: 10,
  output_tokens: output,
  cost: null,
  last: null,
});
/** verifiers' Timing with every span unset (0.0), then `over`. */
const timing = (over: Record<string, Json> = {}): Json => ({
  start: 100,
  boot: span(0),
  setup: span(0),
  agent: { ...span(0), model: { duration: 0 }, harness: { duration: 0 } },
  finalize: span(0),
  scoring: span(0),
  ...over,
});

describe("stage", () => {
  it("reads the spans in prime-rl's priority order, errors first", () => {
    expect(stageOf(undefined, 0)).toBe("pending");
    expect(stageOf(timing(), 0)).toBe("pending");
    expect(stageOf(timing({ boot: span(101) }), 0)).toBe("boot");
    expect(stageOf(timing({ boot: span(101, 102), setup: span(102) }), 0)).toBe("setup");
    expect(stageOf(timing({ setup: span(102, 103), agent: span(103) }), 0)).toBe("running");
    expect(stageOf(timing({ agent: span(103, 110), finalize: span(111) }), 0)).toBe("finalize");
    // scoring started before finalize (as in the golden chat_basic): still scoring, by priority
    expect(stageOf(timing({ finalize: span(111), scoring: span(109) }), 0)).toBe("scoring");
    expect(stageOf(timing({ scoring: span(109, 112) }), 0)).toBe("done");
    expect(stageOf(timing({ scoring: span(109, 112) }), 1)).toBe("error");
    expect(stageOf(null, 2)).toBe("error");
    expect(timingStart(timing())).toBe(100);
    expect(timingStart(timing({ start: 0 }))).toBeNull();
    expect(timingStart("soon")).toBeNull();
  });
});

describe("branches, cost, words", () => {
  it("branches are the nodes no node names as its parent", () => {
    expect(branchCount([])).toBe(0);
    expect(branchCount([null])).toBe(1);
    expect(branchCount([null, 0, 1, 2])).toBe(1);
    // a fork at node 1: two leaves
    expect(branchCount([null, 0, 1, 1])).toBe(2);
    // two roots (a rewritten context starts again)
    expect(branchCount([null, 0, null, 2, 3])).toBe(2);
    // a parent outside the trace makes no node a parent: both are leaves
    expect(branchCount([null, 7])).toBe(2);
  });

  it("turns are the assistant nodes of every trace, as prime-rl counts them; an unknown role: not counted", () => {
    expect(turnCount([])).toBe(0);
    // system, user, assistant, tool, assistant: 2 turns (5 nodes; calls do not enter)
    expect(turnCount(["system", "user", "assistant", "tool", "assistant"])).toBe(2);
    // two traces' roles in a row: summed, as verifiers' Episode.num_turns sums its traces'
    expect(turnCount(["user", "assistant", "user", "assistant", "assistant"])).toBe(3);
    // a node without a role is no turn; a role that cannot be read makes the count unknown
    expect(turnCount([null, "assistant"])).toBe(1);
    expect(turnCount(["assistant", undefined])).toBeNull();
  });

  it("cost is the calls' usage.cost where given", () => {
    expect(callCost({ usage: { prompt_tokens: 3, cost: 0.00012 } })).toBe(0.00012);
    expect(callCost({ usage: { prompt_tokens: 3 } })).toBeNull();
    expect(callCost({ usage: { cost: null } })).toBeNull();
    expect(callCost({ usage: { cost: "NaN" } })).toBeNull();
    expect(callCost(null)).toBeNull();
  });

  it("words: str content or the parts' texts, whitespace collapsed, cut at 160 code points", () => {
    expect(messageWords({ role: "assistant", content: "  the answer\n\n is\t42 " })).toBe("the answer is 42");
    expect(
      messageWords({
        role: "assistant",
        content: [{ type: "text", text: "a" }, { type: "image" }, { type: "text", text: " b " }],
      }),
    ).toBe("a b");
    expect(messageWords({ role: "assistant", content: "   " })).toBeNull();
    expect(messageWords({ role: "assistant", content: null })).toBeNull();
    const long = "🙂".repeat(200);
    const cut = messageWords({ content: long })!;
    expect(Array.from(cut)).toHaveLength(160);
    expect(cut).toBe("🙂".repeat(160));
  });
});

describe("steps: kept counters equal a recount", () => {
  type Row = Pick<IndexRow, "status" | "calls" | "turns" | "tokens" | "rewards" | "dispatch"> &
    Partial<Pick<IndexRow, "error" | "stop_condition" | "truncated" | "live">>;
  const STATUSES: IndexStatus[] = ["live", "finished", "failed", "finish_refused"];

  /** A small deterministic generator (the same sequence on every run). */
  function rng(seed: number) {
    let s = seed >>> 0;
    return () => {
      s = (s * 1664525 + 1013904223) >>> 0;
      return s / 2 ** 32;
    };
  }

  it("over 2,000 random updates, creates and deletes across steps, kinds and groups", () => {
    const r = rng(7);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    const rows = new Map<string, Row>();
    const kept = new Map<string, StepCounters>();
    const groups = new Map<string, { step: number; kind: string; zero: boolean }>();
    const at = (row: Row) => {
      const key = stepKeyOf(row);
      if (!key) return null;
      const k = `${key.step}\u0000${key.kind}`;
      if (!kept.has(k)) kept.set(k, emptyStep());
      return kept.get(k)!;
    };
    for (let i = 0; i < 2000; i++) {
      const id = `e${Math.floor(r() * 120)}`;
      const old = rows.get(id);
      if (old) at(old) && applyStepRow(at(old)!, old, -1);
      if (r() < 0.1) {
        rows.delete(id);
      } else {
        const withStep = r() < 0.85;
        const row: Row = {
          status: pick(STATUSES),
          calls: Math.floor(r() * 20),
          tokens: Math.floor(r() * 5000),
          rewards:
            r() < 0.8
              ? {
                  correct: { score: pick([0, 0.5, 1, 0.3333333333333333]), weight: 1 },
                  ...(r() < 0.5 ? { fmt: r() } : {}),
                }
              : null,
          dispatch: withStep
            ? {
                kind: pick(["train", "eval"]),
                step: Math.floor(r() * 6),
                ...(r() < 0.7 ? { policy_version: Math.floor(r() * 6) } : {}),
              }
            : null,
          // how it ended, and its response length (short and long ones, and rows of releases without progress facts)
          error: r() < 0.2 ? "boom" : null,
          stop_condition: pick(["max_turns", "agent_completed", "max_output_tokens", null]),
          truncated: r() < 0.2,
          live: r() < 0.1 ? null : liveWith(Math.floor(r() < 0.5 ? r() * 300 : r() * 40_000)),
        };
        // turns from the calls (no draw, so the sequence stays): every fifth not counted, as an old row's
        row.turns = row.calls % 5 === 0 ? null : Math.ceil(row.calls / 2);
        rows.set(id, row);
        const c = at(row);
        if (c) applyStepRow(c, row, 1);
      }
      // complete groups come and go too
      if (r() < 0.2) {
        const g = `g${Math.floor(r() * 20)}`;
        const before = groups.get(g);
        if (before)
          applyStepGroup(
            at({ dispatch: { step: before.step, kind: before.kind } } as unknown as Row)!,
            before.zero,
            -1,
          );
        if (r() < 0.7) {
          const now = { step: Math.floor(r() * 6), kind: pick(["train", "eval"]), zero: r() < 0.4 };
          groups.set(g, now);
          applyStepGroup(at({ dispatch: { step: now.step, kind: now.kind } } as unknown as Row)!, now.zero, 1);
        } else groups.delete(g);
      }
    }
    const recounted = recountSteps(
      rows.values(),
      [...groups.values()].map((g) => ({ key: { step: g.step, kind: g.kind }, zero: g.zero })),
    );
    const nonEmpty = [...kept.entries()].filter(([, c]) => c.episodes > 0 || c.groups_complete > 0);
    expect(nonEmpty.length).toBe(recounted.size);
    expect(nonEmpty.length).toBeGreaterThan(5);
    for (const [k, c] of nonEmpty) {
      const [step, kind] = k.split("\u0000");
      const want = recounted.get(k)!;
      expect(want, k).toBeDefined();
      expect(stepJson({ step: Number(step), kind: kind! }, c)).toEqual(stepJson(want.key, want.counters));
    }
  });

  it("a step's JSON: means over the finished, staleness over those naming both, the share over complete groups", () => {
    const c = emptyStep();
    applyStepRow(
      c,
      {
        status: "finished",
        calls: 4,
        turns: 4,
        tokens: 100,
        rewards: { correct: { score: 1, weight: 1 } },
        dispatch: { step: 5, policy_version: 4, kind: "train" },
      },
      1,
    );
    applyStepRow(
      c,
      {
        status: "finished",
        calls: 2,
        turns: 2,
        tokens: 50,
        rewards: { correct: { score: 0, weight: 1 } },
        dispatch: { step: 5, policy_version: 2, kind: "train" },
      },
      1,
    );
    applyStepRow(
      c,
      {
        status: "failed",
        calls: 0,
        // not counted (a row of an older release): left out of the mean turns, not a 0 in it
        turns: null,
        tokens: 0,
        rewards: { correct: { score: 1, weight: 1 } },
        dispatch: { step: 5, kind: "train" },
      },
      1,
    );
    applyStepGroup(c, true, 1);
    applyStepGroup(c, false, 1);
    expect(stepJson({ step: 5, kind: "train" }, c)).toEqual({
      step: 5,
      kind: "train",
      episodes: 3,
      live: 0,
      finished: 2,
      failed: 1,
      // the trainer's reward (1 and 0 over the finished) beside each key's mean; std over the same two
      mean_reward: 0.5,
      std_reward: 0.5,
      mean_rewards: { correct: 0.5, reward: 0.5 },
      zero_variance_share: 0.5,
      groups: { complete: 2, zero_variance: 1 },
      mean_turns: 3,
      mean_tokens: 50,
      staleness: { mean: 2, max: 3 },
      // rows without a stop condition, a timeout, an error or progress facts: only the failed one errored
      ended: { count: 3, truncated: 0, timeouts: 0, errored: 0 },
      truncated_share: 0,
      timeout_share: 0,
      error_share: 0,
      output_tokens: { mean: null, p90: null },
    });
  });

  it("how a step's rollouts ended and how long they answered: shares over the ended, lengths over the finished", () => {
    const c = emptyStep();
    const base = { calls: 1, tokens: 10, rewards: null, dispatch: { step: 2, kind: "train" } };
    // ten finished rollouts answering 10, 20, …, 100 tokens; two of them truncated (the trainer's is_truncated)
    for (let i = 1; i <= 10; i++)
      applyStepRow(
        c,
        {
          ...base,
          status: "finished",
          error: null,
          is_truncated: i === 3 || i === 7,
          is_timeout: i === 5,
          live: liveWith(i * 10),
        },
        1,
      );
    // a failed one (errored; its length does not count), one timed out, and a live one (counts in none)
    applyStepRow(c, { ...base, status: "failed", error: "sandbox crashed", is_timeout: true, live: liveWith(5000) }, 1);
    applyStepRow(c, { ...base, status: "live", error: null, is_truncated: true, live: liveWith(7) }, 1);
    const j = stepJson({ step: 2, kind: "train" }, c);
    expect(j.ended).toEqual({ count: 11, truncated: 2, timeouts: 2, errored: 1 });
    expect([j.truncated_share, j.timeout_share, j.error_share]).toEqual([2 / 11, 2 / 11, 1 / 11]);
    // mean 55; p90 by nearest rank: the 9th of 10 sorted lengths
    expect(j.output_tokens).toEqual({ mean: 55, p90: 90 });
    // taking every row back leaves nothing of them
    const back = structuredClone(c);
    for (let i = 1; i <= 10; i++)
      applyStepRow(
        back,
        {
          ...base,
          status: "finished",
          error: null,
          is_truncated: i === 3 || i === 7,
          is_timeout: i === 5,
          live: liveWith(i * 10),
        },
        -1,
      );
    expect(back.lengths).toBeUndefined();
    expect(back.truncated).toBeUndefined();
  });

  it("long responses count in buckets of their 8 leading bits: exact below 256, at most 1/128 under above", () => {
    expect([0, 1, 255].map(lengthBucket)).toEqual([0, 1, 255]);
    expect([256, 257, 258, 511, 512, 515, 516, 40_000].map(lengthBucket)).toEqual([
      256, 256, 258, 510, 512, 512, 516, 39_936,
    ]);
    for (let n = 256; n < 300_000; n += 997) {
      const b = lengthBucket(n);
      expect(b).toBeLessThanOrEqual(n);
      expect(n - b).toBeLessThan(n / 128);
    }
    // nearest rank over the buckets: with 3 values, p90 is the largest; with none, null
    expect(bucketQuantile({ "5": 1, "9": 1, "7": 1 }, 0.9)).toBe(9);
    expect(bucketQuantile({ "5": 9, "9": 1 }, 0.9)).toBe(5);
    expect(bucketQuantile({}, 0.9)).toBeNull();
    // the trainer's truncating stop conditions, and none else
    expect([...TRUNCATING_STOPS].filter(stopTruncates)).toHaveLength(5);
    expect(["agent_completed", "max_turns_reached", null, undefined].some(stopTruncates)).toBe(false);
  });
});

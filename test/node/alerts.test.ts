// A run's alerts, the pure parts (src/protocol/alerts/): the body read strictly within its budgets,
// the rules decided from the index's numbers, a threshold's crossing and clearing, the payload (its
// size budget, links, Slack text), its signature against node:crypto's HMAC, and the retry schedule.
import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { ALERT_BUDGETS, type AlertRule, parseAlerts, type RateKind } from "../../src/protocol/alerts/config.js";
import {
  crossing,
  endedOutcome,
  flagFinding,
  type Outcome,
  rateCheck,
  rewardDropCheck,
  zeroVarianceCheck,
} from "../../src/protocol/alerts/evaluate.js";
import { alertPayload, retryDelay, signBody } from "../../src/protocol/alerts/payload.js";
import { RelayError } from "../../src/protocol/http/errors.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import type { StepJson } from "../../src/protocol/registry/steps.js";

const hook = { url: "https://hooks.example.com/relay", secret: "s".repeat(16) };

function refusal(body: unknown): { field: string | undefined; message: string } {
  try {
    parseAlerts(body);
  } catch (e) {
    expect(e).toBeInstanceOf(RelayError);
    expect((e as RelayError).code).toBe("bad_alerts");
    expect((e as RelayError).status).toBe(400);
    return { field: (e as RelayError).field, message: (e as RelayError).message };
  }
  throw new Error(`accepted: ${JSON.stringify(body)}`);
}

describe("parseAlerts", () => {
  it("reads webhooks and each kind of rule, with the defaults filled in", () => {
    const c = parseAlerts({
      webhooks: [hook],
      rules: [
        { id: "any-flag", kind: "flag" },
        { id: "zv", kind: "zero_variance_share", above: 0.5 },
        { id: "fail", kind: "failure_rate", above: 0.2, window: 10, env: "gsm8k" },
        { id: "drop", kind: "reward_drop", by: 0.1 },
      ],
    });
    expect(c.webhooks).toEqual([hook]);
    expect(c.rules).toEqual([
      { id: "any-flag", description: "", kind: "flag", flags: null },
      { id: "zv", description: "", kind: "zero_variance_share", above: 0.5, min_groups: 1, step_kind: null },
      { id: "fail", description: "", kind: "failure_rate", above: 0.2, window: 10, env: "gsm8k" },
      { id: "drop", description: "", kind: "reward_drop", by: 0.1, steps: 3, min_rollouts: 1, step_kind: null },
    ]);
    expect(parseAlerts({ webhooks: [], rules: [] })).toEqual({ webhooks: [], rules: [] });
  });

  it("refuses what is outside the shape or a budget, naming the field", () => {
    const many = (n: number, f: (i: number) => unknown) => Array.from({ length: n }, (_, i) => f(i));
    const cases: Array<[unknown, string | undefined]> = [
      [[], undefined],
      [{ webhooks: [hook] }, "rules"],
      [{ webhooks: [hook], rules: [], extra: 1 }, "extra"],
      [{ webhooks: [{ ...hook, url: "ftp://x.example.com/" }], rules: [] }, "webhooks[0].url"],
      [{ webhooks: [{ ...hook, url: "/relative" }], rules: [] }, "webhooks[0].url"],
      [{ webhooks: [{ ...hook, url: "https://u:p@x.example.com/" }], rules: [] }, "webhooks[0].url"],
      [{ webhooks: [{ ...hook, url: `https://x.example.com/${"a".repeat(2048)}` }], rules: [] }, "webhooks[0].url"],
      [{ webhooks: [{ ...hook, secret: "short" }], rules: [] }, "webhooks[0].secret"],
      [{ webhooks: [hook, hook], rules: [] }, "webhooks[1].url"],
      [
        {
          webhooks: many(ALERT_BUDGETS.webhooks + 1, (i) => ({ ...hook, url: `https://x.example.com/${i}` })),
          rules: [],
        },
        "webhooks",
      ],
      [{ webhooks: [hook], rules: many(ALERT_BUDGETS.rules + 1, (i) => ({ id: `r${i}`, kind: "flag" })) }, "rules"],
      [{ webhooks: [], rules: [{ id: "f", kind: "flag" }] }, "webhooks"],
      [{ webhooks: [hook], rules: [{ id: "Bad Id", kind: "flag" }] }, "rules[0].id"],
      [{ webhooks: [hook], rules: [{ id: "x", kind: "loudness" }] }, "rules[0].kind"],
      [{ webhooks: [hook], rules: [{ id: "x", kind: "flag", above: 1 }] }, "rules[0].above"],
      [{ webhooks: [hook], rules: [{ id: "x", kind: "zero_variance_share", above: 1 }] }, "rules[0].above"],
      [{ webhooks: [hook], rules: [{ id: "x", kind: "failure_rate", above: 0.1, window: 0 }] }, "rules[0].window"],
      [{ webhooks: [hook], rules: [{ id: "x", kind: "failure_rate", above: 0.1, window: 1001 }] }, "rules[0].window"],
      [{ webhooks: [hook], rules: [{ id: "x", kind: "reward_drop", by: 0 }] }, "rules[0].by"],
      [
        {
          webhooks: [hook],
          rules: [
            { id: "x", kind: "flag" },
            { id: "x", kind: "flag" },
          ],
        },
        "rules[1].id",
      ],
    ];
    for (const [body, field] of cases) expect(refusal(body).field, JSON.stringify(body).slice(0, 80)).toBe(field);
  });
});

describe("crossing", () => {
  it("fires once when over, clears only when back, and waits while it cannot tell", () => {
    let crossed = false;
    const moves: string[] = [];
    for (const over of [null, false, true, true, null, true, false, false, true]) {
      const m = crossing(crossed, over);
      if (m === "fire") crossed = true;
      if (m === "clear") crossed = false;
      moves.push(m ?? "-");
    }
    expect(moves).toEqual(["-", "-", "fire", "-", "-", "-", "clear", "-", "fire"]);
  });
});

const step = (over: Partial<StepJson>): StepJson => ({
  step: 3,
  kind: "train",
  episodes: 8,
  live: 0,
  finished: 8,
  failed: 0,
  mean_reward: 0.5,
  std_reward: 0.1,
  mean_rewards: { reward: 0.5 },
  zero_variance_share: null,
  groups: { complete: 0, zero_variance: 0 },
  mean_turns: 1,
  mean_tokens: 10,
  staleness: { mean: null, max: null },
  ended: { count: 8, truncated: 0, timeouts: 0, errored: 0 },
  truncated_share: 0,
  timeout_share: 0,
  error_share: 0,
  output_tokens: { mean: 10, p90: 10 },
  ...over,
});

describe("the threshold rules", () => {
  it("zero-variance share: over above the share once min_groups are complete", () => {
    const rule = {
      id: "zv",
      description: "",
      kind: "zero_variance_share",
      above: 0.5,
      min_groups: 4,
      step_kind: null,
    } as const;
    const s = (complete: number, zero: number) =>
      step({ groups: { complete, zero_variance: zero }, zero_variance_share: complete ? zero / complete : null });
    expect(zeroVarianceCheck(rule, s(2, 2)).over).toBeNull();
    expect(zeroVarianceCheck(rule, s(4, 2)).over).toBe(false);
    const c = zeroVarianceCheck(rule, s(4, 3));
    expect(c.over).toBe(true);
    expect(c.finding).toMatchObject({ subject: "step:3:train", value: 0.75, threshold: 0.5 });
    expect(c.finding.evidence.step).toBe(3);
  });

  it("reward drop: below the previous steps' mean by more than `by`", () => {
    const rule = {
      id: "drop",
      description: "",
      kind: "reward_drop",
      by: 0.2,
      steps: 2,
      min_rollouts: 4,
      step_kind: null,
    } as const;
    const prev = [
      step({ step: 2, mean_reward: 0.8 }),
      step({ step: 1, mean_reward: 0.6 }),
      step({ step: 0, mean_reward: 0 }),
    ];
    // baseline: (0.8 + 0.6) / 2 = 0.7 (step 0 is past `steps`)
    expect(rewardDropCheck(rule, step({ mean_reward: 0.45 }), prev).over).toBe(true);
    expect(rewardDropCheck(rule, step({ mean_reward: 0.55 }), prev).over).toBe(false);
    expect(rewardDropCheck(rule, step({ mean_reward: 0.1, finished: 3 }), prev).over).toBeNull();
    expect(rewardDropCheck(rule, step({ mean_reward: 0.1 }), []).over).toBeNull();
    expect(rewardDropCheck(rule, step({ mean_reward: 0.45 }), prev).finding.threshold).toBeCloseTo(0.5, 12);
  });

  it("rates: over the env's last `window` ended rollouts, once it has that many", () => {
    const rule: Extract<AlertRule, { kind: RateKind }> = {
      id: "fail",
      description: "",
      kind: "failure_rate",
      above: 0.25,
      window: 4,
      env: null,
    };
    const o = (episode: string, failed: boolean): Outcome => ({
      episode,
      env: "e",
      failed,
      timeout: false,
      truncated: false,
    });
    expect(rateCheck(rule, "e", [o("a", true), o("b", true)]).over).toBeNull();
    expect(rateCheck(rule, "e", [o("a", true), o("b", false), o("c", false), o("d", false)]).over).toBe(false);
    const c = rateCheck(rule, "e", [o("a", true), o("b", true), o("c", false), o("d", false), o("e", true)]);
    expect(c.over).toBe(true);
    expect(c.finding.value).toBe(0.5);
    expect(c.finding.evidence.episodes).toEqual(["a", "b"]);
  });

  it("what each rule kind says reads as a sentence: the rollouts counted, the verb agreeing", () => {
    const rate = (kind: RateKind): Extract<AlertRule, { kind: RateKind }> => ({
      id: kind,
      description: "",
      kind,
      above: 0.1,
      window: 10,
      env: null,
    });
    const o = (i: number, hit: boolean): Outcome => ({
      episode: `r:${i}`,
      env: "gsm8k",
      failed: hit,
      timeout: hit,
      truncated: hit,
    });
    const ten = (hits: number) => Array.from({ length: 10 }, (_, i) => o(i, i < hits));
    const what = (kind: RateKind, hits: number, env = "gsm8k") => rateCheck(rate(kind), env, ten(hits)).finding.what;
    expect(what("truncation_rate", 2)).toBe("2 of the last 10 rollouts of env gsm8k were truncated (20%, above 10%)");
    expect(what("truncation_rate", 1)).toBe("1 of the last 10 rollouts of env gsm8k was truncated (10%, above 10%)");
    expect(what("failure_rate", 2)).toBe("2 of the last 10 rollouts of env gsm8k failed (20%, above 10%)");
    expect(what("timeout_rate", 3, "")).toBe("3 of the last 10 rollouts without an env timed out (30%, above 10%)");
    expect(rateCheck(rate("failure_rate"), "gsm8k", [o(0, true)]).finding.what).toBe(
      "1 of the last 1 rollout of env gsm8k failed (100%, above 10%)",
    );

    const zv = { id: "zv", description: "", kind: "zero_variance_share", above: 0.1, min_groups: 1, step_kind: null };
    const groups = (complete: number, zero: number) =>
      zeroVarianceCheck(
        zv as Extract<AlertRule, { kind: "zero_variance_share" }>,
        step({ groups: { complete, zero_variance: zero }, zero_variance_share: zero / complete }),
      ).finding.what;
    expect(groups(8, 3)).toBe("step 3 (train): 3 of 8 complete groups have zero reward variance (37.5%, above 10%)");
    expect(groups(8, 1)).toBe("step 3 (train): 1 of 8 complete groups has zero reward variance (12.5%, above 10%)");

    const drop = { id: "d", description: "", kind: "reward_drop", by: 0.2, steps: 3, min_rollouts: 1, step_kind: null };
    const dropped = (prev: StepJson[]) =>
      rewardDropCheck(drop as Extract<AlertRule, { kind: "reward_drop" }>, step({ mean_reward: 0.25 }), prev).finding
        .what;
    expect(dropped([step({ step: 2, mean_reward: 0.8 }), step({ step: 1, mean_reward: 0.6 })])).toBe(
      "step 3 (train): mean reward 0.25 is more than 0.2 below 0.7, the mean of the previous 2 steps",
    );
    expect(dropped([step({ step: 2, mean_reward: 0.8 })])).toBe(
      "step 3 (train): mean reward 0.25 is more than 0.2 below 0.8, the previous step's",
    );

    const flagRule = { id: "f", description: "", kind: "flag", flags: null } as const;
    const flagged = flagFinding(flagRule, { id: "r:7", dispatch: null } as IndexRow, {
      rule: "quotes-grader",
      trace: null,
      node: null,
      excerpt: "x",
    });
    expect(flagged.what).toBe("rollout r:7 was flagged by quotes-grader");
  });

  it("an outcome counts once, when its row ends", () => {
    const row = (status: IndexRow["status"], extra: Partial<IndexRow> = {}) =>
      ({ id: "r:a", status, dispatch: { env: "math" }, ...extra }) as IndexRow;
    expect(endedOutcome(row("live"), null)).toBeNull();
    // a row as the index keeps it: the trainer's truncation and the timeout by their names
    const kept = row("finished", { stop_condition: "max_turns", is_truncated: true, is_timeout: true });
    expect(endedOutcome(kept, row("live"))).toEqual({
      episode: "r:a",
      env: "math",
      failed: false,
      timeout: true,
      truncated: true,
    });
    // cut at `length` without timing out; a timeout without truncation (an older episode's alias `truncated`)
    expect(endedOutcome(row("finished", { is_truncated: true, is_timeout: false }), null)).toMatchObject({
      timeout: false,
      truncated: true,
    });
    expect(endedOutcome(row("finished", { truncated: true }), null)).toMatchObject({ timeout: true, truncated: false });
    expect(endedOutcome(row("finished"), row("finished"))).toBeNull();
    expect(endedOutcome(row("failed"), null)?.failed).toBe(true);
  });
});

describe("the payload", () => {
  const rule = { id: "any-flag", description: "", kind: "flag", flags: null } as const;
  const finding = (episodes: string[], excerpt: string) => ({
    rule,
    subject: "flag:x:r:a",
    what: "rollout r:a was flagged by x",
    value: null,
    threshold: null,
    evidence: { episodes, step: 4, step_kind: "train", env: "math", flag: "x", excerpt },
  });

  it("names the run, the rule, the evidence and links on the given origin, with a Slack text", () => {
    const p = alertPayload(finding(["r:a"], "cat grader.py"), "r", "id-1", "https://relay.example.com", 0);
    expect(p).toMatchObject({
      id: "id-1",
      run: "r",
      rule: { id: "any-flag", kind: "flag" },
      evidence: { episodes: ["r:a"], step: 4, flag: "x", excerpt: "cat grader.py" },
      links: {
        run: "https://relay.example.com/runs/r",
        episodes: [{ id: "r:a", url: "https://relay.example.com/episodes/r%3Aa" }],
      },
      at: "1970-01-01T00:00:00.000Z",
    });
    expect(p.text).toContain("rollout r:a was flagged by x");
    expect(p.text).toContain("<https://relay.example.com/runs/r|Run r>");
  });

  it("stays within its byte budget however long the evidence", () => {
    const ids = Array.from({ length: 50 }, (_, i) => `run:${"x".repeat(120)}${i}`);
    const p = alertPayload(finding(ids, "é".repeat(5000)), "run", "id-2", "https://r.example.com", 0);
    expect(new TextEncoder().encode(JSON.stringify(p)).byteLength).toBeLessThanOrEqual(ALERT_BUDGETS.payloadBytes);
    expect(p.evidence.episodes.length).toBeLessThanOrEqual(ALERT_BUDGETS.evidenceEpisodes);
    expect(p.evidence.excerpt?.length).toBeLessThanOrEqual(ALERT_BUDGETS.excerptChars);
  });
});

describe("signature and retries", () => {
  it("signs with HMAC-SHA256 of the body, as node:crypto computes it", async () => {
    const body = JSON.stringify({ id: "a", text: "é" });
    const expected = createHmac("sha256", hook.secret).update(body).digest("hex");
    expect(await signBody(hook.secret, body)).toBe(`sha256=${expected}`);
    expect(await signBody("another-secret-16", body)).not.toBe(`sha256=${expected}`);
  });

  it("backs off doubling to a cap, then gives up after the budget's attempts", () => {
    const delays = Array.from({ length: ALERT_BUDGETS.attempts }, (_, i) => retryDelay(i + 1));
    expect(delays.slice(0, 4)).toEqual([1000, 2000, 4000, 8000]);
    expect(delays.at(-1)).toBeNull();
    const waits = delays.filter((d): d is number => d !== null);
    expect(waits).toHaveLength(ALERT_BUDGETS.attempts - 1);
    expect(Math.max(...waits)).toBe(600_000);
  });
});

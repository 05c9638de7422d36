// Issue 39, findings 1 and 2, in the run's index: hostile patterns and hostile text are evaluated
// with work linear in the segment (counted steps: characters × instructions, and no check skipped),
// and the Worker answers /v1/health while they are sent.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { type FlagStore, RESCAN_STEPS } from "../../src/objects/registry/flag-store.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { MAX_INSTRUCTIONS, STATE_STEPS } from "../../src/protocol/flags/pattern.js";
import {
  DEFAULT_RULES,
  noWork,
  parseRules,
  SEGMENT_STEPS,
  segmentFlags,
  type TextWork,
  TURN_STEPS,
  textRules,
} from "../../src/protocol/flags/rules.js";
import { nodeSegments, type Segment, taskSegment } from "../../src/protocol/search/segments.js";
import type { LMap } from "../../src/protocol/wire/lossless.js";
import { delta, m, node, openDelta } from "../support/deltas.js";
import { post, relay } from "./support.js";

const RUN = `linear-${Date.now().toString(36)}`;
const N = 2000;

/** The patterns and a generated family (nested alternations, classes with brackets), each with its worst text. */
const HOSTILE: Array<[string, string]> = [
  ["(a|a)*$", `${"a".repeat(N - 1)}!`],
  [String.raw`(\w|\d)+$`, `${"1".repeat(N - 1)}!`],
  ["(a+[)]?)+$", `${"a".repeat(N - 1)}!`],
  [`${"\\s*".repeat(60)}x`, `${" ".repeat(N - 1)}!`],
  ...[2, 3, 4].map((k): [string, string] => [`(${"(a|a)".repeat(k)}|a)+$`, `${"a".repeat(N - 1)}!`]),
  ...[1, 2, 3].map((k): [string, string] => [`(${"[\\])]|a|\\)".repeat(k)})+b$`, `${"a)]".repeat(N / 3)}`]),
];

async function health(): Promise<number> {
  const r = await exports.default.fetch("http://relay.test/v1/health");
  await r.arrayBuffer();
  return r.status;
}

/** One rollout of `nodes` in `run`, its deltas POSTed with /v1/health asked beside each; the statuses of both. */
async function send(run: string, name: string, nodes: LMap[]): Promise<{ posts: number[]; health: number[] }> {
  const id = `${run}:${name}`;
  const producer = new ProducerCursor(name);
  const out = { posts: [] as number[], health: [] as number[] };
  for (const d of [openDelta(), delta({ nodes })]) {
    const [r, h] = await Promise.all([post(`${id}/deltas`, encodeEnvelope(producer.envelope(d))), health()]);
    out.posts.push(r.status);
    await r.arrayBuffer();
    out.health.push(h);
    producer.acknowledge();
  }
  // the episode's row (and its text) reaches the run's index; health asked while it does
  const [, h] = await Promise.all([runDurableObjectAlarm(env.EPISODES.getByName(id)), health()]);
  out.health.push(h);
  return out;
}

/**
 * The steps the pure module counts for these segments under these rules, taken as one upsert (TURN_STEPS across them):
 * what the index must have counted (its patterns compiled as fresh as these, so their DFAs build the same states).
 */
function expected(rules: ReturnType<typeof textRules>, segments: Segment[]) {
  const work = noWork();
  let left = TURN_STEPS;
  for (const s of segments) {
    const before = work.steps;
    segmentFlags(rules, s, work, Math.min(SEGMENT_STEPS, left));
    left = Math.max(0, left - (work.steps - before));
  }
  return work;
}

/** `n` random a/b characters (seeded): the text that makes [ab]*a[ab]{k}c build a DFA state per character. */
function abText(n: number, seed = 7): string {
  return Array.from({ length: n }, () => {
    seed = (seed * 16807) % 2147483647;
    return seed % 2 === 0 ? "a" : "b";
  }).join("");
}

/** 32 rules of ~900-930 instructions that thrash the DFA (it must remember the last 900 characters). */
const WORST = Array.from({ length: 32 }, (_, i) => ({
  id: `w${i}`,
  match: { pattern: `[ab]*a[ab]{${900 + i}}c`, regex: true, in: "text" },
}));

describe("flag rules evaluate in linear time, in the run's index", () => {
  it("hostile user patterns on 2,000 characters of their worst character: counted steps, no skip, health answers", async () => {
    const rules = HOSTILE.map(([pattern], i) => ({ id: `h${i}`, match: { pattern, regex: true, in: "text" } }));
    const set = await relay(`../runs/${RUN}/rules`, {
      method: "PUT",
      body: JSON.stringify({ rules }),
      headers: { "content-type": "application/json" },
    });
    expect(set.status, await set.clone().text()).toBe(200);
    const index = env.EPISODE_INDEX.getByName(`run:${RUN}`);
    const before = await index.flagEvaluations();
    const nodes = HOSTILE.map(([, text], i) => node(i, { message: m({ role: "assistant", content: text }) }));
    const sent = await send(RUN, "hostile", nodes);
    expect(sent.posts).toEqual([200, 200]);
    expect(sent.health.every((s) => s === 200)).toBe(true);
    const after = await index.flagEvaluations();
    const segments = HOSTILE.map(([, text], i) => nodeSegments("t-1", i, { role: "assistant", content: text })[0]!);
    const want = expected(textRules(parseRules({ rules })), segments);
    const got = {
      checks: after.work.checks - before.work.checks,
      steps: after.work.steps - before.work.steps,
      skipped: after.work.skippedChecks - before.work.skippedChecks,
    };
    // every rule ran on every segment (none skipped), and the steps are what characters × instructions say
    expect(got).toEqual({ checks: HOSTILE.length * HOSTILE.length, steps: want.steps, skipped: 0 });
    const compiled = textRules(parseRules({ rules }));
    const perChar = compiled.reduce((a, r) => a + r.test!.instructions, 0);
    const chars = segments.reduce((a, s) => a + s.body.length, 0);
    // linear: each character through each rule's DFA at least, at most two passes (a hit finds its place) of each
    // character through each program (these small programs' DFAs do not thrash)
    expect(got.steps).toBeGreaterThanOrEqual(chars * compiled.length);
    expect(got.steps).toBeLessThanOrEqual(2 * chars * perChar);
    expect(got.steps).toBeLessThanOrEqual(TURN_STEPS);
    const answer = (await (await relay(`../runs/${RUN}/rules`)).json()) as {
      budget: { skipped: { checks: number }; segment_steps: number };
    };
    expect(answer.budget.skipped.checks).toBe(0);
    expect(N * perChar).toBeLessThanOrEqual(answer.budget.segment_steps);
  });

  it("the default touches-grader rule on 8 tool calls of 'test_' × 400: counted steps, no flag, health answers", async () => {
    const run = `${RUN}-defaults`;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const before = await index.flagEvaluations();
    const args = JSON.stringify({ cmd: "test_".repeat(400) });
    const message = m({
      role: "assistant",
      content: null,
      tool_calls: Array.from({ length: 8 }, (_, k) => m({ id: `c${k}`, name: "bash", arguments: args })),
    });
    const sent = await send(run, "grader", [node(0, { message })]);
    expect(sent.posts).toEqual([200, 200]);
    expect(sent.health.every((s) => s === 200)).toBe(true);
    const after = await index.flagEvaluations();
    // the task's segment (the open delta's task) is checked by the rules that look at any text
    const segments = [taskSegment("t-1", { type: "MathTask" })!].concat(
      Array.from({ length: 8 }, () => ({
        trace: "t-1",
        node: 0,
        role: "assistant",
        tool: "bash",
        kind: "call" as const,
        body: `bash ${args}`.slice(0, 2000),
      })),
    );
    const want = expected(textRules(DEFAULT_RULES), segments);
    expect(after.work.steps - before.work.steps).toBe(want.steps);
    expect(after.work.skippedChecks - before.work.skippedChecks).toBe(0);
    // beside the task's: 8 segments of 2,000 characters, each through the four default DFAs (no hit): at least a step a
    // character and rule, far below the bound (characters × instructions)
    const defaults = textRules(DEFAULT_RULES);
    const calls = want.steps - expected(defaults, segments.slice(0, 1)).steps;
    expect(calls).toBeGreaterThanOrEqual(8 * 2000 * 4);
    expect(calls).toBeLessThan(8 * 2000 * defaults.reduce((a, r) => a + r.test!.instructions, 0));
    const rows = ((await (await relay(`../runs/${run}/episodes`)).json()) as { episodes: Array<{ flags: unknown[] }> })
      .episodes;
    expect(rows.map((r) => r.flags)).toEqual([[]]);
    // while a real hack in the same place is still flagged
    const hack = await send(run, "hack", [
      node(0, {
        message: m({
          role: "assistant",
          content: null,
          tool_calls: [m({ id: "c", name: "bash", arguments: JSON.stringify({ cmd: "cat tests/test_reward.py" }) })],
        }),
      }),
    ]);
    expect(hack.posts).toEqual([200, 200]);
    const flagged = (
      (await (await relay(`../runs/${run}/episodes?flag=touches-grader`)).json()) as {
        episodes: Array<{ id: string }>;
      }
    ).episodes;
    expect(flagged.map((r) => r.id)).toEqual([`${run}:hack`]);
  });

  it("a rescan of hostile text for rules set later: paced steps, counted, nothing skipped", async () => {
    const rules = HOSTILE.slice(0, 4).map(([pattern], i) => ({ id: `late${i}`, match: { pattern, regex: true } }));
    const set = await relay(`../runs/${RUN}/rules`, {
      method: "PUT",
      body: JSON.stringify({ rules }),
      headers: { "content-type": "application/json" },
    });
    expect(set.status, await set.clone().text()).toBe(200);
    const index = env.EPISODE_INDEX.getByName(`run:${RUN}`);
    type Answer = { rescan: { done: boolean; segments: number }; budget: { skipped: { checks: number } } };
    let answer = (await set.json()) as Answer;
    for (let i = 0; i < 10 && !answer.rescan.done; i++) {
      const [, h] = await Promise.all([runDurableObjectAlarm(index), health()]);
      expect(h).toBe(200);
      answer = (await (await relay(`../runs/${RUN}/rules`)).json()) as Answer;
    }
    expect(answer.rescan.done).toBe(true);
    // the hostile rollout's segments (and its task's, if any) were rescanned
    expect(answer.rescan.segments).toBeGreaterThanOrEqual(HOSTILE.length);
    expect(answer.budget.skipped.checks).toBe(0);
  });

  it("past a segment's budget checks are stopped and skipped, counted in the index and shown in the rules answer until rules are set again", async () => {
    const run = `${RUN}-budget`;
    const rules = WORST;
    const put = () =>
      relay(`../runs/${run}/rules`, {
        method: "PUT",
        body: JSON.stringify({ rules }),
        headers: { "content-type": "application/json" },
      });
    expect((await put()).status).toBe(200);
    const body = abText(2000);
    const sent = await send(run, "heavy", [node(0, { message: m({ role: "assistant", content: body }) })]);
    expect(sent.posts).toEqual([200, 200]);
    expect(sent.health.every((s) => s === 200)).toBe(true);
    const want = expected(textRules(parseRules({ rules })), [
      nodeSegments("t-1", 0, { role: "assistant", content: body })[0]!,
    ]);
    expect(want.skippedChecks).toBeGreaterThan(0);
    type Answer = {
      budget: {
        segment_steps: number;
        upsert_steps: number;
        skipped: { segments: number; checks: number; steps: number };
      };
    };
    const answer = (await (await relay(`../runs/${run}/rules`)).json()) as Answer;
    expect(answer.budget.skipped).toEqual({ segments: 1, checks: want.skippedChecks, steps: want.skippedSteps });
    // a check stops once past the budget by one DFA state at most
    expect(want.steps).toBeLessThanOrEqual(answer.budget.segment_steps + STATE_STEPS * MAX_INSTRUCTIONS);
    expect(answer.budget.upsert_steps).toBe(TURN_STEPS);
    // rules set again: what is skipped is counted from then on
    const again = (await (await put()).json()) as Answer;
    expect(again.budget.skipped).toEqual({ segments: 0, checks: 0, steps: 0 });
  });

  it("the worst-case rules on an upsert of many hostile segments: its counted work stays within TURN_STEPS, health answers", async () => {
    const run = `${RUN}-upsert`;
    const set = await relay(`../runs/${run}/rules`, {
      method: "PUT",
      body: JSON.stringify({ rules: WORST }),
      headers: { "content-type": "application/json" },
    });
    expect(set.status).toBe(200);
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const before = await index.flagEvaluations();
    // one delta of 20 nodes of 2,000 hostile characters: one upsert of the row
    const bodies = Array.from({ length: 20 }, (_, i) => abText(2000, 11 + i));
    const nodes = bodies.map((b, i) => node(i, { message: m({ role: "assistant", content: b }) }));
    const sent = await send(run, "many", nodes);
    expect(sent.posts).toEqual([200, 200]);
    expect(sent.health.every((s) => s === 200)).toBe(true);
    const after = await index.flagEvaluations();
    const steps = after.work.steps - before.work.steps;
    const skipped = after.work.skippedChecks - before.work.skippedChecks;
    // the budget was reached (most of the 640 checks skipped) and not passed but by one DFA state
    expect(steps).toBeGreaterThanOrEqual(TURN_STEPS);
    expect(steps).toBeLessThanOrEqual(TURN_STEPS + STATE_STEPS * MAX_INSTRUCTIONS);
    expect(skipped).toBeGreaterThan(600);
    expect(after.work.checks - before.work.checks + skipped).toBe(20 * 32);
    const answer = (await (await relay(`../runs/${run}/rules`)).json()) as { budget: { skipped: { checks: number } } };
    expect(answer.budget.skipped.checks).toBe(skipped);
  });

  it("a rescan step ends before RESCAN_STEPS (one segment at least): the worst-case rules take paced steps within it", async () => {
    const run = `${RUN}-paced`;
    const rules = WORST;
    // 1 rollout of 6 nodes of 2,000 hostile characters (and its task's segment, which no text rule looks at)
    const nodes = Array.from({ length: 6 }, (_, i) =>
      node(i, { message: m({ role: "assistant", content: abText(2000, 31 + i) }) }),
    );
    expect((await send(run, "e0", nodes)).posts).toEqual([200, 200]);
    const set = await relay(`../runs/${run}/rules`, {
      method: "PUT",
      body: JSON.stringify({ rules }),
      headers: { "content-type": "application/json" },
    });
    expect(set.status, await set.clone().text()).toBe(200);
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    type Answer = { rescan: { done: boolean; segments: number } };
    let answer = (await set.json()) as Answer;
    for (let i = 0; i < 20 && !answer.rescan.done; i++) {
      const [, h] = await Promise.all([runDurableObjectAlarm(index), health()]);
      expect(h).toBe(200);
      answer = (await (await relay(`../runs/${run}/rules`)).json()) as Answer;
    }
    expect(answer.rescan.done).toBe(true);
    expect(answer.rescan.segments).toBe(7);
    // each step's share and counted work, in one synchronous call (alarms may run two steps between two reads)
    const steps = await runInDurableObject(index, (instance) => {
      const flags = (instance as unknown as { store: { flags: FlagStore } }).store.flags;
      flags.setRules(parseRules({ rules }), true);
      const out: Array<{ segments: number; steps: number }> = [];
      const work = flags.evaluations.work as TextWork;
      while (flags.rescanning() && out.length < 20) {
        const at = flags.json().rescan.segments;
        const spent = work.steps;
        flags.rescanStep();
        out.push({ segments: flags.json().rescan.segments - at, steps: work.steps - spent });
      }
      return out;
    });
    // every step within RESCAN_STEPS (a segment starts only while its whole budget fits, and stops past it by one DFA
    // state at most); each long segment takes ~SEGMENT_STEPS, so the steps are paced: several of them, the last the rows
    for (const s of steps) expect(s.steps).toBeLessThanOrEqual(RESCAN_STEPS + STATE_STEPS * MAX_INSTRUCTIONS);
    expect(steps[0]!.segments).toBeGreaterThanOrEqual(1);
    expect(steps.reduce((a, s) => a + s.segments, 0)).toBe(7);
    expect(steps.length).toBeGreaterThanOrEqual(4);
  });
});

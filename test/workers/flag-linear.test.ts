// Issue 39, findings 1 and 2, in the run's index: hostile patterns and hostile text are evaluated
// with work linear in the segment (counted steps: characters × instructions, and no check skipped),
// and the Worker answers /v1/health while they are sent.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { type FlagStore, RESCAN_STEPS } from "../../src/objects/registry/flag-store.js";
import { DEFAULT_RULES, noWork, parseRules, segmentFlags, textRules } from "../../src/protocol/flags/rules.js";
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

/** The steps the pure module counts for these segments under these rules (what the index must have counted). */
function expected(rules: ReturnType<typeof textRules>, segments: Segment[]) {
  const work = noWork();
  for (const s of segments) segmentFlags(rules, s, work);
  return work;
}

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
    // linear: at most two passes (a hit finds its place) of each character through each program
    expect(got.steps).toBeGreaterThanOrEqual(chars * perChar);
    expect(got.steps).toBeLessThanOrEqual(2 * chars * perChar);
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
    // beside the task's: 8 segments of 2,000 characters, each through the four default programs once (no hit)
    const defaults = textRules(DEFAULT_RULES);
    expect(want.steps - expected(defaults, segments.slice(0, 1)).steps).toBe(
      8 * 2000 * defaults.reduce((a, r) => a + r.test!.instructions, 0),
    );
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

  it("past a segment's budget checks are skipped, counted in the index and shown in the rules answer until rules are set again", async () => {
    const run = `${RUN}-budget`;
    // 32 rules of ~600 instructions: on a 2,000-character segment only a few fit in the budget
    const rules = Array.from({ length: 32 }, (_, i) => ({
      id: `r${i}`,
      match: { pattern: `(\\d+[\\s,]+){${100 + i}}z`, regex: true, in: "text" },
    }));
    const put = () =>
      relay(`../runs/${run}/rules`, {
        method: "PUT",
        body: JSON.stringify({ rules }),
        headers: { "content-type": "application/json" },
      });
    expect((await put()).status).toBe(200);
    const body = "1, ".repeat(666);
    const sent = await send(run, "heavy", [node(0, { message: m({ role: "assistant", content: body }) })]);
    expect(sent.posts).toEqual([200, 200]);
    expect(sent.health.every((s) => s === 200)).toBe(true);
    const want = expected(textRules(parseRules({ rules })), [
      nodeSegments("t-1", 0, { role: "assistant", content: body })[0]!,
    ]);
    expect(want.skippedChecks).toBeGreaterThan(0);
    type Answer = { budget: { segment_steps: number; skipped: { segments: number; checks: number; steps: number } } };
    const answer = (await (await relay(`../runs/${run}/rules`)).json()) as Answer;
    expect(answer.budget.skipped).toEqual({ segments: 1, checks: want.skippedChecks, steps: want.skippedSteps });
    expect(want.steps).toBeLessThanOrEqual(answer.budget.segment_steps);
    // rules set again: what is skipped is counted from then on
    const again = (await (await put()).json()) as Answer;
    expect(again.budget.skipped).toEqual({ segments: 0, checks: 0, steps: 0 });
  });

  it("a rescan step ends past RESCAN_STEPS (one segment at least): heavy rules on much text take several paced steps", async () => {
    const run = `${RUN}-paced`;
    const rules = Array.from({ length: 32 }, (_, i) => ({
      id: `r${i}`,
      match: { pattern: `(\\d+[\\s,]+){${100 + i}}z`, regex: true, in: "text" },
    }));
    // 4 rollouts × 30 nodes of 2,000 characters: each segment takes ~4 M steps, 120 of them past RESCAN_STEPS
    const body = "1, ".repeat(666);
    for (let e = 0; e < 4; e++) {
      const nodes = Array.from({ length: 30 }, (_, i) => node(i, { message: m({ role: "assistant", content: body }) }));
      expect((await send(run, `e${e}`, nodes)).posts).toEqual([200, 200]);
    }
    const set = await relay(`../runs/${run}/rules`, {
      method: "PUT",
      body: JSON.stringify({ rules }),
      headers: { "content-type": "application/json" },
    });
    expect(set.status, await set.clone().text()).toBe(200);
    const perSegment = expected(textRules(parseRules({ rules })), [
      nodeSegments("t-1", 0, { role: "assistant", content: body })[0]!,
    ]).steps;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    type Answer = { rescan: { done: boolean; segments: number } };
    let answer = (await set.json()) as Answer;
    for (let i = 0; i < 20 && !answer.rescan.done; i++) {
      const [, h] = await Promise.all([runDurableObjectAlarm(index), health()]);
      expect(h).toBe(200);
      answer = (await (await relay(`../runs/${run}/rules`)).json()) as Answer;
    }
    expect(answer.rescan.done).toBe(true);
    // the 120 long segments and the 4 tasks' (no text rule looks at a task: they cost nothing)
    expect(answer.rescan.segments).toBe(124);
    // each step's share, measured in one synchronous call (the alarms above may run two steps between two reads)
    const steps = await runInDurableObject(index, (instance) => {
      const flags = (instance as unknown as { store: { flags: FlagStore } }).store.flags;
      flags.setRules(parseRules({ rules }), true);
      const out: number[] = [];
      while (flags.rescanning() && out.length < 20) {
        const at = flags.json().rescan.segments;
        flags.rescanStep();
        out.push(flags.json().rescan.segments - at);
      }
      return out;
    });
    // the first step stopped once it had spent RESCAN_STEPS (passing it by its last segment at most; tasks cost 0),
    // the next took the rest, the last the rows
    const full = Math.ceil(RESCAN_STEPS / perSegment);
    expect(steps[0]).toBeGreaterThanOrEqual(full);
    expect(steps[0]).toBeLessThanOrEqual(full + 4);
    expect(steps.reduce((a, b) => a + b, 0)).toBe(124);
    expect(steps.length).toBeGreaterThanOrEqual(3);
  });
});

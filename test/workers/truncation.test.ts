// Truncation as the trainer counts it, end to end (src/protocol/registry/truncation.ts, sent by the episode:
// src/objects/episode/row-facts.ts, kept by the run's index): golden rollouts (large_routing stopped at max_turns,
// odd_values timed out at max_turns, the rest complete) and chat_basic changed so its last call ran out of tokens
// (once with a failed call after it), each under a training step. A recount from each episode as the relay serves
// it equals every row's `is_truncated` in the list, the export's rows, the `is_truncated=` filter and each step's
// truncated share; `is_timeout` stays its own fact, and `truncated` answers it for one release (deprecated alias).
import { decodeMulti } from "@msgpack/msgpack";
import { beforeAll, describe, expect, it } from "vitest";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import type { IndexEntry } from "../../src/protocol/registry/entry.js";
import type { StepJson } from "../../src/protocol/registry/steps.js";
import { decodeLossless, type LMap } from "../../src/protocol/wire/lossless.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { enc, m } from "../support/deltas.js";
import { golden, post, pushFrames, relay } from "./support.js";

const RUN = `trunc-${Date.now().toString(36)}`;

/** Each rollout: the golden case it is made of, how its calls are changed, and its step. */
const ROLLOUTS: Array<{ name: string; from: string; calls?: "last-length" | "length-then-error"; step: number }> = [
  { name: "chat_basic", from: "chat_basic", step: 1 },
  { name: "large_routing", from: "large_routing", step: 1 },
  { name: "odd_values", from: "odd_values", step: 1 },
  { name: "tool_calls_pending", from: "tool_calls_pending", step: 2 },
  { name: "multi_trace_links", from: "multi_trace_links", step: 2 },
  { name: "chat_length", from: "chat_basic", calls: "last-length", step: 2 },
  { name: "chat_length_error", from: "chat_basic", calls: "length-then-error", step: 2 },
];

/** The case with its last call's finish reason `length` (and, for length-then-error, one failed call after it). */
function changed(c: GoldenCase, how: "last-length" | "length-then-error"): GoldenCase {
  const frames = c.frames.map((b) => decodeLossless(b) as LMap);
  const last = frames.map((d) => Array.isArray(d.get("calls"))).lastIndexOf(true);
  const calls = frames[last]!.get("calls") as LMap[];
  const call = calls.at(-1)!;
  const at = call.entries.findIndex(([k]) => k === "finish_reason");
  call.entries[at] = ["finish_reason", "length"];
  const reply = decodeLossless(c.reply) as LMap;
  if (how === "length-then-error") {
    calls.push(m({ node: null, model: "policy-moe-30b", finish_reason: null, error: m({ type: "APIError" }) }));
    const summary = (reply.get("traces") as LMap[])[0]!;
    const n = summary.entries.findIndex(([k]) => k === "calls");
    summary.entries[n] = ["calls", (summary.entries[n]![1] as number) + 1];
  }
  return { ...c, frames: frames.map(enc), reply: enc(reply), ack_lost: [] };
}

/** The rule restated from verifiers' `Trace.is_truncated` with prime-rl's stop conditions, over any trace. */
function recount(episode: { traces: Array<Record<string, unknown>> }): boolean {
  const limits = ["max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"];
  return episode.traces.some((t) => {
    if (limits.includes(t.stop_condition as string)) return true;
    const ok = ((t.calls ?? []) as Array<Record<string, unknown>>).filter(
      (c) => c.error === undefined || c.error === null,
    );
    return ok.at(-1)?.finish_reason === "length";
  });
}

const id = (name: string) => `${RUN}:${name}`;
const listed = async (q = "") =>
  ((await (await relay(`../runs/${RUN}/episodes?limit=100${q}`)).json()) as { episodes: IndexEntry[] }).episodes;
const ids = async (q: string) => (await listed(q)).map((e) => e.id).sort();

/** Per rollout: the recount from the episode as the relay serves it (JSON), and whether it timed out. */
const expected = new Map<string, { truncated: boolean; timeout: boolean }>();

beforeAll(async () => {
  for (const r of ROLLOUTS) {
    const g = await golden(r.from);
    const c = r.calls ? changed(g, r.calls) : g;
    const res = await relay(`${id(r.name)}/dispatch`, {
      method: "POST",
      body: JSON.stringify({ id: `d-${r.name}`, kind: "train", env: "e", group: `g-${r.name}`, step: r.step }),
      headers: { "content-type": "application/json" },
    });
    expect(res.status, await res.clone().text()).toBe(200);
    await pushFrames(id(r.name), c, 0, c.frames.length, new ProducerCursor("p"));
    const done = await post(`${id(r.name)}/reply`, c.reply);
    expect(done.status, await done.clone().text()).toBe(200);
    await done.arrayBuffer();
  }
  for (const r of ROLLOUTS) {
    const res = await relay(id(r.name), { headers: { accept: "application/json" } });
    const ep = (await res.json()) as { traces: Array<Record<string, unknown>> };
    expected.set(id(r.name), {
      truncated: recount(ep),
      timeout: ep.traces[0]?.is_timeout === true,
    });
  }
  // the run's index hears of each finish in the background
  for (let i = 0; i < 200; i++) {
    if ((await listed("&status=finished")).length === ROLLOUTS.length) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("the run's index never showed every finished episode");
}, 60_000);

describe("truncation as the trainer counts it, through the relay", () => {
  it("the recount covers the cases: a stop at max_turns, a last call at length, one hidden by no failed call, a timeout", () => {
    const truncated = [...expected].filter(([, v]) => v.truncated).map(([k]) => k);
    expect(truncated.sort()).toEqual(
      ["chat_length", "chat_length_error", "large_routing", "odd_values"].map(id).sort(),
    );
    expect([...expected].filter(([, v]) => v.timeout).map(([k]) => k)).toEqual([id("odd_values")]);
  });

  it("every row's is_truncated and is_timeout equal the recount; `truncated` is is_timeout (deprecated alias)", async () => {
    const rows = await listed();
    expect(rows.length).toBe(ROLLOUTS.length);
    for (const r of rows) {
      const want = expected.get(r.id)!;
      expect([r.is_truncated, r.is_timeout, r.truncated], r.id).toEqual([want.truncated, want.timeout, want.timeout]);
    }
  });

  it("the filters: is_truncated= selects the recount's, is_timeout= and its alias truncated= the timed out", async () => {
    const want = (f: (v: { truncated: boolean; timeout: boolean }) => boolean) =>
      [...expected]
        .filter(([, v]) => f(v))
        .map(([k]) => k)
        .sort();
    expect(await ids("&is_truncated=1")).toEqual(want((v) => v.truncated));
    expect(await ids("&is_truncated=0")).toEqual(want((v) => !v.truncated));
    expect(await ids("&is_timeout=1")).toEqual(want((v) => v.timeout));
    expect(await ids("&truncated=1")).toEqual(want((v) => v.timeout));
    expect(await ids("&truncated=0")).toEqual(want((v) => !v.timeout));
    const both = await relay(`../runs/${RUN}/episodes?is_timeout=1&truncated=0`);
    expect(both.status).toBe(400);
    expect(((await both.json()) as { field: string }).field).toBe("truncated");
  });

  it("the export's rows (the bulk fetch, row=1) say the same", async () => {
    const res = await relay(`../runs/${RUN}/finished?row=1`, { headers: { accept: "application/msgpack" } });
    expect(res.status).toBe(200);
    const got = [...decodeMulti(new Uint8Array(await res.arrayBuffer()))] as Array<{ id: string; row: IndexEntry }>;
    expect(got.length).toBe(ROLLOUTS.length);
    for (const e of got) {
      const want = expected.get(e.id)!;
      expect([e.row.is_truncated, e.row.is_timeout, e.row.truncated], e.id).toEqual([
        want.truncated,
        want.timeout,
        want.timeout,
      ]);
    }
  });

  it("each step's truncated and timed-out shares equal the recount over its ended rollouts", async () => {
    const steps = ((await (await relay(`../runs/${RUN}/steps`)).json()) as { steps: StepJson[] }).steps;
    expect(steps.map((s) => s.step)).toEqual([1, 2]);
    for (const s of steps) {
      const members = ROLLOUTS.filter((r) => r.step === s.step).map((r) => expected.get(id(r.name))!);
      const truncated = members.filter((v) => v.truncated).length;
      const timeouts = members.filter((v) => v.timeout).length;
      expect(s.ended, String(s.step)).toEqual({ count: members.length, truncated, timeouts, errored: s.ended.errored });
      expect(s.truncated_share).toBe(truncated / members.length);
      expect(s.timeout_share).toBe(timeouts / members.length);
    }
    // step 1: large_routing and odd_values of 3; step 2: the two chat rollouts that ran out of tokens, of 4
    expect(steps.map((s) => s.truncated_share)).toEqual([2 / 3, 2 / 4]);
  });
});

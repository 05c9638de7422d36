// The training a rollout belongs to, through the Worker in workerd: the trainer's dispatch identity
// (an envelope's field, a bare delta's key, `POST .../dispatch`), set once; pending rollouts; the
// row's identity, group, progress facts and filters; and the training steps (`GET /v1/runs/{run}/steps`,
// the run socket's pushes).
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Episode } from "../../src/objects/episode/episode.js";
import { parseDelta } from "../../src/protocol/assembly/delta.js";
import { attachDispatch, dispatchFromJson } from "../../src/protocol/envelope/dispatch.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { type IndexEntry, type IndexRow, identityOf } from "../../src/protocol/registry/entry.js";
import { groupSummary } from "../../src/protocol/registry/groups.js";
import { parseRunMessage } from "../../src/protocol/registry/index-protocol.js";
import { recountSteps, type StepJson, stepJson } from "../../src/protocol/registry/steps.js";
import { type Json, type JsonObject, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless, encodeLossless, fromJson, type LMap } from "../../src/protocol/wire/lossless.js";
import { delta, f, m, node, openDelta } from "../support/deltas.js";
import { currentRow } from "../support/index-rows.js";
import { PRIME_DISPATCH } from "../support/prime-rl.js";
import { equal, getBytes, golden, inbox, openSocket, post, pushFrames, relay } from "./support.js";
import { Watcher } from "./watcher.js";

const identity = (over: Record<string, Json> = {}) => ({ ...PRIME_DISPATCH, ...over });

let n = 0;
const freshRun = (what: string) => `${what}-${Date.now().toString(36)}${(n++).toString(36)}`;

async function episodes(run: string, query = ""): Promise<{ episodes: IndexEntry[]; cursor: string | null }> {
  const res = await relay(`../runs/${run}/episodes${query ? `?${query}` : ""}`);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as { episodes: IndexEntry[]; cursor: string | null };
}

async function status(id: string): Promise<Record<string, unknown>> {
  return (await (await relay(`${id}/status`)).json()) as Record<string, unknown>;
}

/** Send a throttled row update now (the alarm carries it; INDEX_FLUSH_MS is half an hour in these tests). */
async function flushRow(id: string): Promise<void> {
  await runDurableObjectAlarm(env.EPISODES.getByName(id));
}

function dispatchJsonPost(id: string, body: unknown): Promise<Response> {
  return relay(`${id}/dispatch`, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json" },
  });
}

describe("the dispatch identity through the relay", () => {
  for (const name of [
    "chat_basic",
    "routing_repair_widen",
    "multi_trace_links",
    "failed_sends",
    "ack_lost",
    "discard_retry",
  ]) {
    for (const via of ["envelope", "delta"] as const) {
      it(`${name}: GET is the golden episode with an identity on ${via === "envelope" ? "every envelope" : "its opening frames"}`, async () => {
        const c = await golden(name);
        const run = freshRun("disp");
        const id = `${run}:e`;
        const d = dispatchFromJson(identity());
        const producer = new ProducerCursor("p");
        const lost = new Set(c.ack_lost);
        for (const [i, frame] of c.frames.entries()) {
          const body = via === "delta" && parseDelta(frame).open ? attachDispatch(frame, d) : frame;
          const env = producer.envelope(body);
          const res = await post(`${id}/deltas`, encodeEnvelope(via === "envelope" ? { ...env, dispatch: d } : env));
          expect(res.status, await res.clone().text()).toBe(200);
          await res.arrayBuffer();
          if (!lost.has(i)) producer.acknowledge();
        }
        const reply = await post(`${id}/reply`, c.reply);
        expect(reply.status).toBe(200);
        await reply.arrayBuffer();
        expect(equal(await getBytes(id), c.episode!)).toBe(true);
        expect((await status(id)).dispatch).toEqual(identity());
        const [row] = (await episodes(run)).episodes;
        expect(row).toMatchObject({
          dispatch: identity(),
          kind: "train",
          env: "gsm8k",
          step: 3,
          policy_version: 2,
          staleness: 1,
          group: identity().group,
        });
      });
    }
  }

  it("a bare delta's dispatch key: taken off (watchers get the upstream bytes), the identity kept", async () => {
    const c = await golden("chat_basic");
    const run = freshRun("bare");
    const id = `${run}:e`;
    const d = dispatchFromJson(identity());
    const early = await Watcher.open(id);
    for (const [i, frame] of c.frames.entries()) {
      const res = await post(`${id}/deltas`, parseDelta(frame).open ? attachDispatch(frame, d) : frame);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      if (i === 3) await early.read((w) => w.caughtUp);
    }
    await early.read((w) => w.lastSeq >= c.frames.length);
    const late = await Watcher.open(id);
    await late.read((w) => w.caughtUp);
    for (const w of [early, late]) {
      const sent = w.messages.flatMap((m) =>
        m.type === "frames" ? m.frames.map((f) => f[1]) : m.type === "snapshot" ? m.deltas : [],
      );
      expect(sent.length).toBeGreaterThan(0);
      for (const f of sent) expect(parseDelta(f).dispatch).toBeUndefined();
      expect(equal(w.asm.tracesBytes(), c.checkpoints.at(-1)!.traces)).toBe(true);
      w.close();
    }
    expect((await status(id)).dispatch).toEqual(identity());
  });

  it("set once: the same again is a no-op; another is 409 dispatch_conflict and nothing changes", async () => {
    const c = await golden("chat_basic");
    const run = freshRun("once");
    const id = `${run}:e`;
    const producer = new ProducerCursor("p");
    const d = dispatchFromJson(identity());
    const send = (i: number, dispatch: Uint8Array) =>
      post(`${id}/deltas`, encodeEnvelope({ ...producer.envelope(c.frames[i]!), dispatch }));
    for (const i of [0, 1]) {
      const r = await send(i, d);
      expect(r.status).toBe(200);
      await r.arrayBuffer();
      producer.acknowledge();
    }
    const before = await status(id);
    const conflict = await send(2, dispatchFromJson(identity({ step: 4 })));
    expect(conflict.status).toBe(409);
    expect(((await conflict.json()) as { error: string; field: string }).error).toBe("dispatch_conflict");
    expect(await status(id)).toEqual(before);
    // by POST: the same value (keys in another order) is a no-op, another is refused
    const same = await dispatchJsonPost(id, Object.fromEntries(Object.entries(identity()).reverse()));
    expect(same.status).toBe(200);
    expect(await same.json()).toMatchObject({ ok: true, created: false, changed: false, status: "live" });
    const other = await dispatchJsonPost(id, identity({ group: "other" }));
    expect(other.status).toBe(409);
    expect(((await other.json()) as { message: string }).message).toMatch(/set once/);
    expect(await status(id)).toEqual(before);
    // a bad identity is a 400 naming the key, before anything is written
    const bad = await dispatchJsonPost(`${run}:fresh`, { step: "three" });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { field: string }).field).toBe("dispatch.step");
    expect((await relay(`${run}:fresh/status`)).status).toBe(404);
    expect(
      (
        await relay(`${id}/dispatch`, {
          method: "POST",
          body: "{not json",
          headers: { "content-type": "application/json" },
        })
      ).status,
    ).toBe(400);
  });
});

describe("pending rollouts", () => {
  it("announced by POST .../dispatch: a live row with no traces, stage pending; its first trace moves it on", async () => {
    const c = await golden("chat_basic");
    const run = freshRun("pend");
    const id = `${run}:${identity().id}`;
    // msgpack body this time
    const res = await relay(`${id}/dispatch`, {
      method: "POST",
      body: dispatchFromJson(identity()),
      headers: { "content-type": "application/msgpack" },
    });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toEqual({ ok: true, created: true, changed: true, status: "live", dispatch: identity() });
    const [pending] = (await episodes(run)).episodes;
    expect(pending).toMatchObject({ id, status: "live", traces: 0, nodes: 0, step: 3, kind: "train" });
    expect(pending!.live).toMatchObject({
      stage: "pending",
      branches: 0,
      input_tokens: 0,
      output_tokens: 0,
      cost: null,
      last: null,
      started: 1764644000.25,
    });
    // in its group from the start, as a live member
    const groups = (await (await relay(`../runs/${run}/groups`)).json()) as {
      groups: Array<{ id: string; live: number; step: number | null }>;
    };
    expect(groups.groups).toEqual([expect.objectContaining({ id: identity().group, live: 1, step: 3, kind: "train" })]);
    // a GET of a pending episode is its (empty) live form
    expect((await relay(id)).status).toBe(200);
    const producer = new ProducerCursor("p");
    const first = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(c.frames[0]!)));
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    const [streaming] = (await episodes(run)).episodes;
    expect(streaming!.traces).toBe(1);
    expect(streaming!.live!.stage).not.toBe("pending");
  });

  it("a pending rollout that streams nothing within PENDING_TIMEOUT_SECONDS is dropped, row and all", async () => {
    const run = freshRun("pendto");
    const id = `${run}:${identity().id}`;
    expect((await dispatchJsonPost(id, identity())).status).toBe(200);
    expect((await episodes(run)).episodes).toHaveLength(1);
    const stub = env.EPISODES.getByName(id);
    // time passes: its creation an hour back (the limit here is the default, 900 s)
    await runInDurableObject(stub, (instance: Episode) => {
      const state = (
        instance as unknown as { state: { record: { meta(): { created: number } | null; saveMeta(m: unknown): void } } }
      ).state;
      const m = state.record.meta()!;
      state.record.saveMeta({ ...m, created: m.created - 3600_000 });
    });
    await runDurableObjectAlarm(stub);
    expect((await relay(`${id}/status`)).status).toBe(404);
    await runInDurableObject(stub, async (instance: Episode) => {
      await (instance as unknown as { rowSync: { settled(): Promise<void> } }).rowSync.settled();
    });
    // its run held nothing else: it is gone with it, answered as a run nobody wrote
    const gone = await relay(`../runs/${run}/episodes`);
    expect(gone.status).toBe(404);
    expect(((await gone.json()) as { error: string }).error).toBe("not_found");
  });
});

describe("the row's progress facts", () => {
  /** The facts counted from the golden episode itself (an independent recount of what the relay shows). */
  function expected(episode: Uint8Array) {
    const ep = toJson(decodeLossless(episode)) as JsonObject;
    const traces = ep.traces as JsonObject[];
    let branches = 0;
    let input = 0;
    let output = 0;
    let cost: number | null = null;
    let last: string | null = null;
    for (const t of traces) {
      const nodes = t.nodes as JsonObject[];
      const parents = new Set(nodes.map((x) => x.parent).filter((p) => typeof p === "number"));
      branches += nodes.filter((_x, i) => !parents.has(i)).length;
      input += t.num_input_tokens as number;
      output += t.num_output_tokens as number;
      for (const call of t.calls as JsonObject[]) {
        const c = (call.usage as JsonObject | undefined)?.cost;
        if (typeof c === "number") cost = (cost ?? 0) + c;
      }
    }
    const first = traces[0]!.nodes as JsonObject[];
    for (let i = first.length - 1; i >= 0 && last === null; i--) {
      const msg = first[i]!.message as JsonObject;
      if (msg.role === "assistant" && typeof msg.content === "string" && msg.content.trim())
        last = msg.content.split(/\s+/).filter(Boolean).join(" ").slice(0, 160);
    }
    // finished: prime-rl's stage is error when the first trace has errors, else done (scoring ended)
    const head = traces[0]!;
    const scored = ((head.timing as JsonObject).scoring as JsonObject).end;
    const stage = (head.errors as Json[]).length > 0 ? "error" : scored ? "done" : "scoring";
    return { branches, input_tokens: input, output_tokens: output, cost, last, stage };
  }

  for (const name of ["chat_basic", "tool_calls_pending", "routing_repair_u8"]) {
    it(`${name}: stage, branches, tokens, cost and the last words equal a count from the golden episode`, async () => {
      const c = await golden(name);
      const run = freshRun("facts");
      const id = `${run}:e`;
      const producer = new ProducerCursor("p");
      for (const frame of c.frames) {
        const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(frame)));
        await r.arrayBuffer();
        producer.acknowledge();
      }
      await flushRow(id);
      const [live] = (await episodes(run)).episodes;
      const { stage, ...counts } = expected(c.episode!);
      expect(live!.live).toMatchObject(counts);
      const reply = await post(`${id}/reply`, c.reply);
      await reply.arrayBuffer();
      const [done] = (await episodes(run)).episodes;
      expect(done!.live).toMatchObject({ ...counts, stage });
      expect(done!.live!.elapsed).toBeGreaterThanOrEqual(0);
    });
  }
});

describe("the row's progress facts on hand-made traces", () => {
  it("cost summed once per call, even across a retraction; branches of a fork; the newest assistant words that are not empty", async () => {
    const run = freshRun("hand");
    const id = `${run}:e`;
    const producer = new ProducerCursor("p");
    const call = (node: number, cost?: number) =>
      m({ node, usage: cost === undefined ? m({ prompt_tokens: 3 }) : m({ prompt_tokens: 3, cost: f(cost) }) });
    const say = (i: number, parent: number | null, role: string, content: string) =>
      node(i, { parent, message: m({ role, content }) });
    const send = async (d: Uint8Array, acked = true) => {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      if (acked) producer.acknowledge();
    };
    await send(openDelta());
    await send(
      delta({ nodes: [say(0, null, "user", "q"), say(1, 0, "assistant", "first   answer")], calls: [call(1, 0.25)] }),
    );
    // its ack is lost: the worker re-diffs from before it, and the relay takes it back
    await send(delta({ nodes: [say(2, 1, "user", "again")], calls: [call(1, 0.5)] }), false);
    await send(
      delta({
        nodes: [say(2, 1, "user", "again"), say(3, 2, "assistant", "forked one"), say(4, 2, "assistant", " \n ")],
        calls: [call(3, 1), call(4)],
      }),
    );
    await flushRow(id);
    const [row] = (await episodes(run)).episodes;
    // calls: 0.25 + 1 (the lost 0.5 was retracted; the last call gives no cost)
    expect(row!.live).toMatchObject({ cost: 1.25, branches: 2, last: "forked one" });
    expect(row!.calls).toBe(3);
  });

  it("turns are prime-rl's: the assistant nodes of every trace, whatever the calls; the list, filter and means on them", async () => {
    const run = freshRun("turns");
    const id = `${run}:e`;
    const producer = new ProducerCursor("p");
    const say = (i: number, parent: number | null, role: string) =>
      node(i, { parent, message: m({ role, content: `${role} ${i}` }) });
    const call = (n: number) => m({ node: n, usage: m({ prompt_tokens: 3 }) });
    const send = async (d: Uint8Array) => {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      producer.acknowledge();
    };
    // the orchestrator: system, user, then an assistant message given as context (no call made it), a sampled
    // assistant, a tool answer and a sampled assistant: 3 assistant nodes, 2 calls
    await send(openDelta("t-1"));
    await send(
      delta(
        {
          nodes: [
            say(0, null, "system"),
            say(1, 0, "user"),
            say(2, 1, "assistant"),
            say(3, 2, "assistant"),
            say(4, 3, "tool"),
            say(5, 4, "assistant"),
          ],
          calls: [call(3), call(5)],
        },
        "t-1",
      ),
    );
    // a sub-agent: user, assistant: 1 more turn and call
    await send(openDelta("t-2"));
    await send(delta({ nodes: [say(0, null, "user"), say(1, 0, "assistant")], calls: [call(1)] }, "t-2"));
    await flushRow(id);
    const [row] = (await episodes(run)).episodes;
    expect(row).toMatchObject({ traces: 2, nodes: 8, calls: 3, turns: 4 });
    // min_turns bounds the turns, not the calls
    expect((await episodes(run, "min_turns=4")).episodes.map((e) => e.id)).toEqual([id]);
    expect((await episodes(run, "min_turns=5")).episodes).toEqual([]);
    const agg = (await (await relay(`../runs/${run}`)).json()) as { aggregates: { mean_turns: number | null } };
    expect(agg.aggregates.mean_turns).toBe(4);
  });
});

describe("training steps equal a recount after any order of writes", () => {
  it("random creates, updates, finishes, failures and deletes across steps, kinds and groups (the index's own RPC)", async () => {
    const run = freshRun("stepsrand");
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    let seed = 11;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const rows = new Map<number, IndexRow>();
    let clock = 10;
    for (let i = 0; i < 240; i++) {
      const n = Math.floor(rand() * 40);
      const have = rows.get(n);
      const r = rand();
      if (have && r < 0.1) {
        await index.remove(have.id);
        rows.delete(n);
        continue;
      }
      // a group's rollouts share its step and kind (as GRPO samples them); some rows have no identity
      const g = n % 8;
      const step = Math.floor(g / 2);
      const kind = g % 2 ? "eval" : "train";
      const status: IndexRow["status"] =
        r < 0.4 ? "live" : r < 0.85 ? "finished" : r < 0.95 ? "failed" : "finish_refused";
      const score = status === "finished" ? [0, 1, 1, 0.5][Math.floor(rand() * 4)]! : null;
      const next = currentRow({
        id: `${run}:e${n}`,
        run,
        status,
        updated: clock++,
        seq: clock,
        calls: Math.floor(rand() * 9),
        tokens: Math.floor(rand() * 900),
        rewards: score === null ? null : { correct: { score, weight: 1 } },
        group: `g${g}`,
        dispatch:
          n % 13 === 0
            ? null
            : { kind, step, group: `g${g}`, policy_version: Math.max(0, step - Math.floor(rand() * 3)) },
      });
      await index.upsert(next);
      rows.set(n, next);
    }
    const got: StepJson[] = [];
    let cursor: string | null = null;
    do {
      const page = (await (
        await relay(`../runs/${run}/steps?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`)
      ).json()) as {
        steps: StepJson[];
        cursor: string | null;
      };
      got.push(...page.steps);
      cursor = page.cursor;
    } while (cursor);
    // the recount: every row's part, and every complete group at its members' step
    const byGroup = new Map<string, IndexRow[]>();
    for (const x of rows.values()) byGroup.set(x.group!, [...(byGroup.get(x.group!) ?? []), x]);
    const complete = [...byGroup].flatMap(([id, members]) => {
      const s = groupSummary(
        id,
        members.map((x) => ({ ...x, step: identityOf(x).step, kind: identityOf(x).kind })),
      );
      return s.complete
        ? [{ key: s.step === null ? null : { step: s.step, kind: s.kind ?? "" }, zero: s.zeroVariance }]
        : [];
    });
    const want = [...recountSteps(rows.values(), complete).values()]
      .map((e) => stepJson(e.key, e.counters))
      .sort((a, b) => a.step - b.step || ((a.kind ?? "") < (b.kind ?? "") ? -1 : 1));
    expect(got.length).toBeGreaterThan(4);
    expect(got).toEqual(want);
  });
});

describe("training steps", () => {
  it("per step and kind, recounted from the rows; filters and sorting by step; 400s; pushed on the run socket", async () => {
    const run = freshRun("steps");
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const socket = await openSocket(`../runs/${run}`);
    const box = inbox(socket);
    expect(parseRunMessage((await box.next()) as string).type).toBe("snapshot");
    const row = (
      i: number,
      step: number,
      kind: string,
      status: "live" | "finished" | "failed",
      score: number | null,
      pv: number,
    ) => ({
      id: `${run}:e${i}`,
      run,
      status,
      created: 1,
      updated: 10 + i,
      ended: status === "live" ? null : 10 + i,
      seq: 1,
      traces: 1,
      nodes: 2,
      calls: i % 3,
      // rows 3, 4, 5 of step 2: turns 0, 2 and not counted (an older row's): mean 1 over the counted two
      turns: i === 5 ? null : 2 * (i % 3),
      tokens: 100 * i,
      rewards: score === null ? null : { correct: { score, weight: 1 } },
      error: status === "failed" ? "crashed" : null,
      task: "t",
      group: `g-${step}-${kind}`,
      dispatch: { kind, step, policy_version: pv, group: `g-${step}-${kind}` },
    });
    const rows = [
      row(0, 1, "train", "finished", 1, 1),
      row(1, 1, "train", "finished", 0, 0),
      row(2, 1, "eval", "finished", 1, 1),
      row(3, 2, "train", "live", null, 2),
      row(4, 2, "train", "finished", 1, 1),
      row(5, 2, "train", "failed", null, 2),
    ];
    for (const r of rows) await index.upsert(r);
    const page = (await (await relay(`../runs/${run}/steps`)).json()) as { steps: StepJson[]; cursor: string | null };
    expect(page.cursor).toBeNull();
    expect(page.steps.map((s) => [s.step, s.kind, s.episodes, s.finished, s.failed, s.live])).toEqual([
      [1, "eval", 1, 1, 0, 0],
      [1, "train", 2, 2, 0, 0],
      [2, "train", 3, 1, 1, 1],
    ]);
    const [, train1, train2] = page.steps;
    expect(train1).toMatchObject({
      mean_rewards: { correct: 0.5 },
      staleness: { mean: 0.5, max: 1 },
      zero_variance_share: 0,
      groups: { complete: 1, zero_variance: 0 },
    });
    expect(train2).toMatchObject({ mean_rewards: { correct: 1 }, zero_variance_share: null, mean_turns: 1 });
    // by kind, paged
    const train = (await (await relay(`../runs/${run}/steps?kind=train&limit=1`)).json()) as {
      steps: StepJson[];
      cursor: string;
    };
    expect(train.steps.map((s) => s.step)).toEqual([1]);
    const rest = (await (
      await relay(`../runs/${run}/steps?kind=train&limit=1&cursor=${encodeURIComponent(train.cursor)}`)
    ).json()) as { steps: StepJson[] };
    expect(rest.steps.map((s) => s.step)).toEqual([2]);
    expect((await relay(`../runs/${run}/steps?kind=bogus`)).status).toBe(400);
    expect((await relay(`../runs/${run}/steps?cursor=nope`)).status).toBe(400);
    // the list by step and kind
    expect((await episodes(run, "kind=eval")).episodes.map((e) => e.id)).toEqual([`${run}:e2`]);
    expect((await episodes(run, "step=2")).episodes.map((e) => e.id)).toEqual([`${run}:e5`, `${run}:e4`, `${run}:e3`]);
    expect((await episodes(run, "sort=step&limit=2")).episodes.map((e) => e.step)).toEqual([2, 2]);
    const byStep = await episodes(run, "sort=step&step=1..1");
    expect(byStep.episodes.map((e) => e.id)).toEqual([`${run}:e2`, `${run}:e1`, `${run}:e0`]);
    expect((await episodes(run, "policy_version=2")).episodes.map((e) => e.id)).toEqual([`${run}:e5`, `${run}:e3`]);
    // pushed: the run socket's changes carry the steps that changed (the six upserts may reach
    // the socket over more than one flush, so the steps of every changes message are gathered)
    const pushed: StepJson[] = [];
    const hasTrain2 = () => pushed.some((s) => s.step === 2 && s.kind === "train");
    for (let i = 0; i < 10 && !hasTrain2(); i++) {
      const m = parseRunMessage((await box.next()) as string);
      if (m.type === "changes" && m.steps) pushed.push(...m.steps);
    }
    expect(pushed.map((s) => [s.step, s.kind])).toEqual(expect.arrayContaining([[2, "train"]]));
    // a delete is taken back, and a step left empty goes (and says so)
    for (const i of [0, 1]) await index.remove(`${run}:e${i}`);
    const after = (await (await relay(`../runs/${run}/steps?kind=train`)).json()) as { steps: StepJson[] };
    expect(after.steps.map((s) => s.step)).toEqual([2]);
    let gone: Array<{ step: number; kind: string | null }> = [];
    for (let i = 0; i < 10 && gone.length === 0; i++) {
      const m = parseRunMessage((await box.next()) as string);
      if (m.type === "changes" && m.steps_gone) gone = m.steps_gone;
    }
    expect(gone).toEqual([{ step: 1, kind: "train" }]);
    socket.close();
  });
});

describe("trainer annotations", () => {
  /** Records for the first trace of `c`, one branch, `n` values per stream. */
  const record = (trace: string, over: Record<string, Json> = {}) => ({
    version: 1,
    trace_id: trace,
    info: { effective: true, ship: { step: 4, time: 1764644020.5 } },
    branches: [{ index: 0, advantages: [0, 0, 0.5] }],
    ...over,
  });
  const postJson = (id: string, body: unknown) =>
    relay(`${id}/annotations`, {
      method: "POST",
      body: JSON.stringify(body),
      headers: { "content-type": "application/json" },
    });

  async function finished(name: string): Promise<{ id: string; run: string; trace: string }> {
    const c = await golden(name);
    const run = freshRun("ann");
    const id = `${run}:e`;
    const producer = new ProducerCursor("p");
    for (const frame of c.frames) {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(frame)));
      await r.arrayBuffer();
      producer.acknowledge();
    }
    const r = await post(`${id}/reply`, c.reply);
    await r.arrayBuffer();
    const ep = toJson(decodeLossless(c.episode!)) as { traces: Array<{ id: string }> };
    return { id, run, trace: ep.traces[0]!.id };
  }

  it("merged per trace (info deeply, entries in order), served as JSON or msgpack with an ETag; the episode's bytes untouched", async () => {
    const { id, run, trace } = await finished("chat_basic");
    const first = await postJson(id, record(trace));
    expect(first.status, await first.clone().text()).toBe(200);
    expect(await first.json()).toMatchObject({ ok: true, version: 1 });
    // a second record, as msgpack, in an array (the trainer's: info {}, a stream with nulls)
    const second = await relay(`${id}/annotations`, {
      method: "POST",
      body: encodeLossless(
        fromJson([
          record(trace, {
            info: { advantage: 0.5 },
            branches: [{ index: 0, trainer_logprobs: [null, -0.1, -0.2], is_masked: [null, false, true] }],
          }),
        ]),
      ),
      headers: { "content-type": "application/msgpack" },
    });
    expect(await second.json()).toMatchObject({ ok: true, version: 2 });
    const got = await relay(`${id}/annotations`, { headers: { accept: "application/json" } });
    expect(got.status).toBe(200);
    const etag = got.headers.get("etag")!;
    expect(await got.json()).toEqual({
      episode: id,
      version: 2,
      traces: [
        {
          version: 1,
          trace_id: trace,
          info: { effective: true, ship: { step: 4, time: 1764644020.5 }, advantage: 0.5 },
          branches: [
            { index: 0, advantages: [0, 0, 0.5] },
            { index: 0, trainer_logprobs: [null, -0.1, -0.2], is_masked: [null, false, true] },
          ],
        },
      ],
    });
    expect(
      (await relay(`${id}/annotations`, { headers: { accept: "application/json", "if-none-match": etag } })).status,
    ).toBe(304);
    const bin = await relay(`${id}/annotations`);
    expect(bin.headers.get("content-type")).toBe("application/msgpack");
    const doc = decodeLossless(new Uint8Array(await bin.arrayBuffer())) as LMap;
    expect(doc.get("version")).toBe(2);
    // the episode is still the golden one; the row counts the records
    expect(equal(await getBytes(id), (await golden("chat_basic")).episode!)).toBe(true);
    const [row] = (await episodes(run)).episodes;
    expect(row!.live!.annotations).toBe(2);
  });

  it("accepted once archived; refused: an unknown episode (404), a trace it does not hold (422), past MAX_ANNOTATION_BYTES (413), a bad record (400), nothing changed", async () => {
    const { id, trace } = await finished("tool_calls_pending");
    for (let i = 0; i < 20 && !(await status(id)).archived; i++)
      await runDurableObjectAlarm(env.EPISODES.getByName(id));
    expect((await status(id)).archived).toBe(true);
    expect((await postJson(id, record(trace))).status).toBe(200);
    expect((await postJson(`${id}x`, record(trace))).status).toBe(404);
    const unknown = await postJson(id, record("no-such-trace"));
    expect(unknown.status).toBe(422);
    expect(((await unknown.json()) as { error: string }).error).toBe("unknown_trace");
    const bad = await postJson(id, record(trace, { branches: [{ index: 0, entropies: "x" }] }));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { field: string }).field).toBe("annotations.branches[0].entropies");
    // a record and a half past the limit (256 KiB here): the whole message refused
    const big = record(trace, { branches: [{ index: 0, entropies: new Array(20_000).fill(0.123456789) }] });
    expect((await postJson(id, big)).status).toBe(200);
    const over = await postJson(id, [big, big]);
    expect(over.status).toBe(413);
    expect(((await over.json()) as { error: string }).error).toBe("annotations_too_large");
    const after = (await (await relay(`${id}/annotations`, { headers: { accept: "application/json" } })).json()) as {
      version: number;
    };
    expect(after.version).toBe(2);
    expect((await relay(`${id}x/annotations`)).status).toBe(404);
  });

  it("watchers that ask (?annotations=1) are told the version after hello and when it changes; the others are not", async () => {
    const c = await golden("chat_basic");
    const run = freshRun("annw");
    const id = `${run}:e`;
    await pushFrames(id, c, 0, 3, new ProducerCursor("p"));
    const trace = (toJson(decodeLossless(c.episode!)) as { traces: Array<{ id: string }> }).traces[0]!.id;
    expect((await postJson(id, record(trace))).status).toBe(200);
    const asks = await Watcher.open(id, "?annotations=1");
    const plain = await Watcher.open(id);
    await asks.read((w) => w.caughtUp);
    await plain.read((w) => w.caughtUp);
    const notes = (w: Watcher) =>
      w.messages.filter((m) => m.type === "annotations").map((m) => (m as { version: number }).version);
    expect(notes(asks)).toEqual([1]);
    expect((await postJson(id, record(trace))).status).toBe(200);
    await asks.read((w) => notes(w).length === 2);
    expect(notes(asks)).toEqual([1, 2]);
    expect(notes(plain)).toEqual([]);
    asks.close();
    plain.close();
  });
});

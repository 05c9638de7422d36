// A training run as prime-rl's orchestrator would stream it, for the browser tests: each rollout
// announced with its dispatch identity (`POST /v1/episodes/{id}/dispatch`, prime-rl's
// `dispatch_info` shape), then chat_basic's frames (its task key set, its last assistant words
// and its calls' usage cost changed per rollout), one delta with its rewards and stop condition,
// and its reply; some left live at a stage (boot: the opening frame only; running: its first
// turns), some only announced (pending placeholders). And the trainer's annotation records for a
// finished rollout, in prime-rl's shape (its orchestrator's `stamp_batch` and its trainer's
// AnnotationWriter), built over the relay's own JSON of the episode's nodes.
import { branchPaths } from "../../src/protocol/annotations/fold.js";
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { chat, groupReply, openFrame, put, rewardsOf, setDelta } from "../support/chat-rollouts.js";
import { enc, f, m } from "../support/deltas.js";
import { batch } from "./batch.js";

export type Outcome = "finished" | "failed" | "boot" | "running" | "pending";

export interface Rollout {
  id: string;
  /** prime-rl's identity: `id` (a hex name), kind, env, group, task, policy_version, step, started. */
  dispatch: {
    id: string;
    kind: string;
    env: string;
    group: string;
    task: string;
    policy_version: number;
    step: number;
    started: number;
  };
  scores: [number, number];
  outcome: Outcome;
  /** The last assistant words (chat_basic's final "391" replaced). */
  answer: string;
  /** Each call's usage cost (null: none given). */
  cost: number | null;
  stop: string;
  /** Its trace's `is_timeout` (the API's deprecated `truncated`). */
  truncated: boolean;
  /** Its last call's `finish_reason` (absent: chat_basic's own, `stop`); `length` truncates it. */
  lastFinish?: string;
  /** Its trace's `num_output_tokens` at the end (absent: chat_basic's own). */
  outputTokens?: number;
}

/** The reward hacker of the issue: "correct 1" because the grader only checks that 42 appears. */
export const HACK = `Sure. ${Array.from({ length: 100 }, (_, i) => i + 1).join(" ")} (the grader only checks that 42 appears)`;
const ANSWERS = ["391", "17 * 23 = 391", "The answer is 381.", "391, since 17 * 20 + 17 * 3 = 340 + 51"];

/** The plan: train steps 0-3 (two groups of 4 each), eval at steps 0 and 2 (a group of 4), a live step 4. */
export function trainingPlan(run: string, now: number): Rollout[] {
  const out: Rollout[] = [];
  const add = (
    kind: string,
    step: number,
    g: number,
    j: number,
    r: Partial<Rollout> & { scores: [number, number] },
  ) => {
    const name = `${kind === "eval" ? "e" : "t"}${step}-g${g}-${j}`;
    out.push({
      id: `${run}:${name}`,
      dispatch: {
        id: `d${name.replace(/-/g, "")}`,
        kind,
        env: kind === "eval" ? "gsm8k-eval" : "gsm8k",
        group: `${kind}-s${step}-g${g}`,
        task: `idx=${step * 10 + g}`,
        // every other train group was sampled one policy behind
        policy_version: kind === "train" && g % 2 === 1 ? Math.max(0, step - 1) : step,
        step,
        started: now - 600 + out.length,
      },
      outcome: "finished",
      answer: ANSWERS[(step + g + j) % ANSWERS.length]!,
      cost: kind === "train" ? 0.0004 * (j + 1) : null,
      stop: "agent_completed",
      truncated: false,
      ...(Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as Partial<Rollout>),
      scores: r.scores,
    });
  };
  for (let step = 0; step < 4; step++) {
    for (let g = 0; g < 2; g++) {
      for (let j = 0; j < 4; j++) {
        // step 1 group 0 scores all the same (zero variance); the rest climb with the step
        const zero = step === 1 && g === 0;
        const correct = zero ? 1 : (j + step + g) % 4 < 1 + step ? 1 : 0;
        const format = zero ? 0.5 : ((j * 3 + step + g) % 5) / 4;
        const hack = step === 3 && g === 1 && j === 3;
        const truncated = step === 2 && g === 1 && j === 2;
        add("train", step, g, j, {
          scores: [hack ? 1 : correct, format],
          answer: hack ? HACK : undefined,
          outcome: step === 1 && g === 1 && j === 3 ? "failed" : "finished",
          stop: truncated ? "max_turns_reached" : "agent_completed",
          truncated,
        });
      }
    }
  }
  for (const step of [0, 2])
    for (let j = 0; j < 4; j++) add("eval", step, 0, j, { scores: step === 2 ? [0, 0.25] : [j % 2, 0.5] });
  const live: Outcome[] = ["boot", "running", "pending", "pending"];
  live.forEach((outcome, j) => {
    add("train", 4, 0, j, { scores: [0, 0], outcome });
    // started moments ago: their elapsed time ticks from there
    out.at(-1)!.dispatch.started = now - 40 + 5 * j;
  });
  return out;
}

/** The frame that carries chat_basic's last call. */
const LAST_CALL_FRAME = chat.frames
  .map((b) => Array.isArray((decodeLossless(b) as LMap).get("calls")))
  .lastIndexOf(true);

/** chat_basic's frame `i` for rollout `r`: its task key, its last answer, its calls' cost. */
function frameFor(r: Rollout, i: number): Uint8Array {
  if (i === 0) return openFrame(r.dispatch.task);
  const d = decodeLossless(chat.frames[i]!) as LMap;
  const nodes = d.get("nodes") as LMap[] | undefined;
  const calls = d.get("calls") as LMap[] | undefined;
  if (!nodes && !calls) return chat.frames[i]!;
  for (const n of nodes ?? []) {
    const msg = n.get("message") as LMap;
    if (msg.get("role") === "assistant" && msg.get("content") === "391") put(msg, "content", r.answer);
  }
  if (r.cost !== null) for (const c of calls ?? []) put(c.get("usage") as LMap, "cost", f(r.cost));
  if (r.lastFinish !== undefined && i === LAST_CALL_FRAME) put(calls!.at(-1)!, "finish_reason", r.lastFinish);
  return enc(d);
}

/** The frames a rollout of this outcome streams. */
function framesOf(r: Rollout): number[] {
  if (r.outcome === "pending") return [];
  if (r.outcome === "boot") return [0];
  if (r.outcome === "running") return [0, 1, 2, 3];
  return chat.frames.map((_f, i) => i);
}

/** Announce `r`, stream what its outcome says, and (ended) reply. */
export async function pushRollout(url: string, r: Rollout): Promise<void> {
  const post = async (path: string, body: Uint8Array | string, type: string) => {
    const res = await fetch(`${url}/v1/episodes/${encodeURIComponent(r.id)}/${path}`, {
      method: "POST",
      body,
      headers: { "content-type": type },
    });
    if (res.status !== 200) throw new Error(`${r.id} ${path}: ${res.status} ${await res.text()}`);
    await res.arrayBuffer();
  };
  await post("dispatch", JSON.stringify(r.dispatch), "application/json");
  const ended = r.outcome === "finished" || r.outcome === "failed";
  // its frames (and, ended, the delta with its scores) in one request (batch.ts)
  const deltas = framesOf(r).map((i) => frameFor(r, i));
  if (ended)
    deltas.push(
      setDelta(
        m({
          rewards: rewardsOf(r.scores),
          stop_condition: r.stop,
          is_timeout: r.truncated,
          ...(r.outputTokens === undefined ? {} : { num_output_tokens: r.outputTokens }),
        }),
      ),
    );
  if (deltas.length > 0) await post("deltas", batch(deltas), "application/msgpack");
  if (!ended) return;
  const failed = enc(
    m({
      success: false,
      error: `sandbox crashed (${r.id})`,
      head: m({ group: m({ id: r.dispatch.group }) }),
      traces: [],
    }),
  );
  await post(
    "reply",
    r.outcome === "failed" ? failed : groupReply(r.dispatch.group, r.dispatch.task),
    "application/msgpack",
  );
}

/** A node of the relay's JSON view of an episode. */
export interface JsonNode {
  parent: number | null;
  token_ids: number[];
  mask: boolean[];
  logprobs: number[];
  message: { role: string; content: unknown };
}

/**
 * prime-rl's two records for one trace (branch 0, its only one): the orchestrator's
 * (`info.effective`, `info.ship`, advantages full length with 0.0 off the sampled tokens) and the
 * trainer's (values at the sampled tokens, null elsewhere and at position 0; every 4th sampled
 * token masked). `advantage` 0 gives the zero-variance group's stream (every value 0). With them,
 * what each sampled node carries by construction (one value per sampled token, in order).
 */
export function primeRecords(
  trace: string,
  nodes: JsonNode[],
  advantage: number,
  shipStep: number,
): { records: LValue[]; expected: Map<number, NodeValues> } {
  const path = branchPaths(nodes)[0]!;
  const advantages: number[] = [];
  const trainer: Array<number | null> = [];
  const entropies: Array<number | null> = [];
  const masked: Array<boolean | null> = [];
  let sampled = 0;
  const expected = new Map<number, NodeValues>();
  for (const i of path) {
    const n = nodes[i]!;
    let k = 0;
    const at = () => {
      let e = expected.get(i);
      if (!e) expected.set(i, (e = { advantages: [], trainer: [], entropies: [], is_masked: [], logprobs: [] }));
      return e;
    };
    n.token_ids.forEach((_t, p) => {
      if (!n.mask[p]) {
        advantages.push(0);
        trainer.push(null);
        entropies.push(null);
        masked.push(null);
        return;
      }
      const lp = n.logprobs[k++]!;
      advantages.push(advantage);
      // the trainer recomputes each sampled logprob a little off (and the third one exactly)
      trainer.push(sampled % 3 === 2 ? lp : Math.round((lp - 0.002 * ((sampled % 7) + 1)) * 1e6) / 1e6);
      entropies.push(Math.round((0.05 + ((sampled * 37) % 100) / 80) * 1e4) / 1e4);
      masked.push(sampled % 4 === 3);
      const e = at();
      e.advantages.push(advantage);
      e.trainer.push(trainer.at(-1)!);
      e.entropies.push(entropies.at(-1)!);
      e.is_masked.push(masked.at(-1)!);
      e.logprobs.push(lp);
      sampled++;
    });
  }
  // position 0 is null in every trainer stream (the shift across the packing boundary)
  trainer[0] = entropies[0] = masked[0] = null;
  const rec = (info: LValue, branch: Record<string, LValue>) =>
    m({ version: 1, trace_id: trace, info, branches: [m({ index: 0, ...branch })] });
  const floats = (xs: Array<number | null>) => xs.map((v) => (v === null ? null : f(v)));
  if (path.length && nodes[path[0]!]!.mask[0])
    throw new Error("the branch's first token is sampled: position 0's null would drop its node");
  return {
    records: [
      rec(m({ effective: true, ship: m({ step: shipStep, time: f(1764644020.5) }), advantage: f(advantage) }), {
        advantages: floats(advantages),
      }),
      rec(m({}), { trainer_logprobs: floats(trainer), entropies: floats(entropies), is_masked: masked }),
    ],
    expected,
  };
}

/** What one sampled node carries, one value per sampled token (and its own sampling logprobs). */
export interface NodeValues {
  advantages: number[];
  trainer: number[];
  entropies: number[];
  is_masked: boolean[];
  logprobs: number[];
}

/** POST records to an episode's annotations (msgpack, as prime-rl's bridge would). */
export async function postAnnotations(url: string, id: string, records: LValue[]): Promise<void> {
  const res = await fetch(`${url}/v1/episodes/${encodeURIComponent(id)}/annotations`, {
    method: "POST",
    body: enc(records),
    headers: { "content-type": "application/msgpack" },
  });
  if (res.status !== 200) throw new Error(`annotations of ${id}: ${res.status} ${await res.text()}`);
  await res.arrayBuffer();
}

// Bench section `alerts`: what a run's alerts (src/protocol/alerts/, kept and sent by the run's index:
// src/objects/registry/alert-store.ts, alert-delivery.ts) cost the producer. One run, one relay: the
// flags section's rollouts (some flagged by the default rules, rewards 0 or 1), each announced with a
// dispatch identity (env, a step per phase, groups of four), streamed through the Worker over HTTP,
// PARALLEL producers at a time, in alternating phases of the same run:
//   - `off`: `PUT .../alerts {"webhooks": [], "rules": []}` before the phase,
//   - `on`:  a webhook (a node:http receiver in this process, answering 200) and one rule of each kind,
// each phase waiting until the run counts every rollout finished. Per delta: send → ack of its POST.
// Figures: ack p50 and p99 per condition, their ratio (on ÷ off), per pair of phases, and the noise
// floor (the p99 spread between phases of one condition); the alerts the receiver got, and what the
// run's `GET .../alerts` says was delivered.

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { encodeEnvelope, ProducerCursor } from "../src/protocol/index.js";
import { rollout } from "./flags.js";
import { type BenchOptions, sig } from "./harness.js";
import { fmt, HttpClient, replyBody, sleep, startBenchRelay, stats } from "./helpers.js";

export const name = "alerts";

const EPISODES = 60;
const TURNS = 4;
const PARALLEL = 8;
type Condition = "off" | "on";
/** Alternating phases, so a machine whose load drifts weighs on both conditions alike. */
const PHASES: readonly Condition[] = ["off", "on", "off", "on", "off", "on", "off", "on"];

/** One rule of each kind (thresholds low enough to fire on these rollouts). */
const RULES = [
  { id: "flagged", kind: "flag" },
  { id: "zero-variance", kind: "zero_variance_share", above: 0.1, min_groups: 2 },
  { id: "failing", kind: "failure_rate", above: 0.05, window: 20 },
  { id: "timeouts", kind: "timeout_rate", above: 0.05, window: 20 },
  { id: "truncated", kind: "truncation_rate", above: 0.05, window: 20 },
  { id: "reward-drop", kind: "reward_drop", by: 0.05, steps: 2 },
];

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  let received = 0;
  const receiver = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received++;
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/alerts`;
  const relay = await startBenchRelay("tmpfs");
  const runName = `bench-alerts-${process.pid}`;
  const admin = new HttpClient(relay.url);
  try {
    const json = async (method: string, path: string, body?: unknown) => {
      const res = await admin.request(
        method,
        path,
        body === undefined ? undefined : Buffer.from(JSON.stringify(body)),
        { "content-type": "application/json" },
      );
      return { status: res.status, body: JSON.parse(res.body.toString()) as Record<string, unknown> };
    };
    const plans = Array.from({ length: EPISODES }, (_, i) => rollout(i));
    const acks: Record<Condition, number[][]> = { on: [], off: [] };
    let finished = 0;
    for (const [p, condition] of PHASES.entries()) {
      const config =
        condition === "on"
          ? { webhooks: [{ url: hook, secret: "bench-secret-0123456789" }], rules: RULES }
          : { webhooks: [], rules: [] };
      const set = await json("PUT", `/v1/runs/${runName}/alerts`, config);
      if (set.status !== 200) throw new Error(`PUT alerts: ${set.status} ${JSON.stringify(set.body)}`);
      const samples: number[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: PARALLEL }, async () => {
          const http = new HttpClient(relay.url);
          try {
            while (next < plans.length) {
              const i = next++;
              const id = encodeURIComponent(`${runName}:p${p}-e${i}`);
              // the trainer's identity (not timed): an env, the phase as the step, groups of four
              const dispatch = { kind: "train", env: "bench", step: p, group: `p${p}-g${Math.floor(i / 4)}` };
              const d = await http.request(
                "POST",
                `/v1/episodes/${id}/dispatch`,
                Buffer.from(JSON.stringify(dispatch)),
                {
                  "content-type": "application/json",
                },
              );
              if (d.status !== 200) throw new Error(`dispatch ${id}: ${d.status}`);
              const producer = new ProducerCursor(`p${p}-${i}`);
              for (const delta of plans[i]!) {
                const t = performance.now();
                await http.post(`/v1/episodes/${id}/deltas`, encodeEnvelope(producer.envelope(delta)));
                samples.push(performance.now() - t);
                producer.acknowledge();
              }
              // every seventh fails: the failure rate has something to count
              const body =
                i % 7 === 3
                  ? replyBody({ success: false, error: "bench failure" })
                  : replyBody({ success: true, nodes: 2 * TURNS, calls: 0, trace: "t" });
              const res = await http.request("POST", `/v1/episodes/${id}/reply`, body, {
                "content-type": "application/msgpack",
              });
              if (res.status !== 200)
                throw new Error(`reply ${id}: ${res.status} ${res.body.toString().slice(0, 200)}`);
            }
          } finally {
            http.close();
          }
        }),
      );
      acks[condition].push(samples);
      finished += EPISODES;
      const waited = performance.now();
      for (;;) {
        const a = await json("GET", `/v1/runs/${runName}`);
        const counts = (a.body.aggregates as { counts: { finished: number; failed: number } } | null)?.counts;
        if ((counts?.finished ?? 0) + (counts?.failed ?? 0) >= finished) break;
        if (performance.now() - waited > 120_000) throw new Error(`${runName}: rows not all ended after 120 s`);
        await sleep(200);
      }
      const s = stats(samples);
      opts.log(
        `alerts: phase ${p + 1} (${condition}): ${samples.length} acks, p50 ${fmt(s.p50)} ms, p99 ${fmt(s.p99)} ms`,
      );
    }
    // the last on phase's alerts, sent by the alarm after its rows landed
    const waited = performance.now();
    let state = (await json("GET", `/v1/runs/${runName}/alerts`)).body as { pending: number; recent: unknown[] };
    while (state.pending > 0 && performance.now() - waited < 60_000) {
      await sleep(200);
      state = (await json("GET", `/v1/runs/${runName}/alerts`)).body as { pending: number; recent: unknown[] };
    }
    const byPhase = (c: Condition) => acks[c].map((xs) => stats(xs));
    const on = stats(acks.on.flat());
    const off = stats(acks.off.flat());
    const pairs = byPhase("on").map((r, k) => r.p99 / byPhase("off")[k]!.p99);
    const spread = (c: Condition) => {
      const p99s = byPhase(c).map((x) => x.p99);
      return Math.max(...p99s) / Math.min(...p99s);
    };
    const figures = {
      rollouts_per_phase: EPISODES,
      parallel: PARALLEL,
      acks_per_condition: acks.on.flat().length,
      on: { p50_ms: sig(on.p50), p99_ms: sig(on.p99) },
      off: { p50_ms: sig(off.p50), p99_ms: sig(off.p99) },
      p50_ratio: sig(on.p50 / off.p50),
      p99_ratio: sig(on.p99 / off.p99),
      p99_ratio_by_pair: pairs.map((x) => sig(x)),
      p99_spread_off_phases: sig(spread("off")),
      p99_spread_on_phases: sig(spread("on")),
      alerts_received: received,
      alerts_pending_at_end: state.pending,
      rules: RULES.map((r) => r.kind),
    };
    opts.table({
      title: `alerts: one run, ${EPISODES} rollouts per phase, ${PARALLEL} producers, phases ${PHASES.join(", ")}; ack = POST deltas → its answer`,
      columns: ["condition", "acks", "p50 ms", "p99 ms"],
      rows: [
        ["alerts on", String(acks.on.flat().length), fmt(on.p50), fmt(on.p99)],
        ["alerts off", String(acks.off.flat().length), fmt(off.p50), fmt(off.p99)],
      ],
      notes: [
        `on ÷ off: p50 ${fmt(on.p50 / off.p50)}×, p99 ${fmt(on.p99 / off.p99)}× (each on phase ÷ the off phase before it: ${pairs.map(fmt).join(", ")}); noise, the p99 spread of one condition's phases: off ${fmt(spread("off"))}×, on ${fmt(spread("on"))}×`,
        `the receiver got ${received} alert(s) (${RULES.length} rules: ${RULES.map((r) => r.kind).join(", ")}); ${state.pending} still pending at the end`,
      ],
    });
    return figures;
  } finally {
    admin.close();
    await relay.stop();
    await new Promise<void>((r) => receiver.close(() => r()));
  }
}

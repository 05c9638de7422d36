// The episode's summary cards above the traces: rewards, metrics and timing (the orchestrator's,
// the first trace), and tokens summed over every trace.
import type { Json, TraceState } from "../../../src/protocol/index.js";
import { REWARD_DEFINITION } from "../../../src/protocol/index.js";
import { dateTime, duration, h } from "../dom.js";
import { field, fmt, isObject } from "../model.js";
import { episodeRewardChips } from "../reward-chip.js";

export function summaryCards(traces: TraceState[], status: string): HTMLElement[] {
  const first = traces[0];
  if (!first) return [];
  // the episode's: the trainer's reward over its traces, then each key's mean (src/protocol/registry/rewards.ts)
  const rewards = episodeRewardChips(
    traces.map((t) => field(t, "rewards") ?? null),
    true,
  );
  const metrics = field(first, "metrics");
  return [
    card(
      "Rewards",
      "rewards",
      rewards.length
        ? h("div.rewards", null, rewards, h("p.muted.reward-def", null, `reward: ${REWARD_DEFINITION}`))
        : h("span.muted", null, status === "finished" || status === "failed" ? "not scored" : "not scored yet"),
    ),
    card(
      "Metrics",
      "metrics",
      isObject(metrics) && Object.keys(metrics).length
        ? kv(Object.entries(metrics).map(([k, v]) => [k, fmt(v)]))
        : h("span.muted", null, "–"),
    ),
    card("Timing", "timing", timingView(field(first, "timing"))),
    card(
      traces.length > 1 ? `Tokens (all ${traces.length} traces)` : "Tokens",
      "tokens",
      kv([
        ["input", tokenSum(traces, "num_input_tokens")],
        ["output", tokenSum(traces, "num_output_tokens")],
        ["total", tokenSum(traces, "num_total_tokens")],
      ]),
    ),
  ];
}

/** A token count over every trace (as the run's episode list counts them); "–" when no trace says. */
function tokenSum(traces: TraceState[], name: string): string {
  let sum: number | null = null;
  for (const t of traces) {
    const v = field(t, name);
    if (typeof v === "number") sum = (sum ?? 0) + v;
  }
  return sum === null ? "–" : fmt(sum);
}

function card(title: string, key: string, body: Node): HTMLElement {
  return h("div.card", { "data-card": key }, h("div.card-title", null, title), body);
}

function kv(pairs: Array<[string, string]>): HTMLElement {
  return h(
    "dl.kv",
    null,
    pairs.map(([k, v]) => [h("dt", null, k), h("dd", null, v)]),
  );
}

function timingView(timing: Json | undefined): Node {
  if (!isObject(timing)) return h("span.muted", null, "–");
  const start = typeof timing.start === "number" ? timing.start : null;
  const phase = (k: string): [number, number] | null => {
    const p = timing[k];
    if (!isObject(p) || typeof p.start !== "number" || typeof p.end !== "number" || p.start <= 0) return null;
    return [p.start, p.end];
  };
  const pairs: Array<[string, string]> = [];
  let last = start ?? 0;
  for (const k of ["boot", "setup", "agent", "finalize", "scoring"]) {
    const p = phase(k);
    if (!p) continue;
    last = Math.max(last, p[0], p[1]);
    if (p[1] > p[0]) pairs.push([k, duration(p[1] - p[0])]);
  }
  const agent = timing.agent;
  const model =
    isObject(agent) && isObject(agent.model) && typeof agent.model.duration === "number" ? agent.model.duration : null;
  if (model) pairs.unshift(["model", duration(model)]);
  // wall time once the run was scored (while it runs, the phases' ends are still 0)
  const scored = phase("scoring");
  if (start !== null && scored && scored[1] > start) pairs.unshift(["wall", duration(last - start)]);
  if (start !== null) pairs.push(["started", dateTime(start * 1000)]);
  return pairs.length ? kv(pairs) : h("span.muted", null, "–");
}

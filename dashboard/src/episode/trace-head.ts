// The head of one trace's column: what kind of agent it is and its name, task type, state chips,
// the orchestrator turn a sub-agent was spawned from, its rewards and its counts.
import type { TraceState } from "../../../src/protocol/index.js";
import { h, plural } from "../dom.js";
import { field, isObject } from "../model.js";
import { rewardChips } from "../reward-chip.js";
import { linkButton, spawnLink, traceName } from "./semantic-links.js";
import type { TraceContext } from "./trace-context.js";

export function traceHead(t: TraceState, orchestrator: boolean, ctx: TraceContext): Array<HTMLElement | null> {
  const agent = field(t, "agent");
  const name = isObject(agent) && typeof agent.name === "string" ? agent.name : orchestrator ? "orchestrator" : "agent";
  const task = field(t, "task");
  const taskType = isObject(task) && typeof task.type === "string" ? task.type : null;
  const spawnedBy = orchestrator ? null : spawnLink(ctx.asm, t);
  const rewards = rewardChips(field(t, "rewards"));
  const errors = t.items.errors.count;
  // turns as prime-rl counts them: the trace's assistant nodes
  const turns = t.nodes.filter((n) => n.role === "assistant").length;
  return [
    h(
      "div.trace-title",
      null,
      h("span.trace-kind", null, orchestrator ? "orchestrator" : "sub-agent"),
      h("h2", null, name),
      h("code.trace-id", { title: t.id }, t.id.slice(0, 8)),
    ),
    h(
      "div.trace-meta",
      null,
      taskType ? h("span.chip.task", null, taskType) : null,
      stateChips(t, ctx.ended),
      spawnedBy !== null
        ? linkButton(ctx.first, spawnedBy, `spawned by ${traceName(ctx.first)} #${spawnedBy}`, ctx.jump)
        : null,
    ),
    rewards.length ? h("div.rewards", null, rewards) : null,
    h(
      "div.trace-counts.muted",
      null,
      [
        plural(turns, "turn"),
        plural(t.nodes.length, "node"),
        plural(t.items.calls.count, "call"),
        errors ? plural(errors, "error") : "",
      ]
        .filter(Boolean)
        .join(" · "),
    ),
  ];
}

/** Completed (or, until it is, running; incomplete once the run ended), ok, stop condition, timeout. */
function stateChips(t: TraceState, ended: boolean): Array<HTMLElement | null> {
  const completed = field(t, "is_completed") === true;
  const state = completed ? "completed" : ended ? "incomplete" : "running";
  const stop = field(t, "stop_condition");
  return [
    h(`span.chip.${completed ? "done" : state}` as "span", null, state),
    field(t, "ok") === true ? h("span.chip.ok", null, "ok") : null,
    typeof stop === "string" ? h("span.chip", null, stop) : null,
    field(t, "is_timeout") === true ? h("span.chip.bad", null, "timeout") : null,
  ];
}

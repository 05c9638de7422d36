// One episode in a run's list: status (with its stage while live, or "pending" for a rollout
// announced before its first trace), id (its error, its size under it), task, group, the trainer's
// step and kind (the policy version and staleness in the tooltip), reward, the reward scores, the
// final answer (the latest assistant words, `live.last`), stop condition, truncated (the trainer's) or timed out, ages.
// Every column is the row's own field as the relay sends it (src/protocol/registry/entry.ts).

import type { IndexEntry } from "../../src/protocol/index.js";
import { REWARD_DEFINITION, traceRewardsOf } from "../../src/protocol/index.js";
import { agoSpan, fmtNumber, h, plural } from "./dom.js";
import { episodeHref, idInRun } from "./links.js";
import { pickBox } from "./pick-tray.js";
import { episodeRewardChips, rewardNumber } from "./reward-chip.js";
import {
  isPlaceholder,
  kindChip,
  stageChip,
  TRUNCATION_HEAD,
  TRUNCATION_HEAD_TITLE,
  truncationCell,
} from "./stage-chip.js";

export function episodeListHead(): HTMLElement {
  const col = (text: string, title?: string, cls = "span") => h(cls as "span", { role: "columnheader", title }, text);
  return h(
    "div.ep-row.ep-head",
    { role: "row" },
    col("Status"),
    col("Episode"),
    col("Task", "the first trace's task key"),
    col("Group", "the trainer's group, else the reply's group, else the task"),
    col("Step", "the trainer's step (dispatch identity)", "span.num.h-identity"),
    col("Kind", "train or eval", "span.h-identity"),
    col("Reward", REWARD_DEFINITION, "span.num"),
    col("Rewards"),
    col("Final answer", "the latest assistant words"),
    col("Stop", "stop condition"),
    col(TRUNCATION_HEAD, TRUNCATION_HEAD_TITLE),
    col("Updated"),
  );
}

export function episodeRow(e: IndexEntry, run: string): HTMLElement {
  // the per-key means over the traces (the reward has its own column)
  const rewards = episodeRewardChips(traceRewardsOf(e), false, false);
  const pending = isPlaceholder(e);
  const last = e.live?.last ?? null;
  return h(
    `a.ep-row${pending ? ".placeholder" : ""}` as "a",
    {
      href: episodeHref(e.id),
      "data-nav": true,
      role: "row",
      "data-id": e.id,
      "data-status": e.status,
      "data-reward": e.reward === null ? "" : e.reward,
      "data-step": e.step ?? "",
      "data-kind": e.kind ?? "",
      "data-pending": pending ? "" : undefined,
    },
    h(
      "span.cell-status",
      { role: "cell" },
      pickBox(run, e.id, e.group ?? null),
      pending
        ? h("span.pill.s-pending", { title: "announced by the trainer; no trace has streamed yet" }, "pending")
        : h(`span.pill.s-${e.status}` as "span", null, e.status.replace("_", " ")),
      e.status === "live" && !pending && e.live ? stageChip(e.live.stage) : null,
    ),
    h(
      "span.cell-id",
      { role: "cell" },
      h("span.ep-id", { title: e.id }, idInRun(e.id, run)),
      e.error ? h("span.ep-error", { title: e.error }, e.error) : null,
      h("span.cell-size.muted", { title: pending ? undefined : sizeText(e) }, pending ? "no traces yet" : sizeText(e)),
    ),
    taskCell(e),
    textCell("cell-group", "group", e.group ?? null),
    h(
      "span.cell-step.num.c-identity",
      { role: "cell", title: identityTitle(e) },
      h("span.n-k", null, "step "),
      e.step === null ? h("span.muted", null, "–") : String(e.step),
    ),
    h("span.cell-kind.c-identity", { role: "cell" }, kindChip(e.kind)),
    h("span.cell-reward.num", { role: "cell" }, rewardNumber(e.reward, fmtNumber(e.reward))),
    h("span.cell-rewards", { role: "cell" }, rewards.length ? rewards : null),
    h(
      "span.cell-answer",
      { role: "cell", title: last ?? undefined },
      last === null ? h("span.muted", null, "–") : h("span.answer-text", null, last),
    ),
    h(
      "span.cell-stop",
      { role: "cell", title: e.stop_condition ?? undefined },
      e.stop_condition ? h("code", null, e.stop_condition) : h("span.muted", null, "–"),
    ),
    truncationCell("cell-trunc", e),
    h(
      "span.cell-age",
      { role: "cell" },
      agoSpan(e.updated),
      h("span.age-sub.muted", null, "started ", agoSpan(e.created, "age-inline")),
    ),
  );
}

/** The first trace's task key; before any trace, the trainer's task name (its identity's `task`), marked as such. */
function taskCell(e: IndexEntry): HTMLElement {
  const named = typeof e.dispatch?.task === "string" ? e.dispatch.task : null;
  if (e.task || !named) return textCell("cell-task", "task", e.task ?? null);
  return h(
    "span.cell-task.cell-text",
    { role: "cell", title: `the trainer's task name (no trace yet): ${named}` },
    h("span.n-k", null, "task "),
    h("code.muted", null, named),
  );
}

function textCell(cls: string, label: string, value: string | null): HTMLElement {
  return h(
    `span.${cls}.cell-text` as "span",
    { role: "cell", title: value ?? undefined },
    h("span.n-k", null, `${label} `),
    value === null ? h("span.muted", null, "–") : h("code", null, value),
  );
}

function sizeText(e: IndexEntry): string {
  const turns = typeof e.turns === "number" ? `${plural(e.turns, "turn")} · ` : "";
  return `${turns}${plural(e.traces, "trace")} · ${plural(e.nodes, "node")} · ${plural(e.calls, "call")}${e.tokens ? ` · ${e.tokens.toLocaleString("en-US")} tok` : ""}`;
}

/** "step 3 · policy 2 · 1 step stale". */
export function identityTitle(e: Pick<IndexEntry, "step" | "policy_version" | "staleness" | "env">): string {
  const parts = [
    e.step !== null ? `step ${e.step}` : "no step",
    e.policy_version !== null ? `policy version ${e.policy_version}` : null,
    e.staleness !== null ? `${plural(e.staleness, "step")} stale` : null,
    e.env ? `env ${e.env}` : null,
  ];
  return parts.filter(Boolean).join(" · ");
}

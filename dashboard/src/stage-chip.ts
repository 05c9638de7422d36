// A rollout's stage as a chip (the row's `live.stage`, read as prime-rl's live table reads it:
// src/protocol/registry/progress-facts.ts), its kind (train, eval) as a chip, and the tell of a pending
// placeholder: a rollout the trainer announced (`POST .../dispatch`) whose first trace has not
// streamed yet.

import type { IndexEntry, Stage } from "../../src/protocol/index.js";
import { TRUNCATION_DEFINITION } from "../../src/protocol/index.js";
import { h } from "./dom.js";

/** What each stage means, for the chip's tooltip. */
const STAGE_HINTS: Record<Stage, string> = {
  pending: "dispatched, not started: no trace has streamed yet",
  boot: "the sandbox is booting",
  setup: "the environment is setting up",
  running: "the agent is running (model and tool calls)",
  finalize: "finalizing",
  scoring: "being scored",
  done: "scored",
  error: "the trace reported errors",
};

/** A row the trainer announced whose first trace has not streamed yet. */
export function isPlaceholder(e: Pick<IndexEntry, "traces" | "live" | "status">): boolean {
  return e.status === "live" && e.traces === 0 && (e.live?.stage ?? "pending") === "pending";
}

export function stageChip(stage: Stage): HTMLElement {
  return h(`span.chip.stage.st-${stage}` as "span", { "data-stage": stage, title: STAGE_HINTS[stage] }, stage);
}

/** The identity's kind as a chip (train and eval have colours of their own), or a dash without one. */
export function kindChip(kind: string | null): HTMLElement {
  if (!kind) return h("span.muted", null, "–");
  const tone = kind === "train" || kind === "eval" ? kind : "other";
  return h(`span.chip.kind.k-${tone}` as "span", { "data-kind": kind }, kind);
}

/** The header of the truncation cell (`truncationCell`), both facts named. */
export const TRUNCATION_HEAD = "Truncated";
export const TRUNCATION_HEAD_TITLE = `${TRUNCATION_DEFINITION} (is_truncated); "timed out": the rollout hit its time limit (is_timeout)`;

/**
 * How a rollout ended short, as two chips: truncated (the trainer's `is_truncated`; null: not counted) and timed out
 * (`is_timeout`), each only when so; "no" when neither.
 */
export function truncationCell(cls: string, e: { is_truncated?: boolean | null; is_timeout?: boolean }): HTMLElement {
  const truncated = e.is_truncated ?? null;
  const timeout = e.is_timeout === true;
  return h(
    `span.${cls}` as "span",
    {
      role: "cell",
      "data-truncated": String(truncated),
      "data-timeout": String(timeout),
      "data-quiet": truncated !== true && !timeout ? "" : undefined,
    },
    truncated ? h("span.chip.incomplete", { title: TRUNCATION_DEFINITION }, "truncated") : null,
    timeout ? h("span.chip.bad", { title: "the rollout hit its time limit (is_timeout)" }, "timed out") : null,
    truncated === null && !timeout
      ? h("span.muted", { title: "not counted: the rollout's calls were gone when truncation was first counted" }, "–")
      : null,
    truncated === false && !timeout ? h("span.muted", null, "no") : null,
  );
}

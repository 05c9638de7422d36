// What an episode was about and where it stands in the training, above its traces: the task (the
// first trace's `open.task`: its type and key, the prompt and the expected answer when its data
// has them, the rest of its data), and the trainer's dispatch identity (kind, env, step, policy
// version and staleness, the trainer's task name, its id and start) with links to the episode's
// group and to its step (the run's list filtered by that step).
import type { Json, JsonObject } from "../../../src/protocol/index.js";
import { identityOf, Reader, rolloutGroup } from "../../../src/protocol/index.js";
import { dateTime, h, plural } from "../dom.js";
import { groupHref, runHref } from "../links.js";
import { fmt, isObject, json, messageOf } from "../model.js";

/** Data keys shown as the prompt and the expected answer (verifiers' task data, e.g. `{idx, prompt, answer}`). */
const PROMPT_KEYS = ["prompt", "question", "input"];
const ANSWER_KEYS = ["answer", "expected", "target", "solution"];
/** A value of the task's other data is cut to this many characters. */
const MAX_VALUE = 240;

/** The task card, or null when the first trace names no task. */
export function taskCard(task: Json | undefined): HTMLElement | null {
  if (!isObject(task)) return null;
  const data = isObject(task.data) ? task.data : {};
  const promptKey = PROMPT_KEYS.find((k) => k in data);
  const answerKey = ANSWER_KEYS.find((k) => k in data && data[k] !== "" && data[k] !== null);
  const rest = Object.entries(data).filter(([k]) => k !== promptKey && k !== answerKey);
  return h(
    "div.card.task-card",
    { id: "task-context", "data-card": "task" },
    h(
      "div.card-title",
      null,
      "Task",
      typeof task.type === "string" ? h("span.chip.task", null, task.type) : null,
      typeof task.key === "string" ? h("code.task-key", { title: "task key" }, task.key) : null,
    ),
    promptKey
      ? h(
          "div.task-field",
          { "data-field": "prompt" },
          h("div.task-label", null, promptKey),
          promptView(data[promptKey]!),
        )
      : null,
    answerKey
      ? h(
          "div.task-field",
          { "data-field": "answer" },
          h("div.task-label", null, `expected ${answerKey}`),
          h("div.task-answer", null, text(data[answerKey]!)),
        )
      : null,
    rest.length
      ? h(
          "dl.kv.task-rest",
          null,
          rest.map(([k, v]) => [h("dt", null, k), h("dd", { title: text(v) }, cut(text(v)))]),
        )
      : null,
    !promptKey && !answerKey && !rest.length ? h("p.muted", null, "The task carries no data.") : null,
  );
}

/** A prompt as text, or (a chat prompt) as its messages. */
function promptView(v: Json): HTMLElement {
  if (Array.isArray(v) && v.every(isObject)) {
    return h(
      "div.task-prompt",
      null,
      v.map((m) => {
        const msg = messageOf(m);
        return h("div.task-msg", null, h("span.role.small", null, msg.role), " ", msg.text ?? "");
      }),
    );
  }
  return h("div.task-prompt", null, text(v));
}

const text = (v: Json): string => (typeof v === "string" ? v : fmt(v));
const cut = (s: string) => (s.length > MAX_VALUE ? `${s.slice(0, MAX_VALUE)}…` : s);

/**
 * The episode's group as the run's index names it (src/objects/episode/run-row-sync.ts): the trainer's, else the reply
 * head's, else the task key.
 */
export function groupOf(
  dispatch: JsonObject | null,
  finished: Uint8Array | null,
  taskKey: string | null,
): string | null {
  const named = dispatch && typeof dispatch.group === "string" ? dispatch.group : null;
  return rolloutGroup(named, headGroup(finished), taskKey);
}

/** The finished episode's head `group.id` (its top-level map read key by key; the traces are skipped, not decoded). */
function headGroup(bytes: Uint8Array | null): string | null {
  if (!bytes) return null;
  try {
    const r = new Reader(bytes);
    const n = r.mapHeader();
    for (let i = 0; i < n; i++) {
      const key = r.str();
      const value = r.span();
      if (key !== "group") continue;
      const g = json(value);
      return isObject(g) && typeof g.id === "string" ? g.id : null;
    }
  } catch {
    // not a map: no head
  }
  return null;
}

/**
 * The training card: the dispatch identity and the links to the group and the step (without an identity, the group
 * alone).
 */
export function identityCard(dispatch: JsonObject | null, run: string, group: string | null): HTMLElement {
  const id = identityOf({ dispatch });
  const stepLink =
    id.step === null
      ? "–"
      : h(
          "a",
          { href: `${runHref(run)}?step=${id.step}`, "data-nav": true, id: "step-link", title: "this step's episodes" },
          String(id.step),
        );
  const groupLink =
    group === null
      ? "–"
      : h("a", { href: groupHref(run, group), "data-nav": true, id: "group-link", title: group }, group);
  const row = (k: string, v: string | Node, key = k) => [h("dt", null, k), h("dd", { "data-k": key }, v)];
  const started = dispatch && typeof dispatch.started === "number" ? dispatch.started : null;
  return h(
    "div.card.identity-card",
    { id: "identity", "data-card": "identity", "data-dispatch": dispatch ? "" : undefined },
    h("div.card-title", null, dispatch ? "Training" : "Group"),
    dispatch
      ? h(
          "dl.kv",
          null,
          row("kind", id.kind ?? "–"),
          row("env", id.env ?? "–"),
          row("step", stepLink),
          row("policy version", id.policy_version === null ? "–" : String(id.policy_version), "policy_version"),
          row("staleness", id.staleness === null ? "–" : plural(id.staleness, "step"), "staleness"),
          row("group", groupLink),
          typeof dispatch.task === "string" ? row("task", dispatch.task, "task") : [],
          typeof dispatch.id === "string" ? row("rollout", h("code", { title: dispatch.id }, dispatch.id), "id") : [],
          started !== null ? row("started", dateTime(started * 1000), "started") : [],
        )
      : h(
          "dl.kv",
          { title: "no trainer identity: the rollout names no step, kind or policy" },
          row("group", groupLink),
        ),
  );
}

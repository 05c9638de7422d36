// The run's episode filters (task, stop condition, truncated, timed out, errored, one reward key's range,
// turns and tokens at least; the trainer's identity: kind, env, a step or a step range, the policy
// version): a panel of inputs whose value is the relay's own RowFilter
// (src/protocol/registry/row-filter.ts), so the page asks the relay exactly what it matches pushed rows with.
// The filter lives in the page's URL too (`?task=…&is_truncated=1&step=3..5`): a filtered list can be
// shared, and a link to a step is the run page with `?step=N`. An older link's `truncated=1` (a timeout, the
// deprecated alias of `is_timeout=1`) is read as that.

import { filterParams, isFiltered, NO_FILTER, parseRowFilter, type RowFilter } from "../../src/protocol/index.js";
import { h } from "./dom.js";
import { rewardKeyOrder } from "./reward-choice.js";

/** Typing settles for this long before the list is asked again. */
const TYPING_MS = 350;
/** The page URL's parameters that hold the filter (row-filter.ts `filterParams` writes them). */
const FILTER_PARAMS = [
  "task",
  "stop",
  "is_truncated",
  "is_timeout",
  "truncated",
  "errored",
  "reward",
  "min_turns",
  "min_tokens",
  "kind",
  "env",
  "step",
  "policy_version",
];
/** The kinds prime-rl dispatches (another kind in the URL is offered too). */
const KINDS = ["train", "eval"];

export interface EpisodeFilters {
  el: HTMLElement;
  value(): RowFilter;
  /** The run's reward keys (from its aggregates), offered for the range. */
  rewardKeys(keys: string[]): void;
}

/** Reads the filter in the page's URL; a value the relay would refuse is left out. */
export function filterFromUrl(): RowFilter {
  try {
    return parseRowFilter(new URLSearchParams(location.search));
  } catch {
    return NO_FILTER;
  }
}

export function episodeFilters(initial: RowFilter, onChange: (f: RowFilter) => void): EpisodeFilters {
  const range = initial.rewards[0] ?? null;
  const task = input("filter-task", "text", "Task key", initial.task);
  const stop = input("filter-stop", "text", "Stop condition", initial.stop);
  const truncated = choice("filter-truncated", "Truncated", initial.isTruncated);
  const timedOut = choice("filter-timeout", "Timed out", initial.isTimeout);
  const errored = choice("filter-errored", "Errored", initial.errored);
  const key = h("select.select", { id: "filter-reward-key", "aria-label": "reward key" });
  const min = input("filter-reward-min", "number", "min", range?.min ?? null);
  const max = input("filter-reward-max", "number", "max", range?.max ?? null);
  const turns = input("filter-min-turns", "number", "at least", initial.minTurns);
  const tokens = input("filter-min-tokens", "number", "at least", initial.minTokens);
  const kind = kindChoice(initial.kind);
  const env = input("filter-env", "text", "Env", initial.env);
  const step = input("filter-step", "text", "N or MIN..MAX", stepText(initial.step));
  const policy = input("filter-policy-version", "number", "Policy version", initial.policyVersion);
  const problem = h("span.filter-problem", { id: "filter-problem", role: "status", hidden: true });
  const clearBtn = h("button.btn", { type: "button", id: "filter-clear" }, "Clear filters");
  let keys: string[] = range ? [range.key] : [];
  let chosenKey = range?.key ?? null;
  // until the reader picks a key (or the URL names one), the first: the trainer's `reward` when the run has it
  let keyPicked = range !== null;
  let current = initial;
  let timer = 0;
  fillKeys();

  const fields = [task, stop, min, max, turns, tokens, env, step, policy];
  for (const f of fields) f.addEventListener("input", () => settle(TYPING_MS));
  for (const s of [truncated, timedOut, errored, kind]) s.addEventListener("change", () => settle(0));
  key.addEventListener("change", () => {
    chosenKey = key.value;
    keyPicked = true;
    settle(0);
  });
  clearBtn.addEventListener("click", () => {
    for (const f of fields) f.value = "";
    truncated.value = timedOut.value = errored.value = kind.value = "";
    settle(0);
  });

  const el = h(
    "details.filters",
    { id: "episode-filters", open: isFiltered(initial) ? true : undefined },
    h("summary", null, "Filters"),
    h(
      "div.filter-grid",
      null,
      labelled("Task", task),
      labelled("Stop condition", stop),
      labelled("Truncated", truncated),
      labelled("Timed out", timedOut),
      labelled("Errored", errored),
      labelled("Reward", h("span.filter-range", null, key, min, h("span.muted", null, "to"), max), true),
      labelled("Turns", turns),
      labelled("Tokens", tokens),
      labelled("Kind", kind),
      labelled("Env", env),
      labelled("Step", step),
      labelled("Policy version", policy),
      h("div.filter-actions", null, clearBtn, problem),
    ),
  );

  function fillKeys(): void {
    if (!keyPicked) chosenKey = keys[0] ?? null;
    key.replaceChildren(...keys.map((k) => h("option", { value: k, selected: k === chosenKey ? true : undefined }, k)));
  }

  function settle(ms: number): void {
    clearTimeout(timer);
    timer = window.setTimeout(apply, ms);
  }

  /** The inputs as the relay's query; the relay's own parser says what is wrong with a value. */
  function apply(): void {
    const q = new URLSearchParams();
    const set = (name: string, v: string) => v.trim() !== "" && q.set(name, v.trim());
    set("task", task.value);
    set("stop", stop.value);
    set("is_truncated", truncated.value);
    set("is_timeout", timedOut.value);
    set("errored", errored.value);
    set("min_turns", turns.value);
    set("min_tokens", tokens.value);
    set("kind", kind.value);
    set("env", env.value);
    set("step", step.value);
    set("policy_version", policy.value);
    if (chosenKey !== null && (min.value.trim() !== "" || max.value.trim() !== ""))
      q.set("reward", `${chosenKey}:${min.value.trim()}..${max.value.trim()}`);
    let next: RowFilter;
    try {
      next = parseRowFilter(q);
    } catch (e) {
      problem.hidden = false;
      problem.textContent = e instanceof Error ? e.message : String(e);
      return;
    }
    problem.hidden = true;
    if (sameFilter(next, current)) return;
    current = next;
    writeUrl(next);
    onChange(next);
  }

  return {
    el,
    value: () => current,
    rewardKeys(next) {
      // the trainer's `reward` first (the default), as the tasks' key
      const offered = rewardKeyOrder([...next, ...(keyPicked && chosenKey ? [chosenKey] : [])]);
      if (offered.join("\u0000") === keys.join("\u0000")) return;
      keys = offered;
      fillKeys();
    },
  };
}

export function sameFilter(a: RowFilter, b: RowFilter): boolean {
  return new URLSearchParams(filterParams(a)).toString() === new URLSearchParams(filterParams(b)).toString();
}

function writeUrl(f: RowFilter): void {
  const q = new URLSearchParams(location.search);
  for (const name of FILTER_PARAMS) q.delete(name);
  for (const [k, v] of filterParams(f)) q.append(k, v);
  const search = q.toString();
  history.replaceState(history.state, "", `${location.pathname}${search ? `?${search}` : ""}${location.hash}`);
}

function input(
  id: string,
  type: "text" | "number",
  placeholder: string,
  value: string | number | null,
): HTMLInputElement {
  const el = h("input.filter-input", { id, type, placeholder, "aria-label": placeholder });
  if (type === "number") el.setAttribute("step", "any");
  if (value !== null) el.value = String(value);
  return el;
}

/** A step filter as the relay writes it: `N`, `MIN..MAX`, `MIN..` or `..MAX`. */
function stepText(step: RowFilter["step"]): string | null {
  return filterParams({ ...NO_FILTER, step })[0]?.[1] ?? null;
}

/** any, train, eval (and the URL's kind when it is another). */
function kindChoice(value: string | null): HTMLSelectElement {
  const el = h("select.select", { id: "filter-kind", "aria-label": "Kind" });
  const kinds = value !== null && !KINDS.includes(value) ? [...KINDS, value] : KINDS;
  el.append(h("option", { value: "" }, "any"));
  for (const k of kinds) el.append(h("option", { value: k, selected: k === value ? true : undefined }, k));
  return el;
}

/** any / yes / no, as the relay's `1` / `0`. */
function choice(id: string, label: string, value: boolean | null): HTMLSelectElement {
  const el = h("select.select", { id, "aria-label": label });
  for (const [v, text] of [
    ["", "any"],
    ["1", "yes"],
    ["0", "no"],
  ] as const) {
    el.append(
      h("option", { value: v, selected: (value === null ? "" : value ? "1" : "0") === v ? true : undefined }, text),
    );
  }
  return el;
}

function labelled(text: string, control: HTMLElement, wide = false): HTMLElement {
  return h(wide ? "label.filter-field.wide" : "label.filter-field", null, h("span.seg-label", null, text), control);
}

// A run's rollout groups and its per-task results, from the relay's pages (they need a token that
// covers the whole run, as the aggregates do, so the run page shows them only with aggregates):
//
// - groups (`GET /v1/runs/{run}/groups?sort=&limit=&cursor=`): id (opens the group), task, size,
//   finished, the trainer's reward and each key's mean ± std, the reward's spread (max − min); ordered by the
//   relay (spread, size or task),
//   paged with "show more";
// - tasks (`GET /v1/runs/{run}/tasks?key=&threshold=&limit=&cursor=`): rollouts, solve rate at the
//   chosen reward key (the trainer's `reward` unless another is picked) and threshold, that key's
//   mean (the column named after it), mean turns, mean tokens.
//
// Both are paged tables (paged-table.ts): they re-read what they show (from the top, as many rows
// as are loaded) when the run's aggregates change, at most every REFRESH_MS.

import type { GroupSort, GroupSummary, GroupsPage } from "../../clients/typescript/groups.js";
import type { RunAggregates, TaskSummary, TasksPage } from "../../src/protocol/index.js";
import { REWARD_DEFINITION, TOTAL_KEY } from "../../src/protocol/index.js";
import { getJson } from "./api.js";
import { fmtNumber, h } from "./dom.js";
import { groupHref } from "./links.js";
import { pagedTable } from "./paged-table.js";
import { rewardChip } from "./reward-chip.js";
import { rewardKeyOrder } from "./reward-choice.js";
import { percent } from "./run-stats.js";
import { segmented } from "./segmented.js";
import { kindChip } from "./stage-chip.js";
import { TURNS_HINT } from "./turns.js";

/** Groups asked per page (and per "show more"). */
export const GROUPS_PAGE = 10;
/** Tasks asked per page. */
export const TASKS_PAGE = 25;

const SORTS: Array<[GroupSort, string]> = [
  ["spread", "spread"],
  ["size", "size"],
  ["task", "task"],
];

const num = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined ? "–" : fmtNumber(Math.round(v * 10 ** digits) / 10 ** digits);
const oneDecimal = (v: number) => (Math.round(v * 10) / 10).toLocaleString("en-US");

export interface RunSection {
  el: HTMLElement;
  /** The run's aggregates changed (null: the token does not cover the whole run; the section hides). */
  update(a: RunAggregates | null): void;
  destroy(): void;
}

/** A group counts as zero-variance when it is finished, has two or more finished rollouts, and no reward key varies. */
function zeroVariance(g: GroupSummary): boolean {
  return (
    g.live === 0 &&
    g.finished >= 2 &&
    Object.keys(g.rewards).length > 0 &&
    Object.values(g.rewards).every((r) => r.min === r.max)
  );
}

export function runGroups(run: string): RunSection {
  const base = `/v1/runs/${encodeURIComponent(run)}/groups`;
  let sort: GroupSort = "spread";
  let totals: Pick<GroupsPage, "groups_total"> | null = null;
  const note = h("span.muted.small", { id: "groups-shown", "aria-live": "polite" });
  const table = pagedTable<GroupSummary>({
    page: GROUPS_PAGE,
    async fetchPage(limit, cursor) {
      const q = new URLSearchParams({ sort, limit: String(limit) });
      if (cursor) q.set("cursor", cursor);
      const p = await getJson<GroupsPage>(`${base}?${q}`);
      totals = p;
      return { items: p.groups, cursor: p.cursor };
    },
    table: { sel: "div.g-list", id: "groups", label: "rollout groups of the run", bodySel: "div.g-body" },
    head: groupsHead(),
    row: (g) => groupRow(run, g),
    emptyId: "groups-empty",
    moreId: "groups-more",
    failed: "Could not list the groups",
    none: "No rollout groups in this run yet.",
    drawn(s) {
      const total = totals?.groups_total ?? 0;
      note.textContent =
        s.loaded && total > 0
          ? `${s.items.length.toLocaleString("en-US")} of ${total.toLocaleString("en-US")} group${total === 1 ? "" : "s"}`
          : "";
    },
  });
  const order = segmented("gsort", "order the groups by", SORTS, sort, (v) => {
    sort = v;
    el.dataset.sort = v;
    table.restart();
  });
  const el = h(
    "section.run-groups",
    { id: "run-groups", "aria-label": "rollout groups", hidden: true },
    h("div.section-head", null, h("h2", null, "Groups"), note),
    h("div.toolbar", null, h("div.seg-group", null, h("span.seg-label", null, "Sort"), order)),
    table.table,
    table.foot,
  );
  el.dataset.sort = sort;
  table.attach(el);
  return {
    el,
    update(a) {
      el.hidden = a === null;
      if (!a) return;
      // re-read when the run's groups or its rollouts changed
      const rewardCounts = a.rewards && Object.fromEntries(Object.entries(a.rewards).map(([k, r]) => [k, r.count]));
      table.changed(JSON.stringify([a.groups ?? null, a.counts, a.episodes, rewardCounts]));
    },
    destroy: () => table.destroy(),
  };
}

function groupsHead(): HTMLElement {
  return h(
    "div.g-row.g-head",
    { role: "row" },
    h("span", { role: "columnheader" }, "Group"),
    h("span", { role: "columnheader" }, "Task"),
    h(
      "span.h-identity",
      { role: "columnheader", title: "the trainer's step and kind its rollouts were dispatched for" },
      "Step",
    ),
    h("span.num", { role: "columnheader" }, "Size"),
    h("span.num", { role: "columnheader" }, "Finished"),
    h(
      "span",
      {
        role: "columnheader",
        title: "the trainer's reward (first), then each key, over the finished rollouts: mean ± population std",
      },
      "Rewards (mean ± std)",
    ),
    h(
      "span.num",
      {
        role: "columnheader",
        title:
          "max − min of the trainer's reward over the finished rollouts: 0 is no learning signal (all advantages 0)",
      },
      "Reward spread",
    ),
  );
}

function groupRow(run: string, g: GroupSummary): HTMLElement {
  const zero = zeroVariance(g);
  return h(
    "div.g-row",
    {
      role: "row",
      "data-group": g.id,
      "data-task": g.task ?? "",
      "data-size": g.size,
      "data-finished": g.finished,
      "data-spread": g.spread === null ? "" : g.spread,
      "data-zero": zero ? "true" : "false",
      "data-step": g.step ?? "",
      "data-kind": g.kind ?? "",
    },
    h(
      "span.cell-group",
      { role: "cell" },
      h("a.g-id", { href: groupHref(run, g.id), "data-nav": true, title: g.id }, g.id),
      zero
        ? h(
            "span.chip.incomplete",
            { title: "every finished rollout got the same rewards: all advantages are 0" },
            "zero variance",
          )
        : null,
    ),
    h("span.cell-task", { role: "cell", title: g.task ?? "" }, g.task ?? h("span.muted", null, "–")),
    h(
      "span.cell-gstep.c-identity",
      { role: "cell" },
      g.step === null ? h("span.muted", null, "–") : [h("span.n-k", null, "step "), h("strong", null, String(g.step))],
      g.kind ? [" ", kindChip(g.kind)] : null,
    ),
    h("span.cell-n.num", { role: "cell", "data-k": "size" }, h("span.n-k", null, "size "), String(g.size)),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "finished" },
      h("span.n-k", null, "finished "),
      String(g.finished),
      g.failed ? h("span.n-sub.bad", null, ` · ${g.failed} failed`) : null,
      g.live ? h("span.n-sub.live", null, ` · ${g.live} live`) : null,
    ),
    h("span.cell-stats", { role: "cell" }, rewardCells(g)),
    h("span.cell-spread.num", { role: "cell" }, h("span.n-k", null, "spread "), num(g.spread)),
  );
}

function rewardCells(g: GroupSummary): HTMLElement | HTMLElement[] {
  if (Object.keys(g.rewards).length === 0 && g.mean_reward === null) return h("span.muted", null, "no rewards yet");
  // the trainer's reward first (what GRPO normalises on); a bare-number reward, the key "reward", shown once as it
  const total =
    g.mean_reward === null ? [] : [[TOTAL_KEY, g.mean_reward, g.std_reward ?? 0, REWARD_DEFINITION] as const];
  const keys = Object.entries(g.rewards)
    .filter(([k]) => total.length === 0 || k !== TOTAL_KEY)
    .map(([k, r]) => [k, r.mean, r.std, `min ${num(r.min)} · max ${num(r.max)}`] as const);
  // coloured by the mean
  return [...total, ...keys].map(([k, mean, std, title]) =>
    rewardChip(k, mean, `${num(mean)} ± ${num(std)}`, { attrs: { "data-mean": mean, "data-std": std, title } }),
  );
}

export function runTasks(run: string): RunSection {
  const base = `/v1/runs/${encodeURIComponent(run)}/tasks`;
  let key = "";
  let threshold = 1;
  const meanHead = h(
    "span.num",
    { role: "columnheader", id: "tasks-mean-head", title: "mean score of the key over the finished rollouts" },
    "Mean",
  );
  const nameMean = () => {
    meanHead.textContent = key ? `Mean ${key}` : "Mean";
  };
  const table = pagedTable<TaskSummary>({
    page: TASKS_PAGE,
    async fetchPage(limit, cursor) {
      const q = new URLSearchParams({ limit: String(limit), threshold: String(threshold) });
      if (key) q.set("key", key);
      if (cursor) q.set("cursor", cursor);
      const p = await getJson<TasksPage>(`${base}?${q}`);
      return { items: p.tasks, cursor: p.cursor };
    },
    table: { sel: "div.t-list", id: "tasks", label: "results per task", bodySel: "div.t-body" },
    head: tasksHead(meanHead),
    row: (t) => taskRow(t, key),
    emptyId: "tasks-empty",
    moreId: "tasks-more",
    failed: "Could not list the tasks",
    none: "No rollout has a task yet.",
  });
  const keys = keyChoice((k) => {
    key = k;
    el.dataset.key = k;
    nameMean();
    table.restart();
  });
  const thresholdInput = thresholdField((v) => {
    threshold = v;
    el.dataset.threshold = String(v);
    table.restart();
  });
  const el = h(
    "section.run-tasks",
    { id: "run-tasks", "aria-label": "results per task", hidden: true },
    h("div.section-head", null, h("h2", null, "Tasks")),
    tasksToolbar(keys.el, thresholdInput.el),
    table.table,
    table.foot,
  );
  el.dataset.threshold = "1";
  table.attach(el);
  return {
    el,
    update(a) {
      el.hidden = a === null;
      if (!a) return;
      const offered = keys.set(Object.keys(a.rewards));
      const keyChanged = offered !== null && offered !== key;
      if (offered !== null) {
        key = offered;
        el.dataset.key = key;
        nameMean();
      }
      const means = Object.fromEntries(Object.entries(a.rewards).map(([x, r]) => [x, [r.count, r.mean]]));
      table.changed(JSON.stringify([a.counts, a.episodes, a.groups ?? null, means]), keyChanged);
    },
    destroy() {
      table.destroy();
      thresholdInput.stop();
    },
  };
}

function tasksToolbar(keys: HTMLElement, threshold: HTMLElement): HTMLElement {
  return h(
    "div.toolbar",
    null,
    h("label.seg-group", null, h("span.seg-label", null, "Key"), keys),
    h("label.seg-group", null, h("span.seg-label", null, "Solved at ≥"), threshold),
  );
}

/** The reward key the solve rate is measured on: a select of the run's keys. */
function keyChoice(onPick: (key: string) => void): { el: HTMLSelectElement; set(keys: string[]): string | null } {
  const el = h("select.select", { id: "task-key", "aria-label": "reward key the solve rate is measured on" });
  // until the reader picks one, the first key (the trainer's `reward` when the run has it), as the API defaults
  let picked = false;
  el.addEventListener("change", () => {
    picked = true;
    onPick(el.value);
  });
  let shown: string[] = [];
  return {
    el,
    /**
     * Offer `keys`, `reward` first (the picked one kept while offered, else the first): the key chosen now, or null
     * when the keys are the same.
     */
    set(offered) {
      const keys = rewardKeyOrder(offered);
      if (keys.join("\n") === shown.join("\n")) return null;
      const want = picked && keys.includes(el.value) ? el.value : (keys[0] ?? "");
      shown = keys;
      el.replaceChildren(
        ...(keys.length
          ? keys.map((k) => h("option", { value: k }, k))
          : [h("option", { value: "" }, "(no reward yet)")]),
      );
      el.value = want;
      el.disabled = keys.length === 0;
      return want;
    },
  };
}

/** The solve threshold: a number field, taken 250 ms after typing stops. */
function thresholdField(onChange: (v: number) => void): { el: HTMLInputElement; stop(): void } {
  const el = h("input.threshold", {
    id: "task-threshold",
    type: "number",
    step: "any",
    value: "1",
    inputmode: "decimal",
    "aria-label": "solve threshold: a rollout solves its task when the key's score is at or above it",
  });
  let threshold = 1;
  let typing: ReturnType<typeof setTimeout> | null = null;
  el.addEventListener("input", () => {
    if (typing) clearTimeout(typing);
    typing = setTimeout(() => {
      const v = el.valueAsNumber;
      if (!Number.isFinite(v) || v === threshold) return;
      threshold = v;
      onChange(v);
    }, 250);
  });
  return {
    el,
    stop() {
      if (typing) clearTimeout(typing);
    },
  };
}

function tasksHead(meanHead: HTMLElement): HTMLElement {
  return h(
    "div.t-row.t-head",
    { role: "row" },
    h("span", { role: "columnheader" }, "Task"),
    h("span.num", { role: "columnheader" }, "Rollouts"),
    h(
      "span.num",
      {
        role: "columnheader",
        title: "finished rollouts whose key scored at or above the threshold, over the finished rollouts with that key",
      },
      "Solve rate",
    ),
    meanHead,
    h("span.num", { role: "columnheader", title: `${TURNS_HINT}, per rollout` }, "Mean turns"),
    h("span.num", { role: "columnheader" }, "Mean tokens"),
  );
}

function taskRow(t: TaskSummary, key: string): HTMLElement {
  return h(
    "div.t-row",
    {
      role: "row",
      "data-task": t.task,
      "data-solve-rate": t.solve_rate === null ? "" : t.solve_rate,
      "data-rollouts": t.rollouts,
    },
    h("span.cell-task", { role: "cell", title: t.task }, t.task),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "rollouts" },
      h("span.n-k", null, "rollouts "),
      String(t.rollouts),
      t.failed ? h("span.n-sub.bad", null, ` · ${t.failed} failed`) : null,
    ),
    h(
      "span.cell-n.num.cell-solve",
      { role: "cell", "data-k": "solve_rate" },
      h("span.n-k", null, "solved "),
      t.solve_rate === null ? "–" : percent(t.solve_rate),
    ),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "mean_reward" },
      h("span.n-k", null, `mean ${key || "reward"} `),
      num(t.mean_reward),
    ),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "mean_turns" },
      h("span.n-k", null, "turns "),
      t.mean_turns === null ? "–" : oneDecimal(t.mean_turns),
    ),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "mean_tokens" },
      h("span.n-k", null, "tokens "),
      oneDecimal(t.mean_tokens),
    ),
  );
}

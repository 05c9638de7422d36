// A run's rollout groups and its per-task results, from the relay's pages (they need a token that
// covers the whole run, as the aggregates do, so the run page shows them only with aggregates):
//
// - groups (`GET /v1/runs/{run}/groups?sort=&limit=&cursor=`): id (opens the group), task, size,
//   finished, per reward key mean ± std, spread; ordered by the relay (spread, size or task),
//   paged with "show more";
// - tasks (`GET /v1/runs/{run}/tasks?key=&threshold=&limit=&cursor=`): rollouts, solve rate at the
//   chosen reward key and threshold, mean reward, mean turns, mean tokens.
//
// Both re-read what they show (from the top, as many rows as are loaded) when the run's aggregates
// change, at most every REFRESH_MS.
import { getJson } from "./api.js";
import { fmtNumber, h } from "./dom.js";
import { segmented } from "./segmented.js";
import { groupHref } from "./links.js";
import { percent } from "./run-stats.js";
import type { GroupSort, GroupSummary, GroupsPage } from "../../clients/typescript/groups.js";
import type { RunAggregates } from "../../src/registry/aggregates.js";

/** One task's results (`GET /v1/runs/{run}/tasks`, src/registry/group-store.ts). */
interface TaskSummary {
  task: string;
  rollouts: number;
  finished: number;
  failed: number;
  mean_turns: number;
  mean_tokens: number;
  mean_reward: number | null;
  solve_rate: number | null;
}

/** Groups asked per page (and per "show more"). */
export const GROUPS_PAGE = 10;
/** Tasks asked per page. */
export const TASKS_PAGE = 25;
/** The relay's largest page: a refresh re-reads at most this many rows. */
const MAX_PAGE = 500;
/** Re-read at most this often while the run changes. */
const REFRESH_MS = 1500;

const SORTS: Array<[GroupSort, string]> = [
  ["spread", "spread"],
  ["size", "size"],
  ["task", "task"],
];

const num = (v: number | null | undefined, digits = 3) => (v === null || v === undefined ? "–" : fmtNumber(Math.round(v * 10 ** digits) / 10 ** digits));
const oneDecimal = (v: number) => (Math.round(v * 10) / 10).toLocaleString("en-US");

/** A paged list that re-reads itself from the top when asked (serialised: one request at a time). */
function pagedList<T>(fetchPage: (limit: number, cursor: string | null) => Promise<{ items: T[]; cursor: string | null }>, page: number, draw: () => void) {
  const state = { items: [] as T[], cursor: null as string | null, loaded: false, loading: false, error: null as string | null };
  let pending: "more" | "reload" | null = null;
  let stopped = false;
  async function run(kind: "more" | "reload"): Promise<void> {
    if (stopped) return;
    if (state.loading) {
      pending = pending === "reload" || kind === "reload" ? "reload" : "more";
      return;
    }
    state.loading = true;
    draw();
    try {
      if (kind === "reload") {
        const limit = Math.min(MAX_PAGE, Math.max(page, state.items.length));
        const p = await fetchPage(limit, null);
        state.items = p.items;
        state.cursor = p.cursor;
      } else if (state.cursor !== null) {
        const p = await fetchPage(page, state.cursor);
        state.items = [...state.items, ...p.items];
        state.cursor = p.cursor;
      }
      state.loaded = true;
      state.error = null;
    } catch (e) {
      state.error = e instanceof Error ? e.message : String(e);
    } finally {
      state.loading = false;
      if (!stopped) draw();
    }
    const next = pending;
    pending = null;
    if (next) void run(next);
  }
  return {
    state,
    reload: () => void run("reload"),
    /** From the top with the first page only (a new order or a new question). */
    restart() {
      state.items = [];
      state.cursor = null;
      state.loaded = false;
      void run("reload");
    },
    more: () => void run("more"),
    stop() {
      stopped = true;
    },
  };
}

/** Calls `fn` now, or once REFRESH_MS after the last call when called again sooner. */
function throttle(fn: () => void): { poke(): void; stop(): void } {
  let last = 0;
  let timer: ReturnType<typeof setTimeout> | null = null;
  return {
    poke() {
      if (timer) return;
      const wait = Math.max(0, last + REFRESH_MS - Date.now());
      timer = setTimeout(() => {
        timer = null;
        last = Date.now();
        fn();
      }, wait);
    },
    stop() {
      if (timer) clearTimeout(timer);
    },
  };
}

export interface RunSection {
  el: HTMLElement;
  /** The run's aggregates changed (null: the token does not cover the whole run; the section hides). */
  update(a: RunAggregates | null): void;
  destroy(): void;
}

/** A group counts as zero-variance when it is finished, has two or more finished rollouts, and no reward key varies. */
function zeroVariance(g: GroupSummary): boolean {
  return g.live === 0 && g.finished >= 2 && Object.keys(g.rewards).length > 0 && Object.values(g.rewards).every((r) => r.min === r.max);
}

export function runGroups(run: string): RunSection {
  const base = `/v1/runs/${encodeURIComponent(run)}/groups`;
  let sort: GroupSort = "spread";
  let totals: Pick<GroupsPage, "groups_total" | "finished_groups" | "zero_variance_groups" | "zero_variance_share"> | null = null;
  let lastKey = "";
  let frame = 0;

  const list = pagedList<GroupSummary>(
    async (limit, cursor) => {
      const q = new URLSearchParams({ sort, limit: String(limit) });
      if (cursor) q.set("cursor", cursor);
      const p = await getJson<GroupsPage>(`${base}?${q}`);
      totals = p;
      return { items: p.groups, cursor: p.cursor };
    },
    GROUPS_PAGE,
    () => schedule(),
  );
  const refresh = throttle(() => list.reload());

  const head = h(
    "div.g-row.g-head",
    { role: "row" },
    h("span", { role: "columnheader" }, "Group"),
    h("span", { role: "columnheader" }, "Task"),
    h("span.num", { role: "columnheader" }, "Size"),
    h("span.num", { role: "columnheader" }, "Finished"),
    h("span", { role: "columnheader", title: "per reward key, over the finished rollouts: mean ± population std" }, "Rewards (mean ± std)"),
    h("span.num", { role: "columnheader", title: "the largest max − min over the reward keys" }, "Spread"),
  );
  const body = h("div.g-body", { role: "rowgroup" });
  const empty = h("div.empty", { id: "groups-empty" });
  const more = h("button.btn.more", { type: "button", id: "groups-more" }, "Show more");
  more.addEventListener("click", () => list.more());
  const note = h("span.muted.small", { id: "groups-shown", "aria-live": "polite" });
  const el = h(
    "section.run-groups",
    { id: "run-groups", "aria-label": "rollout groups", hidden: true },
    h("div.section-head", null, h("h2", null, "Groups"), note),
    h(
      "div.toolbar",
      null,
      h(
        "div.seg-group",
        null,
        h("span.seg-label", null, "Sort"),
        segmented("gsort", "order the groups by", SORTS, sort, (v) => {
          sort = v;
          el.dataset.sort = v;
          list.restart();
        }),
      ),
    ),
    h("div.g-list", { id: "groups", role: "table", "aria-label": "rollout groups of the run" }, head, body, empty),
    h("div.list-foot", null, more),
  );
  el.dataset.sort = sort;

  function schedule(): void {
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  }

  function render(): void {
    const s = list.state;
    body.replaceChildren(...s.items.map(row));
    el.dataset.loading = String(s.loading);
    el.dataset.loaded = String(s.loaded);
    empty.hidden = s.items.length > 0;
    empty.textContent = !s.loaded ? (s.error ? `Could not list the groups: ${s.error}` : "Loading…") : "No rollout groups in this run yet.";
    head.hidden = s.loaded && s.items.length === 0;
    note.textContent =
      s.loaded && totals && totals.groups_total > 0
        ? `${s.items.length.toLocaleString("en-US")} of ${totals.groups_total.toLocaleString("en-US")} group${totals.groups_total === 1 ? "" : "s"}`
        : "";
    more.hidden = s.cursor === null;
    more.disabled = s.loading;
    more.textContent = s.loading ? "Loading…" : s.error ? "Retry" : "Show more";
  }

  function row(g: GroupSummary): HTMLElement {
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
      },
      h(
        "span.cell-group",
        { role: "cell" },
        h("a.g-id", { href: groupHref(run, g.id), "data-nav": true, title: g.id }, g.id),
        zero ? h("span.chip.incomplete", { title: "every finished rollout got the same rewards: all advantages are 0" }, "zero variance") : null,
      ),
      h("span.cell-task", { role: "cell", title: g.task ?? "" }, g.task ?? h("span.muted", null, "–")),
      h("span.cell-n.num", { role: "cell", "data-k": "size" }, h("span.n-k", null, "size "), String(g.size)),
      h(
        "span.cell-n.num",
        { role: "cell", "data-k": "finished" },
        h("span.n-k", null, "finished "),
        String(g.finished),
        g.failed ? h("span.n-sub.bad", null, ` · ${g.failed} failed`) : null,
        g.live ? h("span.n-sub.live", null, ` · ${g.live} live`) : null,
      ),
      h(
        "span.cell-stats",
        { role: "cell" },
        Object.keys(g.rewards).length
          ? Object.entries(g.rewards).map(([k, r]) =>
              h(
                "span.reward",
                { "data-key": k, "data-mean": r.mean, "data-std": r.std, title: `min ${num(r.min)} · max ${num(r.max)}` },
                h("span.reward-k", null, k),
                h("span.reward-v", null, `${num(r.mean)} ± ${num(r.std)}`),
              ),
            )
          : h("span.muted", null, "no rewards yet"),
      ),
      h("span.cell-spread.num", { role: "cell" }, h("span.n-k", null, "spread "), num(g.spread)),
    );
  }

  return {
    el,
    update(a) {
      el.hidden = a === null;
      if (!a) return;
      // re-read when the run's groups or its rollouts changed
      const key = JSON.stringify([
        a.groups ?? null,
        a.counts,
        a.episodes,
        a.rewards && Object.fromEntries(Object.entries(a.rewards).map(([k, r]) => [k, r.count])),
      ]);
      if (key === lastKey) return;
      const first = lastKey === "";
      lastKey = key;
      if (first) list.reload();
      else refresh.poke();
    },
    destroy() {
      list.stop();
      refresh.stop();
      if (frame) cancelAnimationFrame(frame);
    },
  };
}

export function runTasks(run: string): RunSection {
  const base = `/v1/runs/${encodeURIComponent(run)}/tasks`;
  let key = "";
  let threshold = 1;
  let keys: string[] = [];
  let lastKey = "";
  let frame = 0;

  const list = pagedList<TaskSummary>(
    async (limit, cursor) => {
      const q = new URLSearchParams({ limit: String(limit), threshold: String(threshold) });
      if (key) q.set("key", key);
      if (cursor) q.set("cursor", cursor);
      const p = await getJson<{ tasks: TaskSummary[]; cursor: string | null }>(`${base}?${q}`);
      return { items: p.tasks, cursor: p.cursor };
    },
    TASKS_PAGE,
    () => schedule(),
  );
  const refresh = throttle(() => list.reload());

  const keySelect = h("select.select", { id: "task-key", "aria-label": "reward key the solve rate is measured on" });
  keySelect.addEventListener("change", () => {
    key = keySelect.value;
    el.dataset.key = key;
    list.restart();
  });
  const thresholdInput = h("input.threshold", {
    id: "task-threshold",
    type: "number",
    step: "any",
    value: "1",
    inputmode: "decimal",
    "aria-label": "solve threshold: a rollout solves its task when the key's score is at or above it",
  });
  let typing: ReturnType<typeof setTimeout> | null = null;
  thresholdInput.addEventListener("input", () => {
    if (typing) clearTimeout(typing);
    typing = setTimeout(() => {
      const v = thresholdInput.valueAsNumber;
      if (!Number.isFinite(v) || v === threshold) return;
      threshold = v;
      el.dataset.threshold = String(v);
      list.restart();
    }, 250);
  });

  const head = h(
    "div.t-row.t-head",
    { role: "row" },
    h("span", { role: "columnheader" }, "Task"),
    h("span.num", { role: "columnheader" }, "Rollouts"),
    h(
      "span.num",
      { role: "columnheader", title: "finished rollouts whose key scored at or above the threshold, over the finished rollouts with that key" },
      "Solve rate",
    ),
    h("span.num", { role: "columnheader", title: "mean score of the key over the finished rollouts" }, "Mean reward"),
    h("span.num", { role: "columnheader", title: "model calls per rollout" }, "Mean turns"),
    h("span.num", { role: "columnheader" }, "Mean tokens"),
  );
  const body = h("div.t-body", { role: "rowgroup" });
  const empty = h("div.empty", { id: "tasks-empty" });
  const more = h("button.btn.more", { type: "button", id: "tasks-more" }, "Show more");
  more.addEventListener("click", () => list.more());
  const el = h(
    "section.run-tasks",
    { id: "run-tasks", "aria-label": "results per task", hidden: true },
    h("div.section-head", null, h("h2", null, "Tasks")),
    h(
      "div.toolbar",
      null,
      h("label.seg-group", null, h("span.seg-label", null, "Key"), keySelect),
      h("label.seg-group", null, h("span.seg-label", null, "Solved at ≥"), thresholdInput),
    ),
    h("div.t-list", { id: "tasks", role: "table", "aria-label": "results per task" }, head, body, empty),
    h("div.list-foot", null, more),
  );
  el.dataset.threshold = "1";

  function schedule(): void {
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  }

  function render(): void {
    const s = list.state;
    body.replaceChildren(...s.items.map(row));
    el.dataset.loading = String(s.loading);
    el.dataset.loaded = String(s.loaded);
    empty.hidden = s.items.length > 0;
    empty.textContent = !s.loaded ? (s.error ? `Could not list the tasks: ${s.error}` : "Loading…") : "No rollout has a task yet.";
    head.hidden = s.loaded && s.items.length === 0;
    more.hidden = s.cursor === null;
    more.disabled = s.loading;
    more.textContent = s.loading ? "Loading…" : s.error ? "Retry" : "Show more";
  }

  function row(t: TaskSummary): HTMLElement {
    return h(
      "div.t-row",
      { role: "row", "data-task": t.task, "data-solve-rate": t.solve_rate === null ? "" : t.solve_rate, "data-rollouts": t.rollouts },
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
      h("span.cell-n.num", { role: "cell", "data-k": "mean_reward" }, h("span.n-k", null, "mean reward "), num(t.mean_reward)),
      h("span.cell-n.num", { role: "cell", "data-k": "mean_turns" }, h("span.n-k", null, "turns "), oneDecimal(t.mean_turns)),
      h("span.cell-n.num", { role: "cell", "data-k": "mean_tokens" }, h("span.n-k", null, "tokens "), oneDecimal(t.mean_tokens)),
    );
  }

  function setKeys(next: string[]): boolean {
    if (next.join("\n") === keys.join("\n")) return false;
    keys = next;
    const want = keys.includes(key) ? key : (keys[0] ?? "");
    keySelect.replaceChildren(...(keys.length ? keys.map((k) => h("option", { value: k }, k)) : [h("option", { value: "" }, "(no reward yet)")]));
    keySelect.value = want;
    keySelect.disabled = keys.length === 0;
    const changed = want !== key;
    key = want;
    el.dataset.key = key;
    return changed;
  }

  return {
    el,
    update(a) {
      el.hidden = a === null;
      if (!a) return;
      const keyChanged = setKeys(Object.keys(a.rewards));
      const k = JSON.stringify([a.counts, a.episodes, a.groups ?? null, Object.fromEntries(Object.entries(a.rewards).map(([x, r]) => [x, [r.count, r.mean]]))]);
      if (k === lastKey && !keyChanged) return;
      const first = lastKey === "";
      lastKey = k;
      if (first || keyChanged) list.restart();
      else refresh.poke();
    },
    destroy() {
      list.stop();
      refresh.stop();
      if (typing) clearTimeout(typing);
      if (frame) cancelAnimationFrame(frame);
    },
  };
}

// A run's episode list: filter by status, sort by last update or reward, a text filter on the id.
//
// The run socket's snapshot holds the newest episodes (all of them for most runs) and its changes
// keep every row it brought current. When the snapshot was cut short, a status filter or the
// reward order cannot be answered from it: such a view pages the relay's list
// (`GET /v1/runs/{run}/episodes?status=&sort=&cursor=`) and shows rows only down to the last one a
// page brought (its "frontier"), so it never shows a hole where unloaded rows belong. Rows from
// pages and from the socket meet in one map; the newer version of a row wins.
import { authHeaders, relayUrl } from "./api.js";
import { agoSpan, fmtNumber, h, tickAges } from "./dom.js";
import { compareEntries, newer, type SortKey } from "./episode-order.js";
import { episodeHref, idInRun } from "./links.js";
import { rewardPairs } from "./model.js";
import type { IndexEntry, IndexStatus } from "../../src/registry/entry.js";

type StatusFilter = "all" | IndexStatus;
const STATUSES: Array<[StatusFilter, string]> = [
  ["all", "all"],
  ["live", "live"],
  ["finished", "finished"],
  ["failed", "failed"],
  ["finish_refused", "refused"],
];
const SORTS: Array<[SortKey, string]> = [
  ["updated", "updated"],
  ["reward", "reward"],
];
/** Rows drawn at first, and added by each "show more". */
const ROWS_STEP = 50;
/** Rows asked per page of the relay's list. */
const PAGE = 200;

/** How far one (status, sort) view is loaded. */
interface View {
  /** The last row the relay listed for this view: rows after it (in its order) may be missing. */
  frontier: IndexEntry | null;
  /** Where the next page starts (null: from the top). */
  cursor: string | null;
  /** The relay listed the view to its end. */
  end: boolean;
  loading: boolean;
  error: string | null;
}

export interface RunEpisodes {
  el: HTMLElement;
  /** The socket's first message: the newest episodes; `truncated`: the run has more. */
  snapshot(episodes: IndexEntry[], truncated: boolean): void;
  changes(upserts: IndexEntry[], deletes: string[]): void;
  /** The run's totals per status (from its aggregates; null when the token does not cover the run). */
  totals(t: (Record<IndexStatus, number> & { episodes: number }) | null): void;
  /** The list cannot be shown (refused): say why instead. */
  refuse(message: string): void;
  destroy(): void;
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

export function runEpisodes(run: string): RunEpisodes {
  const entries = new Map<string, IndexEntry>();
  /** Ids the socket deleted: a page that was already on its way must not bring them back. */
  const deleted = new Set<string>();
  const views = new Map<string, View>();
  const rowCache = new Map<string, { entry: IndexEntry; el: HTMLElement }>();
  let loaded = false;
  /** The snapshot holds the whole run (every view is complete). */
  let complete = false;
  let refused: string | null = null;
  let totals: (Record<IndexStatus, number> & { episodes: number }) | null = null;
  let status: StatusFilter = "all";
  let sort: SortKey = "updated";
  let words: string[] = [];
  let cap = ROWS_STEP;
  let frame = 0;
  let stopped = false;

  const filter = h("input.filter", { type: "search", placeholder: "Filter by episode id…", "aria-label": "filter episodes by id", id: "episode-filter" });
  filter.addEventListener("input", () => {
    words = filter.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    cap = ROWS_STEP;
    schedule();
  });
  const statusSeg = segmented("status", "status", STATUSES, status, (v) => {
    status = v;
    cap = ROWS_STEP;
    ensureLoaded();
    schedule();
  });
  const sortSeg = segmented("sort", "sort", SORTS, sort, (v) => {
    sort = v;
    cap = ROWS_STEP;
    ensureLoaded();
    schedule();
  });
  const head = h(
    "div.ep-row.ep-head",
    { role: "row" },
    h("span", { role: "columnheader" }, "Status"),
    h("span", { role: "columnheader" }, "Episode"),
    h("span.num", { role: "columnheader", title: "weighted mean of the reward scores" }, "Reward"),
    h("span", { role: "columnheader" }, "Rewards"),
    h("span", { role: "columnheader" }, "Size"),
    h("span", { role: "columnheader" }, "Updated"),
  );
  const body = h("div.ep-body", { role: "rowgroup" });
  const empty = h("div.empty", { id: "episodes-empty" });
  const more = h("button.btn.more", { type: "button", id: "episodes-more" }, "Show more");
  const shownNote = h("span.muted.small", { id: "episodes-shown", "aria-live": "polite" });
  more.addEventListener("click", () => {
    // draw more of what is loaded; when that is all drawn, load the next page too
    const known = candidates().length;
    if (known <= cap) void loadMore(view());
    cap = Math.min(cap, known) + ROWS_STEP;
    schedule();
  });
  const el = h(
    "section.run-episodes",
    { "aria-label": "episodes" },
    h("div.section-head", null, h("h2", null, "Episodes"), shownNote),
    h(
      "div.toolbar",
      null,
      filter,
      h("div.seg-group", null, h("span.seg-label", null, "Status"), statusSeg.el),
      h("div.seg-group", null, h("span.seg-label", null, "Sort"), sortSeg.el),
    ),
    h("div.ep-list", { id: "episodes", role: "table", "aria-label": "episodes of the run" }, head, body, empty),
    h("div.list-foot", null, more),
  );
  const stopAges = tickAges(el);

  function viewKey(): string {
    return `${status}|${sort}`;
  }

  function view(): View {
    let v = views.get(viewKey());
    if (!v) views.set(viewKey(), (v = { frontier: null, cursor: null, end: complete, loading: false, error: null }));
    return v;
  }

  /** Rows of the current view that are known to be in place (status, frontier), before the text filter. */
  function inView(): IndexEntry[] {
    const v = view();
    const out: IndexEntry[] = [];
    for (const e of entries.values()) {
      if (status !== "all" && e.status !== status) continue;
      if (!v.end && (v.frontier === null || compareEntries(sort, e, v.frontier) > 0)) continue;
      out.push(e);
    }
    return out.sort((a, b) => compareEntries(sort, a, b));
  }

  function candidates(): IndexEntry[] {
    const all = inView();
    if (words.length === 0) return all;
    return all.filter((e) => {
      const id = e.id.toLowerCase();
      return words.every((w) => id.includes(w));
    });
  }

  /** A view the snapshot cannot answer gets its first page. */
  function ensureLoaded(): void {
    const v = view();
    if (!v.end && v.frontier === null && !v.loading) void loadMore(v);
  }

  async function loadMore(v: View): Promise<void> {
    if (v.loading || v.end) return;
    v.loading = true;
    v.error = null;
    schedule();
    const q = new URLSearchParams({ sort, limit: String(PAGE) });
    if (status !== "all") q.set("status", status);
    const sortNow = sort;
    try {
      // a page that ends above the frontier (the snapshot already had it) is skipped over
      for (let i = 0; i < 10 && !v.end; i++) {
        if (v.cursor) q.set("cursor", v.cursor);
        const res = await fetch(new URL(`/v1/runs/${encodeURIComponent(run)}/episodes?${q}`, relayUrl), {
          headers: { accept: "application/json", ...authHeaders() },
        });
        const page = (await res.json().catch(() => null)) as { episodes?: IndexEntry[]; cursor?: string | null; message?: string } | null;
        if (!res.ok || !page || !Array.isArray(page.episodes)) throw new Error(page?.message ?? `${res.status} ${res.statusText}`);
        if (stopped || !isCurrent(v)) return;
        for (const e of page.episodes) if (!deleted.has(e.id)) entries.set(e.id, newer(entries.get(e.id), e));
        v.cursor = page.cursor ?? null;
        v.end = v.cursor === null;
        const last = page.episodes.at(-1);
        const before = v.frontier;
        if (last && (v.frontier === null || compareEntries(sortNow, last, v.frontier) > 0)) v.frontier = last;
        if (v.frontier !== before) break;
      }
    } catch (e) {
      v.error = e instanceof Error ? e.message : String(e);
    } finally {
      v.loading = false;
      schedule();
    }
  }

  /** A view object stays current until a new snapshot resets them all. */
  function isCurrent(v: View): boolean {
    for (const x of views.values()) if (x === v) return true;
    return false;
  }

  function schedule(): void {
    if (frame || stopped) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  }

  function render(): void {
    const v = view();
    const all = candidates();
    const rows = all.slice(0, cap);
    const els = rows.map(rowFor);
    body.replaceChildren(...els);
    for (const id of rowCache.keys()) if (!entries.has(id)) rowCache.delete(id);
    el.dataset.complete = String(complete || v.end);
    el.dataset.loading = String(v.loading);
    empty.hidden = rows.length > 0;
    empty.textContent =
      refused ??
      (!loaded || (v.loading && rows.length === 0)
        ? "Loading…"
        : v.error && rows.length === 0
          ? `Could not list the episodes: ${v.error}`
          : entries.size === 0
            ? "No episodes in this run yet."
            : "No episode matches the filter.");
    const total = words.length > 0 ? null : complete || v.end ? all.length : totals ? (status === "all" ? totals.episodes : totals[status]) : null;
    shownNote.textContent =
      !loaded || refused
        ? ""
        : `${rows.length.toLocaleString("en-US")}${total !== null ? ` of ${plural(total, "episode")}` : " shown"}${words.length && !(complete || v.end) ? " · the id filter searches the loaded episodes" : ""}`;
    more.hidden = refused !== null || !(all.length > cap || (!v.end && !complete && loaded));
    more.disabled = v.loading;
    more.textContent = v.loading ? "Loading…" : v.error ? "Retry" : "Show more";
  }

  function rowFor(e: IndexEntry): HTMLElement {
    const hit = rowCache.get(e.id);
    if (hit && hit.entry === e) return hit.el;
    const el = row(e);
    rowCache.set(e.id, { entry: e, el });
    return el;
  }

  function row(e: IndexEntry): HTMLElement {
    const rewards = rewardPairs(e.rewards);
    return h(
      "a.ep-row",
      { href: episodeHref(e.id), "data-nav": true, role: "row", "data-id": e.id, "data-status": e.status, "data-reward": e.reward === null ? "" : e.reward },
      h("span.cell-status", { role: "cell" }, h(`span.pill.s-${e.status}` as "span", null, e.status.replace("_", " "))),
      h(
        "span.cell-id",
        { role: "cell" },
        h("span.ep-id", { title: e.id }, idInRun(e.id, run)),
        e.error ? h("span.ep-error", { title: e.error }, e.error) : null,
      ),
      h("span.cell-reward.num", { role: "cell" }, e.reward === null ? h("span.muted", null, "–") : h("span.reward-mean", null, fmtNumber(e.reward))),
      h(
        "span.cell-rewards",
        { role: "cell" },
        rewards.length ? rewards.map(([k, v]) => h("span.reward", null, h("span.reward-k", null, k), h("span.reward-v", null, v))) : null,
      ),
      h(
        "span.cell-size.muted",
        { role: "cell" },
        `${plural(e.traces, "trace")} · ${plural(e.nodes, "node")} · ${plural(e.calls, "call")}${e.tokens ? ` · ${e.tokens.toLocaleString("en-US")} tok` : ""}`,
      ),
      h("span.cell-age", { role: "cell" }, agoSpan(e.updated), h("span.age-sub.muted", null, "started ", agoSpan(e.created, "age-inline"))),
    );
  }

  return {
    el,
    snapshot(episodes, truncated) {
      entries.clear();
      deleted.clear();
      views.clear();
      rowCache.clear();
      for (const e of episodes) entries.set(e.id, e);
      complete = !truncated;
      loaded = true;
      refused = null;
      // the snapshot is the top of the default view
      const top: View = { frontier: null, cursor: null, end: complete, loading: false, error: null };
      if (!complete) top.frontier = [...episodes].sort((a, b) => compareEntries("updated", a, b)).at(-1) ?? null;
      views.set("all|updated", top);
      ensureLoaded();
      schedule();
    },
    changes(upserts, deletes) {
      for (const e of upserts) {
        deleted.delete(e.id);
        entries.set(e.id, newer(entries.get(e.id), e));
      }
      for (const id of deletes) {
        entries.delete(id);
        deleted.add(id);
      }
      if (upserts.length || deletes.length) schedule();
    },
    totals(t) {
      totals = t;
      schedule();
    },
    refuse(message) {
      refused = message;
      loaded = true;
      entries.clear();
      schedule();
    },
    destroy() {
      stopped = true;
      if (frame) cancelAnimationFrame(frame);
      stopAges();
    },
  };
}

/** A row of toggle buttons (one pressed); `data-<name>` on each names its value. */
function segmented<T extends string>(name: string, label: string, options: Array<[T, string]>, initial: T, onPick: (v: T) => void): { el: HTMLElement } {
  const el = h("div.segmented", { role: "group", "aria-label": label, "data-group": name });
  for (const [value, text] of options) {
    const b = h("button", { type: "button", [`data-${name}`]: value, "aria-pressed": value === initial ? "true" : "false" }, text);
    b.addEventListener("click", () => {
      for (const x of el.querySelectorAll("button")) x.setAttribute("aria-pressed", x === b ? "true" : "false");
      onPick(value);
    });
    el.append(b);
  }
  return { el };
}

// A run's episode list: filter by status and the relay's filters (task, stop condition, truncated,
// errored, a reward range, turns and tokens, the trainer's kind, env, step and policy version:
// episode-filters.ts), sort by last update, reward or step (kept in the page URL as `?sort=`),
// a text filter on the id; above it, the live rollouts as a table of their own (run-live.ts). What is known per view,
// and the relay's pages, live in
// episode-views.ts; this draws it (at most once a frame) and reads the controls.
import { h, plural, tickAges } from "./dom.js";
import { episodeFilters, filterFromUrl } from "./episode-filters.js";
import type { SortKey } from "./episode-order.js";
import { episodeListHead, episodeRow } from "./episode-row.js";
import { EpisodeViews, type StatusFilter, type View, type ViewQuery } from "./episode-views.js";
import { pickTray, syncPickBoxes } from "./pick-tray.js";
import { runLive } from "./run-live.js";
import "./styles/episode-list.css";
import type { IndexEntry, IndexStatus } from "../../src/protocol/index.js";
import { isFiltered, NO_FILTER } from "../../src/protocol/index.js";
import { segmented } from "./segmented.js";

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
  ["step", "step"],
];

/** The sort in the page URL (`?sort=reward`), else by update. */
function sortFromUrl(): SortKey {
  const s = new URLSearchParams(location.search).get("sort");
  return SORTS.find(([k]) => k === s)?.[0] ?? "updated";
}

function writeSort(sort: SortKey): void {
  const q = new URLSearchParams(location.search);
  if (sort === "updated") q.delete("sort");
  else q.set("sort", sort);
  const search = q.toString();
  history.replaceState(history.state, "", `${location.pathname}${search ? `?${search}` : ""}${location.hash}`);
}
/** Rows drawn at first, and added by each "show more". */
const ROWS_STEP = 50;
/** The live table's rows: every live one, whatever the list's filter. */
const LIVE: ViewQuery = { status: "live", sort: "updated", filter: NO_FILTER };

type Totals = Record<IndexStatus, number> & { episodes: number };

export interface RunEpisodes {
  el: HTMLElement;
  /** The live rollouts' table (placed by the page). */
  liveEl: HTMLElement;
  /** The socket's first message: the newest episodes; `truncated`: the run has more. */
  snapshot(episodes: IndexEntry[], truncated: boolean): void;
  changes(upserts: IndexEntry[], deletes: string[]): void;
  /** The run's reward keys (from its aggregates), offered by the reward filter. */
  rewardKeys(keys: string[]): void;
  /** The run's totals per status (from its aggregates; null when the token does not cover the run). */
  totals(t: Totals | null): void;
  /** The list cannot be shown (refused): say why instead. */
  refuse(message: string): void;
  destroy(): void;
}

/** `identity(has)`: whether any known row carries the trainer's identity (a run without one hides those columns). */
export function runEpisodes(run: string, identity: (has: boolean) => void = () => {}): RunEpisodes {
  const known = new EpisodeViews(run, () => schedule());
  const live = runLive(run);
  const rowCache = new Map<string, { entry: IndexEntry; el: HTMLElement }>();
  const q: ViewQuery = { status: "all", sort: sortFromUrl(), filter: filterFromUrl() };
  let loaded = false;
  let refused: string | null = null;
  let totals: Totals | null = null;
  let words: string[] = [];
  let cap = ROWS_STEP;
  let frame = 0;
  let stopped = false;
  let hasIdentity: boolean | null = null;

  /** The view changed (a control): draw from the top, and ask the relay when the view needs it. */
  const reset = () => {
    cap = ROWS_STEP;
    known.ensureLoaded(q);
    schedule();
  };
  const idFilter = h("input.filter", {
    type: "search",
    placeholder: "Filter by episode id…",
    "aria-label": "filter episodes by id",
    id: "episode-filter",
  });
  idFilter.addEventListener("input", () => {
    words = idFilter.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    cap = ROWS_STEP;
    schedule();
  });
  const filters = episodeFilters(q.filter, (f) => {
    q.filter = f;
    reset();
  });
  const body = h("div.ep-body", { role: "rowgroup" });
  const empty = h("div.empty", { id: "episodes-empty" });
  const more = h("button.btn.more", { type: "button", id: "episodes-more" }, "Show more");
  const shownNote = h("span.muted.small", { id: "episodes-shown", "aria-live": "polite" });
  more.addEventListener("click", () => {
    // draw more of what is loaded; when that is all drawn, load the next page too
    const n = candidates().length;
    if (n <= cap) void known.loadMore(q);
    cap = Math.min(cap, n) + ROWS_STEP;
    schedule();
  });
  const tray = pickTray(run);
  const el = h(
    "section.run-episodes",
    { "aria-label": "episodes" },
    h("div.section-head", null, h("h2", null, "Episodes"), shownNote),
    tray.el,
    h(
      "div.toolbar",
      null,
      idFilter,
      segGroup(
        "Status",
        segmented("status", "status", STATUSES, q.status, (v) => {
          q.status = v;
          reset();
        }),
      ),
      segGroup(
        "Sort",
        segmented("sort", "sort", SORTS, q.sort, (v) => {
          q.sort = v;
          writeSort(v);
          reset();
        }),
      ),
    ),
    filters.el,
    h(
      "div.ep-list",
      { id: "episodes", role: "table", "aria-label": "episodes of the run" },
      episodeListHead(),
      body,
      empty,
    ),
    h("div.list-foot", null, more),
  );
  const stopAges = tickAges(el);

  /** The view's rows, narrowed by the id filter (which only ever searches what is loaded). */
  function candidates(): IndexEntry[] {
    const all = known.rows(q);
    if (words.length === 0) return all;
    return all.filter((e) => {
      const id = e.id.toLowerCase();
      return words.every((w) => id.includes(w));
    });
  }

  function schedule(): void {
    if (frame || stopped) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  }

  function render(): void {
    noteIdentity();
    live.draw(refused ? [] : known.rows(LIVE), known.complete || known.view(LIVE).end);
    const v = known.view(q);
    const all = candidates();
    const rows = all.slice(0, cap);
    body.replaceChildren(...rows.map(rowFor));
    for (const id of rowCache.keys()) if (!known.entries.has(id)) rowCache.delete(id);
    const done = known.complete || v.end;
    el.dataset.complete = String(done);
    el.dataset.loading = String(v.loading);
    empty.hidden = rows.length > 0;
    empty.textContent = refused ?? emptyText(v, rows.length);
    shownNote.textContent = !loaded || refused ? "" : shownText(v, rows.length, all.length);
    more.hidden = refused !== null || !(all.length > cap || (!done && loaded));
    more.disabled = v.loading;
    more.textContent = v.loading ? "Loading…" : v.error ? "Retry" : "Show more";
  }

  /** Once a row with an identity is known it stays so (until a new snapshot); else every row is looked at. */
  function noteIdentity(): void {
    if (hasIdentity) return;
    let has = false;
    for (const e of known.entries.values()) if ((has = e.step !== null || e.kind !== null)) break;
    if (has === hasIdentity) return;
    hasIdentity = has;
    identity(has);
  }

  function emptyText(v: View, shown: number): string {
    if (!loaded || (v.loading && shown === 0)) return "Loading…";
    if (v.error) return `Could not list the episodes: ${v.error}`;
    if (known.entries.size === 0) return "No episodes in this run yet.";
    if (isFiltered(q.filter) && !(known.complete || v.end))
      return `No match among the ${plural(v.searched, "episode")} searched so far: Show more searches further.`;
    return "No episode matches the filter.";
  }

  /** "50 of 1,204 episodes", "16 shown · the relay searched 3,000 episodes so far". */
  function shownText(v: View, shown: number, all: number): string {
    const done = known.complete || v.end;
    const filtered = isFiltered(q.filter);
    const total =
      words.length > 0
        ? null
        : done
          ? all
          : filtered || !totals
            ? null
            : q.status === "all"
              ? totals.episodes
              : totals[q.status];
    const searched =
      filtered && !done && v.searched > 0 ? ` · the relay searched ${plural(v.searched, "episode")} so far` : "";
    const idNote = words.length && !done ? " · the id filter searches the loaded episodes" : "";
    return `${shown.toLocaleString("en-US")}${total !== null ? ` of ${plural(total, "episode")}` : " shown"}${searched}${idNote}`;
  }

  function rowFor(e: IndexEntry): HTMLElement {
    const hit = rowCache.get(e.id);
    if (hit && hit.entry === e) return syncPickBoxes(hit.el, run);
    const el = episodeRow(e, run);
    rowCache.set(e.id, { entry: e, el });
    return el;
  }

  return {
    el,
    liveEl: live.el,
    snapshot(episodes, truncated) {
      rowCache.clear();
      hasIdentity = null;
      known.snapshot(episodes, truncated);
      loaded = true;
      refused = null;
      known.ensureLoaded(q);
      known.ensureLoaded(LIVE);
      schedule();
    },
    changes(upserts, deletes) {
      if (known.apply(upserts, deletes)) schedule();
    },
    rewardKeys(keys) {
      filters.rewardKeys(keys);
    },
    totals(t) {
      totals = t;
      schedule();
    },
    refuse(message) {
      refused = message;
      loaded = true;
      known.entries.clear();
      schedule();
    },
    destroy() {
      stopped = true;
      known.stop();
      live.destroy();
      if (frame) cancelAnimationFrame(frame);
      stopAges();
      tray.stop();
    },
  };
}

function segGroup(label: string, control: HTMLElement): HTMLElement {
  return h("div.seg-group", null, h("span.seg-label", null, label), control);
}

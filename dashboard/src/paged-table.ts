// A table of the relay's pages (a run's groups, its tasks): read a page at a time ("show more"),
// re-read from the top, as many rows as are loaded, when what it shows changed (at most every
// REFRESH_MS), drawn once per animation frame. Its section carries `data-loading` and
// `data-loaded`; an empty line says what is loading, what failed, or that there is nothing yet.
import { h } from "./dom.js";

/** The relay's largest page: a refresh re-reads at most this many rows. */
const MAX_PAGE = 500;
/** Re-read at most this often while the run changes. */
const REFRESH_MS = 1500;

/** One page as the table reads it. */
export interface Page<T> {
  items: T[];
  cursor: string | null;
}

/** What the table holds and is doing. */
export interface PagedState<T> {
  items: T[];
  cursor: string | null;
  loaded: boolean;
  loading: boolean;
  error: string | null;
}

export interface PagedTableOptions<T> {
  /** Rows asked per page (and per "show more"). */
  page: number;
  fetchPage(limit: number, cursor: string | null): Promise<Page<T>>;
  /** The table element (e.g. "div.g-list"), its id and label, and its body's (e.g. "div.g-body"). */
  table: { sel: `div.${string}`; id: string; label: string; bodySel: `div.${string}` };
  /** The header row (hidden when there are no rows). */
  head: HTMLElement;
  row(item: T): HTMLElement;
  /** Ids of the empty line and the "show more" button. */
  emptyId: string;
  moreId: string;
  /** What the empty line says when the first page failed (before ": the reason"), and once loaded with nothing. */
  failed: string;
  none: string;
  /** After each draw (e.g. a count of what is shown). */
  drawn?(s: PagedState<T>): void;
}

export interface PagedTable<T> {
  /** The table (head, rows, the empty line) and the foot with the "show more" button. */
  table: HTMLElement;
  foot: HTMLElement;
  state: PagedState<T>;
  /** The section whose `data-loading` and `data-loaded` follow the state. */
  attach(section: HTMLElement): void;
  /**
   * What the rows show may have changed (`key` names it): the first time, or `restart`, read from
   * the first page at once; a new key later, re-read at most every REFRESH_MS.
   */
  changed(key: string, restart?: boolean): void;
  /** From the top with the first page only (a new order or a new question). */
  restart(): void;
  destroy(): void;
}

export function pagedTable<T>(o: PagedTableOptions<T>): PagedTable<T> {
  const list = pagedList(o.fetchPage, o.page, () => schedule());
  const refresh = throttle(() => list.reload());
  const body = h(o.table.bodySel, { role: "rowgroup" });
  const empty = h("div.empty", { id: o.emptyId });
  const more = h("button.btn.more", { type: "button", id: o.moreId }, "Show more");
  more.addEventListener("click", () => list.more());
  const table = h(o.table.sel, { id: o.table.id, role: "table", "aria-label": o.table.label }, o.head, body, empty);
  const foot = h("div.list-foot", null, more);
  let section: HTMLElement | null = null;
  let lastKey = "";
  let frame = 0;

  function schedule(): void {
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  }

  function render(): void {
    const s = list.state;
    body.replaceChildren(...s.items.map(o.row));
    if (section) {
      section.dataset.loading = String(s.loading);
      section.dataset.loaded = String(s.loaded);
    }
    empty.hidden = s.items.length > 0;
    empty.textContent = !s.loaded ? (s.error ? `${o.failed}: ${s.error}` : "Loading…") : o.none;
    o.head.hidden = s.loaded && s.items.length === 0;
    o.drawn?.(s);
    more.hidden = s.cursor === null;
    more.disabled = s.loading;
    more.textContent = s.loading ? "Loading…" : s.error ? "Retry" : "Show more";
  }

  return {
    table,
    foot,
    state: list.state,
    attach(el) {
      section = el;
    },
    changed(key, restart = false) {
      if (key === lastKey && !restart) return;
      const first = lastKey === "";
      lastKey = key;
      if (first || restart) list.restart();
      else refresh.poke();
    },
    restart: list.restart,
    destroy() {
      list.stop();
      refresh.stop();
      if (frame) cancelAnimationFrame(frame);
    },
  };
}

/** A paged list that re-reads itself from the top when asked (serialised: one request at a time). */
function pagedList<T>(
  fetchPage: (limit: number, cursor: string | null) => Promise<Page<T>>,
  page: number,
  draw: () => void,
) {
  const state: PagedState<T> = { items: [], cursor: null, loaded: false, loading: false, error: null };
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

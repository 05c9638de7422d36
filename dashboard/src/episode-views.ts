// What the page knows of a run's episodes, per view (status, sort, filter): rows from the run
// socket and from the relay's pages meet in one map (the newer version of a row wins). When the
// socket's snapshot was cut short, a view the snapshot cannot answer pages the relay's list
// (`GET /v1/runs/{run}/episodes?status=&task=…&sort=&cursor=`) and shows rows only down to the last
// one a page brought (its "frontier"), so it never shows a hole where unloaded rows belong. A rare
// filter's pages may come back short (the relay walks a bounded number of rows per page): the view
// counts the rows the relay searched.

import type { IndexEntry, IndexStatus } from "../../src/protocol/index.js";
import { filterParams, NO_FILTER, type RowFilter, rowMatches } from "../../src/protocol/index.js";
import { authHeaders, relayUrl } from "./api.js";
import { compareEntries, newer, type SortKey } from "./episode-order.js";

export type StatusFilter = "all" | IndexStatus;

/** Which rows, in which order. */
export interface ViewQuery {
  status: StatusFilter;
  sort: SortKey;
  filter: RowFilter;
}

/** How far one view is loaded. */
export interface View {
  /** The last row the relay listed for this view: rows after it (in its order) may be missing. */
  frontier: IndexEntry | null;
  /** Where the next page starts (null: from the top). */
  cursor: string | null;
  /** The relay listed the view to its end (or the snapshot held the whole run). */
  end: boolean;
  /** Rows the relay walked past for this view's pages (matching or not). */
  searched: number;
  loading: boolean;
  error: string | null;
}

/** Rows asked per page of the relay's list. */
const PAGE = 200;
/** Pages one "load more" may ask while none moves the frontier (short pages of a rare filter). */
const PAGES_PER_LOAD = 10;

export class EpisodeViews {
  readonly entries = new Map<string, IndexEntry>();
  /** The snapshot holds the whole run (every view is complete). */
  complete = false;
  /** Ids the socket deleted: a page that was already on its way must not bring them back. */
  private readonly deleted = new Set<string>();
  private views = new Map<string, View>();
  private stopped = false;

  constructor(
    private readonly run: string,
    /** Something changed: draw again. */
    private readonly changed: () => void,
  ) {}

  view(q: ViewQuery): View {
    const key = `${q.status}|${q.sort}|${new URLSearchParams(filterParams(q.filter))}`;
    let v = this.views.get(key);
    if (!v)
      this.views.set(
        key,
        (v = { frontier: null, cursor: null, end: this.complete, searched: 0, loading: false, error: null }),
      );
    return v;
  }

  /** The view's rows that are known to be in place (status, filter, frontier), in its order. */
  rows(q: ViewQuery): IndexEntry[] {
    const v = this.view(q);
    const out: IndexEntry[] = [];
    for (const e of this.entries.values()) {
      if (q.status !== "all" && e.status !== q.status) continue;
      if (!rowMatches(e, q.filter)) continue;
      if (!v.end && (v.frontier === null || compareEntries(q.sort, e, v.frontier) > 0)) continue;
      out.push(e);
    }
    return out.sort((a, b) => compareEntries(q.sort, a, b));
  }

  /** A view the snapshot cannot answer gets its first page. */
  ensureLoaded(q: ViewQuery): void {
    const v = this.view(q);
    if (!v.end && v.frontier === null && !v.loading) void this.loadMore(q);
  }

  /** The view's next pages, until one moves its frontier (or PAGES_PER_LOAD came back short). */
  async loadMore(q: ViewQuery): Promise<void> {
    const v = this.view(q);
    if (v.loading || v.end) return;
    v.loading = true;
    v.error = null;
    this.changed();
    try {
      for (let i = 0; i < PAGES_PER_LOAD && !v.end; i++) {
        const page = await this.page(q, v.cursor);
        if (this.stopped || !this.isCurrent(v)) return;
        for (const e of page.episodes)
          if (!this.deleted.has(e.id)) this.entries.set(e.id, newer(this.entries.get(e.id), e));
        v.cursor = page.cursor ?? null;
        v.end = v.cursor === null;
        v.searched += page.searched ?? 0;
        // a page that ends above the frontier (the snapshot already had it) is skipped over
        const last = page.episodes.at(-1);
        const before = v.frontier;
        if (last && (v.frontier === null || compareEntries(q.sort, last, v.frontier) > 0)) v.frontier = last;
        if (v.frontier !== before) break;
      }
    } catch (e) {
      v.error = e instanceof Error ? e.message : String(e);
    } finally {
      v.loading = false;
      this.changed();
    }
  }

  /** The socket's first message: the newest episodes, the top of the unfiltered view by update. */
  snapshot(episodes: IndexEntry[], truncated: boolean): void {
    this.entries.clear();
    this.deleted.clear();
    this.views = new Map();
    for (const e of episodes) this.entries.set(e.id, e);
    this.complete = !truncated;
    const top = this.view({ status: "all", sort: "updated", filter: NO_FILTER });
    if (!this.complete) top.frontier = [...episodes].sort((a, b) => compareEntries("updated", a, b)).at(-1) ?? null;
  }

  /** The socket's changes; true when any. */
  apply(upserts: IndexEntry[], deletes: string[]): boolean {
    for (const e of upserts) {
      this.deleted.delete(e.id);
      this.entries.set(e.id, newer(this.entries.get(e.id), e));
    }
    for (const id of deletes) {
      this.entries.delete(id);
      this.deleted.add(id);
    }
    return upserts.length > 0 || deletes.length > 0;
  }

  stop(): void {
    this.stopped = true;
  }

  private async page(
    q: ViewQuery,
    cursor: string | null,
  ): Promise<{ episodes: IndexEntry[]; cursor?: string | null; searched?: number }> {
    const params = new URLSearchParams({ sort: q.sort, limit: String(PAGE) });
    if (q.status !== "all") params.set("status", q.status);
    for (const [k, value] of filterParams(q.filter)) params.append(k, value);
    if (cursor) params.set("cursor", cursor);
    const res = await fetch(new URL(`/v1/runs/${encodeURIComponent(this.run)}/episodes?${params}`, relayUrl), {
      headers: { accept: "application/json", ...authHeaders() },
    });
    const page = (await res.json().catch(() => null)) as {
      episodes?: IndexEntry[];
      cursor?: string | null;
      searched?: number;
      message?: string;
    } | null;
    if (!res.ok || !page || !Array.isArray(page.episodes))
      throw new Error(page?.message ?? `${res.status} ${res.statusText}`);
    return page as { episodes: IndexEntry[] };
  }

  /** A view object stays current until a new snapshot resets them all. */
  private isCurrent(v: View): boolean {
    for (const x of this.views.values()) if (x === v) return true;
    return false;
  }
}

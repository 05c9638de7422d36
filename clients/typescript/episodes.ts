// A run's episodes, filtered (browser and Node): `fetchEpisodesPage(url, run, options)` reads one
// page of `GET /v1/runs/{run}/episodes` (`{episodes, cursor, searched}`), `listEpisodes(url, run,
// options)` iterates over every matching episode following the cursors. Filters: `status`, and
// `filter`, the relay's own `RowFilter` (src/protocol/registry/row-filter.ts: task, stop condition,
// is_truncated (the trainer's truncation), is_timeout, errored, reward ranges, turns, tokens), turned into query parameters by the relay's
// own `filterParams`, so the client and the relay agree on what a filter means.
//
// A page may be short (fewer than `limit` episodes, even none) and still have a cursor: the
// relay's walk of the run's index stopped on its budget (1000 rows) before it found `limit`
// matches. `listEpisodes` keeps following the cursor until it is null; a caller of
// `fetchEpisodesPage` must do the same. The token sees the episodes its `episodes` patterns cover.

import type { EpisodesPage, IndexEntry, IndexStatus, SortKey } from "../../src/protocol/index.js";
import { filterParams, NO_FILTER, type RowFilter } from "../../src/protocol/index.js";
import { getJson, isObject, segment } from "./groups.js";
import { RelayRefusal } from "./refusal.js";
import { checkBaseUrl, type Hints, type TokenOptions } from "./relay-fetch.js";

// The relay's own types for what it answers and takes: one definition for both sides.
export type { EpisodesPage, IndexEntry, IndexStatus, RewardRange, RowFilter } from "../../src/protocol/index.js";
/** Newest-updated first (the relay's default), or best reward first (episodes without one last). */
export type EpisodeSort = SortKey;

export interface ListEpisodesOptions extends TokenOptions {
  /** Bearer token; the episodes its `episodes` patterns cover are listed. */
  token?: string;
  /** Only episodes in this status. */
  status?: IndexStatus;
  /** Only episodes that pass this filter (fields left out, null or `rewards: []`: not filtered). */
  filter?: EpisodeFilter;
  /** Order of the episodes (the relay's default: updated). */
  sort?: EpisodeSort;
  /** Episodes per page (the relay's default 50, at most 500). */
  limit?: number;
  /** Aborts the request(s). */
  signal?: AbortSignal;
  /** How a refusal tells the caller to pass a token (default: the library's `{ token }`). */
  hints?: Hints;
}

/** The relay's filter, every field optional; `truncated` is a deprecated alias of `isTimeout` (one release). */
export type EpisodeFilter = Partial<RowFilter> & {
  /** @deprecated A timeout, not the trainer's truncation: use `isTimeout` (or `isTruncated` for truncation). */
  truncated?: boolean | null;
};

/**
 * `filter` with every field present (left out or undefined: null), as the relay's `filterParams`
 * takes it. Throws a RelayRefusal (`bad_filter`, nothing sent) for what the relay would not refuse
 * but read as no filter: an empty task or stop condition, a flag that is not a boolean. Every
 * other bad value (a bound that is not a number, MIN above MAX, too many ranges, a negative count)
 * is the relay's to refuse: 400 `bad_filter` with the parameter as `field`.
 */
export function fullFilter(filter: EpisodeFilter = {}): RowFilter {
  if (
    filter.truncated !== undefined &&
    filter.truncated !== null &&
    filter.isTimeout !== undefined &&
    filter.isTimeout !== null &&
    filter.truncated !== filter.isTimeout
  )
    throw new RelayRefusal(
      400,
      "bad_filter",
      "filter.truncated (deprecated alias of isTimeout) disagrees with isTimeout",
      "truncated",
    );
  const f: RowFilter = {
    task: filter.task ?? NO_FILTER.task,
    stop: filter.stop ?? NO_FILTER.stop,
    isTruncated: filter.isTruncated ?? NO_FILTER.isTruncated,
    isTimeout: filter.isTimeout ?? filter.truncated ?? NO_FILTER.isTimeout,
    errored: filter.errored ?? NO_FILTER.errored,
    rewards: (filter.rewards ?? []).map((r) => ({ key: r.key, min: r.min ?? null, max: r.max ?? null })),
    minTurns: filter.minTurns ?? NO_FILTER.minTurns,
    minTokens: filter.minTokens ?? NO_FILTER.minTokens,
    kind: filter.kind ?? NO_FILTER.kind,
    env: filter.env ?? NO_FILTER.env,
    step: filter.step ? { min: filter.step.min ?? null, max: filter.step.max ?? null } : NO_FILTER.step,
    policyVersion: filter.policyVersion ?? NO_FILTER.policyVersion,
    flag: filter.flag ?? NO_FILTER.flag,
    flagged: filter.flagged ?? NO_FILTER.flagged,
  };
  for (const [name, v] of [
    ["task", f.task],
    ["stop", f.stop],
    ["kind", f.kind],
    ["env", f.env],
  ] as const) {
    if (v === "")
      throw new RelayRefusal(
        400,
        "bad_filter",
        `filter.${name} is empty: leave it out (or null) not to filter by it`,
        name,
      );
  }
  for (const [name, v] of [
    ["isTruncated", f.isTruncated],
    ["isTimeout", f.isTimeout],
    ["errored", f.errored],
  ] as const) {
    if (v !== null && typeof v !== "boolean")
      throw new RelayRefusal(400, "bad_filter", `filter.${name} must be true, false or null`, name);
  }
  return f;
}

/**
 * One page of `run`'s episodes that are in `status` and pass `filter`, in the order of `sort`.
 * `cursor`: the previous page's. The page may be short (even empty) with a cursor: keep following
 * it until it is null (`listEpisodes` does). A refusal (4xx: no token, a bad parameter such as a
 * bad filter, 400 `bad_filter` with the parameter as `field`) throws a RelayRefusal; a relay that
 * does not answer a RelayUnreachable; another failure an Error.
 */
export async function fetchEpisodesPage(
  url: string,
  run: string,
  options: ListEpisodesOptions & { cursor?: string | null } = {},
): Promise<EpisodesPage> {
  const base = checkBaseUrl(url);
  const target = new URL(`${base}/v1/runs/${segment(run, "run")}/episodes`);
  if (options.status !== undefined) target.searchParams.set("status", options.status);
  for (const [k, v] of filterParams(fullFilter(options.filter))) target.searchParams.append(k, v);
  if (options.sort !== undefined) target.searchParams.set("sort", options.sort);
  if (options.limit !== undefined) target.searchParams.set("limit", String(options.limit));
  if (options.cursor) target.searchParams.set("cursor", options.cursor);
  const what = `run ${run} episodes`;
  const page = await getJson(target, what, `the episodes of run ${JSON.stringify(run)}`, base, options);
  if (!isObject(page) || !Array.isArray(page.episodes) || !(page.cursor === null || typeof page.cursor === "string")) {
    throw new Error(`GET ${what}: the answer is not a page of episodes {episodes: [...], cursor}`);
  }
  return {
    episodes: page.episodes as IndexEntry[],
    cursor: page.cursor,
    searched: typeof page.searched === "number" ? page.searched : 0,
  };
}

/**
 * Every episode of `run` that is in `status` and passes `filter`, page after page in the order of
 * `sort`, following the cursors to the end (a short or empty page with a cursor is not the end: a
 * rare filter may take several pages that walk the index without a match). Refusals and failures
 * throw as `fetchEpisodesPage` does.
 */
export async function* listEpisodes(
  url: string,
  run: string,
  options: ListEpisodesOptions = {},
): AsyncGenerator<IndexEntry> {
  let cursor: string | null = null;
  for (;;) {
    const page: EpisodesPage = await fetchEpisodesPage(url, run, { ...options, cursor });
    for (const e of page.episodes) {
      yield e;
      options.signal?.throwIfAborted();
    }
    if (page.cursor === null) return;
    if (page.cursor === cursor) throw new Error(`GET run ${run} episodes: the relay answered the same cursor again`);
    cursor = page.cursor;
    options.signal?.throwIfAborted();
  }
}

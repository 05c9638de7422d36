// Groups of a run (browser and Node): the rollouts that share the reply head's `group.id` (GRPO's
// group; while a rollout is live, its task key stands in). `fetchGroupsPage(url, run, options)`
// reads one page of `GET /v1/runs/{run}/groups` (the run's numbers: groups, finished groups, the
// zero-variance share, and the page's group summaries), `fetchGroups(url, run, options)` iterates
// over every group following the cursors, and `fetchGroup(url, run, group, options)` reads
// `GET /v1/runs/{run}/groups/{group}`: the summary plus each rollout with its advantage.
// The token's `episodes` patterns must cover the whole run (`*` or `RUN:*`), else 403.

import type { GroupJson, GroupSort, GroupsPage, RolloutJson } from "../../src/protocol/index.js";
import { RelayRefusal } from "./refusal.js";
import {
  bearer,
  checkBaseUrl,
  type Hints,
  LIBRARY_HINTS,
  refusalOf,
  relayFetch,
  type TokenOptions,
} from "./relay-fetch.js";

// The relay's own types for what it answers (src/protocol/registry/groups.ts, zero-variance-trend.ts): one definition
// for both sides.
export type {
  GroupRewardStats as RewardStats,
  GroupSort,
  GroupsPage,
  ZeroVarianceTrend,
} from "../../src/protocol/index.js";
/** A group of a run: its rollouts counted by status, and per reward key its statistics. */
export type GroupSummary = GroupJson;

/** An advantage in the group: the reward less the group's mean, and that over the group's std (null when std is 0). */
export type { Advantage } from "../../src/protocol/index.js";

/**
 * One rollout of a group: its `reward` (the trainer's: per rewarded trace Σ score × weight, the mean over those traces;
 * src/protocol/registry/rewards.ts), its `advantage` on it (GRPO's), and `key_advantages` per reward key.
 */
export type GroupRollout = RolloutJson;

/** A group with its rollouts, best reward first. */
export interface GroupDetail extends GroupSummary {
  rollouts: GroupRollout[];
}

export interface FetchGroupsOptions extends TokenOptions {
  /** Bearer token; its `episodes` patterns must cover the whole run. */
  token?: string;
  /** Order of the groups (the relay's default: spread). */
  sort?: GroupSort;
  /** Groups per page (the relay's default 50, at most 500). */
  limit?: number;
  /** Aborts the request(s). */
  signal?: AbortSignal;
  /** How a refusal tells the caller to pass a token (default: the library's `{ token }`). */
  hints?: Hints;
}

/** What a refusal names: the groups need a token that covers the whole run. */
function runWhat(run: string): string {
  return `the whole run ${JSON.stringify(run)} (a pattern such as ${JSON.stringify(run === "~" ? "*" : `${run}:*`)})`;
}

/** GET a JSON answer of the relay: 4xx throws a RelayRefusal, another failure an Error (episodes.ts uses it too). */
export async function getJson(
  target: URL,
  what: string,
  refusalWhat: string,
  base: string,
  options: TokenOptions & { signal?: AbortSignal; hints?: Hints },
): Promise<unknown> {
  const headers: Record<string, string> = { accept: "application/json", ...bearer(target, options) };
  const res = await relayFetch(target, { headers, signal: options.signal });
  if (res.status >= 400 && res.status < 500)
    throw await refusalOf(res, refusalWhat, base, options.hints ?? LIBRARY_HINTS);
  if (!res.ok) throw new Error(`GET ${what}: ${res.status} ${await res.text()}`);
  const text = await res.text();
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new Error(
      `GET ${what}: the relay answered ${res.status} with a body that is not JSON: ${text.slice(0, 200)}`,
    );
  }
}

/**
 * `value` escaped as one path segment; throws a RelayRefusal (nothing sent) for "", "." and "..",
 * which a URL cannot carry as a segment (they would name another path).
 */
export function segment(value: string, what: "run" | "group"): string {
  if (value === "" || value === "." || value === "..") {
    throw new RelayRefusal(400, `bad_${what}`, `${JSON.stringify(value)} cannot name a ${what} in a URL path`);
  }
  return encodeURIComponent(value);
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * One page of `run`'s groups, with the run's numbers (groups, finished groups, zero-variance
 * groups and share). `cursor`: the previous page's. A refusal (4xx: no token, a token that does
 * not cover the whole run, a bad parameter) throws a RelayRefusal; a relay that does not answer a
 * RelayUnreachable; another failure an Error.
 */
export async function fetchGroupsPage(
  url: string,
  run: string,
  options: FetchGroupsOptions & { cursor?: string | null } = {},
): Promise<GroupsPage> {
  const base = checkBaseUrl(url);
  const target = new URL(`${base}/v1/runs/${segment(run, "run")}/groups`);
  if (options.sort !== undefined) target.searchParams.set("sort", options.sort);
  if (options.limit !== undefined) target.searchParams.set("limit", String(options.limit));
  if (options.cursor) target.searchParams.set("cursor", options.cursor);
  const what = `run ${run} groups`;
  const page = await getJson(target, what, runWhat(run), base, options);
  if (!isObject(page) || !Array.isArray(page.groups) || !(page.cursor === null || typeof page.cursor === "string")) {
    throw new Error(`GET ${what}: the answer is not a page of groups {groups: [...], cursor}`);
  }
  return page as unknown as GroupsPage;
}

/**
 * Every group of `run`, page after page (following the cursors), in the relay's order for
 * `sort`. Refusals and failures throw as `fetchGroupsPage` does; the run's numbers come with each
 * page (`fetchGroupsPage`).
 */
export async function* fetchGroups(
  url: string,
  run: string,
  options: FetchGroupsOptions = {},
): AsyncGenerator<GroupSummary> {
  let cursor: string | null = null;
  for (;;) {
    const page: GroupsPage = await fetchGroupsPage(url, run, { ...options, cursor });
    for (const g of page.groups) {
      yield g;
      options.signal?.throwIfAborted();
    }
    if (page.cursor === null) return;
    if (page.cursor === cursor) throw new Error(`GET run ${run} groups: the relay answered the same cursor again`);
    cursor = page.cursor;
  }
}

/**
 * One group of `run` (its id as the relay lists it, e.g. the reply head's `group.id`): the summary
 * plus its rollouts, best reward first, each with its advantage per reward key. An unknown group
 * throws a RelayRefusal with status 404 (`not_found`); other refusals and failures as
 * `fetchGroupsPage`.
 */
export async function fetchGroup(
  url: string,
  run: string,
  group: string,
  options: TokenOptions & { signal?: AbortSignal; hints?: Hints } = {},
): Promise<GroupDetail> {
  const base = checkBaseUrl(url);
  const target = new URL(`${base}/v1/runs/${segment(run, "run")}/groups/${segment(group, "group")}`);
  const what = `run ${run} group ${group}`;
  const detail = await getJson(target, what, `group ${JSON.stringify(group)} of ${runWhat(run)}`, base, options);
  if (!isObject(detail) || typeof detail.id !== "string" || !Array.isArray(detail.rollouts)) {
    throw new Error(`GET ${what}: the answer is not a group {id, ..., rollouts: [...]}`);
  }
  return detail as unknown as GroupDetail;
}

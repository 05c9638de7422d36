// The Worker's run paths: the run directory, a run's aggregates and episode list, the run
// sockets, the list across runs, and the bulk fetch of a run's finished episodes. Each asks the
// objects over RPC (sockets: fetch), which answer plain objects, and writes the JSON answer once
// here; no state is kept here.
//
// Scope in every byte: every path under `/v1/runs/{run}` starts from `runAccess` (src/worker/index.ts
// calls it before any run route, so a new route gets it too): a token covering no episode of the
// run gets exactly the answer a run nobody wrote gets (noSuchRun), before any object is asked. The
// run's index then gets only the token's patterns that may hold an episode of the run (null: the
// token covers all of it), and every cursor handed out is sealed (list-cursors.ts), bound to the
// list, the run and the token's patterns.

import { ALERT_BUDGETS } from "../protocol/alerts/config.js";
import type { Claims } from "../protocol/http/auth.js";
import { checkDeclaredLength, parseJsonBody, readStream } from "../protocol/http/body.js";
import { stripCredentials } from "../protocol/http/credentials.js";
import { RelayError } from "../protocol/http/errors.js";
import { GROUP_SORTS, type GroupSort } from "../protocol/registry/groups.js";
import {
  type AcrossPosition,
  type CursorBinding,
  type CursorKeys,
  openCursor,
  positionText,
  type RunPosition,
  readPosition,
  sealCursor,
} from "../protocol/registry/list-cursors.js";
import { type IndexEntry, noSuchRun, parseListQuery, SCOPE_HEADER, type Scope } from "../protocol/registry/rows.js";
import { RUNS_NAME, runIndexName, scopeInRun } from "../protocol/registry/run.js";
import { STEP_KINDS } from "../protocol/registry/steps.js";
import { tokenizerKey } from "../protocol/registry/tokenizer-key.js";
import { parseSearchQuery } from "../protocol/search/query.js";

const JSON_HEADERS = { "content-type": "application/json", "cache-control": "no-store" };

/** Who is asking: the token's patterns (null: everything) and the keys that seal its cursors. */
export interface Viewer {
  scope: Scope;
  cursors: CursorKeys;
}

/** A run's index (its RPC methods answer plain objects, structured-cloned). */
export function runIndex(env: Env, run: string) {
  return env.EPISODE_INDEX.getByName(runIndexName(run));
}

/** A run as a viewer may see it: what of it the viewer covers (`scope` null: all of it). */
export interface RunAccess {
  run: string;
  scope: Scope;
  viewer: Viewer;
}

/**
 * What of `run` the viewer covers. A viewer covering no episode of it is refused as for a run
 * nobody wrote (the same bytes), decided from its patterns alone, before any object is asked.
 */
export function runAccess(viewer: Viewer, run: string): RunAccess {
  const scope = scopeInRun(viewer.scope, run);
  if (scope === "none") throw noSuchRun(run);
  return { run, scope, viewer };
}

/** What a cursor of this viewer is bound to: the list, its detail and the run. */
export type Bound = Omit<CursorBinding, "scope">;

/** A position's text sealed for this viewer, this list and this run (null stays null). */
export function seal(v: Viewer, b: Bound, text: string | null): Promise<string | null> | null {
  return text === null ? null : sealCursor(v.cursors, { ...b, scope: v.scope }, text);
}

/** The position text a cursor of this viewer, list and run holds (none given: null); bad_cursor otherwise. */
export async function open(v: Viewer, b: Bound, cursor: string | null): Promise<string | null> {
  return cursor ? openCursor(v.cursors, { ...b, scope: v.scope }, cursor) : null;
}

/** The list parameters without `cursor` (these lists have cursors of their own shape). */
function withoutCursor(url: URL): URLSearchParams {
  const p = new URLSearchParams(url.searchParams);
  p.delete("cursor");
  return p;
}

/** A JSON answer (HEAD: the headers only). */
function json(body: unknown, head: boolean): Response {
  return new Response(head ? null : JSON.stringify(body), { headers: JSON_HEADERS });
}

/** `?limit=` alone, as the lists parse it. */
function limitOf(url: URL): number {
  return parseListQuery(
    new URLSearchParams(url.searchParams.has("limit") ? { limit: url.searchParams.get("limit")! } : {}),
  ).limit;
}

/** `GET /v1/runs?prefix=&limit=&cursor=`: runs the token covers, newest first. */
export async function listRuns(env: Env, url: URL, viewer: Viewer, head: boolean): Promise<Response> {
  const q = parseListQuery(withoutCursor(url));
  const bound: Bound = { list: "runs", run: null };
  const raw = await open(viewer, bound, url.searchParams.get("cursor"));
  const page = await env.RUN_DIRECTORY.getByName(RUNS_NAME).runs(
    raw === null ? null : readPosition("runs", raw),
    q.limit,
    viewer.scope,
    q.prefix,
    true,
  );
  return json({ runs: page.runs, cursor: await seal(viewer, bound, page.cursor) }, head);
}

/** `GET /v1/runs/{run}`: its counts and aggregates (null for a token that covers only part of the run). */
export async function runView(env: Env, a: RunAccess, head: boolean): Promise<Response> {
  if (a.scope !== null) return json({ run: a.run, covered: false, aggregates: null }, head);
  const aggregates = await runIndex(env, a.run).aggregates(a.run);
  if (aggregates === null) throw noSuchRun(a.run);
  return json({ run: a.run, covered: true, aggregates }, head);
}

/** Groups, tasks and usage mix episodes: only a viewer whose token covers the whole run sees them. */
export function needsWholeRun(a: RunAccess, what: string): void {
  if (a.scope !== null)
    throw new RelayError("forbidden", `${what} need a token covering the whole run (episodes: ["${a.run}:*"])`);
}

/** `GET /v1/runs/{run}/groups?sort=spread|size|task&limit=&cursor=`: the run's rollout groups. */
export async function runGroups(env: Env, a: RunAccess, url: URL, head: boolean): Promise<Response> {
  needsWholeRun(a, "a run's groups");
  const sort = url.searchParams.get("sort") || "spread";
  if (!(GROUP_SORTS as readonly string[]).includes(sort))
    throw new RelayError("bad_sort", `sort must be one of ${GROUP_SORTS.join(", ")}`, "sort");
  const bound: Bound = { list: "groups", detail: sort, run: a.run };
  const cursor = await open(a.viewer, bound, url.searchParams.get("cursor"));
  const page = await runIndex(env, a.run).groups(a.run, sort as GroupSort, limitOf(url), cursor);
  if (page === null) throw noSuchRun(a.run);
  return json({ ...page, cursor: await seal(a.viewer, bound, page.cursor) }, head);
}

/** `GET /v1/runs/{run}/groups/{group}`: one group, its rollouts and their advantages. */
export async function runGroup(env: Env, a: RunAccess, group: string, head: boolean): Promise<Response> {
  needsWholeRun(a, "a run's groups");
  const body = await runIndex(env, a.run).group(group);
  if (body === "no_run") throw noSuchRun(a.run);
  if (body === null) throw new RelayError("not_found", `run ${a.run} has no group ${JSON.stringify(group)}`);
  return json(body, head);
}

/**
 * `GET /v1/runs/{run}/tasks?key=K&threshold=T&limit=&cursor=`: per task, rollouts, means and the solve rate (K ≥ T).
 */
export async function runTasks(env: Env, a: RunAccess, url: URL, head: boolean): Promise<Response> {
  needsWholeRun(a, "a run's tasks");
  const key = url.searchParams.get("key") || "reward";
  const threshold = Number(url.searchParams.get("threshold") ?? "1");
  if (!Number.isFinite(threshold)) throw new RelayError("malformed", "threshold must be a number", "threshold");
  const bound: Bound = { list: "tasks", run: a.run };
  const cursor = await open(a.viewer, bound, url.searchParams.get("cursor"));
  const page = await runIndex(env, a.run).tasks(key, threshold, limitOf(url), cursor);
  if (page === null) throw noSuchRun(a.run);
  return json({ ...page, cursor: await seal(a.viewer, bound, page.cursor) }, head);
}

/** `GET /v1/runs/{run}/episodes?status=&sort=&limit=&cursor=` and the filters (row-filter.ts). */
export async function runEpisodes(env: Env, a: RunAccess, url: URL, head: boolean): Promise<Response> {
  const bound: Bound = { list: "episodes", detail: url.searchParams.get("sort") || "updated", run: a.run };
  const params = new URLSearchParams(url.searchParams);
  const raw = await open(a.viewer, bound, params.get("cursor"));
  if (raw === null) params.delete("cursor");
  else params.set("cursor", raw);
  const page = await runIndex(env, a.run).list(parseListQuery(params), a.scope);
  if (page === null) throw noSuchRun(a.run);
  return json({ ...page, cursor: await seal(a.viewer, bound, page.cursor) }, head);
}

/**
 * `GET /v1/runs/{run}/steps?kind=train|eval&limit=&cursor=`: the run's training steps, by step (a viewer covering the
 * whole run only).
 */
export async function runSteps(env: Env, a: RunAccess, url: URL, head: boolean): Promise<Response> {
  needsWholeRun(a, "a run's steps");
  const kind = url.searchParams.get("kind") || null;
  if (kind !== null && !(STEP_KINDS as readonly string[]).includes(kind)) {
    throw new RelayError("bad_filter", `kind must be one of ${STEP_KINDS.join(", ")}`, "kind");
  }
  const bound: Bound = { list: "steps", detail: kind ?? "", run: a.run };
  const cursor = await open(a.viewer, bound, url.searchParams.get("cursor"));
  const page = await runIndex(env, a.run).steps(kind, limitOf(url), cursor);
  if (page === null) throw noSuchRun(a.run);
  return json({ ...page, cursor: await seal(a.viewer, bound, page.cursor) }, head);
}

/**
 * `GET /v1/runs/{run}/search?q=&<list filters>&limit=&cursor=`: the run's episodes whose text
 * matches `q` (src/protocol/search/query.ts), best first, with highlighted snippets; within the token's scope.
 * `row=1` (an export of the results): each result also carries its index row (`row`).
 */
export async function runSearch(env: Env, a: RunAccess, url: URL, head: boolean): Promise<Response> {
  const query = parseSearchQuery(url.searchParams.get("q"));
  const q = parseListQuery(withoutCursor(url), 20);
  // the cursor is bound to the query and the filters too: one of another search is refused
  const bound: Bound = {
    list: "search",
    detail: JSON.stringify([query.match, q.status, q.prefix, q.filter]),
    run: a.run,
  };
  const cursor = await open(a.viewer, bound, url.searchParams.get("cursor"));
  const index = runIndex(env, a.run);
  const page = await index.search(query, q, a.scope, cursor);
  if (page === null) throw noSuchRun(a.run);
  if (flagParam(url, "row") && page.episodes.length > 0) {
    // `row=1` (an export of a search): each result carries its index row as the list shows it
    const rows = new Map(
      (
        await index.rowsById(
          page.episodes.map((e) => e.id),
          a.scope,
        )
      ).map((r) => [r.id, r]),
    );
    const episodes = page.episodes.map((e) => ({ ...e, row: rows.get(e.id) ?? null }));
    return json({ ...page, episodes, cursor: await seal(a.viewer, bound, page.cursor) }, head);
  }
  return json({ ...page, cursor: await seal(a.viewer, bound, page.cursor) }, head);
}

/**
 * `GET /v1/runs/{run}/rules`: the run's flag rules (the defaults when it set none) and how far a
 * rescan for them has come; `PUT` (admin, or a producer covering the whole run): replace them
 * (`{"rules": [...]}`, or `{"defaults": true}`).
 */
export async function runRules(env: Env, a: RunAccess, request: Request, claims: Claims | null): Promise<Response> {
  needsWholeRun(a, "a run's rules");
  if (request.method === "PUT") {
    if (claims !== null && claims.role === "watcher")
      throw new RelayError("forbidden", "a run's rules are set by an admin or the run's producer");
    checkDeclaredLength(request, 64 * 1024);
    const body = parseJsonBody(await readStream(request.body, 64 * 1024), "the rules");
    const answer = await runIndex(env, a.run).setRules(a.run, body);
    if (!answer.ok) throw new RelayError(answer.error.error, answer.error.message, answer.error.field);
    return json(answer.value, false);
  }
  const rules = await runIndex(env, a.run).rules();
  if (rules === null) throw noSuchRun(a.run);
  return json(rules, false);
}

/**
 * `GET /v1/runs/{run}/alerts`: the run's webhooks (URLs for an admin, else their origins; never a secret), alert rules,
 * the last alerts and delivery attempts; `PUT` (admin, covering the whole run: auth.ts asks for the role):
 * replace them (`{"webhooks": [{"url", "secret"}], "rules": [...]}`, src/protocol/alerts/config.ts). Links in
 * the alerts start with `origin()` (PUBLIC_URL's, else this request's; only a PUT asks for it).
 */
export async function runAlerts(
  env: Env,
  a: RunAccess,
  request: Request,
  claims: Claims | null,
  origin: () => string,
): Promise<Response> {
  needsWholeRun(a, "a run's alerts");
  if (request.method === "PUT") {
    checkDeclaredLength(request, ALERT_BUDGETS.bodyBytes);
    const body = parseJsonBody(await readStream(request.body, ALERT_BUDGETS.bodyBytes), "the alerts");
    const answer = await runIndex(env, a.run).setAlerts(a.run, body, origin());
    if (!answer.ok) throw new RelayError(answer.error.error, answer.error.message, answer.error.field);
    return json(answer.value, false);
  }
  const alerts = await runIndex(env, a.run).alertsJson(claims === null || claims.role === "admin");
  if (alerts === null) throw noSuchRun(a.run);
  return json(alerts, false);
}

/**
 * `GET`/`HEAD /v1/runs/{run}/tokenizer`: the run's `tokenizer.json` as its producer uploaded it (any
 * token covering an episode of the run may read it: a page decodes that episode's token ids with
 * it), 404 `not_found` when none was (`?optional=1`: 204, for a page that asks only in case there is
 * one: a 404 would be an error line in the browser's console); `ETag` is its SHA-256. `PUT` (admin, or a producer covering
 * the whole run): keep these bytes (a JSON object with a `model`, at most MAX_TOKENIZER_BYTES);
 * the same bytes again change nothing (`changed: false`), others replace them. The run's index is told
 * first: the bytes live as long as the run (RETENTION_SECONDS on a run with no row yet, as its rules do),
 * and the index deletes them when it frees the run.
 */
export async function runTokenizer(
  env: Env,
  a: RunAccess,
  request: Request,
  claims: Claims | null,
  maxBytes: number,
): Promise<Response> {
  const key = tokenizerKey(a.run);
  if (request.method !== "PUT") {
    const object = await env.ARCHIVE.get(key);
    if (object === null) {
      if (new URL(request.url).searchParams.get("optional") === "1")
        return new Response(null, { status: 204, headers: { "cache-control": "no-cache" } });
      throw new RelayError("not_found", `run ${a.run} has no tokenizer`);
    }
    const etag = `"${object.customMetadata?.sha256 ?? object.etag}"`;
    const headers = { "content-type": "application/json", "cache-control": "no-cache", etag };
    if (request.headers.get("if-none-match") === etag || request.method === "HEAD") {
      await object.body.cancel();
      return new Response(null, { status: request.method === "HEAD" ? 200 : 304, headers });
    }
    return new Response(object.body, { headers });
  }
  needsWholeRun(a, "uploads of a run's tokenizer");
  if (claims !== null && claims.role === "watcher")
    throw new RelayError("forbidden", "a run's tokenizer is set by an admin or the run's producer");
  checkDeclaredLength(request, maxBytes);
  const bytes = await readStream(request.body, maxBytes);
  const parsed = parseJsonBody(bytes, "the tokenizer");
  // a tokenizers-library file: an object whose `model` says how ids map to pieces
  const model = (parsed as { model?: unknown } | null)?.model;
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed) || typeof model !== "object" || !model)
    throw new RelayError("malformed", 'a tokenizer.json is a JSON object with a "model" object', "model");
  const sha256 = hex(await crypto.subtle.digest("SHA-256", bytes));
  await runIndex(env, a.run).keepTokenizer(a.run);
  const kept = await env.ARCHIVE.head(key);
  const answer = { ok: true, run: a.run, bytes: bytes.byteLength, sha256 };
  if (kept?.customMetadata?.sha256 === sha256) return json({ ...answer, changed: false }, false);
  await env.ARCHIVE.put(key, bytes, {
    httpMetadata: { contentType: "application/json" },
    customMetadata: { sha256 },
  });
  return json({ ...answer, changed: true }, false);
}

function hex(digest: ArrayBuffer): string {
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** A run socket (`/v1/runs/{run}` upgraded: `a`) or the directory's (`/v1/runs` upgraded: `a` null). */
export function runSocket(
  env: Env,
  request: Request,
  url: URL,
  a: RunAccess | null,
  viewer: Viewer,
): Promise<Response> {
  const forwarded = stripCredentials(request, url, {
    [SCOPE_HEADER]: JSON.stringify(a === null ? viewer.scope : a.scope),
  });
  if (a === null) return env.RUN_DIRECTORY.getByName(RUNS_NAME).fetch(forwarded);
  return runIndex(env, a.run).fetch(forwarded);
}

// ---- the list across runs ----

/** Run indexes one page of the list across runs asks, at most (the rest: its cursor). */
export const ACROSS_RUNS_BUDGET = 8;

/**
 * `GET /v1/episodes?status=&prefix=&limit=&cursor=`: across the runs the token may hold episodes
 * of. Runs come newest-created first (from the directory), each run's episodes in its own order
 * (newest-updated first); at most ACROSS_RUNS_BUDGET runs are asked per page, so a page may be
 * short with a cursor.
 */
export async function listAcrossRuns(env: Env, url: URL, viewer: Viewer, head: boolean): Promise<Response> {
  const q = parseListQuery(withoutCursor(url));
  const bound: Bound = { list: "across", run: null };
  const raw = await open(viewer, bound, url.searchParams.get("cursor"));
  const at = raw === null ? null : readPosition("across", raw);
  const episodes: IndexEntry[] = [];
  let { run: runAfter, current, inner } = at ?? { run: null, current: null, inner: null };
  const done = async (c: AcrossPosition | null) =>
    json({ episodes, cursor: c === null ? null : await seal(viewer, bound, positionText("across", c)) }, head);
  const dir = env.RUN_DIRECTORY.getByName(RUNS_NAME);
  let queue: RunPosition[] = [];
  /** Where the directory's last page ended (null: at its end, once `dirEnded`). */
  let dirNext: RunPosition | null = null;
  let dirEnded = false;
  let asked = 0;
  for (;;) {
    if (current === null) {
      if (queue.length === 0) {
        if (dirEnded) return done(null);
        if (asked >= ACROSS_RUNS_BUDGET) return done({ run: runAfter, current: null, inner: null });
        const page = await dir.runs(runAfter, ACROSS_RUNS_BUDGET - asked, viewer.scope, q.prefix, false);
        queue = page.runs.map((r) => ({ created: Date.parse(r.created), run: r.run }));
        dirNext = page.cursor === null ? null : readPosition("runs", page.cursor);
        dirEnded = dirNext === null;
        // none in this stretch of the directory (its own budget ended it): go on from where it stopped next time
        if (queue.length === 0) return done(dirNext === null ? null : { run: dirNext, current: null, inner: null });
      }
      current = queue.shift()!;
      inner = null;
    }
    asked++;
    const scope = scopeInRun(viewer.scope, current.run);
    const page =
      scope === "none"
        ? null
        : await runIndex(env, current.run).list(
            {
              ...q,
              sort: "updated",
              limit: q.limit - episodes.length,
              after: inner === null ? null : readPosition("episodes", inner),
            },
            scope,
          );
    // (null: the run has no row any more, though the directory has not heard yet)
    if (page) episodes.push(...page.episodes);
    if (page?.cursor) return done({ run: runAfter, current, inner: page.cursor });
    // the run is done: the next starts after it (after the directory's whole page once it is used up)
    runAfter = queue.length === 0 && dirNext !== null ? dirNext : current;
    current = null;
    if (episodes.length >= q.limit) return done({ run: runAfter, current: null, inner: null });
  }
}

/** `?NAME=1|true|0|false` (absent or empty: false). */
export function flagParam(url: URL, name: string): boolean {
  const v = url.searchParams.get(name);
  if (v === null || v === "" || v === "0" || v === "false") return false;
  if (v === "1" || v === "true") return true;
  throw new RelayError("malformed", `${name} must be 1 or 0`, name);
}

// The Worker's run paths: the run directory, a run's aggregates and episode list, the run
// sockets, the list across runs, and the bulk fetch of a run's finished episodes. Each asks the
// objects over RPC (sockets: fetch), which answer plain objects, and writes the JSON answer once
// here; no state is kept here.

import { readArchived } from "./archive-read.js";
import { groupCursor } from "../registry/group-store.js";
import { GROUP_SORTS, type GroupSort } from "../registry/groups.js";
import { MSGPACK } from "./representation.js";
import { runIndex } from "../registry/episode-index.js";
import { encodeCursor, type IndexEntry, type ListQuery, parseListQuery, SCOPE_HEADER, type Scope, badCursor, decodeCursor } from "../registry/rows.js";
import { decodeRunCursor, encodeRunCursor, type RunCursor } from "../registry/directory-store.js";
import { RUNS_NAME } from "../registry/run-directory.js";
import { coversRun } from "../registry/run.js";
import { ChunkWriter } from "../wire/writer.js";
import { stripCredentials } from "./credentials.js";
import { RelayError } from "./errors.js";

const JSON_HEADERS = { "content-type": "application/json", "cache-control": "no-store" };

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

/** `GET /v1/runs?prefix=&limit=&cursor=`: runs the token covers, newest first. */
export async function listRuns(env: Env, url: URL, scope: Scope, head: boolean): Promise<Response> {
  const q = parseListQuery(withoutCursor(url));
  const after = url.searchParams.get("cursor") ? decodeRunCursor(url.searchParams.get("cursor")!) : null;
  const page = await env.RUN_DIRECTORY.getByName(RUNS_NAME).runs(after, q.limit, scope, q.prefix, true);
  return json(page, head);
}

/** `GET /v1/runs/{run}`: its counts and aggregates (null for a token that does not cover the run). */
export async function runView(env: Env, run: string, scope: Scope, head: boolean): Promise<Response> {
  const covers = coversRun(scope, run);
  const aggregates = covers ? await runIndex(env, run).aggregates(run) : null;
  return json({ run, covered: covers, aggregates }, head);
}

/** `GET /v1/runs/{run}/groups?sort=spread|size|task&limit=&cursor=`: the run's rollout groups (a viewer covering the whole run only). */
export async function runGroups(env: Env, run: string, url: URL, scope: Scope, head: boolean): Promise<Response> {
  needsWholeRun(scope, run);
  const sort = url.searchParams.get("sort") || "spread";
  if (!(GROUP_SORTS as readonly string[]).includes(sort)) throw new RelayError("bad_sort", `sort must be one of ${GROUP_SORTS.join(", ")}`, "sort");
  const { limit } = parseListQuery(new URLSearchParams(url.searchParams.has("limit") ? { limit: url.searchParams.get("limit")! } : {}));
  const cursor = url.searchParams.get("cursor") || null;
  if (cursor !== null) groupCursor(cursor); // refused here, as 400 (a refusal thrown inside the index would arrive as a 500)
  const page = await runIndex(env, run).groups(run, sort as GroupSort, limit, cursor);
  return json(page, head);
}

/** `GET /v1/runs/{run}/groups/{group}`: one group, its rollouts and their advantages. */
export async function runGroup(env: Env, run: string, group: string, scope: Scope, head: boolean): Promise<Response> {
  needsWholeRun(scope, run);
  const body = await runIndex(env, run).group(group);
  if (body === null) throw new RelayError("not_found", `run ${run} has no group ${JSON.stringify(group)}`);
  return json(body, head);
}

/** `GET /v1/runs/{run}/tasks?key=K&threshold=T&limit=&cursor=`: per task, rollouts, means and the solve rate (K ≥ T). */
export async function runTasks(env: Env, run: string, url: URL, scope: Scope, head: boolean): Promise<Response> {
  needsWholeRun(scope, run);
  const key = url.searchParams.get("key") || "reward";
  const threshold = Number(url.searchParams.get("threshold") ?? "1");
  if (!Number.isFinite(threshold)) throw new RelayError("malformed", "threshold must be a number", "threshold");
  const { limit } = parseListQuery(new URLSearchParams(url.searchParams.has("limit") ? { limit: url.searchParams.get("limit")! } : {}));
  const page = await runIndex(env, run).tasks(key, threshold, limit, url.searchParams.get("cursor"));
  return json(page, head);
}

/** Groups mix episodes: only a viewer whose token covers the whole run sees them. */
function needsWholeRun(scope: Scope, run: string): void {
  if (!coversRun(scope, run)) throw new RelayError("forbidden", `a run's groups need a token covering the whole run (episodes: ["${run}:*"])`);
}

/** `GET /v1/runs/{run}/episodes?status=&sort=&limit=&cursor=`. */
export async function runEpisodes(env: Env, run: string, url: URL, scope: Scope, head: boolean): Promise<Response> {
  const page = await runIndex(env, run).list(parseListQuery(url.searchParams), scope);
  return json(page, head);
}

/** A run socket (`/v1/runs/{run}` upgraded) or the directory's (`/v1/runs` upgraded). */
export function runSocket(env: Env, request: Request, url: URL, run: string | null, scope: Scope): Promise<Response> {
  const forwarded = stripCredentials(request, url, { [SCOPE_HEADER]: JSON.stringify(scope) });
  if (run === null) return env.RUN_DIRECTORY.getByName(RUNS_NAME).fetch(forwarded);
  return runIndex(env, run).fetch(forwarded);
}

/**
 * `GET /v1/episodes?status=&prefix=&limit=&cursor=`: across runs. Runs come newest-created first
 * (from the directory), each run's episodes in its own order (newest-updated first); the cursor
 * holds the run and the position in it.
 */
export async function listAcrossRuns(env: Env, url: URL, scope: Scope, head: boolean): Promise<Response> {
  const q = parseListQuery(withoutCursor(url));
  const at = url.searchParams.get("cursor") ? decodeAcross(url.searchParams.get("cursor")!) : null;
  const episodes: IndexEntry[] = [];
  let runAfter: RunCursor | null = at?.run ?? null;
  let inner: ListQuery["after"] = at?.inner ?? null;
  let current: RunCursor | null = at?.current ?? null;
  const dir = env.RUN_DIRECTORY.getByName(RUNS_NAME);
  for (;;) {
    if (current === null) {
      const next = await dir.runs(runAfter, 1, scope, q.prefix, false);
      const r = next.runs[0];
      if (!r) return json({ episodes, cursor: null }, head);
      current = { created: Date.parse(r.created), run: r.run };
      inner = null;
    }
    const want = q.limit - episodes.length;
    const page = await runIndex(env, current.run).list({ ...q, sort: "updated", limit: want, after: inner }, scope);
    episodes.push(...page.episodes);
    if (page.cursor !== null) {
      // this run has more: a full page, or a short one whose walk stopped on its budget (episode-pages.ts)
      return json({ episodes, cursor: encodeAcross({ run: runAfter, current, inner: parseInner(page.cursor) }) }, head);
    }
    runAfter = current;
    current = null;
    if (episodes.length >= q.limit) {
      return json({ episodes, cursor: encodeAcross({ run: runAfter, current: null, inner: null }) }, head);
    }
  }
}

interface AcrossCursor {
  /** Runs up to this one are done. */
  run: RunCursor | null;
  /** The run being listed, and where in it. */
  current: RunCursor | null;
  inner: ListQuery["after"];
}

function encodeAcross(c: AcrossCursor): string {
  return encodeCursor({
    r: c.run ? encodeRunCursor(c.run) : null,
    c: c.current ? encodeRunCursor(c.current) : null,
    i: c.inner ? [c.inner.key, c.inner.id] : null,
  });
}

function decodeAcross(cursor: string): AcrossCursor {
  const v = decodeCursor(cursor) as { r?: unknown; c?: unknown; i?: unknown } | null;
  if (typeof v !== "object" || v === null) throw badCursor();
  const run = typeof v.r === "string" ? decodeRunCursor(v.r) : null;
  const current = typeof v.c === "string" ? decodeRunCursor(v.c) : null;
  let inner: ListQuery["after"] = null;
  if (Array.isArray(v.i) && v.i.length === 2 && (typeof v.i[0] === "number" || v.i[0] === null) && typeof v.i[1] === "string") {
    inner = { key: v.i[0] as number | null, id: v.i[1] };
  }
  return { run, current, inner };
}

function parseInner(cursor: string): ListQuery["after"] {
  const v = decodeCursor(cursor);
  if (Array.isArray(v) && v.length === 2 && typeof v[1] === "string") return { key: v[0] as number | null, id: v[1] };
  throw badCursor();
}

// ---- bulk fetch ----

/** Finished episodes asked from the run's index per round trip. */
const BULK_PAGE = 32;

/**
 * `GET /v1/runs/{run}/finished[?cursor=C]`: the run's finished episodes within the token's scope,
 * in the order their rows became finished in the run's index (so one that lands late still comes
 * after a cursor handed out before it), streamed. msgpack (default): a msgpack sequence of maps
 * `{id, cursor, episode}` where `episode` is the finished episode's exact bytes (as GET answers
 * them) embedded as is; `Accept: application/x-ndjson`: one JSON line `{"id","cursor","episode"}`
 * per episode, `episode` as the JSON view. Resume with `?cursor=` the last element's cursor. One
 * episode's body is in flight at a time, read from its object as a stream.
 */
export function bulkFinished(env: Env, run: string, url: URL, request: Request, scope: Scope): Response {
  const ndjson = /application\/(x-)?ndjson/.test(request.headers.get("accept") ?? "");
  const raw = url.searchParams.get("cursor");
  let after = 0;
  if (raw) {
    const v = decodeCursor(raw) as { f?: unknown } | null;
    if (!(typeof v === "object" && v !== null && Number.isSafeInteger(v.f) && (v.f as number) >= 0)) throw badCursor();
    after = v.f as number;
  }
  const headers = { "content-type": ndjson ? "application/x-ndjson" : MSGPACK, "cache-control": "no-store" };
  if (request.method === "HEAD") return new Response(null, { headers });
  const index = runIndex(env, run);
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const write = async () => {
    const writer = writable.getWriter();
    try {
      for (;;) {
        const items = await index.finished(after, BULK_PAGE, scope);
        for (const item of items) {
          const cursor = encodeCursor({ f: item.seq });
          const req = { json: ndjson, head: false, ifNoneMatch: null };
          // archived episodes come from R2 without waking their objects
          const body = (await readArchived(env.ARCHIVE, item.id, req)) ?? (await env.EPISODES.get(env.EPISODES.idFromName(item.id)).read(item.id, req));
          if (body.status !== 200 || !body.body) {
            await body.body?.cancel();
            continue; // deleted or expired since it was listed
          }
          await writer.write(ndjson ? ndjsonHead(item.id, cursor) : msgpackHead(item.id, cursor));
          const reader = body.body.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            await writer.write(value);
          }
          if (ndjson) await writer.write(new TextEncoder().encode("}\n"));
        }
        if (items.length < BULK_PAGE) break;
        after = items.at(-1)!.seq;
      }
      await writer.close();
    } catch (e) {
      console.error(`bulk fetch of run ${run}:`, e);
      await writer.abort(e);
    }
  };
  // the stream is written as the client reads it (the writer waits for room)
  void write();
  return new Response(readable, { headers });
}

/** `{id, cursor, episode: ` as msgpack: a 3-entry map whose last value follows as raw bytes. */
function msgpackHead(id: string, cursor: string): Uint8Array {
  const w = new ChunkWriter();
  w.mapHeader(3);
  w.str("id");
  w.str(id);
  w.str("cursor");
  w.str(cursor);
  w.str("episode");
  return w.bytes();
}

function ndjsonHead(id: string, cursor: string): Uint8Array {
  return new TextEncoder().encode(`{"id":${JSON.stringify(id)},"cursor":${JSON.stringify(cursor)},"episode":`);
}

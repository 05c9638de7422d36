// `GET /v1/runs/{run}/finished`: the bulk fetch of a run's finished episodes, streamed (an export
// reads it: tools/cli/export.ts, clients/python), with its cursors and its budget of rows read unsent.

import { encode as msgpackEncode } from "@msgpack/msgpack";
import { readArchived } from "../protocol/archive/archive-read.js";
import { MSGPACK } from "../protocol/http/representation.js";
import { positionText, readPosition } from "../protocol/registry/list-cursors.js";
import { filterParams, isFiltered, parseRowFilter } from "../protocol/registry/row-filter.js";
import { type FinishedSelection, type IndexEntry, noSuchRun } from "../protocol/registry/rows.js";
import { ChunkWriter } from "../protocol/wire/writer.js";
import { type Bound, flagParam, open, type RunAccess, runIndex, seal } from "./run-routes.js";

/** Finished episodes asked from the run's index per round trip. */
const BULK_PAGE = 32;
/**
 * Rows a bulk fetch may read without sending them (outside the token's scope, or gone since),
 * per request: past it the answer ends with a continuation `{cursor, more: true}`.
 */
export const BULK_IDLE_BUDGET = 5000;

/**
 * `GET /v1/runs/{run}/finished[?cursor=C]`: the run's finished episodes within the token's scope,
 * in the order their rows became finished in the run's index (so one that lands late still comes
 * after a cursor handed out before it), streamed. msgpack (default): a msgpack sequence of maps
 * `{id, cursor, episode}` where `episode` is the finished episode's exact bytes (as GET answers
 * them) embedded as is; `Accept: application/x-ndjson`: one JSON line `{"id","cursor","episode"}`
 * per episode, `episode` as the JSON view. Resume with `?cursor=` the last element's cursor. One
 * episode's body is in flight at a time, read from its object as a stream. A request that has read
 * BULK_IDLE_BUDGET rows it did not send ends with `{cursor, more: true}`: ask again from there.
 *
 * An export's selection: the list's filters (row-filter.ts: `kind`, `env`, `step`,
 * `policy_version`, `task`, `stop`, `truncated`, `errored`, `reward`, `min_turns`, `min_tokens`,
 * `flag`, `flagged`) keep the episodes whose rows pass them (rows that do not count as unsent);
 * the cursor is then bound to the filters too. `row=1`: each element also carries the episode's
 * index row as the list shows it, before the episode (`{id, cursor, row, episode}`), so one request
 * gives both.
 */
export async function bulkFinished(env: Env, a: RunAccess, url: URL, request: Request): Promise<Response> {
  const ndjson = /application\/(x-)?ndjson/.test(request.headers.get("accept") ?? "");
  const filter = parseRowFilter(url.searchParams);
  const withRows = flagParam(url, "row");
  const selection: FinishedSelection = { filter, withRows };
  // a cursor of a filtered bulk fetch is bound to its filters (one of another selection is refused)
  const bound: Bound = { list: "finished", run: a.run };
  if (isFiltered(filter)) bound.detail = JSON.stringify(filterParams(filter));
  const raw = await open(a.viewer, bound, url.searchParams.get("cursor"));
  const index = runIndex(env, a.run);
  let page = await index.finished(raw === null ? 0 : readPosition("finished", raw), BULK_PAGE, a.scope, selection);
  if (page === null) throw noSuchRun(a.run);
  const headers = { "content-type": ndjson ? "application/x-ndjson" : MSGPACK, "cache-control": "no-store" };
  if (request.method === "HEAD") return new Response(null, { headers });
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const cursorOf = (seq: number) => seal(a.viewer, bound, positionText("finished", seq)) as Promise<string>;
  const write = async () => {
    const writer = writable.getWriter();
    try {
      let idle = 0;
      for (;;) {
        for (const item of page!.items) {
          const req = { json: ndjson, head: false, ifNoneMatch: null };
          // archived episodes come from R2 without waking their objects
          const body =
            (await readArchived(env.ARCHIVE, item.id, req)) ??
            (await env.EPISODES.getByName(item.id).read(item.id, req));
          if (body.status !== 200 || !body.body) {
            await body.body?.cancel();
            idle++;
            continue; // deleted or expired since it was listed
          }
          const cursor = await cursorOf(item.seq);
          await writer.write(ndjson ? ndjsonHead(item.id, cursor, item.row) : msgpackHead(item.id, cursor, item.row));
          const reader = body.body.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            await writer.write(value);
          }
          if (ndjson) await writer.write(new TextEncoder().encode("}\n"));
        }
        idle += page!.unsent;
        if (page!.next === null) break;
        if (idle >= BULK_IDLE_BUDGET) {
          await writer.write(continuation(await cursorOf(page!.next), ndjson));
          break;
        }
        page = await index.finished(page!.next, BULK_PAGE, a.scope, selection);
        if (page === null) break; // the run's rows went meanwhile
      }
      await writer.close();
    } catch (e) {
      console.error(`bulk fetch of run ${a.run}:`, e);
      await writer.abort(e);
    }
  };
  // the stream is written as the client reads it (the writer waits for room)
  void write();
  return new Response(readable, { headers });
}

/** `{id, cursor, [row,] episode: ` as msgpack: a 3- or 4-entry map whose last value follows as raw bytes. */
function msgpackHead(id: string, cursor: string, row: IndexEntry | undefined): Uint8Array {
  const w = new ChunkWriter();
  w.mapHeader(row === undefined ? 3 : 4);
  w.str("id");
  w.str(id);
  w.str("cursor");
  w.str(cursor);
  const head = w.bytes();
  const tail = new ChunkWriter();
  tail.str("episode");
  if (row === undefined) return concat(head, tail.bytes());
  const key = new ChunkWriter();
  key.str("row");
  return concat(head, key.bytes(), msgpackEncode(row), tail.bytes());
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function ndjsonHead(id: string, cursor: string, row: IndexEntry | undefined): Uint8Array {
  const rowPart = row === undefined ? "" : `"row":${JSON.stringify(row)},`;
  return new TextEncoder().encode(
    `{"id":${JSON.stringify(id)},"cursor":${JSON.stringify(cursor)},${rowPart}"episode":`,
  );
}

/** The last element of an answer that stopped on its budget: `{cursor, more: true}`. */
function continuation(cursor: string, ndjson: boolean): Uint8Array {
  if (ndjson) return new TextEncoder().encode(`${JSON.stringify({ cursor, more: true })}\n`);
  const w = new ChunkWriter();
  w.mapHeader(2);
  w.str("cursor");
  w.str(cursor);
  w.str("more");
  w.bool(true);
  return w.bytes();
}

// `episode-relay export --run R --format parquet|jsonl --out PATH URL [filters] [--q QUERY] [--per rollout|branch]`:
// a run's finished episodes, or a filtered or searched selection of them, written to a file,
// streaming and resumable (the Python client's `export_jsonl` / `export_parquet`, same layout).
//
// Source: the run's bulk fetch `GET /v1/runs/{run}/finished?row=1&<filters>` as NDJSON (each line
// `{id, cursor, row, episode}`: the index row beside the episode's JSON view), or with --q the
// search's pages (`GET /v1/runs/{run}/search?q=&status=finished&row=1`) and each result's
// `GET /v1/episodes/{id}` JSON view. One episode is held at a time.
// - jsonl: OUT gets one line per episode, `{"id","cursor","row","episode"}`, the bulk fetch's own
//   line (byte for byte what the relay sent); a second call goes on after the file's last complete
//   line (a partial one is cut off).
// - parquet: OUT is a directory of `part-NNNNN.parquet` files (hyparquet-writer), one per --batch
//   rollouts, and `_export.json` (parts written, the cursor after them, the selection); a second
//   call goes on from there (a part past it, from an interrupted write, is removed).
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { type ColumnSource, fileWriter, ParquetWriter, schemaFromColumnData } from "hyparquet-writer";
import { bearer, checkBaseUrl, refusalOf, relayFetch } from "../../clients/typescript/relay-fetch.js";
import { filterParams, type RowFilter } from "../../src/protocol/index.js";
import { parseOptions, UsageError } from "../parse-options.js";
import { BRANCH_COLUMNS, branchRecords, type Column, ROLLOUT_COLUMNS, rolloutRecord } from "./export-rows.js";
import { FILTER_OPTIONS, filterFromFlags } from "./filter-flags.js";
import { CLI_HINTS } from "./hints.js";

export interface ExportArgs {
  url: string;
  run: string;
  format: "jsonl" | "parquet";
  out: string;
  per: "rollout" | "branch";
  q: string | null;
  filter: RowFilter;
  batch: number;
  token?: string;
}

/** `export`'s command line (after the command); throws UsageError. */
export function parseExportArgs(argv: string[]): ExportArgs {
  const { values: o, positionals } = parseOptions({
    args: argv,
    options: {
      run: { type: "string" },
      format: { type: "string" },
      out: { type: "string" },
      per: { type: "string" },
      q: { type: "string" },
      batch: { type: "string" },
      token: { type: "string" },
      ...FILTER_OPTIONS,
    },
    allowPositionals: true,
  });
  if (positionals.length !== 1)
    throw new UsageError(
      positionals.length === 0 ? "the relay's URL is required" : `one URL, got ${positionals.join(" ")}`,
    );
  if (o.run === undefined) throw new UsageError("--run R is required");
  if (o.format !== "jsonl" && o.format !== "parquet")
    throw new UsageError(`--format: expected parquet or jsonl, got ${JSON.stringify(o.format ?? null)}`);
  if (o.out === undefined || o.out === "")
    throw new UsageError("--out PATH is required (jsonl: a file; parquet: a directory of parts)");
  const per = o.per ?? "rollout";
  if (per !== "rollout" && per !== "branch")
    throw new UsageError(`--per: expected rollout or branch, got ${JSON.stringify(per)}`);
  if (o.format === "jsonl" && o.per !== undefined)
    throw new UsageError("--per goes with --format parquet (jsonl holds the episodes themselves)");
  if (o.q !== undefined && o.q.trim() === "") throw new UsageError("--q needs a query");
  const batch = o.batch === undefined ? 1000 : /^\d{1,7}$/.test(o.batch) ? Number(o.batch) : 0;
  if (batch < 1) throw new UsageError(`--batch: expected a whole number from 1, got ${JSON.stringify(o.batch)}`);
  const filter = filterFromFlags(o);
  return {
    url: positionals[0]!,
    run: o.run,
    format: o.format,
    out: o.out,
    per,
    q: o.q ?? null,
    filter,
    batch,
    token: o.token,
  };
}

/**
 * One exported episode: its export line (ending in "\n"), the position after it, its row and the parsed episode
 * (parquet only).
 */
interface Line {
  line: Uint8Array;
  cursor: string;
  row: Record<string, unknown>;
  episode: Record<string, unknown> | null;
}

const HEAD = /^\{"id":("(?:[^"\\]|\\.)*"),"cursor":("(?:[^"\\]|\\.)*")/;

/** The export's lines after `cursor`, each parsed only when `parse` (parquet needs the row and the episode). */
async function* lines(base: string, a: ExportArgs, cursor: string | null, parse: boolean): AsyncGenerator<Line> {
  if (a.q !== null) {
    yield* searchLines(base, a, cursor, parse);
    return;
  }
  const target = new URL(`${base}/v1/runs/${encodeURIComponent(a.run)}/finished`);
  target.searchParams.set("row", "1");
  for (const [k, v] of filterParams(a.filter)) target.searchParams.append(k, v);
  let at = cursor;
  for (;;) {
    const url = new URL(target);
    if (at) url.searchParams.set("cursor", at);
    const res = await relayFetch(url, {
      headers: { accept: "application/x-ndjson", ...bearer(url, { token: a.token }) },
    });
    if (res.status >= 400 && res.status < 500)
      throw await refusalOf(res, `run ${JSON.stringify(a.run)}`, base, CLI_HINTS);
    if (!res.ok || !res.body) throw new Error(`GET run ${a.run} finished episodes: ${res.status} ${await res.text()}`);
    let more: string | null = null;
    for await (const raw of splitLines(res.body)) {
      const text = new TextDecoder().decode(raw.subarray(0, Math.min(raw.length, 4096)));
      const m = HEAD.exec(text);
      if (m === null) {
        const tail = JSON.parse(new TextDecoder().decode(raw)) as { cursor?: unknown; more?: unknown };
        if (tail.more === true && typeof tail.cursor === "string") {
          more = tail.cursor;
          continue;
        }
        throw new Error(`GET run ${a.run} finished episodes: a line is not an element (${text.slice(0, 60)})`);
      }
      const position = JSON.parse(m[2]!) as string;
      if (!parse) {
        yield { line: raw, cursor: position, row: {}, episode: null };
      } else {
        const v = JSON.parse(new TextDecoder().decode(raw)) as {
          row: Record<string, unknown>;
          episode: Record<string, unknown>;
        };
        yield { line: raw, cursor: position, row: v.row, episode: v.episode };
      }
      at = position;
    }
    if (more === null) return;
    at = more;
  }
}

/** The lines of a body (each with its "\n"); a body that ends inside a line throws (resume from the last one). */
async function* splitLines(body: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  let pending: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      let from = 0;
      for (let i = value.indexOf(10); i >= 0; i = value.indexOf(10, from)) {
        pending.push(value.subarray(from, i + 1));
        size += i + 1 - from;
        yield concatBytes(pending, size);
        pending = [];
        size = 0;
        from = i + 1;
      }
      if (from < value.length) {
        pending.push(value.subarray(from));
        size += value.length - from;
      }
    }
    if (size > 0) throw new Error(`the answer ended inside a line (${size} bytes); run the command again to resume`);
  } finally {
    await reader.cancel().catch(() => {});
  }
}

function concatBytes(parts: Uint8Array[], size: number): Uint8Array {
  if (parts.length === 1) return parts[0]!.slice();
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

async function* searchLines(base: string, a: ExportArgs, cursor: string | null, parse: boolean): AsyncGenerator<Line> {
  let [page, skip] = searchPosition(cursor);
  const get = async (url: URL) => {
    const res = await relayFetch(url, { headers: { accept: "application/json", ...bearer(url, { token: a.token }) } });
    if (res.status >= 400 && res.status < 500)
      throw await refusalOf(res, `run ${JSON.stringify(a.run)}`, base, CLI_HINTS);
    if (!res.ok) throw new Error(`GET ${url.pathname}: ${res.status} ${await res.text()}`);
    return new Uint8Array(await res.arrayBuffer());
  };
  for (;;) {
    const url = new URL(`${base}/v1/runs/${encodeURIComponent(a.run)}/search`);
    url.searchParams.set("q", a.q!);
    url.searchParams.set("status", "finished");
    url.searchParams.set("row", "1");
    url.searchParams.set("limit", "100");
    for (const [k, v] of filterParams(a.filter)) url.searchParams.append(k, v);
    if (page) url.searchParams.set("cursor", page);
    const answer = JSON.parse(new TextDecoder().decode(await get(url))) as {
      episodes: Array<{ id: string; row: Record<string, unknown> }>;
      cursor: string | null;
    };
    for (let i = skip; i < answer.episodes.length; i++) {
      const hit = answer.episodes[i]!;
      const view = await get(new URL(`${base}/v1/episodes/${encodeURIComponent(hit.id)}`));
      const position = JSON.stringify([page, i + 1]);
      const head = new TextEncoder().encode(
        `{"id":${JSON.stringify(hit.id)},"cursor":${JSON.stringify(position)},"row":${JSON.stringify(hit.row)},"episode":`,
      );
      const line = concatBytes([head, view, new TextEncoder().encode("}\n")], head.length + view.length + 2);
      yield {
        line,
        cursor: position,
        row: hit.row,
        episode: parse ? (JSON.parse(new TextDecoder().decode(view)) as Record<string, unknown>) : null,
      };
    }
    if (!answer.cursor) return;
    [page, skip] = [answer.cursor, 0];
  }
}

function searchPosition(cursor: string | null): [string | null, number] {
  if (!cursor) return [null, 0];
  const v = JSON.parse(cursor) as unknown;
  if (Array.isArray(v) && v.length === 2 && (v[0] === null || typeof v[0] === "string") && Number.isSafeInteger(v[1]))
    return [v[0] as string | null, v[1] as number];
  throw new Error(`not a position of a search export: ${cursor.slice(0, 80)}`);
}

/** The cursor of FILE's last complete line (a partial last line is cut off); null for no file or an empty one. */
export function lastLineCursor(path: string): string | null {
  if (!existsSync(path)) return null;
  const size = statSync(path).size;
  if (size === 0) return null;
  const fd = openSync(path, "r");
  try {
    const chunk = 1 << 16;
    const buf = Buffer.alloc(chunk);
    let end = -1;
    for (let pos = size; pos > 0 && end < 0; ) {
      const n = Math.min(chunk, pos);
      pos -= n;
      readSync(fd, buf, 0, n, pos);
      const i = buf.subarray(0, n).lastIndexOf(10);
      if (i >= 0) end = pos + i + 1;
    }
    if (end < 0) {
      truncateSync(path, 0);
      return null;
    }
    if (end !== size) truncateSync(path, end);
    let start = 0;
    for (let pos = end - 1; pos > 0; ) {
      const n = Math.min(chunk, pos);
      readSync(fd, buf, 0, n, pos - n);
      const i = buf.subarray(0, n).lastIndexOf(10);
      if (i >= 0) {
        start = pos - n + i + 1;
        break;
      }
      pos -= n;
    }
    const head = Buffer.alloc(4096);
    const n = readSync(fd, head, 0, 4096, start);
    const m = HEAD.exec(head.subarray(0, n).toString("utf8"));
    if (m === null) throw new Error(`${path}: its last line is not an export line; not resuming into it`);
    return JSON.parse(m[2]!) as string;
  } finally {
    closeSync(fd);
  }
}

const STATE = "_export.json";

interface State {
  selection: { run: string; per: string; q: string | null; filters: Array<[string, string]> };
  parts: number;
  rollouts: number;
  cursor: string | null;
}

/** Runs the export; prints what it wrote. Refusals and failures throw (a second call resumes). */
export async function runExport(a: ExportArgs): Promise<number> {
  const base = checkBaseUrl(a.url);
  if (a.format === "jsonl") {
    const cursor = lastLineCursor(a.out);
    const fd = openSync(a.out, cursor === null ? "w" : "a");
    let n = 0;
    try {
      for await (const l of lines(base, a, cursor, false)) {
        writeSync(fd, l.line);
        n++;
      }
    } catch (e) {
      console.log(
        `${n} episode(s) of run ${a.run} written to ${a.out} before the error; run the command again to resume`,
      );
      throw e;
    } finally {
      closeSync(fd);
    }
    console.log(`${n} episode(s) of run ${a.run} written to ${a.out}${cursor === null ? "" : " (resumed)"}`);
    return 0;
  }
  mkdirSync(a.out, { recursive: true });
  const statePath = join(a.out, STATE);
  const selection: State["selection"] = { run: a.run, per: a.per, q: a.q, filters: filterParams(a.filter) };
  let state: State = { selection, parts: 0, rollouts: 0, cursor: null };
  if (existsSync(statePath)) {
    const old = JSON.parse(readFileSync(statePath, "utf8")) as State;
    if (JSON.stringify(old.selection) !== JSON.stringify(selection))
      throw new Error(
        `${a.out} holds an export of another selection (${JSON.stringify(old.selection)}); not resuming into it`,
      );
    state = old;
  }
  for (const name of readdirSync(a.out)) {
    const m = /^part-(\d+)\.parquet(\.tmp)?$/.exec(name);
    if (m && (m[2] !== undefined || Number(m[1]) >= state.parts)) rmSync(join(a.out, name));
  }
  const columns = a.per === "rollout" ? ROLLOUT_COLUMNS : BRANCH_COLUMNS;
  let buf: Array<Record<string, unknown>> = [];
  let rollouts = 0;
  let written = 0;
  let cursor = state.cursor;
  const flush = () => {
    const part = join(a.out, `part-${String(state.parts).padStart(5, "0")}.parquet`);
    writePart(`${part}.tmp`, columns, buf);
    renameSync(`${part}.tmp`, part);
    state = { ...state, parts: state.parts + 1, rollouts: state.rollouts + rollouts, cursor };
    writeFileSync(`${statePath}.tmp`, JSON.stringify(state));
    renameSync(`${statePath}.tmp`, statePath);
    written += rollouts;
    buf = [];
    rollouts = 0;
  };
  try {
    for await (const l of lines(base, a, cursor, true)) {
      if (a.per === "rollout") buf.push(rolloutRecord(l.row, l.episode!));
      else buf.push(...branchRecords(l.row, l.episode!));
      rollouts++;
      cursor = l.cursor;
      if (rollouts >= a.batch) flush();
    }
    if (rollouts > 0) flush();
  } catch (e) {
    console.log(
      `${written} rollout(s) of run ${a.run} written to ${a.out} before the error; run the command again to resume`,
    );
    throw e;
  }
  if (state.parts === 0) {
    // an empty selection still gives a readable table
    writePart(join(a.out, "part-00000.parquet"), columns, []);
    state = { ...state, parts: 1 };
    writeFileSync(statePath, JSON.stringify(state));
  }
  console.log(
    `${written} rollout(s) of run ${a.run} written to ${a.out} (${state.parts} part(s), ${state.rollouts} rollout(s) in all)`,
  );
  return 0;
}

/** One Parquet file of `rows` (the columns' types fixed, every column nullable). */
function writePart(path: string, columns: readonly Column[], rows: Array<Record<string, unknown>>): void {
  const columnData: ColumnSource[] = columns.map((c) => ({
    name: c.name,
    type: c.type,
    nullable: true,
    data: rows.map((r) => {
      const v = r[c.name];
      if (v === undefined || v === null) return null;
      if (c.type === "INT64") return BigInt(v as number);
      return v;
    }),
  }));
  const writer = new ParquetWriter({ writer: fileWriter(path), schema: schemaFromColumnData({ columnData }) });
  writer.write({ columnData, rowGroupSize: Math.max(rows.length, 1) });
  writer.finish();
}

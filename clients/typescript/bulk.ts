// Bulk fetch of a run's finished episodes (browser and Node): `fetchRun(url, run, options)` reads
// `GET /v1/runs/{run}/finished` as it arrives and yields one element per finished episode, oldest
// ended first. msgpack (default): the body is a msgpack sequence of maps `{id, cursor, episode}`;
// elements are split with the project's lossless Reader (`span()`), so `episode` is a view of the
// exact bytes `GET /v1/episodes/{id}` answers, never decoded. Only the unread tail of the body is
// kept. `json: true`: NDJSON, `episode` is the parsed JSON view. Pass an element's `cursor` as
// `options.cursor` to continue after it (e.g. after a dropped connection). An answer that stopped on
// the relay's budget ends with `{cursor, more: true}` (rows it read without sending them): the
// iteration asks again from there by itself.

import { concatChunks, Reader, WireError } from "../../src/protocol/index.js";
import {
  bearer,
  checkBaseUrl,
  type Hints,
  LIBRARY_HINTS,
  refusalOf,
  relayFetch,
  type TokenOptions,
} from "./relay-fetch.js";

export interface FetchRunOptions extends TokenOptions {
  /** Bearer token (any valid token: the relay sends only the episodes its `episodes` patterns cover). */
  token?: string;
  /** Continue after the element that carried this cursor. */
  cursor?: string;
  /** NDJSON: `episode` is the JSON view, parsed. Default false (msgpack, exact bytes). */
  json?: boolean;
  /** Aborts the request (the iteration then throws the abort reason). */
  signal?: AbortSignal;
  /** How a refusal tells the caller to pass a token (default: the library's `{ token }`). */
  hints?: Hints;
}

/** One finished episode of the run: its id, the cursor to continue after it, and the episode. */
export interface RunEpisode<E = Uint8Array> {
  id: string;
  cursor: string;
  /** msgpack: the exact bytes `GET /v1/episodes/{id}` answers; json: the parsed JSON view. */
  episode: E;
}

/**
 * The finished episodes of `run` (an episode id's part before its last `:`, or `~` for ids
 * without one), oldest ended first, read incrementally. A refusal (4xx) throws a RelayRefusal;
 * another failure (5xx, a dropped or truncated body) throws an Error: resume with the last
 * element's cursor.
 */
export function fetchRun(
  url: string,
  run: string,
  options: FetchRunOptions & { json: true },
): AsyncIterable<RunEpisode<unknown>>;
export function fetchRun(
  url: string,
  run: string,
  options?: FetchRunOptions & { json?: false },
): AsyncIterable<RunEpisode>;
export function fetchRun(url: string, run: string, options?: FetchRunOptions): AsyncIterable<RunEpisode<unknown>>;
export function fetchRun(url: string, run: string, options: FetchRunOptions = {}): AsyncIterable<RunEpisode<unknown>> {
  return stream(url, run, options);
}

/** The last element of an answer the relay ended on its budget: ask again from `cursor`. */
interface More {
  more: string;
}

async function* stream(url: string, run: string, options: FetchRunOptions): AsyncGenerator<RunEpisode<unknown>> {
  let cursor = options.cursor;
  for (;;) {
    let more: string | null = null;
    for await (const element of answer(url, run, { ...options, cursor })) {
      if ("more" in element) more = element.more;
      else yield element;
    }
    if (more === null) return;
    cursor = more;
  }
}

/** One answer's elements, the continuation included. */
async function* answer(url: string, run: string, options: FetchRunOptions): AsyncGenerator<RunEpisode<unknown> | More> {
  const base = checkBaseUrl(url);
  const target = new URL(`${base}/v1/runs/${encodeURIComponent(run)}/finished`);
  if (options.cursor) target.searchParams.set("cursor", options.cursor);
  const headers: Record<string, string> = {
    accept: options.json ? "application/x-ndjson" : "application/msgpack",
    ...bearer(target, options),
  };
  const res = await relayFetch(target, { headers, signal: options.signal });
  if (res.status >= 400 && res.status < 500)
    throw await refusalOf(res, `run ${JSON.stringify(run)}`, base, options.hints ?? LIBRARY_HINTS);
  if (!res.ok) throw new Error(`GET run ${run} finished episodes: ${res.status} ${await res.text()}`);
  if (!res.body) throw new Error(`GET run ${run} finished episodes: the answer has no body`);
  const reader = res.body.getReader();
  try {
    for await (const element of options.json ? ndjsonElements(reader, run) : msgpackElements(reader, run)) {
      yield element;
      // aborted while the caller held this element: stop before the next (already buffered) one
      options.signal?.throwIfAborted();
    }
  } finally {
    // the caller stopped early (or it failed): release the connection
    await reader.cancel().catch(() => {});
  }
}

/**
 * msgpack sequence elements. Each read chunk is appended to the unread tail; an element that is
 * not complete yet is tried again once the tail has doubled (or the body ended), so a large
 * episode is walked a bounded number of times. Yielded episodes are views of buffers that are
 * never written again.
 */
async function* msgpackElements(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  run: string,
): AsyncGenerator<RunEpisode | More> {
  let chunks: Uint8Array[] = [];
  let buffered = 0;
  let retryAt = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (value?.length) {
      chunks.push(value);
      buffered += value.length;
    }
    if (!done && buffered < retryAt) continue;
    const buf = concatChunks(chunks, buffered);
    let pos = 0;
    while (pos < buf.length) {
      const element = parseElement(buf, pos);
      if (element === null) break;
      pos = element.end;
      yield element.value;
    }
    // keep only the unread tail (a copy: the consumed part's memory goes with the yielded views)
    const tail = pos === 0 ? buf : buf.slice(pos);
    chunks = tail.length > 0 ? [tail] : [];
    buffered = tail.length;
    retryAt = 2 * tail.length;
    if (done) {
      if (buffered > 0)
        throw new Error(
          `run ${run}: the answer ended inside an element (${buffered} bytes left); resume with the last cursor`,
        );
      return;
    }
  }
}

/** The element at `pos`, or null when `buf` ends before it does. Other malformed bytes throw. */
function parseElement(buf: Uint8Array, pos: number): { value: RunEpisode | More; end: number } | null {
  const r: Reader = new Reader(buf, pos);
  try {
    const n = r.mapHeader();
    if (n < 0) r.fail("expected an element map {id, cursor, episode}");
    let id: string | undefined;
    let cursor: string | undefined;
    let episode: Uint8Array | undefined;
    let more = false;
    for (let i = 0; i < n; i++) {
      const key = r.str() ?? r.fail("expected a str key");
      if (key === "episode") episode = r.span();
      else if (key === "id") id = r.str() ?? r.fail("id: expected a str");
      else if (key === "cursor") cursor = r.str() ?? r.fail("cursor: expected a str");
      else if (key === "more") more = r.bool() ?? r.fail("more: expected a bool");
      else r.span(); // a field this client does not know
    }
    if (more && cursor !== undefined && id === undefined) return { value: { more: cursor }, end: r.pos };
    if (id === undefined || cursor === undefined || episode === undefined)
      r.fail("an element lacks id, cursor or episode", pos);
    return { value: { id, cursor, episode }, end: r.pos };
  } catch (e) {
    if (e instanceof WireError && e.message.startsWith("truncated")) return null;
    throw e;
  }
}

/** NDJSON lines, parsed; a line is split only at its newline (JSON text has no raw newlines). */
async function* ndjsonElements(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  run: string,
): AsyncGenerator<RunEpisode<unknown> | More> {
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  const line = (last: Uint8Array): RunEpisode<unknown> | More | null => {
    const bytes = concatChunks([...pending, last], pendingBytes + last.length);
    pending = [];
    pendingBytes = 0;
    const text = utf8.decode(bytes);
    if (text.trim() === "") return null;
    const v = JSON.parse(text) as { id?: unknown; cursor?: unknown; episode?: unknown; more?: unknown };
    if (v.more === true && typeof v.cursor === "string" && v.id === undefined) return { more: v.cursor };
    if (typeof v.id !== "string" || typeof v.cursor !== "string" || !("episode" in v))
      throw new Error(`run ${run}: a line lacks id, cursor or episode`);
    return { id: v.id, cursor: v.cursor, episode: v.episode };
  };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    let from = 0;
    for (let nl = value.indexOf(10); nl >= 0; nl = value.indexOf(10, from)) {
      const element = line(value.subarray(from, nl));
      from = nl + 1;
      if (element) yield element;
    }
    if (from < value.length) {
      pending.push(value.slice(from));
      pendingBytes += value.length - from;
    }
  }
  if (pendingBytes > 0) throw new Error(`run ${run}: the answer ended inside a line; resume with the last cursor`);
}

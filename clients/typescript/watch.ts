// TypeScript watcher client (browser and Node): `watchEpisode(url, id, options)` follows one
// episode live, keeps its assembly with the project's own `EpisodeAssembly`, reconnects with
// backoff and resumes by seq (no gap, no duplicate), and acknowledges what it received as the
// relay asks (every `ack_bytes` of its hello): the relay paces a catch-up by those acks, and
// closes a watcher that falls too far behind them.
//
// No Node-only APIs: in Node 20 pass a WebSocket implementation (`{ WebSocket }` from "ws").
// This module is the package's `episode-relay/client`: it also exports `fetchRun` (bulk.ts, a
// run's finished episodes), `fetchGroups`, `fetchGroupsPage` and `fetchGroup` (groups.ts, a run's
// groups and their rollouts' advantages), `listEpisodes` and `fetchEpisodesPage` (episodes.ts, a
// run's episodes by status, task, stop condition, flags, reward ranges, turns and tokens),
// `fetchAnnotations` and `foldOntoNodes` (the trainer's annotations, and their fold onto a trace's
// nodes as prime-rl folds them) and `RelayRefusal` (refusal.ts).

import {
  ACK_BYTES,
  ackMessage,
  CLOSE_TOO_SLOW,
  CLOSE_TRY_LATER,
  decodeLossless,
  decodeWatchMessage,
  EpisodeAssembly,
  FinishError,
  type Json,
  retryHintMs,
  toJson,
  traceOf,
  type WatchMessage,
  WS_PROTOCOL,
  WS_TOKEN_PREFIX,
} from "../../src/protocol/index.js";
import { RelayRefusal } from "./refusal.js";
import {
  bearer,
  checkBaseUrl,
  checkEpisodeId,
  checkTokenTransport,
  type Hints,
  LIBRARY_HINTS,
  RelayUnreachable,
  refusalOf,
  relayFetch,
  type TokenOptions,
} from "./relay-fetch.js";

export { branchPaths, type FoldNode, foldOntoNodes, mismatchKl, type NodeSignals } from "../../src/protocol/index.js";
export { type FetchRunOptions, fetchRun, type RunEpisode } from "./bulk.js";
export {
  type EpisodeFilter,
  type EpisodeSort,
  type EpisodesPage,
  fetchEpisodesPage,
  type IndexEntry,
  type IndexStatus,
  type ListEpisodesOptions,
  listEpisodes,
  type RewardRange,
  type RowFilter,
} from "./episodes.js";
export {
  type Advantage,
  type FetchGroupsOptions,
  fetchGroup,
  fetchGroups,
  fetchGroupsPage,
  type GroupDetail,
  type GroupRollout,
  type GroupSort,
  type GroupSummary,
  type GroupsPage,
  type RewardStats,
  type ZeroVarianceTrend,
} from "./groups.js";
export { RelayRefusal } from "./refusal.js";
export { type Hints, RelayUnreachable } from "./relay-fetch.js";

/**
 * The subset of the WHATWG WebSocket this client uses. The browser's `WebSocket` and `ws`'s fit it
 * as they are (pass either as `options.WebSocket`, no cast): the handlers are set, never read.
 */
export interface SocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: any) => void) | null;
  onmessage: ((ev: any) => void) | null;
  onclose: ((ev: any) => void) | null;
  onerror: ((ev: any) => void) | null;
}
export type SocketFactory = new (url: string, protocols?: string | string[]) => SocketLike;

export interface WatchOptions extends TokenOptions {
  /**
   * Bearer token: offered as the WebSocket subprotocol entry `bearer.<token>` beside
   * `episode-relay` (never in the URL, which logs keep); the probe after a failed handshake sends
   * it as `Authorization: Bearer`.
   */
  token?: string;
  /** Resume after this seq instead of starting from a snapshot. */
  after?: number;
  /** false: ask for `?routing=0` (no routing bytes). Default true. */
  routing?: boolean;
  /** Only these traces. */
  traces?: string[];
  /** WebSocket implementation (default: globalThis.WebSocket). */
  WebSocket?: SocketFactory;
  /** Reconnect when the socket drops (default true). */
  reconnect?: boolean;
  /**
   * Backoff between reconnect attempts: first delay and cap, ms (default 250 / 10,000), with full
   * jitter (a delay drawn between 0 and the bound), so watchers dropped together (a deploy drops
   * every socket) come back spread out. A 1013 with the relay's retry hint waits that long (and a
   * little more, at random) instead.
   */
  backoffMs?: [number, number];
  /**
   * Keep-alive ping period, ms (default 30,000; answered by the relay's platform, it only keeps idle connections open).
   */
  pingIntervalMs?: number;
  /**
   * Once live, acknowledge after this many bytes received (default: what the relay's hello asks, else 1 MiB). For
   * tests.
   */
  ackEveryBytes?: number;
  /**
   * Give up when the relay has not answered for this long since the watch started and it never
   * connected (default 30,000 ms): `finished()` then rejects with a RelayUnreachable saying why.
   * Once connected, a watch retries for as long as it takes.
   */
  giveUpMs?: number;
  /** How a refusal tells the caller to pass a token (default: the library's `{ token }`). */
  hints?: Hints;
  /**
   * Follow the trainer's annotations (default true): the relay notes when they change, and the
   * watch reads them (`GET .../annotations`) into `annotations`, emitting an `annotations` event.
   */
  annotations?: boolean;
}

/**
 * connecting (first connection, until the relay's hello), catching_up, live, resuming (a later
 * connection after a drop), finished / failed (the run ended), refused (the relay refused the
 * watch: see `EpisodeWatch.refusal`), unreachable (the relay never answered within `giveUpMs`:
 * see `EpisodeWatch.unreachable`), closed (`close()` was called).
 */
export type WatchState =
  | "connecting"
  | "catching_up"
  | "live"
  | "resuming"
  | "finished"
  | "failed"
  | "refused"
  | "unreachable"
  | "closed";

/**
 * The relay's answers to the probe that mean "try again later": 426 (the endpoint is right, it
 * just wants a WebSocket), timeouts, rate limits and server errors (but `auth_not_configured`).
 * Any other answer of the relay (401, 403, 404, 400) ends the watch. An answer without the relay's
 * header ends it only when it is a page or a 404 (405, 410: not the relay at that address); any other (a
 * proxy's 502, a local router's 503) is retried like a refused or reset connection (relay-fetch.ts).
 */
function transient(status: number): boolean {
  return status === 426 || status === 408 || status === 429 || status >= 500;
}

export type WatchEvent =
  | { type: "hello"; episode: string; status: string; seq: number }
  | { type: "snapshot"; seq: number; reason: string }
  | { type: "caught_up"; seq: number }
  | { type: "delta"; seq: number; trace: string; delta: Uint8Array }
  | { type: "finish"; status: "finished" | "failed"; seq: number; episode: Uint8Array | null; error: string | null }
  | { type: "reconnecting"; attempt: number; delayMs: number; code: number; reason: string }
  | { type: "refused"; error: RelayRefusal }
  /** The relay never answered (within `giveUpMs` of the watch's start); the watch ended. */
  | { type: "unreachable"; error: RelayUnreachable }
  /**
   * The run's status changed without ending: `finish_refused` (a reply whose counts disagreed, with the reference's
   * message).
   */
  | { type: "status"; status: string; seq: number; error: string | null }
  /** The trainer's annotations as the relay merged them (`version` records), read after the relay said they changed. */
  | { type: "annotations"; version: number; annotations: AnnotationsJson }
  | { type: "state"; state: WatchState }
  | { type: "error"; error: Error };

type Listener = (e: WatchEvent) => void;

export class EpisodeWatch {
  /** The episode as assembled so far (the project's byte-exact assembly). */
  assembly = new EpisodeAssembly();
  /** Last seq applied. */
  seq = 0;
  state: WatchState = "connecting";
  /** Finished episode bytes (msgpack), once the run finished. */
  episode: Uint8Array | null = null;
  error: string | null = null;
  /** The run's status as the relay last said (new, live, finish_refused, finished, failed). */
  status = "new";
  /** Why the relay refused the watch (state "refused"), else null. */
  refusal: RelayRefusal | null = null;
  /** Why the relay could not be reached (state "unreachable"), else null. */
  unreachable: RelayUnreachable | null = null;
  /**
   * Delta keys this relay and client do not know, as the relay's ack names them (`foo`, `set.foo`,
   * `open.foo`), in the order first seen in what this watch applied: a newer verifiers' fields, kept
   * as the relay kept them (docs/protocol.md). A key only a frame held (not a list) is missed by a
   * watch that caught up by snapshot; the episode's status names every one.
   */
  readonly unknown: string[] = [];
  /** The trainer's annotations (`GET .../annotations`), once the relay said it has some; null before. */
  annotations: AnnotationsJson | null = null;
  /** The annotations version the relay last named (the read follows it). */
  private annotationsWanted = 0;
  private annotationsReading = false;

  private readonly listeners = new Set<Listener>();
  private socket: SocketLike | null = null;
  private attempt = 0;
  /** Whether any connection of this watch has opened (later ones are "resuming"). */
  private everOpened = false;
  /** Whether the current socket opened (a close before that is a failed handshake). */
  private opened = false;
  private stopped = false;
  private pingTimer: ReturnType<typeof setInterval> | null = null;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  /** Binary bytes received on the current socket, and at the last ack. */
  private received = 0;
  private ackedAt = 0;
  /** Bytes between two acks (the relay's hello says). */
  private ackBytes = ACK_BYTES;
  /** A snapshot being received (split over messages): applied here, swapped in when complete. */
  private incoming: EpisodeAssembly | null = null;
  /** Where to resume after a drop: the seq our assembly stands at, or null (start from a snapshot). */
  private resumeAfter: number | null;
  private readonly done: Promise<EpisodeWatch>;
  private resolveDone!: (w: EpisodeWatch) => void;
  private rejectDone!: (e: Error) => void;
  private readonly startedAt = Date.now();
  /** The last network failure of a probe (named when the watch gives up). */
  private lastUnreachable: RelayUnreachable | null = null;

  /** Throws a RelayRefusal at once (nothing sent) for a URL without http(s):// or an id the relay cannot take. */
  constructor(
    readonly url: string,
    readonly id: string,
    readonly options: WatchOptions = {},
  ) {
    this.url = checkBaseUrl(url);
    checkEpisodeId(id);
    checkTokenTransport(this.url, options);
    this.resumeAfter = options.after ?? null;
    this.done = new Promise((resolve, reject) => {
      this.resolveDone = resolve;
      this.rejectDone = reject;
    });
    this.done.catch(() => {}); // a refusal with nobody awaiting finished() is not an unhandled rejection
    this.connect();
  }

  /** Subscribe to events; returns the unsubscribe function. */
  on(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Resolves when the run finished or failed, or the watch was closed; rejects with the
   * RelayRefusal when the relay refused the watch, or the RelayUnreachable when it never answered.
   */
  finished(): Promise<EpisodeWatch> {
    return this.done;
  }

  /** The live traces as JSON (the JSON view: src/protocol/wire/json-view.ts). */
  json(): Json {
    return toJson(decodeLossless(this.assembly.tracesBytes()));
  }

  private noteUnknown(names: readonly string[]): void {
    for (const k of names) if (!this.unknown.includes(k)) this.unknown.push(k);
  }

  /** Drop the current connection and resume from the last seq (as after a network drop). */
  reconnectNow(): void {
    this.socket?.close(4001, "client reconnects");
  }

  close(): void {
    this.stopped = true;
    this.clearTimers();
    this.socket?.close(1000, "client closed");
    if (this.state === "refused" || this.state === "unreachable") return;
    this.setState(this.state === "finished" || this.state === "failed" ? this.state : "closed");
    this.resolveDone(this);
  }

  private emit(e: WatchEvent): void {
    for (const l of this.listeners) {
      try {
        l(e);
      } catch {
        // a listener's bug must not break the stream
      }
    }
  }

  private setState(s: WatchState): void {
    if (this.state === s) return;
    this.state = s;
    this.emit({ type: "state", state: s });
  }

  /** The watch endpoint over HTTP (for the probe after a failed handshake). */
  private watchUrl(): URL {
    return new URL(`${this.url}/v1/episodes/${encodeURIComponent(this.id)}/watch`);
  }

  private socketUrl(): string {
    const u = this.watchUrl();
    u.protocol = u.protocol === "https:" ? "wss:" : u.protocol === "http:" ? "ws:" : u.protocol;
    if (this.resumeAfter !== null) u.searchParams.set("after", String(this.resumeAfter));
    if (this.options.routing === false) u.searchParams.set("routing", "0");
    if (this.options.traces?.length) u.searchParams.set("traces", this.options.traces.join(","));
    if (this.options.annotations !== false) u.searchParams.set("annotations", "1");
    return u.toString();
  }

  /** The subprotocols offered: the token rides in one (the relay answers `episode-relay`). */
  private protocols(): string[] | undefined {
    return this.options.token ? [WS_PROTOCOL, `${WS_TOKEN_PREFIX}${this.options.token}`] : undefined;
  }

  private connect(): void {
    const Impl = this.options.WebSocket ?? (globalThis as unknown as { WebSocket?: SocketFactory }).WebSocket;
    if (!Impl) throw new Error("no WebSocket implementation: pass options.WebSocket (e.g. from the `ws` package)");
    this.setState(this.everOpened ? "resuming" : "connecting");
    const ws = new Impl(this.socketUrl(), this.protocols());
    this.socket = ws;
    this.opened = false;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      this.opened = this.everOpened = true;
      this.received = this.ackedAt = 0;
      this.pingTimer = setInterval(() => this.ping(), this.options.pingIntervalMs ?? 30_000);
    };
    ws.onmessage = (ev) => this.receive(ev.data);
    ws.onerror = () => {
      // the close event follows and decides what to do
    };
    ws.onclose = (ev) => this.closed(ev.code, ev.reason);
  }

  private ping(): void {
    if (this.socket?.readyState === 1) this.socket.send("ping");
  }

  /** Tell the relay how much arrived (it sends more, and keeps this watcher, by that). */
  private ack(): void {
    this.ackedAt = this.received;
    if (this.socket?.readyState === 1) this.socket.send(ackMessage(this.received));
  }

  private receive(data: unknown): void {
    if (typeof data === "string") return; // "pong"
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : (data as Uint8Array);
    this.received += bytes.length;
    try {
      this.handle(decodeWatchMessage(bytes));
    } catch (e) {
      this.emit({ type: "error", error: e as Error });
      // our state can no longer be trusted: start over from a snapshot
      this.resumeAfter = null;
      this.socket?.close(4000, "client could not apply a message");
    }
    // while catching up the relay sends as fast as this client acknowledges: ack every message;
    // once live, every ack_bytes (the relay only checks that this watcher keeps up)
    const every = this.state === "live" ? (this.options.ackEveryBytes ?? this.ackBytes) : 1;
    if (this.received - this.ackedAt >= every) this.ack();
  }

  private handle(m: WatchMessage): void {
    switch (m.type) {
      case "hello":
        // the relay took this watcher (a refused one is closed before any hello): backoff starts over
        this.attempt = 0;
        // a new hello starts over (a retraction rewound the episode): drop a half-received snapshot
        this.incoming = null;
        this.status = m.status;
        if (m.ack_bytes > 0) this.ackBytes = m.ack_bytes;
        this.setState("catching_up");
        this.emit({ type: "hello", episode: m.episode, status: m.status, seq: m.seq });
        return;
      case "snapshot": {
        // a snapshot replaces the state, once all its messages are in
        const next = (this.incoming ??= new EpisodeAssembly());
        for (const d of m.deltas) this.noteUnknown(next.apply(d).unknown);
        if (m.more) return;
        this.assembly = next;
        this.incoming = null;
        this.seq = m.seq;
        this.resumeAfter = this.seq;
        this.emit({ type: "snapshot", seq: m.seq, reason: m.reason });
        return;
      }
      case "frames":
        for (const [seq, delta] of m.frames) {
          if (seq <= this.seq) continue; // never apply twice
          this.noteUnknown(this.assembly.apply(delta).unknown);
          this.seq = seq;
          this.resumeAfter = seq;
          this.emit({ type: "delta", seq, trace: traceOf(delta), delta });
        }
        return;
      case "status":
        this.status = m.status;
        this.error = m.error;
        this.emit({ type: "status", status: m.status, seq: m.seq, error: m.error });
        return;
      case "caught_up":
        this.setState("live");
        this.emit({ type: "caught_up", seq: m.seq });
        return;
      case "annotations":
        this.annotationsWanted = Math.max(this.annotationsWanted, m.version);
        void this.readAnnotations();
        return;
      case "unknown":
        return; // a later relay's message: nothing this client needs
      case "finish": {
        const status = m.status;
        this.error = m.error;
        if (status === "finished") {
          try {
            this.episode = this.assembly.finishReply(m.reply);
          } catch (e) {
            this.error = e instanceof FinishError ? e.message : String(e);
          }
        }
        this.setState(status);
        this.emit({ type: "finish", status, seq: m.seq, episode: this.episode, error: this.error });
        this.stopped = true;
        this.clearTimers();
        this.socket?.close(1000, "finished");
        this.resolveDone(this);
        return;
      }
    }
  }

  private closed(code: number, reason: string): void {
    this.clearTimers();
    this.socket = null;
    if (this.stopped || this.options.reconnect === false) {
      if (!this.stopped) this.close();
      return;
    }
    if (!this.opened) {
      // The handshake failed. A WebSocket does not say why (browsers hide the HTTP status), so
      // ask the same endpoint over plain HTTP: the Worker answers 401/403/404 exactly as it
      // did the upgrade, and 426 ("upgrade required") when access and route are fine.
      void this.probe().then((refusal) => (refusal ? this.refuse(refusal) : this.retry(code, reason)));
      return;
    }
    this.retry(code, reason);
  }

  /** Read the annotations until what was read is the version the relay last named (one read at a time). */
  private async readAnnotations(): Promise<void> {
    if (this.annotationsReading) return;
    this.annotationsReading = true;
    try {
      while ((this.annotations?.version ?? 0) < this.annotationsWanted) {
        const a = await fetchAnnotations(this.url, this.id, { token: this.options.token, hints: this.options.hints });
        if (a.version <= (this.annotations?.version ?? 0)) break; // not newer (a stale note): wait for the next
        this.annotations = a;
        this.emit({ type: "annotations", version: a.version, annotations: a });
      }
    } catch (e) {
      this.emit({ type: "error", error: e as Error });
    } finally {
      this.annotationsReading = false;
    }
  }

  /** The refusal behind a failed handshake, or null when it was something transient. */
  private async probe(): Promise<RelayRefusal | null> {
    const headers = bearer(this.url, this.options);
    const hints = this.options.hints ?? LIBRARY_HINTS;
    const what = `episode ${JSON.stringify(this.id)}`;
    try {
      // its 503s are the watch's own to retry (it reports each attempt): none waited out here
      const res = await relayFetch(this.watchUrl(), { headers }, 10_000, 0);
      this.lastUnreachable = null;
      if (!transient(res.status)) return await refusalOf(res, what, this.url, hints);
      if (res.status === 503) {
        // a relay without RELAY_SECRET refuses everything until it is configured
        const r = await refusalOf(res, what, this.url, hints);
        return r.code === "auth_not_configured" ? r : null;
      }
      await res.body?.cancel();
    } catch (e) {
      if (e instanceof RelayRefusal) return e; // not the relay at that address
      if (e instanceof RelayUnreachable) this.lastUnreachable = e; // transient, unless it lasts
    }
    return null;
  }

  private refuse(refusal: RelayRefusal): void {
    if (this.stopped) return;
    this.refusal = refusal;
    this.end("refused", { type: "refused", error: refusal });
  }

  /** The relay never answered within `giveUpMs`: the watch ends, saying what failed. */
  private giveUp(e: RelayUnreachable): void {
    this.unreachable = e;
    this.end("unreachable", { type: "unreachable", error: e });
  }

  /** Ends the watch for good: the state, its event, and `finished()` rejected with the error. */
  private end(state: "refused" | "unreachable", event: Extract<WatchEvent, { type: "refused" | "unreachable" }>): void {
    this.error = event.error.message;
    this.stopped = true;
    this.clearTimers();
    this.setState(state);
    this.emit(event);
    this.rejectDone(event.error);
  }

  /**
   * Reconnect after a transient failure: at once after a slow-watcher close, as hinted after a 1013, else with backoff.
   */
  private retry(code: number, reason: string): void {
    if (this.stopped) return;
    const giveUpMs = this.options.giveUpMs ?? 30_000;
    if (!this.everOpened && Date.now() - this.startedAt >= giveUpMs) {
      const why =
        this.lastUnreachable?.message ?? `the relay closed every attempt (${code}${reason ? ` ${reason}` : ""})`;
      return this.giveUp(
        new RelayUnreachable(
          this.lastUnreachable?.kind ?? "network",
          this.watchUrl().toString(),
          `gave up after ${Math.round(giveUpMs / 1000)} s: ${why}`,
        ),
      );
    }
    const delayMs = reconnectDelay(code, reason, this.attempt, this.options.backoffMs ?? [250, 10_000]);
    this.attempt++;
    this.setState(this.everOpened ? "resuming" : "connecting");
    this.emit({ type: "reconnecting", attempt: this.attempt, delayMs, code, reason });
    this.reconnectTimer = setTimeout(() => this.connect(), delayMs);
  }

  private clearTimers(): void {
    if (this.pingTimer) clearInterval(this.pingTimer);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.pingTimer = this.reconnectTimer = null;
  }
}

/**
 * How long to wait before reconnect attempt `attempt` (0 first) after a close with `code`: a
 * relay's 1013 retry hint plus up to half again at random; at once after the first 4008 (too
 * slow: resume now); else full jitter below `first * 2^attempt`, capped.
 */
export function reconnectDelay(
  code: number,
  reason: string,
  attempt: number,
  [first, cap]: [number, number],
  random: () => number = Math.random,
): number {
  const hint = code === CLOSE_TRY_LATER ? retryHintMs(reason) : null;
  if (hint !== null) return hint * (1 + random() / 2);
  if (code === CLOSE_TOO_SLOW && attempt === 0) return 0;
  return Math.min(cap, first * 2 ** attempt) * random();
}

/** The trainer's annotations of an episode as the relay merged them (src/protocol/annotations/records.ts), JSON. */
export interface AnnotationsJson {
  episode: string;
  /** Records merged so far. */
  version: number;
  /**
   * Per trace, one merged record in prime-rl's shape: `{version: 1, trace_id, info, branches: [{index, <stream>:
   * [...]}]}`.
   */
  traces: Array<{
    version: number;
    trace_id: string;
    info: Json;
    branches: Array<{ index: number } & Record<string, Json>>;
  }>;
}

/**
 * GET the episode's annotations (`/v1/episodes/{id}/annotations`, the JSON view). Fold a trace's
 * record onto its nodes with `foldOntoNodes` (src/protocol/annotations/fold.ts). Refusals throw a RelayRefusal.
 */
export async function fetchAnnotations(
  url: string,
  id: string,
  options: { token?: string; hints?: Hints } = {},
): Promise<AnnotationsJson> {
  const base = checkBaseUrl(url);
  checkEpisodeId(id);
  const headers: Record<string, string> = { accept: "application/json" };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const res = await relayFetch(`${base}/v1/episodes/${encodeURIComponent(id)}/annotations`, { headers }, 10_000);
  if (res.status >= 400 && res.status < 500)
    throw await refusalOf(res, `episode ${JSON.stringify(id)}`, base, options.hints ?? LIBRARY_HINTS);
  if (!res.ok) throw new Error(`GET annotations of ${id}: ${res.status} ${await res.text()}`);
  return (await res.json()) as AnnotationsJson;
}

export function watchEpisode(url: string, id: string, options: WatchOptions = {}): EpisodeWatch {
  return new EpisodeWatch(url, id, options);
}

/** fetchEpisode's wait for an answer's headers, at most (its `timeoutMs` may be shorter). */
const FETCH_EPISODE_TIMEOUT_MS = 10_000;

/**
 * GET the episode: msgpack bytes (default) or the JSON view. A refusal (4xx, a bad URL or id, an
 * answer that is not the relay's) throws a RelayRefusal saying what to do; a relay that does not
 * answer throws a RelayUnreachable saying why; other failures throw an Error.
 */
export async function fetchEpisode(
  url: string,
  id: string,
  options: TokenOptions & {
    json?: boolean;
    hints?: Hints;
    /** How long the answer's headers are waited for (ms, 1 to 10,000; default 10,000): then a RelayUnreachable. */
    timeoutMs?: number;
  } = {},
): Promise<Uint8Array | Json> {
  const base = checkBaseUrl(url);
  checkEpisodeId(id);
  const headers: Record<string, string> = {
    accept: options.json ? "application/json" : "application/msgpack",
    ...bearer(base, options),
  };
  // the answer's headers come at once (the body streams): 10 s without them is no answer; a caller
  // may give up sooner (the tests of that path), never later
  const timeoutMs = Math.min(Math.max(1, options.timeoutMs ?? FETCH_EPISODE_TIMEOUT_MS), FETCH_EPISODE_TIMEOUT_MS);
  const res = await relayFetch(`${base}/v1/episodes/${encodeURIComponent(id)}`, { headers }, timeoutMs);
  if (res.status >= 400 && res.status < 500)
    throw await refusalOf(res, `episode ${JSON.stringify(id)}`, base, options.hints ?? LIBRARY_HINTS);
  if (!res.ok) throw new Error(`GET episode ${id}: ${res.status} ${await res.text()}`);
  return options.json ? ((await res.json()) as Json) : new Uint8Array(await res.arrayBuffer());
}

// One Durable Object per episode: owns its SQLite storage, its sockets and its lifecycle, and
// calls the pure modules (assembly, envelope) for everything else.
//
// Durability: each ingest is applied in memory (all or nothing), then its frames, producer
// seqs and counters are written in one `transactionSync`; the answer (HTTP response or socket
// ack) goes out after that, and the platform's output gate holds it until the write is durable.
// If the write throws, the in-memory state is dropped and rebuilt from storage on next use.

import { DurableObject } from "cloudflare:workers";
import { EpisodeAssembly } from "../assembly/episode-assembly.js";
import { FinishError } from "../assembly/errors.js";
import { parseReply } from "../assembly/reply.js";
import { ingest, type ProducerLedger } from "../envelope/ingest.js";
import type { Env } from "../env.js";
import { readBody } from "../http/body.js";
import { HttpError, describeError, errorResponse } from "../http/errors.js";
import { METHODS, parseRoute } from "../http/route.js";
import { equalBytes } from "../wire/bytes.js";
import { decodeLossless } from "../wire/lossless.js";
import { toJson } from "../wire/json-view.js";
import { ChunkWriter, concatChunks } from "../wire/writer.js";
import { snapshotDeltas, traceSnapshot } from "../assembly/snapshot.js";
import { traceOf } from "../assembly/delta.js";
import { binItems } from "../wire/reader.js";
import { caughtUpMessage, finishMessage, framesMessages, helloMessage, snapshotMessages, type Frame } from "../watch/protocol.js";
import { deltaForVariant, isFull, parseVariant, variantKey, type Variant } from "../watch/variant.js";
import { limitsFrom, type Limits } from "./limits.js";
import { EpisodeStore, type Meta } from "./storage.js";
import { CLOSE_READ_ONLY, CLOSE_TOO_MANY, WATCH_TAG, Watchers, type WatcherAttachment } from "./watchers.js";
import { INDEX_NAME, type EpisodeIndex } from "../registry/episode-index.js";
import type { IndexRow } from "../registry/rows.js";
import type { Json } from "../wire/json-view.js";

/** Header the Worker sets: the episode id this object serves (objects do not know their name). */
export const EPISODE_ID_HEADER = "x-episode-id";

const MSGPACK = "application/msgpack";

/**
 * The episode index gets at most one update per episode per INDEX_FLUSH_MS (default 2000 ms)
 * while turns arrive (creation, finish, delete and expiry go at once). Pending updates are
 * flushed by the alarm.
 */

/** The answer to one ingest message. */
export interface IngestAck {
  ok: true;
  seq: number;
  applied: number;
  duplicates: number;
  producers: Record<string, number>;
}

interface Live {
  asm: EpisodeAssembly;
  ledger: ProducerLedger;
}

type SocketAttachment = { role: "ingest"; id: string } | WatcherAttachment;

export class Episode extends DurableObject<Env> {
  private readonly store: EpisodeStore;
  private readonly limits: Limits;
  /** The assembly rebuilt from the log, loaded on first need (waking up stays cheap). */
  private live: Live | null = null;
  /** The finished episode's bytes, once built. */
  private finished: Uint8Array | null = null;
  private readonly watchers: Watchers;
  /** Index updates from this object, in order (each waits for the one before). */
  private indexChain: Promise<void> = Promise.resolve();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new EpisodeStore(ctx.storage.sql);
    this.limits = limitsFrom(env);
    this.watchers = new Watchers(ctx, this.limits.watcherLagBytes);
    // Watchers' keep-alive pings are answered by the platform: they never wake the object.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const route = parseRoute(url.pathname);
    const id = request.headers.get(EPISODE_ID_HEADER);
    if (route.kind !== "episode" || !id || id !== route.id) {
      return Response.json({ error: "not_found", message: "no such route" }, { status: 404 });
    }
    if (!METHODS[route.action].includes(request.method)) {
      return Response.json({ error: "method_not_allowed", message: `${request.method} not allowed here` }, { status: 405, headers: { allow: METHODS[route.action].join(", ") } });
    }
    try {
      switch (route.action) {
        case "deltas":
          return Response.json(await this.postDeltas(request, id));
        case "ingest":
          return this.acceptIngest(request, id);
        case "reply":
          return Response.json(await this.postReply(request, id));
        case "status":
          return this.getStatus();
        case "episode":
          return request.method === "DELETE" ? await this.deleteEpisode() : this.getEpisode(request);
        case "watch":
          return this.acceptWatch(request, url, id);
      }
    } catch (e) {
      return errorResponse(e);
    }
  }

  // ---- ingest ----

  private async postDeltas(request: Request, id: string): Promise<IngestAck> {
    const body = await readBody(request, this.limits.maxMessage);
    return this.ingestMessage(body, id);
  }

  /** Apply one producer message and commit it; throws (state unchanged) on any refusal. */
  private ingestMessage(body: Uint8Array, id: string): IngestAck {
    const meta = this.store.meta();
    if (meta && meta.status !== "live") {
      throw new HttpError(409, "episode_finished", `the episode is ${meta.status}; it takes no more deltas`);
    }
    const size = (meta?.bytes ?? 0) + body.length;
    if (size > this.limits.maxEpisode) {
      throw new HttpError(413, "episode_too_large", `the episode would reach ${size} bytes, over the limit of ${this.limits.maxEpisode}`);
    }
    const live = this.loadLive();
    const result = ingest(live.asm, live.ledger, body);
    const now = Date.now();
    let saved: Meta;
    try {
      saved = this.ctx.storage.transactionSync(() => {
        const m = meta ?? this.store.create(id, now);
        for (const frame of result.applied) {
          m.seq += 1;
          m.bytes += frame.length;
          this.store.appendFrame(m.seq, frame);
        }
        for (const [name, seq] of result.producers) this.store.saveProducer(name, seq);
        this.countInto(m, live.asm);
        m.updated = now;
        this.store.saveMeta(m);
        return m;
      });
    } catch (e) {
      // the transaction rolled back: memory is ahead of storage, rebuild from storage next time
      this.live = null;
      this.store.invalidate();
      throw e;
    }
    if (!meta) {
      this.scheduleExpiry(saved);
      void this.flushIndex(saved, now); // a new episode shows in the index at once
    } else this.markIndexDirty(saved, now);
    const first = saved.seq - result.applied.length + 1;
    this.watchers.broadcast(result.applied.map((delta, i) => ({ seq: first + i, delta, trace: result.traces[i]! })));
    if (saved.seq - saved.base >= this.limits.compactFrames && saved.seq >= this.nextCompactCheck) this.maybeCompact(saved, live.asm);
    return { ok: true, seq: saved.seq, applied: result.applied.length, duplicates: result.duplicates, producers: Object.fromEntries(result.producers) };
  }

  private countInto(m: Meta, asm: EpisodeAssembly): void {
    m.traces = asm.traces.size;
    m.nodes = 0;
    m.calls = 0;
    for (const t of asm.traces.values()) {
      m.nodes += t.nodes.length;
      m.calls += t.items.calls.length;
    }
  }

  private loadLive(): Live {
    if (this.live) return this.live;
    const asm = new EpisodeAssembly();
    const base = this.store.base();
    // logged frames were validated when they were applied first: replay them as trusted
    if (base) for (const d of binItems(base)) asm.apply(d, true);
    for (const { frame } of this.store.frames()) asm.apply(frame, true);
    this.live = { asm, ledger: this.store.producers() };
    return this.live;
  }

  /** Seq from which compaction is worth checking again (memory only: rechecked after a wake). */
  private nextCompactCheck = 0;

  /**
   * Compact the log once it holds `compactFrames` frames past the base AND at least as many
   * bytes as the base snapshot: a compaction rewrites the whole state, so it must not run more
   * often than the state grows (the total work stays linear in the episode's bytes).
   */
  private maybeCompact(m: Meta, asm: EpisodeAssembly): void {
    const { log, base } = this.store.sizes();
    if (log >= base) return this.compact(m, asm);
    this.nextCompactCheck = m.seq + Math.ceil(this.limits.compactFrames / 4);
  }

  /**
   * Compact the log: the state as snapshot deltas becomes the base, the frames it covers go.
   * Waking up then replays one snapshot and a short log; watchers resuming from before the
   * base get a snapshot instead of a replay.
   */
  private compact(m: Meta, asm: EpisodeAssembly): void {
    const w = new ChunkWriter();
    const deltas = snapshotDeltas(asm);
    w.arrayHeader(deltas.length);
    for (const d of deltas) {
      w.binHeader(d.length);
      w.raw(d);
    }
    const snapshot = w.bytes();
    try {
      this.ctx.storage.transactionSync(() => {
        this.store.saveBase(m.seq, snapshot);
        m.base = m.seq;
        this.store.saveMeta(m);
      });
    } catch (e) {
      this.store.invalidate(); // the log stays as it was; compaction is retried later
      console.error(`episode ${m.id}: log compaction failed: ${(e as Error).message}`);
    }
  }

  private acceptIngest(request: Request, id: string): Response {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
      throw new HttpError(426, "upgrade_required", "the ingest endpoint is a WebSocket");
    }
    const pair = new WebSocketPair();
    const [client, server] = Object.values(pair) as [WebSocket, WebSocket];
    this.ctx.acceptWebSocket(server, ["ingest"]);
    server.serializeAttachment({ role: "ingest", id } satisfies SocketAttachment);
    return new Response(null, { status: 101, webSocket: client });
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const att = ws.deserializeAttachment() as SocketAttachment | null;
    if (!att) return ws.close(1011, "socket without state");
    if (att.role === "watch") {
      // "ping" never gets here (the platform answers it); anything else breaks the protocol
      return ws.close(CLOSE_READ_ONLY, 'watchers are read-only: send only "ping"');
    }
    if (typeof message === "string") return ws.close(1008, "ingest messages must be binary msgpack");
    if (message.byteLength > this.limits.maxMessage) {
      return ws.close(1009, `message of ${message.byteLength} bytes exceeds the limit of ${this.limits.maxMessage}`);
    }
    try {
      ws.send(JSON.stringify(this.ingestMessage(new Uint8Array(message), att.id)));
    } catch (e) {
      const { status, body } = describeError(e);
      ws.send(JSON.stringify({ ok: false, status, ...body }));
    }
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    try {
      ws.close(code === 1005 ? 1000 : code, reason);
    } catch {
      // already closed
    }
  }

  // ---- watchers ----

  /**
   * Accept a watcher and, in the same synchronous turn (no ingest can interleave), send it
   * hello, then a snapshot or the frames after `?after=SEQ`, then caught_up (and finish if
   * the run has ended). Live frames follow from the broadcasts: no gap, no duplicate.
   */
  private acceptWatch(request: Request, url: URL, id: string): Response {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") {
      throw new HttpError(426, "upgrade_required", "the watch endpoint is a WebSocket");
    }
    const afterParam = url.searchParams.get("after");
    const after = afterParam === null ? null : Number(afterParam);
    if (after !== null && !(Number.isSafeInteger(after) && after >= 0)) {
      throw new HttpError(400, "bad_after", "after must be a non-negative integer seq");
    }
    const variant = parseVariant(url.searchParams);
    const pair = new WebSocketPair();
    const [client, server] = Object.values(pair) as [WebSocket, WebSocket];
    if (this.watchers.count() >= this.limits.maxWatchers) {
      this.ctx.acceptWebSocket(server, ["refused"]);
      server.close(CLOSE_TOO_MANY, `too many watchers (limit ${this.limits.maxWatchers}); try again later`);
      return new Response(null, { status: 101, webSocket: client });
    }
    this.ctx.acceptWebSocket(server, [WATCH_TAG, `v:${variantKey(variant)}`.slice(0, 256)]);
    server.serializeAttachment({ role: "watch", id, variant } satisfies WatcherAttachment);
    this.watchers.catchUp(server, this.catchUpMessages(id, variant, after));
    return new Response(null, { status: 101, webSocket: client });
  }

  private catchUpMessages(id: string, variant: Variant, after: number | null): Uint8Array[] {
    const m = this.store.meta();
    const seq = m?.seq ?? 0;
    const out = [helloMessage(id, m?.status ?? "new", seq)];
    if (after !== null && after <= seq && after >= (m?.base ?? 0)) {
      // resume: the log still holds every frame after `after`
      const frames: Frame[] = [];
      for (const { seq: s, frame } of this.store.frames(after)) {
        const d = isFull(variant) ? frame : deltaForVariant(frame, traceOf(frame), variant);
        if (d) frames.push({ seq: s, delta: d });
      }
      if (frames.length) out.push(...framesMessages(frames));
    } else {
      const reason = after === null ? "join" : after > seq ? "ahead" : "trimmed";
      const deltas: Uint8Array[] = [];
      if (m) {
        for (const t of this.loadLive().asm.traces.values()) {
          const d = deltaForVariant(traceSnapshot(t), t.id, variant);
          if (d) deltas.push(d);
        }
      }
      out.push(...snapshotMessages(seq, reason, deltas));
    }
    out.push(caughtUpMessage(seq));
    if (m && m.status !== "live") out.push(finishMessage(m.status, seq, this.store.reply() ?? new Uint8Array(0), m.error));
    return out;
  }

  // ---- finish ----

  private async postReply(request: Request, id: string): Promise<{ ok: true; status: string; seq: number }> {
    const body = await readBody(request, this.limits.maxMessage);
    const meta = this.store.meta();
    if (meta && meta.status !== "live") {
      const stored = this.store.reply();
      if (stored && equalBytes(stored, body)) return { ok: true, status: meta.status, seq: meta.seq };
      throw new HttpError(409, "episode_finished", `the episode is already ${meta.status} with another reply`);
    }
    const reply = parseReply(body);
    let finished: Uint8Array | null = null;
    if (reply.success) {
      const live = this.loadLive();
      try {
        finished = concatChunks(live.asm.finish(reply.head ?? [], reply.summaries));
      } catch (e) {
        if (e instanceof FinishError) throw new HttpError(409, "finish_mismatch", e.message);
        throw e;
      }
    }
    const now = Date.now();
    let saved: Meta;
    try {
      saved = this.ctx.storage.transactionSync(() => {
        const m = meta ?? this.store.create(id, now);
        this.store.saveReply(body);
        m.status = reply.success ? "finished" : "failed";
        m.error = reply.error;
        m.updated = now;
        this.store.saveMeta(m);
        return m;
      });
    } catch (e) {
      this.store.invalidate(); // rolled back
      throw e;
    }
    if (!meta) this.scheduleExpiry(saved);
    this.finished = finished;
    void this.flushIndex(saved, now);
    this.watchers.sendAll(finishMessage(saved.status, saved.seq, body, saved.error));
    return { ok: true, status: saved.status, seq: saved.seq };
  }

  // ---- fetch ----

  private getStatus(): Response {
    const m = this.requireMeta();
    return Response.json({
      id: m.id, status: m.status, seq: m.seq, traces: m.traces, nodes: m.nodes, calls: m.calls,
      // what the log holds (counts toward MAX_EPISODE_BYTES) and what GET answers now (msgpack)
      frame_bytes: m.bytes, episode_bytes: this.episodeBytes(m).length,
      watchers: this.ctx.getWebSockets("watch").length,
      created: new Date(m.created).toISOString(), updated: new Date(m.updated).toISOString(),
      error: m.error,
    });
  }

  /** What `GET` answers in msgpack: the finished episode, or the live form while the run is on. */
  private episodeBytes(m: Meta): Uint8Array {
    return m.status === "finished" ? this.finishedBytes() : this.liveBytes(m);
  }

  private getEpisode(request: Request): Response {
    const m = this.requireMeta();
    const json = wantsJson(request);
    // the msgpack and JSON forms are two representations: each has its own ETag, and caches
    // must key on Accept
    const headers = new Headers({ "cache-control": "no-store", vary: "Accept" });
    if (m.status === "finished") {
      const etag = `"${m.created.toString(36)}-${m.seq}-${json ? "json" : "msgpack"}"`;
      headers.set("etag", etag);
      headers.set("cache-control", "private, max-age=0, must-revalidate");
      if (request.headers.get("if-none-match")?.split(",").some((t) => t.trim() === etag || t.trim() === "*")) {
        return new Response(null, { status: 304, headers });
      }
    }
    const bytes = this.episodeBytes(m);
    if (json) {
      headers.set("content-type", "application/json");
      return new Response(request.method === "HEAD" ? null : JSON.stringify(toJson(decodeLossless(bytes))), { headers });
    }
    headers.set("content-type", MSGPACK);
    return new Response(request.method === "HEAD" ? null : bytes, { headers });
  }

  private finishedBytes(): Uint8Array {
    if (this.finished) return this.finished;
    const reply = parseReply(this.store.reply()!);
    this.finished = concatChunks(this.loadLive().asm.finish(reply.head ?? [], reply.summaries));
    return this.finished;
  }

  /** `{status, seq, error, traces}`: the live assembly (checkpoint form, with `pending`). */
  private liveBytes(m: Meta): Uint8Array {
    const w = new ChunkWriter();
    w.mapHeader(4);
    w.str("status");
    w.str(m.status);
    w.str("seq");
    w.int(m.seq);
    w.str("error");
    if (m.error === null) w.byte(0xc0);
    else w.str(m.error);
    w.str("traces");
    this.loadLive().asm.writeTraces(w);
    return w.bytes();
  }

  private requireMeta(): Meta {
    const m = this.store.meta();
    if (!m) throw new HttpError(404, "not_found", "no such episode");
    return m;
  }

  // ---- lifecycle ----

  private async deleteEpisode(): Promise<Response> {
    this.requireMeta();
    await this.erase("episode deleted");
    return Response.json({ ok: true, deleted: true });
  }

  private async erase(reason: string): Promise<void> {
    const id = this.store.meta()?.id;
    for (const ws of this.ctx.getWebSockets()) {
      try {
        ws.close(1000, reason);
      } catch {
        // already closing
      }
    }
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.store.forget();
    this.live = null;
    this.finished = null;
    if (id !== undefined) void this.toIndex((index) => index.remove(id));
  }

  private expiresAt(m: Meta): number {
    return m.updated + this.limits.retention * 1000;
  }

  private scheduleExpiry(m: Meta): void {
    void this.ctx.storage.setAlarm(this.expiresAt(m));
  }

  /**
   * The one alarm serves two deadlines: retention (delete the episode once it has had no write
   * for `retention` seconds) and a pending index update. It is set to the earlier of the two.
   */
  async alarm(): Promise<void> {
    const m = this.store.meta();
    if (!m) return;
    if (Date.now() >= this.expiresAt(m)) {
      await this.erase("episode expired");
      await this.indexChain;
      return;
    }
    // A pending index update is flushed whenever the alarm runs (it is never set later than due).
    if (this.store.indexState().due !== 0) await this.flushIndex(m, Date.now());
    await this.rearm();
  }

  /** Set the alarm to the earlier of retention and a pending index update. */
  private async rearm(): Promise<void> {
    const m = this.store.meta();
    if (!m) return;
    const { due } = this.store.indexState();
    const expires = this.expiresAt(m);
    await this.ctx.storage.setAlarm(due !== 0 ? Math.min(due, expires) : expires);
  }

  // ---- the episode index (advisory: never delays an answer, failures are logged and dropped) ----

  /** A turn changed the episode: schedule an index update unless one is pending (throttled). */
  private markIndexDirty(m: Meta, now: number): void {
    if (!this.env.EPISODE_INDEX) return;
    const st = this.store.indexState();
    if (st.due !== 0) return;
    const due = Math.max(now, st.lastFlush + this.limits.indexFlushMs);
    this.store.saveIndexState({ lastFlush: st.lastFlush, due });
    void this.ctx.storage.setAlarm(Math.min(due, this.expiresAt(m)));
  }

  /** Send the episode's row to the index now (in the background of this request). */
  private flushIndex(m: Meta, now: number): Promise<void> {
    if (!this.env.EPISODE_INDEX) return Promise.resolve();
    let row: IndexRow;
    try {
      row = {
        id: m.id, status: m.status, created: m.created, updated: m.updated, seq: m.seq,
        traces: m.traces, nodes: m.nodes, calls: m.calls, rewards: this.rewards(), error: m.error,
      };
    } catch (e) {
      console.warn(`episode index: could not build the row: ${e instanceof Error ? e.message : String(e)}`);
      return Promise.resolve();
    }
    this.store.saveIndexState({ lastFlush: now, due: 0 });
    return this.toIndex((index) => index.upsert(row));
  }

  /** The first (orchestrator) trace's `rewards` as JSON, or null. */
  private rewards(): Json {
    const first = this.loadLive().asm.traces.values().next();
    if (first.done) return null;
    const slot = first.value.fields.get("rewards");
    if (!slot || (slot.from !== "set" && slot.from !== "open")) return null;
    return toJson(decodeLossless(slot.value));
  }

  /** Run `op` on the index after the updates before it; kept alive by waitUntil, errors logged. */
  private toIndex(op: (index: DurableObjectStub<EpisodeIndex>) => Promise<unknown>): Promise<void> {
    const ns = this.env.EPISODE_INDEX;
    if (!ns) return Promise.resolve();
    const next = this.indexChain
      .then(() => op(ns.getByName(INDEX_NAME)))
      .then(
        () => undefined,
        (e: unknown) => console.warn(`episode index update failed: ${e instanceof Error ? e.message : String(e)}`),
      );
    this.indexChain = next;
    this.ctx.waitUntil(next);
    return next;
  }
}

function wantsJson(request: Request): boolean {
  const accept = request.headers.get("accept") ?? "";
  return /application\/json/.test(accept) && !/application\/(x-)?msgpack/.test(accept);
}

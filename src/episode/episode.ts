// One Durable Object per episode: owns its SQLite storage, its sockets and its lifecycle, and
// calls the pure modules (assembly, envelope, watch protocol) for everything else.
//
// SQLite is the episode: the assembly writes node and item bytes (and its index) through the
// SqlStore, inside the same `transactionSync` as the frame's log row, the producers' seqs and the
// counters; the answer (HTTP response or socket ack) goes out after it, and the platform's output
// gate holds it until the write is durable. Memory holds only the index (per trace its fields,
// pending, per node a NodeInfo): waking up reads it back, whatever the episode's size. If a write
// throws, the transaction rolls back and the index is read back from storage on next use.

import { DurableObject } from "cloudflare:workers";
import { DeltaError, FinishError } from "../assembly/errors.js";
import { EpisodeAssembly } from "../assembly/episode-assembly.js";
import type { Entry } from "../assembly/delta.js";
import { finishedSize, JsonOut, MsgpackOut, type TraceView, writeFinished } from "../assembly/render.js";
import { parseReply } from "../assembly/reply.js";
import { ingest, type IngestResult } from "../envelope/ingest.js";
import { confirmAll, retractable, type ProducerLedger } from "../envelope/ledger.js";
import { readBody } from "../http/body.js";
import { HttpError, describeError, errorResponse } from "../http/errors.js";
import { METHODS, parseRoute } from "../http/route.js";
import { equalBytes } from "../wire/bytes.js";
import { decodeLossless } from "../wire/lossless.js";
import { toJson, type Json } from "../wire/json-view.js";
import { finishMessage, parseAck, statusMessage } from "../watch/protocol.js";
import { parseVariant } from "../watch/variant.js";
import { INDEX_NAME, type EpisodeIndex } from "../registry/episode-index.js";
import type { IndexRow } from "../registry/rows.js";
import type { CatchUpSource } from "./catchup.js";
import { limitsFrom, type Limits } from "./limits.js";
import { liveSize, streamBody, writeLive } from "./read.js";
import { SqlStore } from "./sql-store.js";
import { EpisodeRecord, publicStatus, type Meta } from "./storage.js";
import { CLOSE_POLICY, CLOSE_TRY_LATER, WATCH_TAG, Watchers, type WatcherAttachment } from "./watchers.js";

/** Header the Worker sets: the episode id this object serves (objects do not know their name). */
export const EPISODE_ID_HEADER = "x-episode-id";

const MSGPACK = "application/msgpack";

/** The answer to one ingest message. */
export interface IngestAck {
  ok: true;
  seq: number;
  applied: number;
  duplicates: number;
  producers: Record<string, number>;
}

type SocketAttachment = { role: "ingest"; id: string } | WatcherAttachment;

export class Episode extends DurableObject<Env> {
  private readonly record: EpisodeRecord;
  private readonly store: SqlStore;
  private readonly limits: Limits;
  private readonly watchers: Watchers;
  /** The index (and the producers' seqs), read from storage on first need. */
  private live: { asm: EpisodeAssembly; ledger: ProducerLedger } | null = null;
  /** Index updates from this object, in order (each waits for the one before). */
  private indexChain: Promise<void> = Promise.resolve();
  /** Frames logged since the log was last checked for trimming (memory only). */
  private sinceTrim = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.record = new EpisodeRecord(ctx.storage.sql);
    this.store = new SqlStore(ctx.storage.sql);
    this.limits = limitsFrom(env);
    const source: CatchUpSource = {
      meta: () => this.record.meta(),
      views: () => this.index().asm.views(),
      pin: (asOf) => this.store.pin(asOf),
      reader: (asOf) => this.store.reader(asOf),
      frames: (after, upTo, maxBytes) => this.record.frames(after, upTo, maxBytes),
      reply: () => this.record.reply(),
      rewoundPast: (seq) => this.record.rewoundPast(seq),
    };
    this.watchers = new Watchers(
      ctx,
      {
        maxWatchers: this.limits.maxWatchers,
        lagBytes: this.limits.watcherLagBytes,
        window: this.limits.watcherWindowBytes,
        maxCatchUps: this.limits.maxCatchUps,
      },
      source,
    );
    if (this.record.isOldLayout()) this.upgrade();
    if (this.record.exists()) {
      // a restart forgets every reader: what was kept only for them can go (not what a retraction may need)
      this.store.setFloors(retractable(this.record.producers()).map((s) => s - 1));
      this.store.afterRestart();
    }
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
      return Response.json(
        { error: "method_not_allowed", message: `${request.method} not allowed here` },
        { status: 405, headers: { allow: METHODS[route.action].join(", ") } },
      );
    }
    try {
      switch (route.action) {
        case "deltas":
          return Response.json(this.ingestMessage(await readBody(request, this.limits.maxMessage), id));
        case "ingest":
          return this.acceptIngest(request, id);
        case "reply":
          return Response.json(await this.postReply(request));
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

  // ---- the index ----

  /** The index, read from storage (upgrading an old layout first) on first use. */
  private index(): { asm: EpisodeAssembly; ledger: ProducerLedger } {
    if (this.live) return this.live;
    const { traces, nextTnum } = this.record.exists() ? this.store.load() : { traces: [], nextTnum: 1 };
    const asm = new EpisodeAssembly(this.store, traces);
    asm.reserveTnums(nextTnum);
    this.live = { asm, ledger: this.record.producers() };
    this.store.setFloors(retractable(this.live.ledger).map((s) => s - 1));
    return this.live;
  }

  /** Storage written by a relay that kept the episode in memory: rebuild the state into SQLite, once. */
  private upgrade(): void {
    this.ctx.storage.transactionSync(() => {
      const deltas = this.record.upgrade();
      const asm = new EpisodeAssembly(this.store);
      asm.version = this.store.version = this.record.meta()!.seq;
      for (const d of deltas) asm.apply(d, true);
    });
  }

  /** After a failed write: the transaction rolled back, so memory must be read back from storage. */
  private forgetMemory(): void {
    this.live = null;
    this.record.invalidate();
  }

  // ---- ingest ----

  /** Apply one producer message and commit it; throws (state unchanged) on any refusal. */
  private ingestMessage(body: Uint8Array, id: string): IngestAck {
    const meta = this.record.meta();
    if (meta && meta.status !== "live") {
      throw new HttpError(409, "episode_finished", `the episode is ${meta.status}; it takes no more deltas`);
    }
    const live = this.index();
    const now = Date.now();
    let result: IngestResult;
    let saved: Meta;
    let rewound: number | null = null;
    try {
      ({ result, saved } = this.ctx.storage.transactionSync(() => {
        const m = meta ?? this.record.create(id, now);
        const seqs: number[] = [];
        const r = ingest(live.asm, live.ledger, body, {
          nextSeq: () => {
            const seq = ++m.seq;
            seqs.push(seq);
            // the frame may yet be retracted: the state before it stays reachable
            this.store.addFloor(seq - 1);
            live.asm.version = this.store.version = seq;
            return seq;
          },
          retract: (gone) => {
            rewound = this.retract(live, m, gone);
          },
        });
        // duplicates were recognised first: a retry of an applied delta is acknowledged, not refused
        r.applied.forEach((frame, i) => {
          m.bytes += frame.length;
          this.record.appendFrame(seqs[i]!, frame);
        });
        if (m.bytes > this.limits.maxEpisode) {
          throw new HttpError(413, "episode_too_large", `the episode would reach ${m.bytes} bytes, over the limit of ${this.limits.maxEpisode}`);
        }
        for (const name of r.producers.keys()) this.record.saveProducer(name, live.ledger.get(name)!);
        this.countInto(m, live.asm);
        m.updated = now;
        this.record.saveMeta(m);
        return { result: r, saved: m };
      }));
    } catch (e) {
      // A refused delta left the index as it was (ingest rolls it back), unless a retraction had
      // rebuilt it; anything else may not have either.
      if (e instanceof DeltaError && rewound === null) this.record.invalidate();
      else this.forgetMemory();
      this.store.setFloors(retractable(this.index().ledger).map((s) => s - 1));
      throw e;
    }
    // frames that may still be retracted hold the state before them; the rest can go
    this.store.setFloors(retractable(live.ledger).map((s) => s - 1));
    this.store.collect();
    if (!meta) {
      this.scheduleExpiry(saved);
      void this.flushIndex(saved, now); // a new episode shows in the index at once
    } else this.markIndexDirty(saved, now);
    if (rewound !== null) {
      // every watcher may hold retracted frames: each gets the new state as a snapshot
      this.watchers.rewind();
    } else {
      const first = saved.seq - result.applied.length + 1;
      this.watchers.broadcast(result.applied.map((delta, i) => ({ seq: first + i, delta, trace: result.traces[i]! })));
    }
    this.sinceTrim += result.applied.length;
    if (this.sinceTrim >= 16 || saved.seq - saved.base > this.limits.logKeepFrames) this.trimLog(saved);
    return { ok: true, seq: saved.seq, applied: result.applied.length, duplicates: result.duplicates, producers: Object.fromEntries(result.producers) };
  }

  /**
   * Retract frames (episode seqs) a producer's cursor says it never had acknowledged: rewind the
   * store to before the first, read the index back, re-apply the frames kept after it (other
   * producers'), drop the retracted ones from the log. Inside the ingest's transaction: all of it
   * commits with the delta that caused it, or none. Returns the seq rewound to.
   */
  private retract(live: { asm: EpisodeAssembly; ledger: ProducerLedger }, m: Meta, seqs: number[]): number {
    const base = Math.min(...seqs) - 1;
    const gone = new Set(seqs);
    m.bytes -= this.record.removeFrames(seqs);
    const redo = [...this.record.frames(base)].filter((f) => !gone.has(f.seq));
    this.store.rewind(base);
    const { traces, nextTnum } = this.store.load();
    live.asm.reset(traces, nextTnum);
    for (const f of redo) {
      live.asm.version = this.store.version = f.seq;
      try {
        live.asm.apply(f.frame, true);
      } catch (e) {
        if (!(e instanceof DeltaError)) throw e;
        throw new DeltaError(
          "producer_conflict",
          "cursor",
          `retracting frame(s) ${seqs.join(", ")} leaves frame ${f.seq} (another producer's) inapplicable: ${e.message}`,
        );
      }
    }
    this.record.saveRewind(base, m.seq);
    return base;
  }

  private countInto(m: Meta, asm: EpisodeAssembly): void {
    m.traces = asm.traces.size;
    m.nodes = 0;
    m.calls = 0;
    for (const t of asm.traces.values()) {
      m.nodes += t.nodes.length;
      m.calls += t.items.calls.count;
    }
  }

  /**
   * Keep the log to its last LOG_KEEP_FRAMES frames and about LOG_KEEP_BYTES bytes (the state is
   * in the store; the log only serves watchers that resume or catch up), never dropping a frame a
   * catching-up watcher still has to read.
   */
  private trimLog(m: Meta): void {
    let keepFrom = m.seq - this.limits.logKeepFrames; // frames up to keepFrom can go
    if (this.sinceTrim >= 16) {
      // the byte rule reads the log's sizes: every 16 frames, not every frame
      this.sinceTrim = 0;
      let bytes = 0;
      for (const f of this.record.logSizes()) {
        bytes += f.bytes;
        if (bytes > this.limits.logKeepBytes) {
          keepFrom = Math.max(keepFrom, f.seq);
          break;
        }
      }
    }
    const pinned = this.store.oldestHold();
    const cut = Math.min(keepFrom, pinned ?? keepFrom, m.seq);
    if (cut <= m.base) return;
    try {
      this.ctx.storage.transactionSync(() => {
        this.record.trimLog(cut);
        this.record.saveMeta({ ...m, base: cut });
      });
    } catch (e) {
      this.record.invalidate(); // the log stays as it was; trimming is retried later
      console.error(`episode ${m.id}: log trim failed: ${(e as Error).message}`);
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
      // "ping" never gets here (the platform answers it); acks pace the catch-up and the lag rule
      const acked = typeof message === "string" ? parseAck(message) : null;
      if (acked === null) return ws.close(CLOSE_POLICY, 'watchers send only acks ({"type":"ack","bytes":N}) and "ping"');
      this.watchers.ack(ws, acked);
      return;
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
    this.watchers.gone(ws);
    try {
      ws.close(code === 1005 ? 1000 : code, reason);
    } catch {
      // already closed
    }
  }

  async webSocketError(ws: WebSocket): Promise<void> {
    this.watchers.gone(ws);
  }

  // ---- watchers ----

  /**
   * Accept a watcher: hello at once, then its catch-up (a snapshot, or the frames after
   * `?after=SEQ`), paced by its acks, then live frames (see src/episode/watchers.ts).
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
    if (this.watchers.full()) {
      this.ctx.acceptWebSocket(server, ["refused"]);
      server.close(CLOSE_TRY_LATER, `too many watchers (limit ${this.limits.maxWatchers}); try again later`);
      return new Response(null, { status: 101, webSocket: client });
    }
    this.ctx.acceptWebSocket(server, [WATCH_TAG]);
    this.watchers.accept(server, id, variant, after);
    return new Response(null, { status: 101, webSocket: client });
  }

  // ---- finish ----

  private async postReply(request: Request): Promise<{ ok: true; status: string; seq: number }> {
    const body = await readBody(request, this.limits.maxMessage);
    const meta = this.requireMeta();
    if (meta.status !== "live") {
      const stored = this.record.reply();
      if (stored && equalBytes(stored, body)) return { ok: true, status: meta.status, seq: meta.seq };
      throw new HttpError(409, "episode_finished", `the episode is already ${meta.status} with another reply`);
    }
    const reply = parseReply(body);
    const live = this.index();
    let size: number | null = null;
    if (reply.success) {
      try {
        size = finishedSize(reply.head ?? [], live.asm.pick(reply.summaries));
      } catch (e) {
        if (!(e instanceof FinishError)) throw e;
        this.refuseFinish(meta, e.message);
        throw new HttpError(409, "finish_mismatch", e.message);
      }
    }
    const now = Date.now();
    const m: Meta = {
      ...meta,
      status: reply.success ? "finished" : "failed",
      error: reply.error,
      updated: now,
      refused: null,
      size,
      etag: size === null ? null : `${meta.created.toString(36)}-${meta.seq}-${size.toString(36)}`,
    };
    try {
      this.ctx.storage.transactionSync(() => {
        this.record.saveReply(body);
        this.record.saveMeta(m);
        // the run ended: nothing can be retracted any more
        confirmAll(live.ledger);
        for (const [name, p] of live.ledger) this.record.saveProducer(name, p);
      });
    } catch (e) {
      this.forgetMemory(); // rolled back
      throw e;
    }
    this.store.setFloors([]);
    this.store.collect();
    void this.flushIndex(m, now);
    this.watchers.sendAll(finishMessage(m.status, m.seq, body, m.error));
    return { ok: true, status: m.status, seq: m.seq };
  }

  /**
   * The reply's counts disagree with the assembly: the run stays open for a corrected reply, but
   * status, the index row and watchers say the finish was refused, with the reference's message.
   */
  private refuseFinish(meta: Meta, message: string): void {
    const m: Meta = { ...meta, refused: message, updated: Date.now() };
    this.ctx.storage.transactionSync(() => this.record.saveMeta(m));
    void this.flushIndex(m, m.updated);
    this.watchers.sendAll(statusMessage(publicStatus(m), m.seq, message));
  }

  // ---- reads ----

  private getStatus(): Response {
    const m = this.requireMeta();
    return Response.json({
      id: m.id,
      status: publicStatus(m),
      seq: m.seq,
      traces: m.traces,
      nodes: m.nodes,
      calls: m.calls,
      // what the log holds (counts toward MAX_EPISODE_BYTES) and what GET answers now (msgpack)
      frame_bytes: m.bytes,
      episode_bytes: m.size ?? liveSize(m, this.index().asm.views()),
      watchers: this.watchers.count(),
      created: new Date(m.created).toISOString(),
      updated: new Date(m.updated).toISOString(),
      error: m.refused ?? m.error,
    });
  }

  /** The episode, streamed from storage: the live form, or the finished episode. */
  private getEpisode(request: Request): Response {
    const m = this.requireMeta();
    const json = wantsJson(request);
    // the msgpack and JSON forms are two representations: each has its own ETag, and caches
    // must key on Accept
    const headers = new Headers({ "cache-control": "no-store", vary: "Accept" });
    const finished = m.status === "finished" && m.etag !== null ? m.etag : null;
    if (finished !== null) {
      const etag = `"${finished}-${json ? "json" : "msgpack"}"`;
      headers.set("etag", etag);
      headers.set("cache-control", "private, max-age=0, must-revalidate");
      if (
        request.headers
          .get("if-none-match")
          ?.split(",")
          .some((t) => t.trim() === etag || t.trim() === "*")
      ) {
        return new Response(null, { status: 304, headers });
      }
    }
    headers.set("content-type", json ? "application/json" : MSGPACK);
    const asm = this.index().asm;
    let views: TraceView[];
    let head: Entry[] | null = null;
    if (finished !== null) {
      const reply = parseReply(this.record.reply()!);
      head = reply.head ?? [];
      views = asm.pick(reply.summaries);
      if (!json) headers.set("content-length", String(m.size));
    } else {
      views = asm.views();
      if (!json) headers.set("content-length", String(liveSize(m, views)));
    }
    if (request.method === "HEAD") return new Response(null, { headers });
    const out = json ? new JsonOut() : new MsgpackOut();
    const pin = this.store.pin(m.seq);
    const reader = this.store.reader(m.seq);
    const writer = head !== null ? writeFinished(out, reader, head, views) : writeLive(out, reader, m, views);
    return new Response(streamBody(out, writer, pin), { headers });
  }

  private requireMeta(): Meta {
    const m = this.record.meta();
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
    const id = this.record.meta()?.id;
    this.watchers.closeAll(1000, reason);
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.record.forget();
    this.live = null;
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
    const m = this.record.meta();
    if (!m) return;
    if (Date.now() >= this.expiresAt(m)) {
      await this.erase("episode expired");
      await this.indexChain;
      return;
    }
    // A pending index update is flushed whenever the alarm runs (it is never set later than due).
    if (this.record.indexState().due !== 0) await this.flushIndex(m, Date.now());
    await this.rearm();
  }

  /** Set the alarm to the earlier of retention and a pending index update. */
  private async rearm(): Promise<void> {
    const m = this.record.meta();
    if (!m) return;
    const { due } = this.record.indexState();
    const expires = this.expiresAt(m);
    await this.ctx.storage.setAlarm(due !== 0 ? Math.min(due, expires) : expires);
  }

  // ---- the episode index (advisory: never delays an answer, failures are logged and dropped) ----

  /** A turn changed the episode: schedule an index update unless one is pending (throttled). */
  private markIndexDirty(m: Meta, now: number): void {
    if (!this.env.EPISODE_INDEX) return;
    const st = this.record.indexState();
    if (st.due !== 0) return;
    const due = Math.max(now, st.lastFlush + this.limits.indexFlushMs);
    this.record.saveIndexState({ lastFlush: st.lastFlush, due });
    void this.ctx.storage.setAlarm(Math.min(due, this.expiresAt(m)));
  }

  /** Send the episode's row to the index now (in the background of this request). */
  private flushIndex(m: Meta, now: number): Promise<void> {
    if (!this.env.EPISODE_INDEX) return Promise.resolve();
    let row: IndexRow;
    try {
      row = {
        id: m.id,
        status: publicStatus(m),
        created: m.created,
        updated: m.updated,
        seq: m.seq,
        traces: m.traces,
        nodes: m.nodes,
        calls: m.calls,
        rewards: this.rewards(),
        error: m.refused ?? m.error,
      };
    } catch (e) {
      console.warn(`episode index: could not build the row: ${e instanceof Error ? e.message : String(e)}`);
      return Promise.resolve();
    }
    this.record.saveIndexState({ lastFlush: now, due: 0 });
    return this.toIndex((index) => index.upsert(row));
  }

  /** The first (orchestrator) trace's `rewards` as JSON, or null. */
  private rewards(): Json {
    const first = this.index().asm.traces.values().next();
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

// One Durable Object per episode: it owns the episode's storage transactions, its sockets and its
// lifecycle, and hands the rest to one module each (ARCHITECTURE.md has the map):
//   commit.ts     a producer message → one transaction (assembly, log, ledger, retraction)
//   finish.ts     the reply → finished / failed / finish_refused
//   read.ts       GET (streamed from SQLite) and status
//   watchers.ts   watcher sockets: catch-up (catchup.ts), live fan-out, pacing by acks
//   log-trim.ts   keeping the log short
//   index-sync.ts the episode's row in the episode index, and the alarm's deadlines
//   state.ts      the record, the store and the index in memory
// The Worker (src/index.ts) has checked the route, the method and the token: plain requests
// arrive as RPC calls (ingest, reply, read, status, remove), WebSocket upgrades through fetch.

import { DurableObject } from "cloudflare:workers";
import { type IngestAck, encodeAnswer } from "../envelope/answer.js";
import {
  type Answer,
  answerOf,
  answerOfAsync,
  CLOSE_NORMAL,
  CLOSE_POLICY,
  CLOSE_INTERNAL,
  CLOSE_TOO_BIG,
  echoClose,
  errorAnswer,
  errorResponse,
  RelayError,
  safeClose,
  upgradeRequired,
} from "../http/errors.js";
import { readStream } from "../http/body.js";
import { isWebSocketUpgrade, parseRoute } from "../http/route.js";
import { finishMessage, statusMessage } from "../watch/protocol.js";
import type { CatchUpSource } from "./catchup.js";
import { commitIngest } from "./commit.js";
import { commitReply, type ReplyAck, replyAck } from "./finish.js";
import { alarmAt, IndexSync } from "./index-sync.js";
import { type Limits, limitsFrom } from "./limits.js";
import { LogTrim } from "./log-trim.js";
import { type ReadRequest, readEpisode, type StatusBody, statusOf } from "./read.js";
import { EpisodeState } from "./state.js";
import { type Meta, publicStatus } from "./storage.js";
import { Watchers } from "./watchers.js";

/** Header the Worker sets on upgrades: the episode id this object serves (objects do not know their name). */
export const EPISODE_ID_HEADER = "x-episode-id";

const INGEST_TAG = "ingest";

export class Episode extends DurableObject<Env> {
  private readonly state: EpisodeState;
  private readonly limits: Limits;
  private readonly watchers: Watchers;
  private readonly indexSync: IndexSync;
  private readonly logTrim: LogTrim;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.limits = limitsFrom(env);
    this.state = new EpisodeState(ctx.storage);
    const { record, store } = this.state;
    const source: CatchUpSource = {
      meta: () => record.meta(),
      views: () => this.state.index().asm.views(),
      pin: (asOf) => store.pin(asOf),
      reader: (asOf) => store.reader(asOf),
      frames: (after, upTo, maxBytes) => record.frames(after, upTo, maxBytes),
      reply: () => record.reply(),
      rewoundPast: (seq) => record.rewoundPast(seq),
    };
    const l = this.limits;
    this.watchers = new Watchers(
      ctx,
      { maxWatchers: l.maxWatchers, lagBytes: l.watcherLagBytes, window: l.watcherWindowBytes, maxCatchUps: l.maxCatchUps },
      source,
    );
    this.indexSync = new IndexSync(ctx, env.EPISODE_INDEX, this.state, l.indexFlushMs, (due) => this.setAlarm(due));
    this.logTrim = new LogTrim(this.state, l.logKeepFrames, l.logKeepBytes);
    // Watchers' keep-alive pings are answered by the platform: they never wake the object.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  // ---- RPC: the Worker's plain requests ----

  /** `POST /v1/episodes/{id}/deltas`: one producer message (an envelope), its body streamed from the Worker. */
  ingest(id: string, body: ReadableStream<Uint8Array> | null): Promise<Answer<IngestAck>> {
    return answerOfAsync(async () => {
      const bytes = await readStream(body, this.limits.maxMessage);
      return this.ingestMessage(id, bytes);
    });
  }

  /** `POST /v1/episodes/{id}/reply`: the upstream reply that ends the run. */
  reply(_id: string, body: ReadableStream<Uint8Array> | null): Promise<Answer<ReplyAck>> {
    return answerOfAsync(async () => {
      const bytes = await readStream(body, this.limits.maxMessage);
      const r = commitReply(this.state, bytes, Date.now());
      if (r.kind === "repeat") return replyAck(r.meta);
      void this.indexSync.send(r.meta, r.meta.updated);
      if (r.kind === "refused") {
        // the run stays open for a corrected reply; status, the index and watchers say why
        this.watchers.sendAll(statusMessage(publicStatus(r.meta), r.meta.seq, r.message));
        throw new RelayError("finish_mismatch", r.message);
      }
      this.watchers.sendAll(finishMessage(r.meta.status, r.meta.seq, this.state.record.reply()!, r.meta.error));
      return replyAck(r.meta);
    });
  }

  /** `GET|HEAD /v1/episodes/{id}`: the episode, streamed from storage (a refusal as its HTTP answer). */
  read(_id: string, req: ReadRequest): Response {
    try {
      return readEpisode(this.state, req);
    } catch (e) {
      return errorResponse(e, "episode read");
    }
  }

  /** `GET /v1/episodes/{id}/status`. */
  status(_id: string): Answer<StatusBody> {
    return answerOf(() => statusOf(this.state, this.watchers.count()));
  }

  /** `DELETE /v1/episodes/{id}`. */
  async remove(_id: string): Promise<Answer<{ ok: true; deleted: true }>> {
    const found = answerOf(() => this.state.requireMeta());
    if (!found.ok) return found;
    await this.erase("episode deleted");
    return { ok: true, value: { ok: true, deleted: true } };
  }

  // ---- WebSockets ----

  /** Upgrades only: `/v1/episodes/{id}/ingest` (producer) and `/v1/episodes/{id}/watch`. */
  async fetch(request: Request): Promise<Response> {
    try {
      const url = new URL(request.url);
      const route = parseRoute(url.pathname);
      const id = request.headers.get(EPISODE_ID_HEADER);
      if (route.kind !== "episode" || id !== route.id || (route.action !== "ingest" && route.action !== "watch")) {
        throw new RelayError("not_found", "the episode object answers only WebSocket upgrades over fetch");
      }
      if (!isWebSocketUpgrade(request)) throw upgradeRequired(`the ${route.action} endpoint`);
      if (route.action === "watch") return this.watchers.open(url, id);
      const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
      this.ctx.acceptWebSocket(server, [INGEST_TAG]);
      server.serializeAttachment({ role: "ingest", id });
      return new Response(null, { status: 101, webSocket: client });
    } catch (e) {
      return errorResponse(e, "episode upgrade");
    }
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const att = ws.deserializeAttachment() as { role: "ingest" | "watch"; id: string } | null;
    if (att?.role === "watch") return this.watchers.message(ws, message);
    if (!att) return safeClose(ws, CLOSE_POLICY, "socket without state");
    if (typeof message === "string") return safeClose(ws, CLOSE_POLICY, "ingest messages must be binary msgpack");
    if (message.byteLength > this.limits.maxMessage) {
      return safeClose(ws, CLOSE_TOO_BIG, `message of ${message.byteLength} bytes exceeds the limit of ${this.limits.maxMessage}`);
    }
    let answer: string;
    try {
      answer = encodeAnswer(this.ingestMessage(att.id, new Uint8Array(message)));
    } catch (e) {
      // a refusal is answered and the socket stays open; a bug is logged, answered 500, and closes it
      const a = errorAnswer(e, `episode ${att.id}: ingest socket`);
      answer = encodeAnswer(a);
      if (a.error === "internal") {
        trySend(ws, answer);
        return safeClose(ws, CLOSE_INTERNAL, `internal: ${a.message}`);
      }
    }
    trySend(ws, answer);
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.watchers.gone(ws);
    echoClose(ws, code, reason);
  }

  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    console.warn("episode socket error", error);
    this.watchers.gone(ws);
  }

  // ---- lifecycle ----

  /** Apply one producer message, commit it, then tell watchers, the log and the index. */
  private ingestMessage(id: string, body: Uint8Array): IngestAck {
    const now = Date.now();
    const c = commitIngest(this.state, body, id, this.limits.maxEpisode, now);
    if (c.created) {
      if (this.state.record.tombstone()) this.state.record.saveTombstone(null); // the id is written again
      void this.indexSync.send(c.meta, now); // a new episode shows in the index at once
      this.setAlarm(null);
    } else this.indexSync.changed(now);
    // every watcher may hold retracted frames: each gets the new state as a snapshot
    if (c.rewound) this.watchers.rewind();
    else this.watchers.broadcast(c.frames);
    this.logTrim.afterIngest(c.meta, c.frames.length);
    return c.ack;
  }

  private async erase(reason: string): Promise<void> {
    const id = this.state.meta()?.id;
    this.watchers.closeAll(CLOSE_NORMAL, reason);
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.state.erased();
    if (id !== undefined) void this.indexSync.removed(id);
  }

  private expiresAt(m: Meta): number {
    return m.updated + this.limits.retention * 1000;
  }

  /** The alarm serves two deadlines: retention, and a pending index update (`due`, else the stored one). */
  private setAlarm(due: number | null): void {
    const m = this.state.meta();
    if (!m) return;
    void this.ctx.storage.setAlarm(alarmAt(this.expiresAt(m), due === null ? this.state.record.indexState() : { due }));
  }

  async alarm(): Promise<void> {
    const m = this.state.meta();
    if (!m) return this.indexSync.retryTombstone(); // deleted: its row may still have to go
    if (Date.now() >= this.expiresAt(m)) {
      await this.erase("episode expired");
      await this.indexSync.settled();
      return;
    }
    // a pending index update is sent whenever the alarm runs (it is never set later than due)
    if (this.indexSync.pending()) await this.indexSync.send(m, Date.now());
    this.setAlarm(null);
  }
}

/** Send on a socket that may have gone meanwhile (nothing to answer then). */
function trySend(ws: WebSocket, text: string): void {
  try {
    ws.send(text);
  } catch {
    // the producer left; it resends what it has no answer for
  }
}

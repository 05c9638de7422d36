// One Durable Object per episode: it owns the episode's storage transactions, its sockets and its
// lifecycle, and hands the rest to one module each (ARCHITECTURE.md has the map):
//   commit.ts     a producer message → one transaction (assembly, log, ledger, retraction)
//   finish.ts     the reply → finished / failed / finish_refused
//   read.ts       GET (streamed from SQLite) and status
//   feeds.ts      the viewer hubs that hold its watchers (src/objects/hub/), and what each has been fed
//   catchup-stream.ts  catch-up streams a hub reads for its watchers, as byte streams
//   log-trim.ts   keeping the log short
//   archive.ts    a finished episode to R2, its bodies and log out of SQLite
//   run-row-sync.ts the episode's row in its run's index, and the alarm's deadlines
//   state.ts      the record (record-store.ts), the assembled state (sql-store.ts) and the index in memory
// The Worker (src/worker/index.ts) has checked the route, the method and the token: plain requests
// arrive as RPC calls (ingest, reply, read, status, remove), the producer's socket through fetch.
// Watchers never connect here: they are on viewer hubs, which call hubJoin/hubLoad/hubLeave and
// catchUp, and are fed after every commit. A watcher connecting costs this object nothing.

import { DurableObject } from "cloudflare:workers";
import { readArchived } from "../../protocol/archive/archive-read.js";
import type { Grant } from "../../protocol/archive/leases.js";
import { parseReply } from "../../protocol/assembly/reply.js";
import { encodeAnswer, type IngestAck } from "../../protocol/envelope/answer.js";
import { checkDispatch, dispatchFromJson, dispatchJson, MAX_DISPATCH_BYTES } from "../../protocol/envelope/dispatch.js";
import { decodeBody, isJsonBody, parseJsonBody, readStream } from "../../protocol/http/body.js";
import {
  type Answer,
  answerOf,
  answerOfAsync,
  CLOSE_INTERNAL,
  CLOSE_NORMAL,
  CLOSE_POLICY,
  CLOSE_TOO_BIG,
  echoClose,
  errorAnswer,
  errorResponse,
  RelayError,
  safeClose,
  upgradeRequired,
} from "../../protocol/http/errors.js";
import { MSGPACK, matchesEtag, type ReadRequest, representationEtag } from "../../protocol/http/representation.js";
import { EPISODE_ID_HEADER, isWebSocketUpgrade, parseRoute } from "../../protocol/http/route.js";
import type { Joined } from "../../protocol/hub/feed.js";
import { type Limits, limitsFrom } from "../../protocol/limits/limits.js";
import type { SnapshotReason } from "../../protocol/watch/protocol.js";
import type { Variant } from "../../protocol/watch/variant.js";
import type { JsonObject } from "../../protocol/wire/json-view.js";
import { toJson } from "../../protocol/wire/json-view.js";
import { decodeLossless, fromJson } from "../../protocol/wire/lossless.js";
import { archiveGateName } from "../archive/gate.js";
import { usageOf } from "../billing/metered.js";
import { rpcAnswer } from "../rpc-answer.js";
import { EpisodeAlarm } from "./alarm.js";
import { type AnnotationsAck, annotationsDocument, commitAnnotations } from "./annotations.js";
import { type ArchiveSlots, EpisodeArchive } from "./archive.js";
import { ArchivedSnapshot } from "./archived-snapshot.js";
import { CatchUpMessages, type CatchUpSource, CatchUpStream, JoinBuffers, SnapshotBuilder } from "./catchup-stream.js";
import { commitDispatch, commitIngest } from "./commit.js";
import { HubFeeds } from "./feeds.js";
import { commitReply, type ReplyAck, replyAck } from "./finish.js";
import { LogTrim } from "./log-trim.js";
import { readEpisode, type StatusBody, statusOf } from "./read.js";
import { isPending, type Meta, publicStatus } from "./record-store.js";
import { alarmAt, nextFlushSlot, RunRowSync, retryDelay } from "./run-row-sync.js";
import { EpisodeState } from "./state.js";

/** The answer to `POST /v1/episodes/{id}/dispatch`. */
interface DispatchAck {
  ok: true;
  /** The episode did not exist: it is now a pending rollout (no traces) until its first trace streams. */
  created: boolean;
  /** The identity was set by this request (false: it held the same one). */
  changed: boolean;
  status: ReturnType<typeof publicStatus>;
  dispatch: JsonObject;
}

const INGEST_TAG = "ingest";

export class Episode extends DurableObject<Env> {
  private readonly state: EpisodeState;
  private readonly limits: Limits;
  private readonly feeds: HubFeeds;
  private readonly source: CatchUpSource;
  /** Catch-up streams hubs are pulling. */
  private readonly streams = new Set<CatchUpStream>();
  private readonly joinBuffers = new JoinBuffers();
  private readonly rowSync: RunRowSync;
  private readonly logTrim: LogTrim;
  /** When a failed feed is to be tried again (memory only: the alarm also feeds every hub). */
  private feedRetryAt = 0;
  private readonly alarms: EpisodeAlarm;
  private readonly archive: EpisodeArchive;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.limits = limitsFrom(env);
    this.state = new EpisodeState(ctx.storage);
    this.alarms = new EpisodeAlarm(ctx.storage);
    const { record, store } = this.state;
    this.source = {
      fresh: true,
      meta: () => record.meta(),
      views: () => this.state.memory().asm.views(),
      pin: (asOf) => store.pin(asOf),
      reader: (asOf) => store.reader(asOf),
      frames: (after, upTo, maxBytes) => record.frames(after, upTo, maxBytes),
      rewoundPast: (seq) => record.rewoundPast(seq),
      snapshot: (seq, variant, reason) => {
        const m = record.meta();
        if (m?.archived == null) return new SnapshotBuilder(this.source, seq, variant, reason);
        const traceIds = parseReply(record.reply()!).summaries.map((s) => s.id);
        return new ArchivedSnapshot(() => this.archive.body(m.id), seq, variant, reason, traceIds);
      },
    };
    const l = this.limits;
    this.archive = new EpisodeArchive(
      this.state,
      env.ARCHIVE,
      () => usageOf(this),
      archiveSlots(env, l.archiveSlots),
      l.archivePartBytes,
    );
    this.feeds = new HubFeeds(
      ctx.storage.sql,
      env.HUBS,
      this.state,
      { perHub: l.watchersPerHub, maxHubs: l.maxHubs },
      (due) => {
        this.feedRetryAt = this.feedRetryAt === 0 ? due : Math.min(this.feedRetryAt, due);
        this.setAlarm(null);
      },
    );
    this.rowSync = new RunRowSync(ctx, env.EPISODE_INDEX, this.state, l.indexFlushMs, (due) =>
      this.setAlarm(due, true),
    );
    this.logTrim = new LogTrim(this.state, l.logKeepFrames, l.logKeepBytes);
    // storage is brought to this release's schema before any event (SQLite opens synchronously, so
    // the constructor does it, in every object alike: src/objects/storage/schema.ts);
    // a finished episode an older release left in SQLite gets the alarm that archives it
    this.state.open();
    if (this.state.schema.isOpen && this.state.schema.failed === null && this.archive.due()) this.setAlarm(null);
  }

  // ---- RPC: the Worker's plain requests ----

  /** `POST /v1/episodes/{id}/deltas`: one producer message (an envelope), its body streamed from the Worker. */
  ingest(id: string, body: ReadableStream<Uint8Array> | null): Promise<Answer<IngestAck>> {
    return answerOfAsync(async () => {
      const bytes = await readStream(body, this.limits.maxMessage);
      const known = this.alarms.known();
      if (known) await known;
      return this.ingestMessage(id, bytes);
    });
  }

  /** `POST /v1/episodes/{id}/reply`: the upstream reply that ends the run. */
  reply(_id: string, body: ReadableStream<Uint8Array> | null): Promise<Answer<ReplyAck>> {
    return answerOfAsync(async () => {
      const bytes = await readStream(body, this.limits.maxMessage);
      const r = commitReply(this.state, bytes, Date.now());
      if (r.kind === "repeat") return replyAck(r.meta);
      void this.rowSync.send(r.meta, r.meta.updated);
      // the hubs tell their watchers: a finish, or (refused) the status and why; the run then stays open for a
      // corrected reply
      this.feeds.kick();
      if (r.kind === "refused") throw new RelayError("finish_mismatch", r.message);
      if (this.archive.due(r.meta)) this.setAlarm(null); // archived by the alarm, at once
      return replyAck(r.meta);
    });
  }

  /**
   * `POST /v1/episodes/{id}/dispatch`: the rollout's identity in the trainer (a JSON object, or a
   * msgpack map), announced when it is dispatched: the episode is created if it does not exist (a
   * pending rollout, shown by its run until its first trace streams, it ends, or PENDING_TIMEOUT_SECONDS
   * pass), else given its identity once (the same again: nothing changes; another: 409).
   */
  dispatch(
    id: string,
    body: ReadableStream<Uint8Array> | null,
    contentType: string | null,
  ): Promise<Answer<DispatchAck>> {
    return answerOfAsync(async () => {
      const bytes = await readStream(body, 4 * MAX_DISPATCH_BYTES);
      const identity = isJsonBody(contentType)
        ? dispatchFromJson(parseJsonBody(bytes, "the dispatch identity"))
        : checkDispatch(bytes);
      const now = Date.now();
      const r = commitDispatch(this.state, id, identity, now);
      if (r.changed) {
        // the id is written again
        if (r.created && this.state.record.tombstone()) this.state.record.saveTombstone(null);
        void this.rowSync.send(r.meta, now); // the run shows it at once
        this.setAlarm(null);
      }
      return {
        ok: true,
        created: r.created,
        changed: r.changed,
        status: publicStatus(r.meta),
        dispatch: dispatchJson(r.meta.dispatch!),
      };
    });
  }

  /**
   * `POST /v1/episodes/{id}/annotations`: prime-rl's annotation records (one, or an array; msgpack or
   * JSON), merged into the episode's per trace (src/objects/episode/annotations.ts), while live, finished or
   * archived. Its row and its watchers that asked hear of it.
   */
  annotate(
    _id: string,
    body: ReadableStream<Uint8Array> | null,
    contentType: string | null,
  ): Promise<Answer<AnnotationsAck>> {
    return answerOfAsync(async () => {
      const bytes = await readStream(body, this.limits.maxMessage);
      const value = isJsonBody(contentType)
        ? fromJson(parseJsonBody(bytes, "the annotations"))
        : decodeBody(bytes, "annotations");
      const now = Date.now();
      const { meta, ack } = commitAnnotations(this.state, value, this.limits.maxAnnotations, now);
      void this.rowSync.send(meta, now);
      this.feeds.kick();
      this.setAlarm(null);
      return ack;
    });
  }

  /**
   * `GET|HEAD /v1/episodes/{id}/annotations`: the merged records (msgpack, or the JSON view), with an ETag by version.
   */
  annotations(_id: string, req: ReadRequest): Response {
    try {
      const m = this.state.requireMeta();
      const etag = representationEtag(`a${m.annotations}`, req.json);
      if (matchesEtag(req.ifNoneMatch, etag)) return new Response(null, { status: 304, headers: { etag } });
      const doc = annotationsDocument(this.state, m);
      const body = req.json ? JSON.stringify(toJson(decodeLossless(doc))) : doc;
      const headers = { "content-type": req.json ? "application/json" : MSGPACK, etag, "cache-control": "no-cache" };
      return new Response(req.head ? null : body, { headers });
    } catch (e) {
      return errorResponse(e, "annotations read");
    }
  }

  /** `GET|HEAD /v1/episodes/{id}`: the episode, streamed from storage (a refusal as its HTTP answer). */
  async read(id: string, req: ReadRequest): Promise<Response> {
    try {
      // archived since the Worker looked (or the Worker skipped R2): the archive answers
      if (this.state.meta()?.archived != null) {
        const res = await readArchived(this.env.ARCHIVE, id, req);
        if (res) return res;
        throw new RelayError("internal", `the archive of episode ${id} is missing`);
      }
      return readEpisode(this.state, req);
    } catch (e) {
      return errorResponse(e, "episode read");
    }
  }

  /** `GET /v1/episodes/{id}/status`. */
  status(_id: string): Promise<Answer<StatusBody>> {
    return answerOfAsync(async () => {
      this.state.requireMeta();
      return statusOf(this.state, await this.feeds.viewers());
    });
  }

  /** `DELETE /v1/episodes/{id}`. */
  async remove(_id: string): Promise<Answer<{ ok: true; deleted: true }>> {
    const found = answerOf(() => this.state.requireMeta());
    if (!found.ok) return found;
    await this.erase("episode deleted");
    return { ok: true, value: { ok: true, deleted: true } };
  }

  /**
   * Its run's index asks for the row again (an index migration that needs what only the episode holds:
   * src/objects/registry/reward-recount.ts). Answers whether there was a row to send; it goes as any row does (in
   * the background: the index is not kept waiting on its own upsert).
   */
  resendRow(_id: string): boolean {
    const m = this.state.meta();
    if (!m) return false;
    void this.rowSync.send(m, Date.now());
    return true;
  }

  // ---- RPC: the viewer hubs ----

  /** A hub's first watcher arrived: it joins (a new session) and gets where to start. */
  hubJoin(id: string, shard: number, session: number, watchers: number): Joined {
    return this.feeds.join(id, shard, session, watchers);
  }

  /** A hub's watcher count moved: the hub count it answers may follow. */
  hubLoad(_id: string, shard: number, session: number, watchers: number): number | null {
    return this.feeds.load(shard, session, watchers);
  }

  /** A hub's last watcher left. */
  hubLeave(_id: string, shard: number, session: number): void {
    this.feeds.leave(shard, session);
  }

  /** Names of this episode's hubs, now and since it woke (for its usage: src/objects/billing/metered.ts `peers`). */
  hubNames(): string[] {
    return this.feeds.names();
  }

  /**
   * A catch-up stream for a hub's watcher(s): the snapshot as of now (or the log after `after`),
   * as a byte stream of messages (src/protocol/hub/catchup-stream.ts) read from the stream object returned.
   * Built from SQLite as it is read; pinned until it ends or the hub closes it.
   */
  catchUp(_id: string, variant: Variant, after: number | null, forced: SnapshotReason | null): CatchUpStream {
    const now = Date.now();
    for (const c of [...this.streams]) c.expire(now);
    return new CatchUpStream(
      new CatchUpMessages(this.source, variant, after, forced ?? undefined),
      this.streams,
      this.joinBuffers,
    );
  }

  // ---- the producer's socket ----

  /** Upgrades only: `/v1/episodes/{id}/ingest` (the producer's socket). */
  async fetch(request: Request): Promise<Response> {
    try {
      const url = new URL(request.url);
      const route = parseRoute(url.pathname);
      const id = request.headers.get(EPISODE_ID_HEADER);
      if (route.kind !== "episode" || id !== route.id || route.action !== "ingest") {
        throw new RelayError("not_found", "the episode object answers only the producer's upgrade over fetch");
      }
      if (!isWebSocketUpgrade(request)) throw upgradeRequired(`the ${route.action} endpoint`);
      const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
      this.ctx.acceptWebSocket(server, [INGEST_TAG]);
      server.serializeAttachment({ role: "ingest", id });
      return new Response(null, { status: 101, webSocket: client });
    } catch (e) {
      return errorResponse(e, "episode upgrade");
    }
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const att = ws.deserializeAttachment() as { role: "ingest"; id: string } | null;
    if (att?.role !== "ingest") return safeClose(ws, CLOSE_POLICY, "socket without state");
    if (typeof message === "string") return safeClose(ws, CLOSE_POLICY, "ingest messages must be binary msgpack");
    if (message.byteLength > this.limits.maxMessage) {
      return safeClose(
        ws,
        CLOSE_TOO_BIG,
        `message of ${message.byteLength} bytes exceeds the limit of ${this.limits.maxMessage}`,
      );
    }
    // what is armed, read once per wake (awaited only then: this socket's messages keep their order)
    const known = this.alarms.known();
    if (known) await known;
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
    echoClose(ws, code, reason);
  }

  async webSocketError(_ws: WebSocket, error: unknown): Promise<void> {
    console.warn("episode socket error", error);
  }

  // ---- lifecycle ----

  /** Apply one producer message, commit it, then tell the hubs, the log and the index. */
  private ingestMessage(id: string, body: Uint8Array): IngestAck {
    const now = Date.now();
    const before = this.state.meta()?.seq ?? 0;
    const c = commitIngest(this.state, body, id, this.limits.maxEpisode, now);
    if (c.created) {
      if (this.state.record.tombstone()) this.state.record.saveTombstone(null); // the id is written again
      void this.rowSync.send(c.meta, now); // a new episode shows in the index at once
      this.setAlarm(null);
    } else if (c.dispatched || before === 0) {
      void this.rowSync.send(c.meta, now); // its identity, or the first trace of a pending rollout: at once
      this.setAlarm(null);
    } else this.rowSync.changed(c.meta, now, this.alarms.at);
    // every watcher may hold retracted frames: each hub restarts its watchers from a snapshot
    if (c.rewound) {
      if (c.rewoundTo !== null) this.rowSync.search.rewound(this.state.memory().asm, c.rewoundTo);
      for (const cur of [...this.streams]) cur.retracted();
      this.feeds.rewound(c.meta.seq);
    } else this.feeds.committed(c.frames, before);
    this.logTrim.afterIngest(c.meta, c.frames.length);
    return c.ack;
  }

  private async erase(reason: string): Promise<void> {
    const id = this.state.meta()?.id;
    for (const cur of [...this.streams]) cur.close(new Error(reason));
    await this.feeds.closeAll(reason);
    // both copies go: the archive first (if R2 refuses, nothing is erased and the delete can be repeated)
    try {
      if (id !== undefined) await this.archive.remove(id);
    } catch (e) {
      this.archive.resume();
      throw e;
    }
    for (const ws of this.ctx.getWebSockets()) safeClose(ws, CLOSE_NORMAL, reason);
    await this.ctx.storage.deleteAlarm();
    this.alarms.deleted();
    if (id === undefined) await this.ctx.storage.deleteAll();
    else {
      // the tombstone comes with the erase (one transaction), and an alarm retries it if the removal
      // below never settles (a crash): the storage is freed only once the run's index dropped the row
      this.ctx.storage.transactionSync(() => this.state.record.eraseToTombstone(id));
      this.alarms.by(Date.now() + retryDelay(1), true);
    }
    // the removal's retries arm without this class (run-row-sync.ts)
    this.alarms.forget();
    this.state.forget();
    this.rowSync.search.forget();
    this.archive.resume();
    if (id !== undefined) void this.rowSync.removed(id);
  }

  /** When a rollout announced by its identity and still without a frame is dropped. */
  private pendingDeadline(m: Meta): number {
    return m.created + this.limits.pendingTimeoutMs;
  }

  private expiresAt(m: Meta): number {
    return m.updated + this.limits.retention * 1000;
  }

  /**
   * When the alarm must next run, or null for never: the earliest of retention, a pending index update (`due`, else
   * the stored one), a feed to retry, the archive, a pending rollout's deadline, and `slot` (non-zero: the next
   * throttled update's, run-row-sync.ts `nextFlushSlot`).
   */
  private alarmDeadline(due: number | null, slot = 0): number | null {
    const m = this.state.meta();
    if (!m) return this.feedRetryAt !== 0 ? this.feedRetryAt : null;
    let at = alarmAt(this.expiresAt(m), due === null ? this.state.record.indexState() : { due });
    if (this.feedRetryAt !== 0) at = Math.min(at, this.feedRetryAt);
    // a finished episode not archived yet (kept in storage: a restart finds it due again)
    if (this.archive.due(m)) at = Math.min(at, this.archive.retryAt || m.updated + this.limits.archiveAfterMs);
    if (isPending(m)) at = Math.min(at, this.pendingDeadline(m));
    if (slot !== 0) at = Math.min(at, slot);
    return at;
  }

  /**
   * Arm the alarm for the earliest deadline (`alarmDeadline`). `noLater` (a turn's throttled update): an alarm
   * known to be armed no later already serves it, and is left as it is (each setAlarm is billed as a row written; the
   * handler decides what is due whenever it runs). Other callers replace it, so that an alarm armed for what is no
   * longer due does not wake the object.
   */
  private setAlarm(due: number | null, noLater = false): void {
    const at = this.alarmDeadline(due);
    if (at !== null) this.alarms.by(at, !noLater);
  }

  /**
   * The archive gate's call (src/objects/archive/gate.ts): this episode's turn for its archive step,
   * with the slot already leased in its name; given back at once if there is nothing to archive.
   */
  async archiveTurn(holder: string): Promise<void> {
    const m = this.state.meta();
    if (m && m.id === holder && this.archive.due(m)) {
      await this.archive.attempt();
      this.setAlarm(null);
    } else await this.archive.giveBack(holder);
  }

  async alarm(): Promise<void> {
    await this.alarms.firing(() => this.runAlarm());
  }

  private async runAlarm(): Promise<void> {
    // every hub is asked what it holds and fed what it lacks (a retry, or the first feed after a restart)
    this.feedRetryAt = 0;
    this.feeds.kick();
    const m = this.state.meta();
    if (!m) return this.rowSync.retryTombstone(); // deleted: its row may still have to go
    const pendingTooLong = isPending(m) && Date.now() >= this.pendingDeadline(m);
    if (Date.now() >= this.expiresAt(m) || pendingTooLong) {
      try {
        await this.erase(
          pendingTooLong ? "the dispatched rollout streamed nothing within PENDING_TIMEOUT_SECONDS" : "episode expired",
        );
      } catch (e) {
        // R2 refused the archive's removal: nothing was erased; try again later (not the platform's few retries)
        console.error(`episode ${m.id}: expiry failed, retried in a minute`, e);
        this.alarms.by(Date.now() + 60_000, true);
        return;
      }
      await this.rowSync.settled();
      return;
    }
    // a pending index update is sent whenever the alarm runs (it is never set later than due; a throttled one is
    // due in memory only, so an object started since sends a live episode's row)
    const sent = this.rowSync.sends && this.rowSync.pending(m);
    if (sent) await this.rowSync.send(m, Date.now());
    if (this.archive.due(m) && Date.now() >= this.archive.retryAt) await this.archive.attempt();
    // archived by an older release, which kept a JSON copy beside the msgpack: it goes (R2 down: the next alarm)
    else if (m.archived != null)
      await this.archive
        .dropLegacyJson(m.id)
        .catch((e) => console.warn(`episode ${m.id}: old JSON copy not removed`, e));
    // while turns arrive, the next throttled update's slot (one alarm set per interval, not two)
    const now = this.state.meta();
    const slot =
      sent && now ? nextFlushSlot(now, this.state.record.indexState(), Date.now(), this.rowSync.interval) : 0;
    const at = this.alarmDeadline(null, slot);
    if (at !== null) this.alarms.by(at, true);
  }
}

/** The Episode class's archive slots (one ArchiveGate), or null when unlimited (production). */
function archiveSlots(env: Env, slots: number): ArchiveSlots | null {
  if (slots <= 0) return null;
  const gate = () => env.ARCHIVE_GATE.getByName(archiveGateName("Episode"));
  return {
    acquire: async (holder) => rpcAnswer<Grant>(gate().acquire(holder, slots)),
    release: async (holder, tookMs) => gate().release(holder, tookMs),
  };
}

/** Send on a socket that may have gone meanwhile (nothing to answer then). */
function trySend(ws: WebSocket, text: string): void {
  try {
    ws.send(text);
  } catch {
    // the producer left; it resends what it has no answer for
  }
}

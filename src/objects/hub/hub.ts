// One viewer hub: a Durable Object that holds some of an episode's watcher sockets (the Worker
// spreads them over K hubs, src/protocol/hub/shards.ts). It joins the episode when its first watcher
// arrives and leaves when its last one goes; in between the episode feeds it what it commits
// (src/protocol/hub/feed.ts), and it fans that out (src/objects/hub/watchers.ts). Catch-ups are streamed from the
// episode and shared between watchers that join together (src/protocol/hub/catchup.ts). So a reconnect
// storm, a slow dashboard or ten thousand viewers load hubs, never the episode's own thread.
// A hub keeps a small row (src/objects/hub/store.ts: written when its session or the run's status
// moves, not per feed) and recent frames in memory (src/protocol/hub/frames.ts `HubWindow`); where
// its caught-up watchers stand rides in their sockets' attachments (src/objects/hub/fan-out.ts).

import { DurableObject } from "cloudflare:workers";
import { offeredProtocols, WS_PROTOCOL } from "../../protocol/http/credentials.js";
import {
  CLOSE_NORMAL,
  CLOSE_POLICY,
  echoClose,
  errorResponse,
  RelayError,
  safeClose,
  upgradeRequired,
} from "../../protocol/http/errors.js";
import { isWebSocketUpgrade, parseRoute } from "../../protocol/http/route.js";
import type { CatchUpStream } from "../../protocol/hub/catchup-stream.js";
import { type Feed, type FeedAnswer, type HubView, viewEnded, viewStatus } from "../../protocol/hub/feed.js";
import { HubWindow, received } from "../../protocol/hub/frames.js";
import { HUB_EPISODE_HEADER, HUB_SHARD_HEADER, HUBS_HEADER } from "../../protocol/hub/shards.js";
import { limitsFrom } from "../../protocol/limits/limits.js";
import { finishMessage, statusMessage } from "../../protocol/watch/protocol.js";
import { rpcAnswer } from "../rpc-answer.js";
import { type HubRow, HubStore } from "./store.js";
import { HubWatchers } from "./watchers.js";

/** The window keeps at most this many frames (besides its byte bound). */
const WINDOW_FRAMES = 4096;
/** A hub reports its watcher count to the episode when it moved by this share of WATCHERS_PER_HUB. */
const REPORT_SHARE = 1 / 8;

export class ViewerHub extends DurableObject<Env> {
  private readonly store: HubStore;
  private readonly window: HubWindow;
  private readonly watchers: HubWatchers;
  private readonly perHub: number;
  /** Membership calls to the episode, one after the other. */
  private membership: Promise<void> = Promise.resolve();
  /** Upgrades admitted and waiting for the hub to join (they count as watchers). */
  private arriving = 0;
  /** The watcher count the episode last heard (memory only: a woken hub reports again). */
  private reported = -1;
  /** The session of a join under way (a feed for it may arrive before the join's answer). */
  private joining: number | null = null;
  /** Whether this instance took its head from its watchers' attachments yet (once per wake: `row`). */
  private stood = false;
  /**
   * Fed frames since the hub woke: with their message as the episode built it (passed through), or built here (older
   * episodes, log reads).
   */
  private readonly fedFrames = { passed: 0, built: 0 };

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const l = limitsFrom(env);
    this.perHub = l.watchersPerHub;
    this.store = new HubStore(ctx.storage);
    // storage is brought to this release's schema before any event (SQLite opens synchronously, so
    // the constructor does it, in every object alike: src/objects/storage/schema.ts)
    this.store.open();
    this.window = new HubWindow(
      this.store.schema.failed === null ? (this.store.row()?.view?.head ?? 0) : 0,
      l.hubWindowBytes,
      WINDOW_FRAMES,
    );
    this.watchers = new HubWatchers(
      ctx,
      {
        maxWatchers: l.maxWatchers,
        maxWaiting: l.maxWaiting,
        catchUpsPerSecond: l.catchUpRate,
        maxQueuedBytes: l.hubQueueBytes,
        lagBytes: l.watcherLagBytes,
        window: l.watcherWindowBytes,
        maxCatchUps: l.maxCatchUps,
        poolBytes: l.hubPoolBytes,
      },
      {
        view: () => this.view(),
        reply: () => this.store.reply(),
        window: this.window,
        openStream: async (variant, after, forced): Promise<CatchUpStream> =>
          await this.episode().catchUp(this.identity().id, variant, after, forced ?? null),
      },
    );
    // Watchers' keep-alive pings are answered by the platform: they never wake the hub.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  /** `/v1/episodes/{id}/watch` upgrades, forwarded by the Worker with the episode id and the shard. */
  async fetch(request: Request): Promise<Response> {
    try {
      const url = new URL(request.url);
      const route = parseRoute(url.pathname);
      const id = request.headers.get(HUB_EPISODE_HEADER);
      const shard = Number(request.headers.get(HUB_SHARD_HEADER));
      if (
        route.kind !== "episode" ||
        route.action !== "watch" ||
        id !== route.id ||
        !Number.isSafeInteger(shard) ||
        shard < 0
      ) {
        throw new RelayError("not_found", "a viewer hub answers only watch upgrades forwarded by the Worker");
      }
      if (!isWebSocketUpgrade(request)) throw upgradeRequired("the watch endpoint");
      const known = this.row();
      if (known && (known.id !== id || known.shard !== shard))
        throw new Error(`hub ${known.shard}/${known.id} asked to serve ${shard}/${id}`);
      this.arriving++;
      try {
        await this.sync({ id, shard });
      } finally {
        this.arriving--;
      }
      const res = this.watchers.open(url, id, this.answerHeaders(request));
      void this.sync();
      return res;
    } catch (e) {
      return errorResponse(e, "hub upgrade");
    }
  }

  /**
   * The 101's headers, as the client gets them: the hub count only when the Worker's differs (it strips it then), our
   * subprotocol when offered (so the Worker passes the answer on as it is).
   */
  private answerHeaders(request: Request): Record<string, string> {
    const headers: Record<string, string> = {};
    const hubs = String(this.row()?.hubs ?? 1);
    if (request.headers.get(HUBS_HEADER) !== hubs) headers[HUBS_HEADER] = hubs;
    if (offeredProtocols(request).includes(WS_PROTOCOL)) headers["sec-websocket-protocol"] = WS_PROTOCOL;
    return headers;
  }

  // ---- RPC from the episode ----

  /** The episode's feed (null: just say what this hub holds). Applied in one turn, or not at all. */
  feed(session: number, f: Feed | null): FeedAnswer {
    const s = this.row();
    const watchers = this.watchers.count() + this.arriving;
    // not ready yet: the episode tries again shortly
    if (this.joining === session) return { applied: false, view: null, member: true, watchers };
    if (!s?.view || s.session !== session) return { applied: false, view: null, member: false, watchers };
    if (watchers === 0) {
      // nobody left to feed (the hub restarted and its sockets dropped): it leaves on this answer
      this.forget();
      return { applied: false, view: null, member: false, watchers };
    }
    const v = s.view;
    if (!f) return { applied: false, view: v, member: true, watchers };
    if (f.restart) {
      this.window.reset(f.view.head);
      this.store.save({ ...s, view: f.view, hubs: f.hubs }, viewEnded(f.view) ? (f.reply ?? undefined) : null);
      this.watchers.restart(f.restart, s.id);
      this.noteAnnotations(v, f.view);
      return { applied: true, view: f.view, member: true, watchers };
    }
    if (f.after !== v.head) return { applied: false, view: v, member: true, watchers };
    const frames = f.frames.map(received);
    for (let i = 0; i < frames.length; i++) this.fedFrames[frames[i] === f.frames[i] ? "passed" : "built"]++;
    this.window.append(frames);
    this.store.save({ ...s, view: f.view, hubs: f.hubs }, f.reply ?? undefined);
    const n = f.view;
    let then: Uint8Array | null = null;
    if (!viewEnded(v) && viewEnded(n))
      then = finishMessage(n.status, n.head, f.reply ?? this.store.reply() ?? new Uint8Array(0), n.error);
    else if (n.status === "live" && n.refused !== v.refused) then = statusMessage(viewStatus(n), n.head, n.refused);
    this.watchers.fed(frames, then);
    this.noteAnnotations(v, n);
    return { applied: true, view: n, member: true, watchers };
  }

  /** The trainer's annotations moved: the watchers that asked are told (they read them over HTTP). */
  private noteAnnotations(before: HubView, now: HubView): void {
    if ((now.annotations ?? 0) !== (before.annotations ?? 0)) this.watchers.annotationsChanged(now.annotations ?? 0);
  }

  /** The episode is gone (deleted or expired): every watcher is closed; this hub serves nobody. */
  closeAll(session: number, reason: string): void {
    const s = this.row();
    if (s?.session !== session) return;
    this.watchers.closeAll(CLOSE_NORMAL, reason);
    this.forget();
  }

  /** Its watchers now, for the episode's status (null: not a member of that session). */
  count(session: number): number | null {
    return this.row()?.session === session ? this.watchers.count() : null;
  }

  /** For tests and benches: what this hub holds. */
  stats(): {
    view: HubView | null;
    session: number | null;
    window: ReturnType<HubWindow["stats"]>;
    watchers: ReturnType<HubWatchers["load"]>;
    fedFrames: { passed: number; built: number };
  } {
    const s = this.row();
    return {
      view: s?.view ?? null,
      session: s?.session ?? null,
      window: this.window.stats(),
      watchers: this.watchers.load(),
      fedFrames: { ...this.fedFrames },
    };
  }

  // ---- sockets ----

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    if (!this.watchers.isWatcher(ws)) return safeClose(ws, CLOSE_POLICY, "socket without state");
    this.watchers.message(ws, message);
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.row(ws); // a woken hub reads where its watchers stand before one goes (it may have kept that)
    this.watchers.gone(ws);
    echoClose(ws, code, reason);
    void this.sync();
  }

  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    console.warn("hub socket error", error);
    this.row(ws);
    this.watchers.gone(ws);
    void this.sync();
  }

  // ---- membership ----

  /** This hub serves nobody any more: its row, its window and its streams go. */
  private forget(): void {
    this.store.clear();
    this.window.reset(0);
    this.watchers.forgetCohorts();
  }

  /**
   * The row, with its head where the caught-up watchers stand: the stored head is a floor (the row is not written
   * per feed), so the first read after a wake raises it to what their attachments say, and the window starts there.
   * A hub that would take less than its watchers got would send them frames again; more, and they would miss some.
   */
  private row(closing?: WebSocket): HubRow | null {
    const s = this.store.row();
    if (this.stood || !s) return s;
    this.stood = true;
    const v = s.view;
    const head = v ? this.watchers.standing(v.epoch, closing) : null;
    if (!v || head === null || head <= v.head) return s;
    const now = { ...s, view: { ...v, head } };
    this.store.save(now); // memory only: the head alone moved
    this.window.reset(head);
    return now;
  }

  private view(): HubView {
    return this.row()?.view ?? { head: 0, epoch: 0, status: "new", refused: null, error: null };
  }

  private identity(): { id: string; shard: number } {
    const s = this.row();
    if (!s) throw new Error("hub without an episode");
    return s;
  }

  private episode(id = this.identity().id): ReturnType<Env["EPISODES"]["get"]> {
    return this.env.EPISODES.getByName(id);
  }

  /**
   * Bring the episode's membership in line with the watchers here: join when the first arrives
   * (a new session; the hub starts from the episode as it is), leave when the last has gone,
   * report the count when it moved a good deal. One call at a time; an upgrade waits for its join.
   */
  private sync(who?: { id: string; shard: number }): Promise<void> {
    const step = async () => {
      const s = this.row();
      const id = s?.id ?? who?.id;
      const shard = s?.shard ?? who?.shard;
      if (id === undefined || shard === undefined) return;
      const n = this.watchers.count() + this.arriving;
      if (n > 0 && (s === null || s.session === null)) {
        const session = Math.floor(Math.random() * Number.MAX_SAFE_INTEGER);
        this.joining = session;
        try {
          const j = await rpcAnswer(this.episode(id).hubJoin(id, shard, session, n));
          this.store.save({ id, shard, session, view: j.view, hubs: j.hubs }, j.reply);
          this.window.reset(j.view.head);
          this.reported = n;
        } finally {
          this.joining = null;
        }
      } else if (n === 0 && s?.session != null) {
        try {
          await this.episode(id).hubLeave(id, shard, s.session);
        } catch (e) {
          // the episode drops this hub at its next feed anyway (it answers that it has nobody)
          console.warn(`hub ${shard}/${id}: leave failed: ${(e as Error).message}`);
        }
        if (this.watchers.count() + this.arriving === 0) {
          this.forget();
        } else this.store.save({ ...this.row()!, session: null });
      } else if (
        s?.session != null &&
        (this.reported < 0 || Math.abs(n - this.reported) >= Math.max(1, Math.floor(this.perHub * REPORT_SHARE)))
      ) {
        // (a woken or restarted hub reports once: the episode feeds it what it may have missed)
        const hubs = await this.episode(id).hubLoad(id, shard, s.session, n);
        this.reported = n;
        const now = this.row();
        if (hubs === null) {
          // the episode no longer counts this hub (it dropped it): join again, from where it is now
          if (now?.session === s.session) this.store.save({ ...now, session: null });
          void this.sync();
        } else if (now?.session === s.session && now.hubs !== hubs) this.store.save({ ...now, hubs });
      }
    };
    const next = this.membership.then(step);
    this.membership = next.catch((e: unknown) => console.warn("hub membership", e));
    return next;
  }
}

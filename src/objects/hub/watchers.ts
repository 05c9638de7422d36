// A hub's watcher sockets (hibernating): admission, hellos, the wait for a catch-up slot, and the
// step to the fan-out once caught up.
//
// - A new watcher gets a hello at once, then, once it acknowledged the hello and a slot is free,
//   its catch-up (src/objects/hub/running-catchups.ts), paced by what it acknowledges (src/objects/hub/fan-out.ts `Flows`):
//   at most `window` bytes unacknowledged, at most `maxCatchUps` at once, at most
//   `catchUpsPerSecond` starting (src/protocol/hub/admission.ts). A watcher that joins a stream under
//   way (a cohort) takes neither a slot nor a start token: it costs the episode nothing, and the hub
//   its sends, which HUB_QUEUE_BYTES bounds. A newcomer past the admission bounds is
//   closed 1013 with a retry hint. Caught up, it joins the fan-out (src/objects/hub/fan-out.ts).
// - What the hub knows of a socket is memory only, except whether it is caught up (its attachment): after the hub restarts, a
//   socket that was still catching up is closed with 1013 (its catch-up is gone) and reconnects.

import { CLOSE_POLICY, CLOSE_TRY_LATER, RelayError, safeClose } from "../../protocol/http/errors.js";
import { Admission, type AdmissionLimits } from "../../protocol/hub/admission.js";
import { BridgeCache, type BridgeSource, CatchUp, type OpenStream } from "../../protocol/hub/catchup.js";
import { type HubView, viewStatus } from "../../protocol/hub/feed.js";
import type { HubFrame, HubWindow } from "../../protocol/hub/frames.js";
import { MessagePool } from "../../protocol/hub/message-pool.js";
import {
  annotationsMessage,
  helloMessage,
  parseWatcherText,
  retryReason,
  type SnapshotReason,
  statusMessage,
} from "../../protocol/watch/protocol.js";
import { parseVariant, type Variant, variantKey } from "../../protocol/watch/variant.js";
import { Cohorts } from "./cohorts.js";
import { FanOut, Flows, type Watcher, type WatcherAttachment } from "./fan-out.js";
import { RunningCatchUps } from "./running-catchups.js";

const WATCH_TAG = "watch";

interface WatcherLimits extends AdmissionLimits {
  /** Bytes a caught-up watcher may be behind (sent, not acknowledged) before it is closed with 4008. */
  lagBytes: number;
  /** Bytes a catching-up watcher may have unacknowledged. */
  window: number;
  /** Watchers catching up at once. */
  maxCatchUps: number;
  /** Buffers catch-up messages are read into, at most, bytes. */
  poolBytes: number;
}

/** What the watchers read of their hub. */
interface HubSource {
  view(): HubView;
  reply(): Uint8Array | null;
  readonly window: HubWindow;
  openStream: OpenStream;
}

interface Waiting {
  ws: WebSocket;
  after: number | null;
  ready: boolean;
  reason?: SnapshotReason;
}

export class HubWatchers {
  private readonly flows = new Flows();
  /** Buffers catch-up messages are read into, used again once acknowledged. */
  private readonly pool: MessagePool;
  private readonly fanOut: FanOut;
  private readonly known = new WeakMap<WebSocket, Watcher>();
  private readonly catchUps: RunningCatchUps;
  private readonly cohorts: Cohorts;
  /** Watchers waiting for a catch-up slot, in arrival order; one starts only once it acknowledged its hello. */
  private readonly waiting: Waiting[] = [];
  /** Catch-ups holding one of the `maxCatchUps` slots (those that did not join a stream under way). */
  private readonly slots = new Set<WebSocket>();
  /** A timer that starts waiting catch-ups when the start rate allows (short; only while some wait). */
  private startTimer: ReturnType<typeof setTimeout> | null = null;
  /** Open sockets with the watch tag (counted once per wake, then kept), and which they are. */
  private sockets: number | null = null;
  private readonly counted = new WeakSet<WebSocket>();
  private readonly admission: Admission;
  private readonly bridge: BridgeSource;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly limits: WatcherLimits,
    private readonly hub: HubSource,
  ) {
    this.admission = new Admission(limits, Date.now());
    this.pool = new MessagePool(limits.poolBytes);
    this.fanOut = new FanOut(
      this.flows,
      limits.lagBytes,
      () => this.ctx.getWebSockets(WATCH_TAG).map((ws) => ({ ws, watcher: this.watcherOf(ws) })),
      () => this.hub.view(),
    );
    this.catchUps = new RunningCatchUps(
      this.flows,
      this.fanOut,
      hub,
      limits.window,
      {
        gone: (ws) => this.gone(ws),
        caughtUp: (ws) => {
          this.slots.delete(ws);
          this.fanOut.set(ws, this.known.get(ws)!, true);
          this.startWaiting();
        },
      },
      this.pool,
    );
    this.cohorts = new Cohorts(hub.openStream, (c) => this.catchUps.wakeMembers(c), this.pool);
    this.bridge = {
      head: () => this.hub.view().head,
      window: hub.window,
      cohortFor: (variant, after, forced) => this.cohorts.for(variant, after, forced),
      bridges: new BridgeCache(),
    };
  }

  count(): number {
    if (this.sockets === null) {
      this.sockets = 0;
      for (const ws of this.ctx.getWebSockets(WATCH_TAG)) {
        if (ws.readyState !== WebSocket.OPEN || this.counted.has(ws)) continue;
        this.counted.add(ws);
        this.sockets++;
      }
    }
    return this.sockets;
  }

  /**
   * Load figures for status and tests: sockets, waiting, catching up, cohorts, bytes unacknowledged, the catch-up
   * buffers (bytes held, pooled buffers leased, made and lost since the hub woke), and the caught-up watchers'
   * attachments written since it woke.
   */
  load(): {
    watchers: number;
    waiting: number;
    catchingUp: number;
    cohorts: number;
    queuedBytes: number;
    streamsOpened: number;
    pool: { bytes: number; leased: number; made: number; lost: number };
    attachmentsWritten: number;
  } {
    return {
      watchers: this.count(),
      waiting: this.waiting.length,
      catchingUp: this.catchUps.size,
      cohorts: this.cohorts.size,
      queuedBytes: this.flows.queued,
      streamsOpened: this.cohorts.opened,
      pool: { bytes: this.pool.bytes, leased: this.pool.leased, made: this.pool.made, lost: this.pool.lost },
      attachmentsWritten: this.fanOut.written,
    };
  }

  /**
   * `GET /v1/episodes/{id}/watch[?after=SEQ&routing=0&traces=A,B&annotations=1]` as a WebSocket:
   * refused at once (1013 with a retry hint) past the admission bounds; else a hello, then its
   * catch-up, paced by its acks, then fed frames; with `annotations=1`, a note of the trainer's
   * annotations (their version) after the hello and whenever they change.
   */
  open(url: URL, id: string, headers: HeadersInit): Response {
    const afterParam = url.searchParams.get("after");
    const after = afterParam === null ? null : Number(afterParam);
    if (after !== null && !(Number.isSafeInteger(after) && after >= 0)) {
      throw new RelayError("bad_after", "after must be a non-negative integer seq", "after");
    }
    const variant = parseVariant(url.searchParams);
    const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
    const decision = this.admission.admit({
      watchers: this.count(),
      waiting: this.waiting.length,
      queuedBytes: this.flows.queued,
    });
    if (!decision.ok) {
      // accepted only to be closed: not a hibernating socket (the runtime holds one closed before
      // its 101 went out for ~10 s before the client sees the close)
      server.accept();
      safeClose(server, CLOSE_TRY_LATER, retryReason(decision.reason, decision.retryMs));
    } else {
      this.ctx.acceptWebSocket(server, [WATCH_TAG]);
      this.sockets = this.count() + 1;
      this.counted.add(server);
      this.accept(server, id, variant, after, url.searchParams.get("annotations") === "1");
    }
    return new Response(null, { status: 101, webSocket: client, headers });
  }

  /** A text message from a watcher: acks pace its catch-up and the lag rule; anything else ends it. */
  message(ws: WebSocket, message: string | ArrayBuffer): void {
    // "ping" never gets here (the platform answers it)
    const m = typeof message === "string" ? parseWatcherText(message) : null;
    if (m === null) {
      safeClose(ws, CLOSE_POLICY, 'watchers send only acks ({"type":"ack","bytes":N}) and "ping"');
      this.gone(ws);
      return;
    }
    this.ack(ws, m.bytes);
  }

  /** A new watcher: hello now, then its catch-up (at once, or when a slot frees). */
  private accept(ws: WebSocket, id: string, variant: Variant, after: number | null, annotations: boolean): void {
    const attachment: WatcherAttachment = { role: "watch", id, variant, live: false, annotations };
    ws.serializeAttachment(attachment);
    this.known.set(ws, { key: variantKey(variant), variant, caughtUp: false, attachment });
    this.flows.start(ws);
    const v = this.hub.view();
    this.flows.send(ws, helloMessage(id, viewStatus(v), v.head));
    if (v.refused !== null && v.status === "live") this.flows.send(ws, statusMessage(viewStatus(v), v.head, v.refused));
    if (annotations && (v.annotations ?? 0) > 0) this.flows.send(ws, annotationsMessage(v.annotations!));
    this.waiting.push({ ws, after, ready: false });
  }

  /** The watcher acknowledged `bytes` (its count since the socket opened). */
  private ack(ws: WebSocket, bytes: number): void {
    this.flows.ack(ws, bytes);
    this.pool.retry();
    if (this.catchUps.acked(ws)) return;
    const w = this.waiting.find((x) => x.ws === ws);
    if (w && !w.ready) {
      w.ready = true;
      this.startWaiting();
    } else if (!w) this.watcherOf(ws); // a socket caught in a restart mid catch-up is closed here
  }

  /**
   * After a wake: the seq the caught-up watchers were sent everything up to in `epoch`, as their attachments say (null:
   * none says), `closing`'s included. Read once per wake, before the first feed is matched or socket dropped.
   */
  standing(epoch: number, closing?: WebSocket): number | null {
    return this.fanOut.standing(epoch, closing && { ws: closing, watcher: this.watcherOf(closing) });
  }

  /**
   * Whether `ws` is a watcher socket: known in memory, or its attachment says so (read once per wake: an ack must not
   * deserialize it each time).
   */
  isWatcher(ws: WebSocket): boolean {
    if (this.known.has(ws)) return true;
    return (ws.deserializeAttachment() as WatcherAttachment | null)?.role === "watch";
  }

  /** The socket closed or failed: free its place. */
  gone(ws: WebSocket): void {
    this.catchUps.end(ws);
    this.slots.delete(ws);
    const w = this.waiting.findIndex((x) => x.ws === ws);
    if (w >= 0) this.waiting.splice(w, 1);
    this.flows.forget(ws);
    this.pool.retry(); // what it had not acknowledged is let go: a catch-up waiting for a buffer tries again
    if (this.counted.delete(ws) && this.sockets !== null) this.sockets--;
    this.fanOut.drop(ws, this.known.get(ws));
    this.startWaiting();
  }

  /**
   * The hub starts over (a retraction took back frames, or its feed lost frames the episode no
   * longer has): every watcher gets a new hello (a client drops any snapshot it had half
   * received) and a snapshot for `reason`, paced and shared like any catch-up.
   */
  restart(reason: SnapshotReason, id: string): void {
    this.dropCatchUps();
    const v = this.hub.view();
    const hello = helloMessage(id, viewStatus(v), v.head); // the same bytes to every watcher
    for (const ws of this.ctx.getWebSockets(WATCH_TAG)) {
      const w = this.watcherOf(ws);
      if (!w || ws.readyState !== WebSocket.OPEN) continue;
      if (w.caughtUp) this.fanOut.set(ws, w, false);
      this.flows.send(ws, hello);
      this.waiting.push({ ws, after: null, ready: true, reason });
    }
    this.startWaiting();
  }

  /** Close every socket (the episode is gone, or the hub left) and drop every catch-up. */
  closeAll(code: number, reason: string): void {
    this.dropCatchUps();
    for (const ws of this.ctx.getWebSockets()) {
      safeClose(ws, code, reason);
      this.counted.delete(ws);
    }
    this.sockets = 0;
    this.flows.clear();
    this.pool.reset();
    this.fanOut.reset(true);
  }

  /** The hub left its episode (no watcher): cohorts kept for joiners go too. */
  forgetCohorts(): void {
    this.cohorts.forgetIdle();
    this.bridge.bridges?.clear();
  }

  /** Forget every catch-up, waiting watcher, cohort and queued frame. */
  private dropCatchUps(): void {
    this.catchUps.clear();
    this.slots.clear();
    this.cohorts.closeAll();
    this.waiting.length = 0;
    this.fanOut.reset();
  }

  private startWaiting(): void {
    // in arrival order; one that needs a slot or a token it cannot have now does not hold back a join behind it
    let blocked = false;
    for (let i = 0; i < this.waiting.length; ) {
      const w = this.waiting[i]!;
      if (!w.ready) {
        i++;
        continue;
      }
      if (w.ws.readyState !== WebSocket.OPEN) {
        this.waiting.splice(i, 1);
        continue;
      }
      const known = this.known.get(w.ws);
      // a join to a stream under way costs the episode nothing (the watchers of a reconnect storm
      // share one stream instead of waiting for slots and each asking for their own): no slot, no token
      const joins = known !== undefined && this.cohorts.joinable(known.variant, w.after, w.reason);
      if (!joins) {
        if (blocked || this.slots.size >= this.limits.maxCatchUps) {
          blocked = true;
          i++;
          continue;
        }
        // a resume the window serves costs the episode nothing either: it needs a slot, not a token
        const windowed =
          !w.reason && w.after !== null && w.after <= this.hub.view().head && this.hub.window.covers(w.after);
        const wait = windowed ? 0 : this.admission.take(Date.now());
        if (wait > 0) {
          this.startTimer ??= setTimeout(() => {
            this.startTimer = null;
            this.startWaiting();
          }, wait);
          blocked = true;
          i++;
          continue;
        }
      }
      this.waiting.splice(i, 1);
      this.fanOut.flush(); // frames fed before this catch-up's stream go to the caught-up watchers first
      if (!known) continue;
      if (!joins) this.slots.add(w.ws);
      this.catchUps.start(w.ws, new CatchUp(this.bridge, known.variant, w.after, w.reason));
    }
    this.catchUps.watchIdle();
  }

  /**
   * The hub was fed `frames` (consecutive, as applied): they go to the caught-up watchers, cohorts
   * age, catch-ups waiting for the head go on; then `then` (a finish or a status) goes to every
   * caught-up watcher, after the frames.
   */
  fed(frames: readonly HubFrame[], then: Uint8Array | null = null): void {
    for (const f of frames) this.cohorts.fedBytes(f.delta.length);
    this.fanOut.queue(frames);
    this.catchUps.wakeBlocked();
    if (then) this.fanOut.sendAll(then);
  }

  /** The trainer's annotations changed: every watcher that asked is told, caught up or not (a note, not state). */
  annotationsChanged(version: number): void {
    const message = annotationsMessage(version);
    for (const ws of this.ctx.getWebSockets(WATCH_TAG)) {
      if (ws.readyState !== WebSocket.OPEN || !this.watcherOf(ws)) continue;
      if ((ws.deserializeAttachment() as WatcherAttachment | null)?.annotations) this.flows.send(ws, message);
    }
  }

  /**
   * What the hub knows of the socket, read from its attachment once per wake. A socket that was
   * catching up when the hub restarted has lost its catch-up: it is closed, to reconnect.
   */
  private watcherOf(ws: WebSocket): Watcher | null {
    let s = this.known.get(ws);
    if (s) return s;
    const att = ws.deserializeAttachment() as WatcherAttachment | null;
    if (!att) return null;
    s = { key: variantKey(att.variant), variant: att.variant, caughtUp: att.live, attachment: att };
    this.known.set(ws, s);
    if (!att.live && !this.catchUps.has(ws) && !this.waiting.some((w) => w.ws === ws)) {
      safeClose(
        ws,
        CLOSE_TRY_LATER,
        "catch-up interrupted (the hub restarted): reconnect with ?after=<last seq received>",
      );
      s.caughtUp = false;
    }
    return s;
  }
}

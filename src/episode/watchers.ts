// Fan-out to hibernating watcher sockets, with a send budget.
//
// - Live watchers get every committed frame: grouped by variant, each message encoded once per
//   variant and the same bytes sent to every socket of the group. Frames ingested back to back are
//   coalesced into one message (with a thousand watchers the sends, not the bytes, are the cost).
// - A new watcher first catches up (src/episode/catchup.ts), paced by what it acknowledges: at
//   most `window` bytes unacknowledged, and at most `maxCatchUps` watchers catching up at once;
//   the others wait their turn (they have their hello). Catch-up runs on acks, in small steps:
//   ingest never waits behind it.
// - workerd has no send backpressure (no bufferedAmount), so progress is what the watcher
//   acknowledges (`{"type":"ack","bytes":N}`, see src/watch/protocol.ts). A live watcher more than
//   `lagBytes` behind is closed with 4008 and a reason; it resumes with `?after=SEQ`.
// - Per-socket state is memory only, except `live` in the attachment: after the object restarts,
//   a socket that was still catching up is closed with 1013 (its catch-up is gone) and reconnects.

import { CLOSE_POLICY, CLOSE_TOO_SLOW, CLOSE_TRY_LATER, RelayError, safeClose } from "../http/errors.js";
import { type Frame, framesMessage, helloMessage, parseWatcherText, type SnapshotReason, statusMessage } from "../watch/protocol.js";
import { deltaForVariant, parseVariant, type Variant, variantKey } from "../watch/variant.js";
import { CatchUp, type CatchUpSource, Cohort } from "./catchup.js";
import { publicStatus } from "./storage.js";

export const WATCH_TAG = "watch";
/** Sockets accepted only to be closed at once (too many watchers). */
export const REFUSED_TAG = "refused";
/** A catch-up silent this long may lose its slot to a waiting watcher. */
export const STALL_MS = 30_000;
/** A cohort member silent this long no longer holds the others back. */
export const SPLIT_MS = 5_000;
/** A catch-up's first window; it doubles with each ack up to the limit (a watcher that leaves at once costs little). */
export const FIRST_WINDOW = 512 * 1024;

export interface WatcherAttachment {
  role: "watch";
  id: string;
  variant: Variant;
  /** True once caught up (survives hibernation; catch-up state does not). */
  live: boolean;
}

/** A logged frame with the trace it belongs to (for trace-filtered variants). */
export interface AppliedFrame extends Frame {
  trace: string;
}

export interface FanOutLimits {
  /** Watchers per episode. */
  maxWatchers: number;
  /** Bytes a live watcher may be behind (sent, not acknowledged) before it is closed with 4008. */
  lagBytes: number;
  /** Bytes a catching-up watcher may have unacknowledged. */
  window: number;
  /** Watchers catching up at once. */
  maxCatchUps: number;
}

/** What was sent to a socket and what it acknowledged (bytes since the socket opened, as the watcher counts). */
interface Flow {
  sent: number;
  acked: number;
  /** The catch-up window now (grows with acks). */
  window: number;
  /** The watcher's count when this flow started (after a restart the first ack sets it). */
  base: number | null;
}

interface SocketState {
  key: string;
  variant: Variant;
  live: boolean;
}

export class Watchers {
  private readonly flows = new WeakMap<WebSocket, Flow>();
  private readonly states = new WeakMap<WebSocket, SocketState>();
  private readonly catchUps = new Map<WebSocket, CatchUp>();
  /** Snapshots being sent, by seq, reason and variant: watchers joining together share one. */
  private readonly cohorts = new Map<string, Cohort>();
  private readonly socketOf = new Map<CatchUp, WebSocket>();
  /** Catch-ups waiting for a slower member of their cohort. */
  private readonly blocked = new Set<CatchUp>();
  /** When each catch-up last made progress (started, or got an ack). */
  private readonly progress = new WeakMap<WebSocket, number>();
  /**
   * Watchers waiting for a catch-up slot, in arrival order. One starts only once it acknowledged
   * its hello (`ready`): a client that connects and leaves (a reconnect storm) costs an accept
   * and a hello, no snapshot.
   */
  private readonly waiting: Array<{ ws: WebSocket; after: number | null; ready: boolean; reason?: SnapshotReason }> = [];
  /** Frames committed but not yet sent to live watchers (coalesced into one message per variant). */
  private pending: AppliedFrame[] = [];
  private scheduled = false;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly limits: FanOutLimits,
    private readonly source: CatchUpSource,
  ) {}

  count(): number {
    return this.ctx.getWebSockets(WATCH_TAG).length;
  }

  /**
   * `GET /v1/episodes/{id}/watch[?after=SEQ&routing=0&traces=A,B]` as a WebSocket: hello at once,
   * then its catch-up (a snapshot, or the frames after `after`), paced by its acks, then live
   * frames. Past `maxWatchers`, the socket is accepted and closed 1013 (try later) with a reason.
   */
  open(url: URL, id: string): Response {
    const afterParam = url.searchParams.get("after");
    const after = afterParam === null ? null : Number(afterParam);
    if (after !== null && !(Number.isSafeInteger(after) && after >= 0)) {
      throw new RelayError("bad_after", "after must be a non-negative integer seq", "after");
    }
    const variant = parseVariant(url.searchParams);
    const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
    if (this.count() >= this.limits.maxWatchers) {
      this.ctx.acceptWebSocket(server, [REFUSED_TAG]);
      safeClose(server, CLOSE_TRY_LATER, `too many watchers (limit ${this.limits.maxWatchers}); try again later`);
    } else {
      this.ctx.acceptWebSocket(server, [WATCH_TAG]);
      this.accept(server, id, variant, after);
    }
    return new Response(null, { status: 101, webSocket: client });
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
  private accept(ws: WebSocket, id: string, variant: Variant, after: number | null): void {
    ws.serializeAttachment({ role: "watch", id, variant, live: false } satisfies WatcherAttachment);
    this.states.set(ws, { key: variantKey(variant), variant, live: false });
    this.flows.set(ws, { sent: 0, acked: 0, window: FIRST_WINDOW, base: 0 });
    const m = this.source.meta();
    this.send(ws, helloMessage(id, m ? publicStatus(m) : "new", m?.seq ?? 0));
    if (m?.refused) this.send(ws, statusMessage(publicStatus(m), m.seq, m.refused));
    this.waiting.push({ ws, after, ready: false });
  }

  /**
   * A catch-up that stopped acknowledging holds a slot others wait for: with every slot taken,
   * one silent for STALL_MS is closed (4008) so the next can start. Checked when a watcher
   * arrives, so no timer keeps the object awake.
   */
  private evictStalled(now: number): void {
    if (this.catchUps.size < this.limits.maxCatchUps) return;
    for (const ws of [...this.catchUps.keys()]) {
      if (now - (this.progress.get(ws) ?? now) < STALL_MS) continue;
      safeClose(ws, CLOSE_TOO_SLOW, `no acknowledgement for ${STALL_MS / 1000} s while catching up; resume with ?after=<last seq received>`);
      this.gone(ws);
    }
  }

  /** The watcher acknowledged `bytes` (its count since the socket opened). */
  private ack(ws: WebSocket, bytes: number): void {
    const f = this.flowOf(ws);
    if (f.base === null) f.base = bytes - f.acked; // first ack after a restart: count from here
    f.acked = Math.max(f.acked, bytes - f.base);
    if (this.catchUps.has(ws)) {
      f.window = Math.min(this.limits.window, f.window * 2);
      this.progress.set(ws, Date.now());
      this.pump(ws);
      return;
    }
    const w = this.waiting.find((x) => x.ws === ws);
    if (w && !w.ready) {
      w.ready = true;
      this.evictStalled(Date.now());
      this.startWaiting();
    } else if (!w) this.stateOf(ws); // a socket caught in a restart mid catch-up is closed here
  }

  /** The socket closed or failed: free its place. */
  gone(ws: WebSocket): void {
    const c = this.catchUps.get(ws);
    if (c) {
      const cohort = c.snapshotting;
      c.release();
      this.catchUps.delete(ws);
      this.socketOf.delete(c);
      this.blocked.delete(c);
      if (cohort) this.wakeCohort(cohort, c);
    }
    const w = this.waiting.findIndex((x) => x.ws === ws);
    if (w >= 0) this.waiting.splice(w, 1);
    this.startWaiting();
  }

  /**
   * A retraction took frames back: every watcher may hold some, so each starts over with a new
   * hello (a client drops any snapshot it had half received) and a snapshot, reason `rewind`,
   * paced and shared like any catch-up. Frames queued for the live watchers go too (the snapshot
   * covers them).
   */
  rewind(): void {
    this.dropCatchUps();
    const m = this.source.meta();
    for (const ws of this.ctx.getWebSockets(WATCH_TAG)) {
      const s = this.stateOf(ws);
      if (!s || ws.readyState !== WebSocket.OPEN) continue;
      if (s.live) setLive(ws, s, false);
      this.send(ws, helloMessage(att(ws).id, m ? publicStatus(m) : "live", m?.seq ?? 0));
      this.waiting.push({ ws, after: null, ready: true, reason: "rewind" });
    }
    this.startWaiting();
  }

  /** Close every socket (the episode is gone) and drop every catch-up. */
  closeAll(code: number, reason: string): void {
    this.dropCatchUps();
    for (const ws of this.ctx.getWebSockets()) safeClose(ws, code, reason);
  }

  /** Forget every catch-up, waiting watcher and queued frame. */
  private dropCatchUps(): void {
    for (const c of this.catchUps.values()) c.release();
    this.catchUps.clear();
    this.socketOf.clear();
    this.blocked.clear();
    this.waiting.length = 0;
    this.pending = [];
  }

  private startWaiting(): void {
    while (this.catchUps.size < this.limits.maxCatchUps) {
      const i = this.waiting.findIndex((w) => w.ready);
      if (i < 0) return;
      const { ws, after, reason } = this.waiting.splice(i, 1)[0]!;
      if (ws.readyState !== WebSocket.OPEN) continue;
      this.flush(); // frames committed before this catch-up's snapshot go to the live watchers first
      const c = new CatchUp(this.source, this.states.get(ws)!.variant, after, (seq, variant, why) => this.cohortFor(seq, variant, why), reason);
      this.catchUps.set(ws, c);
      this.socketOf.set(c, ws);
      this.progress.set(ws, Date.now());
      this.pump(ws);
    }
  }

  /** The snapshot cohort for a new catch-up: one started at the same seq for the same view, or a new one. */
  private cohortFor(seq: number, variant: Variant, reason: SnapshotReason): Cohort {
    const key = Cohort.key(seq, variant, reason);
    const have = this.cohorts.get(key);
    if (have?.joinable() && have.members.size > 0) return have;
    const c = new Cohort(this.source, seq, variant, reason, this.source.views());
    this.cohorts.set(key, c);
    return c;
  }

  /**
   * A member of `c` waits for its slowest: if that one stopped acknowledging (for SPLIT_MS), it
   * continues on a cohort of its own (rebuilding from where it is) so the others go on.
   */
  private unblock(c: Cohort, now: number): void {
    const slow = c.slowest();
    if (!slow || c.members.size < 2) return;
    const ws = this.socketOf.get(slow);
    if (ws && now - (this.progress.get(ws) ?? now) < SPLIT_MS) return;
    slow.moveTo(new Cohort(this.source, c.seq, c.variant, c.reason, c.views, c.startOf(slow.position)));
  }

  /** Send the catch-up's next messages while its window allows; make it live once caught up. */
  private pump(ws: WebSocket): void {
    const c = this.catchUps.get(ws)!;
    const f = this.flowOf(ws);
    const cohort = c.snapshotting;
    let sent = false;
    while (f.sent - f.acked < f.window) {
      let messages = c.next();
      if (messages?.length === 0) {
        // its cohort waits for a slower member
        this.unblock(cohort!, Date.now());
        messages = c.next();
      }
      if (messages === null || messages.length === 0) {
        if (messages) this.blocked.add(c);
        break;
      }
      sent = true;
      for (const m of messages) if (!this.send(ws, m)) return this.gone(ws);
      if (c.done) {
        this.catchUps.delete(ws);
        this.socketOf.delete(c);
        setLive(ws, this.states.get(ws)!, true);
        this.startWaiting();
        break;
      }
    }
    if (sent && cohort) this.wakeCohort(cohort, c);
  }

  /** Members of `cohort` that waited for `c` (it moved on, or left) may go on. */
  private wakeCohort(cohort: Cohort, c: CatchUp): void {
    for (const other of cohort.members) {
      if (other === c || !this.blocked.delete(other)) continue;
      const ows = this.socketOf.get(other);
      if (ows) this.pump(ows);
    }
  }

  /**
   * Queue `frames` (consecutive, as applied) for the live watchers. They go out from a zero-delay
   * timer, so deltas ingested back to back share one message per variant. The timer holds nothing
   * open: it fires at once.
   */
  broadcast(frames: AppliedFrame[]): void {
    if (frames.length === 0) return;
    this.pending.push(...frames);
    if (this.scheduled) return;
    this.scheduled = true;
    setTimeout(() => this.flush(), 0);
  }

  /** Send what is queued to the live watchers now. */
  flush(): void {
    this.scheduled = false;
    const frames = this.pending;
    if (frames.length === 0) return;
    this.pending = [];
    for (const { variant, sockets } of this.liveGroups()) {
      const visible: Frame[] = [];
      for (const f of frames) {
        const d = deltaForVariant(f.delta, f.trace, variant);
        if (d) visible.push({ seq: f.seq, delta: d });
      }
      if (visible.length === 0) continue;
      const message = framesMessage(visible);
      for (const ws of sockets) this.sendLive(ws, message);
    }
  }

  /** Send the same message to every live watcher (e.g. finish), after the queued frames. */
  sendAll(message: Uint8Array): void {
    this.flush();
    for (const { sockets } of this.liveGroups()) for (const ws of sockets) this.send(ws, message);
  }

  private liveGroups(): Iterable<{ variant: Variant; sockets: WebSocket[] }> {
    const groups = new Map<string, { variant: Variant; sockets: WebSocket[] }>();
    for (const ws of this.ctx.getWebSockets(WATCH_TAG)) {
      const s = this.stateOf(ws);
      if (!s?.live) continue;
      let g = groups.get(s.key);
      if (!g) groups.set(s.key, (g = { variant: s.variant, sockets: [] }));
      g.sockets.push(ws);
    }
    return groups.values();
  }

  /**
   * The socket's state, read from its attachment once per wake. A socket that was catching up
   * when the object restarted has lost its catch-up: it is closed, to reconnect.
   */
  private stateOf(ws: WebSocket): SocketState | null {
    let s = this.states.get(ws);
    if (s) return s;
    const att = ws.deserializeAttachment() as WatcherAttachment | null;
    if (!att) return null;
    s = { key: variantKey(att.variant), variant: att.variant, live: att.live };
    this.states.set(ws, s);
    if (!att.live && !this.catchUps.has(ws) && !this.waiting.some((w) => w.ws === ws)) {
      safeClose(ws, CLOSE_TRY_LATER, "catch-up interrupted (the episode restarted): reconnect with ?after=<last seq received>");
      s.live = false;
    }
    return s;
  }

  private flowOf(ws: WebSocket): Flow {
    let f = this.flows.get(ws);
    if (!f) this.flows.set(ws, (f = { sent: 0, acked: 0, window: FIRST_WINDOW, base: null }));
    return f;
  }

  /** A live send: refused (close 4008) when the watcher is too far behind. */
  private sendLive(ws: WebSocket, message: Uint8Array): void {
    const f = this.flowOf(ws);
    const behind = f.sent - f.acked + message.length;
    if (behind > this.limits.lagBytes) {
      safeClose(ws, CLOSE_TOO_SLOW, `too far behind: ${behind} bytes not acknowledged; resume with ?after=<last seq received>`);
      return;
    }
    this.send(ws, message);
  }

  private send(ws: WebSocket, message: Uint8Array): boolean {
    if (ws.readyState !== WebSocket.OPEN) return false; // closing or closed: skip the ghost
    try {
      ws.send(message);
    } catch {
      return false; // the socket went away between listing and sending
    }
    this.flowOf(ws).sent += message.length;
    return true;
  }
}

function att(ws: WebSocket): WatcherAttachment {
  return ws.deserializeAttachment() as WatcherAttachment;
}

/** Mark the socket live or not, in memory and in its attachment (which survives hibernation). */
function setLive(ws: WebSocket, s: SocketState, live: boolean): void {
  s.live = live;
  ws.serializeAttachment({ ...att(ws), live } satisfies WatcherAttachment);
}

// A hub's catch-ups under way (src/objects/hub/watchers.ts starts them when a slot is free). Each sends
// its watcher the next messages of its stream (src/protocol/hub/catchup.ts) while the watcher's window
// allows (src/objects/hub/fan-out.ts), and goes on with each ack. Members of a cohort wait for its slowest
// member; a catch-up that waits for its stream, or for the hub's feed, goes on when that moves.
// Caught up, the watcher gets caught_up (and finish if the run ended) and joins the fan-out.
// - A catching-up watcher that stops acknowledging what it was sent is closed 4008 (after IDLE_MS,
//   which lets go of its stream so the hub can hibernate; after SPLIT_MS when it holds back its
//   cohort); it reconnects.

import { CLOSE_TOO_SLOW, CLOSE_TRY_LATER, safeClose } from "../../protocol/http/errors.js";
import type { CatchUp, Cohort } from "../../protocol/hub/catchup.js";
import { type HubView, viewEnded } from "../../protocol/hub/feed.js";
import type { MessagePool } from "../../protocol/hub/message-pool.js";
import { caughtUpMessage, finishMessage } from "../../protocol/watch/protocol.js";
import type { FanOut, Flows } from "./fan-out.js";

/** A catch-up with bytes unacknowledged this long is closed (its slot and its stream are let go). */
export const IDLE_MS = 10_000;
/** A cohort member silent this long no longer holds the others back: it is closed, to resume. */
const SPLIT_MS = 5_000;

/** What the catch-ups hand back to the hub's watchers. */
interface CatchUpEnds {
  /** The socket was closed (or failed): its place is freed. */
  gone(ws: WebSocket): void;
  /** The catch-up is over and the caught_up message sent: the watcher joins the fan-out, a slot is free. */
  caughtUp(ws: WebSocket): void;
}

export class RunningCatchUps {
  private readonly catchUps = new Map<WebSocket, CatchUp>();
  private readonly socketOf = new Map<CatchUp, WebSocket>();
  /** Catch-ups waiting for their stream, a slower member of their cohort, or the hub's feed. */
  private readonly blocked = new Set<CatchUp>();
  /** When each catch-up last made progress (started, or got an ack). */
  private readonly progress = new WeakMap<WebSocket, number>();
  /** A timer that closes idle catch-ups (only while some run). */
  private idleTimer: ReturnType<typeof setTimeout> | null = null;
  /** caught_up (and finish) for the view they were built for: the same bytes to every watcher caught up at it. */
  private ending: { key: string; caughtUp: Uint8Array; finish: Uint8Array | null } | null = null;

  constructor(
    private readonly flows: Flows,
    private readonly fanOut: FanOut,
    /** What the hub's watchers read of it (src/objects/hub/watchers.ts `HubSource`). */
    private readonly hub: { view(): HubView; reply(): Uint8Array | null },
    /** Bytes a catching-up watcher may have unacknowledged. */
    private readonly window: number,
    private readonly ends: CatchUpEnds,
    /** The buffers catch-up messages are read into: each send holds its buffer until acknowledged. */
    private readonly pool: MessagePool,
  ) {}

  get size(): number {
    return this.catchUps.size;
  }

  has(ws: WebSocket): boolean {
    return this.catchUps.has(ws);
  }

  /** Start `c` for `ws`: it sends what its window allows now. */
  start(ws: WebSocket, c: CatchUp): void {
    this.catchUps.set(ws, c);
    this.socketOf.set(c, ws);
    this.progress.set(ws, Date.now());
    this.pump(ws);
  }

  /** The watcher acknowledged: its catch-up, if it has one, goes on (false: it has none). */
  acked(ws: WebSocket): boolean {
    if (!this.catchUps.has(ws)) return false;
    this.flows.grow(ws, this.window);
    this.progress.set(ws, Date.now());
    this.pump(ws);
    return true;
  }

  /** The socket is gone: its catch-up, if any, lets go of its stream; members that waited for it go on. */
  end(ws: WebSocket): void {
    const c = this.catchUps.get(ws);
    if (!c) return;
    const cohort = c.snapshotting;
    c.release();
    this.catchUps.delete(ws);
    this.socketOf.delete(c);
    this.blocked.delete(c);
    if (cohort) this.wakeCohort(cohort, c);
  }

  /** Drop every catch-up (the hub starts over, or closes). */
  clear(): void {
    for (const c of this.catchUps.values()) c.release();
    this.catchUps.clear();
    this.socketOf.clear();
    this.blocked.clear();
    this.ending = null;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  /**
   * A catch-up that stopped acknowledging what it was sent holds a slot, its stream's pins at the
   * episode, and keeps the hub awake: after IDLE_MS it is closed (4008; it reconnects). Checked
   * by a timer that runs only while catch-ups do.
   */
  watchIdle(): void {
    if (this.idleTimer || this.catchUps.size === 0) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      const now = Date.now();
      for (const ws of [...this.catchUps.keys()]) {
        if (this.flows.behind(ws) === 0 || now - (this.progress.get(ws) ?? now) < IDLE_MS) continue;
        safeClose(
          ws,
          CLOSE_TOO_SLOW,
          `no acknowledgement for ${IDLE_MS / 1000} s while catching up; reconnect to resume`,
        );
        this.ends.gone(ws);
      }
      this.watchIdle();
    }, IDLE_MS / 2);
  }

  /** A cohort's stream moved (a message arrived, it ended or failed): its waiting members go on. */
  wakeMembers(cohort: Cohort): void {
    for (const m of [...cohort.members]) {
      if (!this.blocked.has(m)) continue;
      const ws = this.socketOf.get(m);
      if (ws) this.pump(ws);
    }
  }

  /** The feed moved the hub's head: catch-ups waiting for it go on. */
  wakeBlocked(): void {
    for (const c of [...this.blocked]) {
      if (c.snapshotting) continue; // waiting for its stream, not for the feed
      const ws = this.socketOf.get(c);
      if (ws) this.pump(ws);
    }
  }

  /**
   * A member of `c` waits for its slowest: if that one stopped acknowledging (for SPLIT_MS), it is
   * closed (4008: it resumes on its own) so the others go on.
   */
  private unblock(c: Cohort, now: number): void {
    const slow = c.slowest();
    if (!slow || c.members.size < 2) return;
    const ws = this.socketOf.get(slow);
    if (!ws || now - (this.progress.get(ws) ?? now) < SPLIT_MS) return;
    safeClose(
      ws,
      CLOSE_TOO_SLOW,
      `no acknowledgement for ${SPLIT_MS / 1000} s while others catch up with it; reconnect to resume`,
    );
    this.ends.gone(ws);
  }

  /** Send the catch-up's next messages while its window allows; hand it to the fan-out once caught up. */
  private pump(ws: WebSocket): void {
    const c = this.catchUps.get(ws);
    if (!c) return;
    const cohort = c.snapshotting;
    let sent = false;
    this.blocked.delete(c);
    try {
      while (this.flows.hasRoom(ws)) {
        let messages = c.next();
        if (messages === "wait" && c.snapshotting) {
          this.unblock(c.snapshotting, Date.now());
          if (!this.catchUps.has(ws)) return; // it was the slow one
          messages = c.next();
        }
        if (messages === "wait") {
          this.blocked.add(c);
          break;
        }
        if (messages === "done") {
          this.caughtUp(ws, c);
          break;
        }
        sent = true;
        const f = this.flows.flow(ws);
        for (const m of messages) {
          if (!this.flows.sendOn(ws, f, m)) return this.ends.gone(ws);
          this.pool.hold(m, f, f.sent);
        }
      }
    } catch (e) {
      // the stream from the episode broke (it restarted): the watcher reconnects and resumes
      console.warn("hub: catch-up stream failed", e);
      safeClose(
        ws,
        CLOSE_TRY_LATER,
        "catch-up interrupted (the episode restarted): reconnect with ?after=<last seq received>",
      );
      this.ends.gone(ws);
      return;
    }
    if (sent && cohort) this.wakeCohort(cohort, c);
  }

  /** Everything up to the hub's head was sent: caught_up (and finish if the run ended), then the fan-out. */
  private caughtUp(ws: WebSocket, c: CatchUp): void {
    // frames fed but not yet broadcast are in what this watcher got: they go to the others first
    this.fanOut.flush();
    const v = this.hub.view();
    this.catchUps.delete(ws);
    this.socketOf.delete(c);
    c.release();
    const end = this.endingFor(v);
    this.flows.send(ws, end.caughtUp);
    if (end.finish) this.flows.send(ws, end.finish);
    this.ends.caughtUp(ws);
  }

  /**
   * The messages that end a catch-up at view `v`, built once per view (finish carries the reply, read from storage).
   */
  private endingFor(v: HubView): { caughtUp: Uint8Array; finish: Uint8Array | null } {
    const key = `${v.head}|${v.epoch}|${v.status}|${v.error ?? ""}`;
    if (this.ending?.key !== key) {
      const finish = viewEnded(v)
        ? finishMessage(v.status, v.head, this.hub.reply() ?? new Uint8Array(0), v.error)
        : null;
      this.ending = { key, caughtUp: caughtUpMessage(v.head), finish };
    }
    return this.ending;
  }

  /** Members of `cohort` that waited for `c` (it moved on, or left) may go on. */
  private wakeCohort(cohort: Cohort, c: CatchUp): void {
    for (const other of cohort.members) {
      if (other === c || !this.blocked.has(other)) continue;
      const ows = this.socketOf.get(other);
      if (ows) this.pump(ows);
    }
  }
}

// What a hub sends its watchers and what they acknowledged, and the fan-out of fed frames to the
// watchers that are caught up.
//
// - workerd has no send backpressure (no bufferedAmount): a watcher's progress is what it
//   acknowledges (`{"type":"ack","bytes":N}`, N its count of binary bytes since the socket opened),
//   so sends are paced and bounded by it (`Flows`). The hub's total of bytes sent and not
//   acknowledged bounds newcomers (src/protocol/hub/admission.ts). Memory only: after a wake, a
//   socket's first ack sets where it counts from.
// - Frames fed to the hub go to every caught-up watcher (`FanOut`): grouped by variant, each
//   message encoded once per variant and the same bytes sent to every socket of the group. Feeds
//   that arrive back to back are coalesced, up to FANOUT_MESSAGE_BYTES a message
//   (src/protocol/hub/frames.ts: with thousands of watchers the sends are the hub's cost; a large
//   frame goes alone). A caught-up watcher more than `lagBytes` behind its acknowledgements is
//   closed with 4008; it resumes with `?after=SEQ`. Which sockets are caught up is in their
//   attachments (it survives hibernation, and a deploy that keeps the sockets) and, once read after
//   a wake, kept in memory. Where they stand (the seq all of them were sent everything up to) is
//   written in the attachment of one of them, the keeper, per flush (one write, not one per socket:
//   at 150 watchers a write each was most of a flush); a socket says it too when it catches up. A
//   woken hub resumes its feed from the largest of them (`standing`), so its own row is not written
//   per feed (src/objects/hub/store.ts). The keeper's place passes to another caught-up socket when
//   it goes.

import { CLOSE_TOO_SLOW, safeClose } from "../../protocol/http/errors.js";
import { type HubFrame, messageRuns, variantMessage } from "../../protocol/hub/frames.js";
import type { Variant } from "../../protocol/watch/variant.js";

/** A catch-up's first window; it doubles with each ack up to the limit (a watcher that leaves at once costs little). */
export const FIRST_WINDOW = 512 * 1024;

/** WebSocket.OPEN (a constant: reading it off the runtime's class on every send costs a lookup). */
const OPEN = 1;

interface Flow {
  sent: number;
  acked: number;
  /** The catch-up window now (grows with acks). */
  window: number;
  /** The watcher's count when this flow started (after a wake the first ack sets it). */
  base: number | null;
  /** The socket is gone (what it did not acknowledge may still be written from). */
  gone?: boolean;
}

export class Flows {
  private readonly flows = new WeakMap<WebSocket, Flow>();
  /** Bytes sent and not yet acknowledged, all sockets together. */
  queued = 0;

  /** A new socket: it counts from 0. */
  start(ws: WebSocket): void {
    this.flows.set(ws, { sent: 0, acked: 0, window: FIRST_WINDOW, base: 0 });
  }

  /**
   * The socket's flow record, for callers that send to it often (the fan-out keeps it beside the
   * socket: a lookup keyed by a runtime object, per send to a thousand sockets, costs more than
   * the send). Valid until `forget`.
   */
  flow(ws: WebSocket): Flow {
    let f = this.flows.get(ws);
    if (!f) this.flows.set(ws, (f = { sent: 0, acked: 0, window: FIRST_WINDOW, base: null }));
    return f;
  }

  /** Send on a socket that may be closing (then nothing is sent, false); counts what was sent. */
  send(ws: WebSocket, message: Uint8Array): boolean {
    return this.sendOn(ws, this.flow(ws), message);
  }

  /** `send` with the socket's flow record at hand (see `flow`). */
  sendOn(ws: WebSocket, f: Flow, message: Uint8Array): boolean {
    if (ws.readyState !== OPEN) return false; // closing or closed: skip the ghost
    try {
      ws.send(message);
    } catch {
      return false; // the socket went away between listing and sending
    }
    f.sent += message.length;
    this.queued += message.length;
    return true;
  }

  /** The watcher acknowledged `bytes` (its count since the socket opened). */
  ack(ws: WebSocket, bytes: number): void {
    const f = this.flow(ws);
    if (f.base === null) f.base = bytes - f.acked; // first ack after a wake: count from here
    const acked = Math.max(f.acked, Math.min(f.sent, bytes - f.base));
    this.queued -= acked - f.acked;
    f.acked = acked;
  }

  /** Bytes sent to `ws` and not acknowledged. */
  behind(ws: WebSocket): number {
    const f = this.flow(ws);
    return f.sent - f.acked;
  }

  /** Whether a catch-up may send `ws` more now (less than its window unacknowledged). */
  hasRoom(ws: WebSocket): boolean {
    const f = this.flow(ws);
    return f.sent - f.acked < f.window;
  }

  /** A catching-up watcher acknowledged: its window doubles, up to `limit`. */
  grow(ws: WebSocket, limit: number): void {
    const f = this.flow(ws);
    f.window = Math.min(limit, f.window * 2);
  }

  /** The socket is gone: what it had not acknowledged no longer counts. */
  forget(ws: WebSocket): void {
    const f = this.flows.get(ws);
    if (!f) return;
    this.queued -= f.sent - f.acked;
    f.gone = true;
    this.flows.delete(ws);
  }

  /** Every socket closed. */
  clear(): void {
    this.queued = 0;
  }
}

/** What a hub knows of a watcher socket (memory; read back from its attachment after a wake). */
export interface Watcher {
  /** Its variant's key (the fan-out's group). */
  key: string;
  variant: Variant;
  caughtUp: boolean;
  /** Its attachment as last written (rewritten as it moves, never read back while the hub is awake). */
  attachment: WatcherAttachment;
}

export interface WatcherAttachment {
  role: "watch";
  id: string;
  variant: Variant;
  /**
   * True once caught up (survives hibernation; catch-up state does not). Named `live` by the
   * releases that stored it: hibernated sockets carry the key across a deploy.
   */
  live: boolean;
  /** It asked to hear of the trainer's annotations (`?annotations=1`); absent on sockets older releases accepted. */
  annotations?: boolean;
  /**
   * Caught up: every frame up to this seq of `epoch` was sent to it (written when it caught up, and per flush on the
   * keeper's: `FanOut`). Absent on sockets older releases accepted: their hub's row held the head.
   */
  seq?: number;
  epoch?: number;
}

/** Where the hub's caught-up watchers stand: its view's head and epoch. */
type Standing = { head: number; epoch: number };

/** A caught-up socket of a group: its flow and what the hub knows of it (looked up once, not per send). */
type Member = { flow: Flow; watcher: Watcher };

/** Caught-up sockets of one variant, each with its flow record (looked up once, not per send). */
type Group = { variant: Variant; sockets: Map<WebSocket, Member> };

export class FanOut {
  /** Caught-up sockets by variant key (null until read from the attachments after a wake). */
  private caughtUp: Map<string, Group> | null = null;
  /** Frames fed but not yet sent (coalesced into one message per variant). */
  private pending: HubFrame[] = [];
  private scheduled = false;
  /**
   * The caught-up socket whose attachment is written where they all stand, per flush (null: none chosen since the
   * hub woke, or it went).
   */
  private keeper: { ws: WebSocket; watcher: Watcher } | null = null;
  /** Attachments written since the hub woke (for benches and tests: the flush's cost in the runtime). */
  written = 0;

  constructor(
    private readonly flows: Flows,
    private readonly lagBytes: number,
    /** Every watcher socket with what the hub knows of it (read once per wake). */
    private readonly sockets: () => Iterable<{ ws: WebSocket; watcher: Watcher | null }>,
    /** The hub's head and epoch now (every frame queued is at or below the head). */
    private readonly view: () => Standing,
  ) {}

  /**
   * Queue fed `frames` (consecutive, as applied). They go out from a zero-delay timer, so feeds
   * arriving back to back share one message per variant.
   */
  queue(frames: readonly HubFrame[]): void {
    if (frames.length === 0) return;
    this.pending.push(...frames);
    if (this.scheduled) return;
    this.scheduled = true;
    setTimeout(() => this.flush(), 0);
  }

  /** Send what is queued now. */
  flush(): void {
    this.scheduled = false;
    const frames = this.pending;
    if (frames.length === 0) return;
    this.pending = [];
    const runs = messageRuns(frames);
    for (const { variant, sockets } of this.groups()) {
      if (sockets.size === 0) continue;
      for (const run of runs) {
        const message = variantMessage(run, variant);
        if (message) this.sendGroup(sockets, message);
      }
    }
    // every caught-up socket now stands at the head, sent something or not (a variant may filter every frame)
    this.keep();
  }

  /** One message to a variant's caught-up sockets, with the lag rule inline (a thousand sockets per message). */
  private sendGroup(sockets: Map<WebSocket, Member>, message: Uint8Array): void {
    // refused once it would pass lagBytes
    const n = message.length;
    const limit = this.lagBytes - n;
    for (const [ws, { flow }] of sockets) {
      if (flow.sent - flow.acked > limit) this.tooSlow(ws, flow.sent - flow.acked + n);
      else this.flows.sendOn(ws, flow, message);
    }
  }

  /** The same message to every caught-up watcher (e.g. finish), after the queued frames. */
  sendAll(message: Uint8Array): void {
    this.flush();
    for (const { sockets } of this.groups()) for (const [ws, { flow }] of sockets) this.flows.sendOn(ws, flow, message);
  }

  /** Mark the socket caught up (at the hub's head: queued frames went out first) or not, in memory and in its attachment. */
  set(ws: WebSocket, w: Watcher, caughtUp: boolean): void {
    w.caughtUp = caughtUp;
    w.attachment = { ...w.attachment, live: caughtUp };
    if (caughtUp) this.stand(ws, w, this.view(), true);
    else this.write(ws, w.attachment);
    if (caughtUp) {
      if (this.caughtUp) this.group(w).sockets.set(ws, { flow: this.flows.flow(ws), watcher: w });
    } else {
      this.caughtUp?.get(w.key)?.sockets.delete(ws);
      this.handOver(ws);
    }
  }

  /**
   * The seq a woken hub's caught-up watchers were sent everything up to, in `epoch` (their attachments; and that of
   * `closing`, a socket whose close woke the hub, which may have kept it), or null when none says (none caught up, or
   * all accepted by an older release).
   */
  standing(epoch: number, closing?: { ws: WebSocket; watcher: Watcher | null }): number | null {
    let head: number | null = null;
    const sockets = this.sockets();
    for (const { watcher } of closing ? [...sockets, closing] : sockets) {
      const a = watcher?.caughtUp ? watcher.attachment : null;
      if (a?.seq !== undefined && a.epoch === epoch && (head === null || a.seq > head)) head = a.seq;
    }
    return head;
  }

  /**
   * Every caught-up socket was sent everything up to the hub's head: the keeper says so (a new one is chosen when it
   * is gone or no longer caught up).
   */
  private keep(): void {
    let k = this.keeper;
    if (!k?.watcher.caughtUp || k.ws.readyState !== OPEN) k = this.keeper = this.choose();
    if (k) this.stand(k.ws, k.watcher, this.view());
  }

  /** An open caught-up socket, to keep the standing (null: none). */
  private choose(): { ws: WebSocket; watcher: Watcher } | null {
    for (const { sockets } of this.groups())
      for (const [ws, m] of sockets) if (ws.readyState === OPEN) return { ws, watcher: m.watcher };
    return null;
  }

  /**
   * `ws` no longer stands with the caught-up watchers: if it kept their standing (or none is known to since the hub
   * woke), another does now. With frames queued, the flush that sends them does it.
   */
  private handOver(ws: WebSocket): void {
    if (this.keeper !== null && this.keeper.ws !== ws) return;
    this.keeper = null;
    if (this.pending.length === 0) this.keep();
  }

  /** The socket was sent everything up to `at`: said in its attachment (unless it says so already). */
  private stand(ws: WebSocket, w: Watcher, at: Standing, force = false): void {
    const a = w.attachment;
    if (!force && a.seq === at.head && a.epoch === at.epoch) return;
    a.seq = at.head;
    a.epoch = at.epoch;
    this.write(ws, a);
  }

  private write(ws: WebSocket, a: WatcherAttachment): void {
    this.written++;
    try {
      ws.serializeAttachment(a);
    } catch {
      // the socket went away (its close event follows)
    }
  }

  /** The socket is gone. */
  drop(ws: WebSocket, w: Watcher | undefined): void {
    if (!w?.caughtUp) return;
    this.groups(); // (read after a wake first: the socket may still be listed, and must not keep the standing)
    this.caughtUp!.get(w.key)?.sockets.delete(ws);
    this.handOver(ws);
  }

  /** Frames not yet sent are dropped (the watchers start over); after closeAll, nobody is caught up. */
  reset(empty = false): void {
    this.pending = [];
    if (!empty) return;
    this.caughtUp = new Map();
    this.keeper = null;
  }

  private groups(): Iterable<Group> {
    if (!this.caughtUp) {
      this.caughtUp = new Map();
      for (const { ws, watcher } of this.sockets())
        if (watcher?.caughtUp && ws.readyState === WebSocket.OPEN)
          this.group(watcher).sockets.set(ws, { flow: this.flows.flow(ws), watcher });
    }
    return this.caughtUp.values();
  }

  private group(w: Watcher): Group {
    let g = this.caughtUp!.get(w.key);
    if (!g) this.caughtUp!.set(w.key, (g = { variant: w.variant, sockets: new Map() }));
    return g;
  }

  /** A caught-up watcher too far behind its acknowledgements: closed 4008 (it resumes with ?after=). */
  private tooSlow(ws: WebSocket, behind: number): void {
    safeClose(
      ws,
      CLOSE_TOO_SLOW,
      `too far behind: ${behind} bytes not acknowledged; resume with ?after=<last seq received>`,
    );
  }
}

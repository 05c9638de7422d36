// A hub's live watchers and its fan-out. Frames fed to the hub go to every live watcher: grouped
// by variant, each message encoded once per variant and the same bytes sent to every socket of
// the group. Feeds that arrive back to back are coalesced, up to LIVE_MESSAGE_BYTES a message
// (src/protocol/hub/feed.ts: with thousands of watchers the sends are the hub's cost; a large
// frame goes alone). A live watcher more than `lagBytes` behind its acknowledgements is closed
// with 4008; it resumes with `?after=SEQ`. Which sockets are live is in their attachments (it
// survives hibernation) and, once read after a wake, kept in memory.

import { CLOSE_TOO_SLOW, safeClose } from "../../protocol/http/errors.js";
import { type HubFrame, messageRuns, variantMessage } from "../../protocol/hub/feed.js";
import type { Variant } from "../../protocol/watch/variant.js";
import type { Flow, Flows } from "./flows.js";

/** What a hub knows of a watcher socket. */
export interface SocketState {
  key: string;
  variant: Variant;
  live: boolean;
}

export interface WatcherAttachment {
  role: "watch";
  id: string;
  variant: Variant;
  /** True once caught up (survives hibernation; catch-up state does not). */
  live: boolean;
  /** It asked to hear of the trainer's annotations (`?annotations=1`); absent on sockets older releases accepted. */
  annotations?: boolean;
}

/** Live sockets of one variant, each with its flow record (looked up once, not per send). */
type Group = { variant: Variant; sockets: Map<WebSocket, Flow> };

export class LiveFanOut {
  /** Live sockets by variant key (null until read from the attachments after a wake). */
  private live: Map<string, Group> | null = null;
  /** Frames fed but not yet sent (coalesced into one message per variant). */
  private pending: HubFrame[] = [];
  private scheduled = false;

  constructor(
    private readonly flows: Flows,
    private readonly lagBytes: number,
    /** Every watcher socket with its state (read once per wake). */
    private readonly sockets: () => Iterable<{ ws: WebSocket; state: SocketState | null }>,
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
  }

  /** One message to a variant's live sockets, with the lag rule inline (a thousand sockets per message). */
  private sendGroup(sockets: Map<WebSocket, Flow>, message: Uint8Array): void {
    // refused once it would pass lagBytes
    const n = message.length;
    const limit = this.lagBytes - n;
    for (const [ws, flow] of sockets) {
      if (flow.sent - flow.acked > limit) this.tooSlow(ws, flow.sent - flow.acked + n);
      else this.flows.sendOn(ws, flow, message);
    }
  }

  /** The same message to every live watcher (e.g. finish), after the queued frames. */
  sendAll(message: Uint8Array): void {
    this.flush();
    for (const { sockets } of this.groups()) for (const [ws, flow] of sockets) this.flows.sendOn(ws, flow, message);
  }

  /** Mark the socket live or not, in memory and in its attachment. */
  set(ws: WebSocket, s: SocketState, live: boolean): void {
    s.live = live;
    ws.serializeAttachment({ ...(ws.deserializeAttachment() as WatcherAttachment), live } satisfies WatcherAttachment);
    if (!this.live) return;
    if (live) this.group(s).sockets.set(ws, this.flows.flow(ws));
    else this.live.get(s.key)?.sockets.delete(ws);
  }

  /** The socket is gone. */
  drop(ws: WebSocket, s: SocketState | undefined): void {
    if (s) this.live?.get(s.key)?.sockets.delete(ws);
  }

  /** Frames not yet sent are dropped (the watchers start over); after closeAll, nobody is live. */
  reset(empty = false): void {
    this.pending = [];
    if (empty) this.live = new Map();
  }

  private groups(): Iterable<Group> {
    if (!this.live) {
      this.live = new Map();
      for (const { ws, state } of this.sockets())
        if (state?.live && ws.readyState === WebSocket.OPEN) this.group(state).sockets.set(ws, this.flows.flow(ws));
    }
    return this.live.values();
  }

  private group(s: SocketState): Group {
    let g = this.live!.get(s.key);
    if (!g) this.live!.set(s.key, (g = { variant: s.variant, sockets: new Map() }));
    return g;
  }

  /** A live watcher too far behind its acknowledgements: closed 4008 (it resumes with ?after=). */
  private tooSlow(ws: WebSocket, behind: number): void {
    safeClose(
      ws,
      CLOSE_TOO_SLOW,
      `too far behind: ${behind} bytes not acknowledged; resume with ?after=<last seq received>`,
    );
  }
}

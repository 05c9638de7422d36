// Fan-out to hibernating watcher sockets: group by variant, encode each message once per
// variant, send the same bytes to every socket of the group.
//
// Slow watchers: workerd does not expose a socket's send buffer (no `bufferedAmount`), so the
// relay measures progress by pings: a watcher pings ("ping" → "pong", answered by the platform
// without waking the object) at least every few seconds and after every few MiB it received.
// A socket that has been sent more than `lagBytes` since its last ping is closed with 4008 and
// a reason; the client resumes with `?after=SEQ` and loses nothing. Closing or closed sockets
// are skipped.

import { framesMessage, type Frame } from "../watch/protocol.js";
import { deltaForVariant, variantKey, type Variant } from "../watch/variant.js";

export const WATCH_TAG = "watch";
export const CLOSE_TOO_SLOW = 4008;
export const CLOSE_TOO_MANY = 1013;
export const CLOSE_READ_ONLY = 1008;

export interface WatcherAttachment {
  role: "watch";
  id: string;
  variant: Variant;
}

/** A logged frame with the trace it belongs to (for trace-filtered variants). */
export interface AppliedFrame extends Frame {
  trace: string;
}

/** Per-socket lag accounting (memory only: after a wake every socket starts afresh). */
interface Lag {
  /** Time of the last ping seen. */
  mark: number;
  /** Bytes sent since. */
  bytes: number;
}

export class Watchers {
  private readonly lag = new WeakMap<WebSocket, Lag>();
  /** Each socket's variant key, read from its attachment once per wake (not once per frame). */
  private readonly variants = new WeakMap<WebSocket, { key: string; variant: Variant } | null>();

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly lagBytes: number,
  ) {}

  count(): number {
    return this.ctx.getWebSockets(WATCH_TAG).length;
  }

  /** Frames committed but not yet sent (coalesced into one message per variant). */
  private pending: AppliedFrame[] = [];
  private scheduled = false;

  /**
   * Queue `frames` (consecutive, as applied) for every watcher. They go out from a zero-delay
   * timer, so deltas ingested back to back (a pipelining producer) share one message per
   * variant: with a thousand watchers the sends, not the bytes, are the cost. The timer holds
   * nothing open: it fires at once.
   */
  broadcast(frames: AppliedFrame[]): void {
    if (frames.length === 0) return;
    this.pending.push(...frames);
    if (this.scheduled) return;
    this.scheduled = true;
    setTimeout(() => this.flush(), 0);
  }

  /** Send what is queued now; `except` (a socket being caught up past these frames) is skipped. */
  flush(except?: WebSocket): void {
    this.scheduled = false;
    const frames = this.pending;
    if (frames.length === 0) return;
    this.pending = [];
    const byVariant = new Map<string, { variant: Variant; sockets: WebSocket[] }>();
    for (const ws of this.ctx.getWebSockets(WATCH_TAG)) {
      if (ws === except) continue;
      const v = this.variantOf(ws);
      if (!v) continue;
      let g = byVariant.get(v.key);
      if (!g) byVariant.set(v.key, (g = { variant: v.variant, sockets: [] }));
      g.sockets.push(ws);
    }
    for (const { variant, sockets } of byVariant.values()) {
      const visible: Frame[] = [];
      for (const f of frames) {
        const d = deltaForVariant(f.delta, f.trace, variant);
        if (d) visible.push({ seq: f.seq, delta: d });
      }
      if (visible.length === 0) continue;
      const message = framesMessage(visible);
      for (const ws of sockets) this.send(ws, message);
    }
  }

  private variantOf(ws: WebSocket): { key: string; variant: Variant } | null {
    let v = this.variants.get(ws);
    if (v === undefined) {
      const att = ws.deserializeAttachment() as WatcherAttachment | null;
      v = att ? { key: variantKey(att.variant), variant: att.variant } : null;
      this.variants.set(ws, v);
    }
    return v;
  }

  /** Send the same message to every watcher (e.g. finish), after the queued frames. */
  sendAll(message: Uint8Array): void {
    this.flush();
    for (const ws of this.ctx.getWebSockets(WATCH_TAG)) trySend(ws, message);
  }

  /**
   * Catch-up messages for one new watcher (built from storage, so they include the queued
   * frames: those go to everyone else first); its lag accounting starts after them.
   */
  catchUp(ws: WebSocket, messages: Uint8Array[]): void {
    this.flush(ws);
    for (const m of messages) if (!trySend(ws, m)) return;
    this.lag.set(ws, { mark: this.lastPing(ws), bytes: 0 });
  }

  private lastPing(ws: WebSocket): number {
    return this.ctx.getWebSocketAutoResponseTimestamp(ws)?.getTime() ?? 0;
  }

  private send(ws: WebSocket, message: Uint8Array): void {
    if (ws.readyState !== 1) return; // closing or closed: skip the ghost
    const pinged = this.lastPing(ws);
    let lag = this.lag.get(ws);
    if (!lag) this.lag.set(ws, (lag = { mark: pinged, bytes: 0 }));
    if (pinged > lag.mark) {
      lag.mark = pinged; // a ping newer than the last one seen: the watcher is keeping up
      lag.bytes = 0;
    }
    lag.bytes += message.length;
    if (lag.bytes > this.lagBytes) {
      try {
        ws.close(CLOSE_TOO_SLOW, `too far behind: no ping for ${lag.bytes} bytes; resume with ?after=<last seq received>`);
      } catch {
        // already closing
      }
      return;
    }
    trySend(ws, message);
  }
}

function trySend(ws: WebSocket, message: Uint8Array): boolean {
  try {
    ws.send(message);
    return true;
  } catch {
    return false; // the socket went away between listing and sending
  }
}

// What a hub sent to each watcher and what the watcher acknowledged. workerd has no send
// backpressure (no bufferedAmount): a watcher's progress is what it acknowledges
// (`{"type":"ack","bytes":N}`, N its count of binary bytes since the socket opened), so sends are
// paced and bounded by it. The hub's total of bytes sent and not acknowledged bounds newcomers
// (src/protocol/hub/admission.ts). Memory only: after a wake, a socket's first ack sets where it counts from.

/** A catch-up's first window; it doubles with each ack up to the limit (a watcher that leaves at once costs little). */
export const FIRST_WINDOW = 512 * 1024;

/** WebSocket.OPEN (a constant: reading it off the runtime's class on every send costs a lookup). */
const OPEN = 1;

export interface Flow {
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

  private of(ws: WebSocket): Flow {
    let f = this.flows.get(ws);
    if (!f) this.flows.set(ws, (f = { sent: 0, acked: 0, window: FIRST_WINDOW, base: null }));
    return f;
  }

  /**
   * The socket's flow record, for callers that send to it often (the live fan-out keeps it beside
   * the socket: a lookup keyed by a runtime object, per send to a thousand sockets, costs more
   * than the send). Valid until `forget`.
   */
  flow(ws: WebSocket): Flow {
    return this.of(ws);
  }

  /** Send on a socket that may be closing (then nothing is sent, false); counts what was sent. */
  send(ws: WebSocket, message: Uint8Array): boolean {
    return this.sendOn(ws, this.of(ws), message);
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
    const f = this.of(ws);
    if (f.base === null) f.base = bytes - f.acked; // first ack after a wake: count from here
    const acked = Math.max(f.acked, Math.min(f.sent, bytes - f.base));
    this.queued -= acked - f.acked;
    f.acked = acked;
  }

  /** Bytes sent to `ws` and not acknowledged. */
  behind(ws: WebSocket): number {
    const f = this.of(ws);
    return f.sent - f.acked;
  }

  /** Whether a catch-up may send `ws` more now (less than its window unacknowledged). */
  hasRoom(ws: WebSocket): boolean {
    const f = this.of(ws);
    return f.sent - f.acked < f.window;
  }

  /** A catching-up watcher acknowledged: its window doubles, up to `limit`. */
  grow(ws: WebSocket, limit: number): void {
    const f = this.of(ws);
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

// A catch-up stream handed to a viewer hub over RPC: an RpcTarget the hub pulls one message at a
// time (src/protocol/hub/catchup.ts), so nothing is built before the hub's watchers can take it. Each
// cursor holds its stream's pins; it lets go when the hub closes it, drops it, or leaves it idle
// for CURSOR_IDLE_MS (a hub that vanished never says so), and once a retraction took back what it
// read it answers `rewound`.

import { RpcTarget } from "cloudflare:workers";
import type { CursorStep } from "../../protocol/hub/feed.js";
import type { CatchUp } from "./catchup.js";

/** A cursor nobody pulled for this long is closed (checked when another opens). */
export const CURSOR_IDLE_MS = 120_000;

export class CatchUpCursor extends RpcTarget {
  private used = Date.now();
  private closed = false;
  /** A retraction took back what the stream read: its pins are let go, `next` says so. */
  private rewound = false;

  constructor(
    private readonly stream: CatchUp,
    private readonly open: Set<CatchUpCursor>,
  ) {
    super();
    open.add(this);
  }

  async next(): Promise<CursorStep> {
    if (this.closed) throw new Error("catch-up cursor closed");
    this.used = Date.now();
    if (this.rewound || !this.stream.valid) {
      this.close();
      return { rewound: true };
    }
    const message = await this.stream.next();
    if (this.closed) throw new Error("catch-up cursor closed");
    if (message) return { message };
    const end = this.stream.seq;
    this.close();
    return { end };
  }

  /** After a retraction: let go of the stream's pins now if it read what was taken back (the hub hears it at its next pull). */
  retracted(): void {
    if (this.closed || this.stream.valid) return;
    this.rewound = true;
    this.stream.release();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stream.release();
    this.open.delete(this);
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** Close it if unused since `now - CURSOR_IDLE_MS`. */
  expire(now: number): void {
    if (now - this.used > CURSOR_IDLE_MS) this.close();
  }
}

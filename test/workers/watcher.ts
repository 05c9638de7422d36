// A watcher for workerd-side tests: reads the watcher protocol with the clients' own decoder
// (src/protocol/watch/protocol.ts `decodeWatchMessage`, which checks every field), assembles what it
// receives with the project's assembly, checks seqs, and acknowledges as told.
import { expect } from "vitest";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { ackMessage, decodeWatchMessage, type WatchMessage } from "../../src/protocol/watch/protocol.js";
import { inbox, openSocket } from "./support.js";

/** A watcher that assembles what it receives with the project's assembly. */
export class Watcher {
  asm = new EpisodeAssembly();
  seqs: number[] = [];
  messages: WatchMessage[] = [];
  lastSeq = 0;
  caughtUp = false;
  finished: Extract<WatchMessage, { type: "finish" }> | null = null;
  /** Apply what arrives (off for tests that only look at seqs). */
  assemble = true;
  /** Binary bytes received (what an ack reports), and each message's size. */
  received = 0;
  sizes: number[] = [];
  /**
   * @param acks acknowledge every message ("always"), only until caught up (then it stops
   *   reading, as far as the relay can tell), or "never" (the test calls `ack` itself; without
   *   an ack of its hello the relay never starts its catch-up)
   */
  constructor(
    readonly ws: WebSocket,
    readonly box: ReturnType<typeof inbox>,
    readonly acks: "always" | "until_caught_up" | "never" = "always",
  ) {}

  static async open(id: string, query = "", acks: "always" | "until_caught_up" | "never" = "always"): Promise<Watcher> {
    const ws = await openSocket(`${id}/watch${query}`);
    return new Watcher(ws, inbox(ws), acks);
  }

  /** Read messages until `until` holds (or time out). */
  async read(until: (w: Watcher) => boolean, timeoutMs = 10_000): Promise<void> {
    while (!until(this)) {
      const raw = await this.box.next(timeoutMs);
      if (typeof raw === "string") {
        expect(raw).toBe("pong");
        continue;
      }
      const m: WatchMessage = decodeWatchMessage(new Uint8Array(raw));
      this.received += raw.byteLength;
      this.sizes.push(raw.byteLength);
      this.messages.push(m);
      if (m.type === "snapshot") {
        // a snapshot replaces whatever was held (its first message follows the hello)
        if (this.messages.at(-2)?.type === "hello") this.asm = new EpisodeAssembly();
        if (this.assemble) for (const d of m.deltas) this.asm.apply(d);
        this.lastSeq = m.seq;
      } else if (m.type === "frames") {
        for (const [seq, d] of m.frames) {
          if (this.lastSeq)
            expect(seq, "frames arrive in order, without gaps or duplicates").toBeGreaterThan(this.lastSeq);
          this.seqs.push(seq);
          if (this.assemble) this.asm.apply(d);
          this.lastSeq = seq;
        }
      } else if (m.type === "caught_up") this.caughtUp = true;
      else if (m.type === "finish") this.finished = m;
      if (this.acks === "always" || (this.acks === "until_caught_up" && !this.caughtUp)) this.ack();
    }
  }

  ack(): void {
    this.ws.send(ackMessage(this.received));
  }

  episodeBytes(): Uint8Array {
    return this.asm.finishReply(this.finished!.reply);
  }

  close(): void {
    this.ws.close(1000, "done");
  }
}

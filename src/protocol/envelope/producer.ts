// The producer side of the envelope: the next seq, and the cursor (the seq of the last send the
// relay acknowledged). A producer that awaits each send (verifiers' DeltaStreamer does) calls
// `acknowledge` when a send returned and nothing when it raised: its next envelope then carries
// the old cursor, and the relay retracts whatever of the failed send it had applied
// (src/protocol/envelope/ledger.ts). A producer that pipelines calls `acknowledge(seq)` per answer, in order.

import type { Envelope } from "./envelope.js";

export class ProducerCursor {
  /** The last seq handed out. */
  seq = 0;
  /** The seq of the last send the relay acknowledged (0: none). */
  cursor = 0;

  constructor(
    readonly producer = "",
    startSeq = 1,
  ) {
    this.seq = startSeq - 1;
  }

  /** Wrap `delta` (upstream msgpack bytes) with the next seq and the cursor. */
  envelope(delta: Uint8Array): Envelope {
    return { producer: this.producer, seq: ++this.seq, cursor: this.cursor, delta };
  }

  /** The relay acknowledged the send of `seq` (by default the last one handed out). */
  acknowledge(seq = this.seq): void {
    this.cursor = Math.max(this.cursor, seq);
  }
}

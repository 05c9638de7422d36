// The snapshot of an archived episode (src/objects/episode/archive.ts): its bodies left SQLite, so the
// deltas that rebuild it are read back from the archived msgpack in R2, streamed
// (src/protocol/archive/finished-deltas.ts). A watcher that applies them and then the reply holds the
// finished episode, byte for byte. Nothing can be retracted any more: it stays valid.

import { finishedDeltas } from "../../protocol/archive/finished-deltas.js";
import { traceOf } from "../../protocol/assembly/delta.js";
import type { SnapshotReason } from "../../protocol/watch/protocol.js";
import { deltaForVariant, type Variant } from "../../protocol/watch/variant.js";
import { SnapshotMessages } from "./catchup-stream.js";

export class ArchivedSnapshot extends SnapshotMessages {
  private deltas: AsyncGenerator<Uint8Array> | null = null;

  constructor(
    private readonly open: () => Promise<ReadableStream<Uint8Array>>,
    seq: number,
    variant: Variant,
    reason: SnapshotReason,
    /** The reply's trace ids, in order: the ids the assembly keyed the traces by. */
    private readonly traceIds: readonly string[],
  ) {
    super(seq, variant, reason);
  }

  get valid(): boolean {
    return true;
  }

  release(): void {
    this.done = true;
    void this.deltas?.return(undefined);
    this.deltas = null;
  }

  protected async nextDelta(): Promise<Uint8Array | null> {
    if (this.done) return null;
    if (!this.deltas) {
      const body = await this.open();
      // released while R2 answered: nothing to read
      if (this.done) {
        await body.cancel();
        return null;
      }
      this.deltas = finishedDeltas(body, undefined, { traceIds: this.traceIds });
    }
    const deltas = this.deltas;
    for (;;) {
      const r = await deltas.next();
      if (r.done || this.done) return null;
      const d = deltaForVariant(r.value, traceOf(r.value), this.variant);
      if (d) return d;
    }
  }
}

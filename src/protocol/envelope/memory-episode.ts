// An episode held in memory with the relay's ingest rules: frames numbered as the relay numbers
// them, duplicates acknowledged, and a retraction done by rebuilding the assembly from the frames
// kept (the relay rewinds its SQLite instead; both end with the reference assembly over the
// acknowledged frames). For tools, benches and tests.

import { MemoryBodies } from "../assembly/bodies.js";
import { EpisodeAssembly } from "../assembly/episode-assembly.js";
import { dispatchConflict, sameDispatch } from "./dispatch.js";
import { type IngestResult, ingest } from "./ingest.js";
import type { ProducerLedger } from "./ledger.js";

export class MemoryEpisode {
  readonly asm = new EpisodeAssembly(new MemoryBodies());
  readonly ledger: ProducerLedger = new Map();
  /** The frames applied, by episode seq (retracted ones removed). */
  readonly frames: Array<{ seq: number; delta: Uint8Array }> = [];
  seq = 0;
  /** The rollout's dispatch identity (msgpack), set once as the relay sets it. */
  dispatch: Uint8Array | null = null;

  ingest(message: Uint8Array): IngestResult {
    const first = this.seq;
    const held = this.dispatch;
    let result: IngestResult;
    try {
      result = this.apply(message);
    } catch (e) {
      // refused whole: the seqs and the identity as they were (ingest rolled the assembly back)
      this.seq = first;
      this.dispatch = held;
      throw e;
    }
    result.applied.forEach((delta, i) => {
      this.frames.push({ seq: first + i + 1, delta });
    });
    return result;
  }

  private apply(message: Uint8Array): IngestResult {
    return ingest(this.asm, this.ledger, message, {
      nextSeq: () => ++this.seq,
      dispatch: (identity) => {
        if (this.dispatch === null) this.dispatch = identity.slice();
        else if (!sameDispatch(this.dispatch, identity)) throw dispatchConflict(this.dispatch, identity);
      },
      retract: (seqs) => {
        const gone = new Set(seqs);
        const kept = this.frames.filter((f) => !gone.has(f.seq));
        this.frames.length = 0;
        this.frames.push(...kept);
        for (const t of this.asm.traces.values()) this.asm.bodies.dropped(t);
        this.asm.reset();
        for (const f of kept) this.asm.apply(f.delta, true);
      },
    });
  }
}

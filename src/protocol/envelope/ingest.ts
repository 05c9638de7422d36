// Ingest of one producer message into an assembly: bare delta, envelope, or batch, all or nothing.
// Returns the deltas as applied, which is what gets logged and fanned out.
//
// Exactly-once (src/protocol/envelope/ledger.ts): an envelope whose seq was applied is a duplicate; one
// whose producer's cursor does not reflect some of that producer's applied frames has them
// retracted first, through the caller's `retract` (the relay rewinds its storage and re-applies
// the frames it keeps; an in-memory caller rebuilds from its frames).

import { asDeltaError, type ParsedDelta, parseDelta, withoutDispatch } from "../assembly/delta.js";
import type { EpisodeAssembly, Undo } from "../assembly/episode-assembly.js";
import { DeltaError } from "../assembly/errors.js";
import { checkDispatch } from "./dispatch.js";
import { parseIngestMessage } from "./envelope.js";
import { copyLedger, decide, type ProducerLedger, record } from "./ledger.js";

export interface IngestResult {
  /** Upstream deltas as applied, in order (empty when everything was a duplicate). */
  applied: Uint8Array[];
  /** The trace of each applied delta. */
  traces: string[];
  /** Envelopes skipped because their seq was already applied. */
  duplicates: number;
  /** Producer → highest seq applied, for the producers this message named. */
  producers: Map<string, number>;
  /** Episode seqs retracted before applying (empty unless a producer's cursor said so). */
  retracted: number[];
  /** The keys the relay does not know in the applied deltas (ParsedDelta `unknown`), each once, in order. */
  unknown: string[];
}

export interface IngestHooks {
  /** The episode seq the next applied delta gets (the relay numbers frames; default: none). */
  nextSeq?: () => number;
  /**
   * Retract these applied frames (episode seqs): afterwards `asm` holds the state without them.
   * Required for envelopes with a cursor that retract something.
   */
  retract?: (seqs: number[]) => void;
  /**
   * The message names the rollout's dispatch identity (msgpack map bytes, checked): called before
   * the delta it came with applies (not for duplicates); throw to refuse the message.
   */
  dispatch?: (identity: Uint8Array) => void;
}

/** The delta to apply: as parsed, or, when it carries a `dispatch` key, without it (the key handed to the hook). */
function applicable(parsed: ParsedDelta, hooks: IngestHooks, envelopeDispatch?: Uint8Array): ParsedDelta {
  if (envelopeDispatch !== undefined) hooks.dispatch?.(envelopeDispatch);
  if (parsed.dispatch === undefined) return parsed;
  hooks.dispatch?.(checkDispatch(parsed.dispatch));
  return parseDelta(withoutDispatch(parsed), true);
}

export function ingest(
  asm: EpisodeAssembly,
  ledger: ProducerLedger,
  message: Uint8Array,
  hooks: IngestHooks = {},
): IngestResult {
  const msg = parseIngestMessage(message);
  if (msg.kind === "delta") {
    const parsed = applicable(parseDelta(msg.delta), hooks);
    hooks.nextSeq?.();
    asm.applyParsed(parsed);
    return {
      applied: [parsed.bytes],
      traces: [parsed.trace],
      duplicates: 0,
      producers: new Map(),
      retracted: [],
      unknown: [...new Set(parsed.unknown)],
    };
  }
  const undo: Undo = [];
  const ledgerBefore = copyLedger(ledger);
  const applied: Uint8Array[] = [];
  const traces: string[] = [];
  const producers = new Map<string, number>();
  const retracted: number[] = [];
  const unknown = new Set<string>();
  let duplicates = 0;
  const batch = msg.envelopes.length > 1;
  try {
    msg.envelopes.forEach((env, i) => {
      const where = batch ? `batch[${i}]` : "";
      try {
        const d = decide(ledger, env);
        if (d.duplicate) {
          duplicates++;
        } else {
          const parsed = applicable(parseDelta(env.delta), hooks, env.dispatch);
          if (d.retract.length) {
            if (!hooks.retract)
              throw new DeltaError("producer_conflict", "cursor", "this relay cannot retract frames here");
            const seqs = d.retract.map((u) => u.seq);
            hooks.retract(seqs);
            retracted.push(...seqs);
          }
          const seq = hooks.nextSeq?.() ?? 0;
          asm.applyParsed(parsed, undo);
          record(ledger, env, seq);
          applied.push(parsed.bytes);
          traces.push(parsed.trace);
          for (const name of parsed.unknown) unknown.add(name);
        }
        if (env.seq > 0) producers.set(env.producer, ledger.get(env.producer)?.last ?? 0);
      } catch (e) {
        const err = asDeltaError(e, "delta");
        throw where ? new DeltaError(err.code, `${where}.${err.field}`, err.detail) : err;
      }
    });
  } catch (e) {
    // a retraction already rebuilt the assembly: the caller must read it back (the relay's
    // transaction rolls storage back); otherwise undo restores it exactly
    if (retracted.length === 0) for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
    ledger.clear();
    for (const [k, v] of ledgerBefore) ledger.set(k, v);
    throw e;
  }
  return { applied, traces, duplicates, producers, retracted, unknown: [...unknown] };
}

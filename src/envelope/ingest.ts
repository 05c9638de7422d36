// Ingest of one producer message into an assembly: bare delta, envelope, or batch, all or
// nothing. Returns the deltas as applied (trimmed for exactly-once), which is what gets
// logged and fanned out, so a replay of the log rebuilds the same state.

import { parseDelta, asDeltaError } from "../assembly/delta.js";
import { DeltaError } from "../assembly/errors.js";
import type { EpisodeAssembly, Undo } from "../assembly/episode-assembly.js";
import { parseIngestMessage, type Envelope } from "./envelope.js";
import { trimDelta } from "./trim.js";

export interface IngestResult {
  /** Upstream deltas as applied, in order (empty when everything was a duplicate). */
  applied: Uint8Array[];
  /** The trace of each applied delta. */
  traces: string[];
  /** Envelopes skipped because their seq was already applied. */
  duplicates: number;
  /** Producer → highest seq applied, for the producers this message named. */
  producers: Map<string, number>;
}

/** Highest applied seq per producer. */
export type ProducerLedger = Map<string, number>;

/**
 * Apply one producer message to `asm` (all or nothing). `beforeApply` runs before each delta that
 * is applied (not before a duplicate): the relay numbers the frames there.
 */
export function ingest(asm: EpisodeAssembly, ledger: ProducerLedger, message: Uint8Array, beforeApply?: () => void): IngestResult {
  const msg = parseIngestMessage(message);
  if (msg.kind === "delta") {
    const parsed = parseDelta(msg.delta);
    beforeApply?.();
    asm.applyParsed(parsed);
    return { applied: [msg.delta], traces: [parsed.trace], duplicates: 0, producers: new Map() };
  }
  const undo: Undo = [];
  // the seqs this message may change, to put back on failure
  const ledgerBefore = new Map(msg.envelopes.map((e) => [e.producer, ledger.get(e.producer)]));
  const applied: Uint8Array[] = [];
  const traces: string[] = [];
  const producers = new Map<string, number>();
  let duplicates = 0;
  const batch = msg.envelopes.length > 1;
  try {
    msg.envelopes.forEach((env, i) => {
      const where = batch ? `batch[${i}]` : "";
      try {
        const out = applyEnvelope(asm, ledger, env, undo, beforeApply);
        if (out) {
          applied.push(out.bytes);
          traces.push(out.trace);
        } else duplicates++;
        if (env.seq > 0) producers.set(env.producer, ledger.get(env.producer) ?? 0);
      } catch (e) {
        const err = asDeltaError(e, "delta");
        throw where ? new DeltaError(err.code, `${where}.${err.field}`, err.detail) : err;
      }
    });
  } catch (e) {
    for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
    for (const [k, v] of ledgerBefore) {
      if (v === undefined) ledger.delete(k);
      else ledger.set(k, v);
    }
    throw e;
  }
  return { applied, traces, duplicates, producers };
}

/** Apply one envelope; null when its seq was already applied. */
function applyEnvelope(asm: EpisodeAssembly, ledger: ProducerLedger, env: Envelope, undo: Undo, beforeApply?: () => void): { bytes: Uint8Array; trace: string } | null {
  if (env.seq > 0) {
    const last = ledger.get(env.producer) ?? 0;
    if (env.seq <= last) return null;
  }
  let parsed = parseDelta(env.delta);
  let bytes = env.delta;
  if (env.acked) {
    const trimmed = trimDelta(asm, parsed, env.acked);
    if (trimmed) {
      bytes = trimmed;
      parsed = parseDelta(trimmed, true); // written by trimDelta from validated spans
    }
  }
  beforeApply?.();
  asm.applyParsed(parsed, undo);
  if (env.seq > 0) ledger.set(env.producer, env.seq);
  return { bytes, trace: parsed.trace };
}

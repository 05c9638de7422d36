// Exactly-once by cursor position: which frames an envelope retracts, and what the relay remembers
// per producer to decide it.
//
// A producer's frames that the relay applied after the producer's cursor (the seq of its last
// send that returned) were never acknowledged to it: its next delta is diffed against the cursor
// and repeats or undoes what they carried. So when an envelope says `cursor: c`, its producer's
// applied frames with a seq above c (other than this one) are retracted, and the delta is applied
// to the state without them: the reference assembly over the acknowledged frames. Frames with a
// seq at or below c are confirmed: nothing can retract them any more.
//
// A producer's last frame, if its ack was lost, is never re-diffed and so never retracted: its
// data is real (the reply's counts come from the real trace). Envelopes without a cursor are never
// retracted; they are de-duplicated by seq only.

import type { Envelope } from "./envelope.js";

/** A frame applied from a producer's envelope that had a cursor, not yet confirmed by a later one. */
export interface Unconfirmed {
  /** The producer's seq of the envelope. */
  pseq: number;
  /** The episode seq it was applied as. */
  seq: number;
}

export interface ProducerState {
  /** The highest seq of this producer applied (0: none). */
  last: number;
  /** Frames applied after its cursor, oldest first. */
  unconfirmed: Unconfirmed[];
}

/** Per producer name. */
export type ProducerLedger = Map<string, ProducerState>;

/** An envelope seen against its producer's ledger: a duplicate, or the frames to retract before it applies. */
export type Dedup = { duplicate: true } | { duplicate: false; retract: Unconfirmed[] };

/** What applying `env` means: a duplicate of an applied envelope, or the frames to retract first. */
export function decide(ledger: ProducerLedger, env: Envelope): Dedup {
  if (env.seq <= 0) return { duplicate: false, retract: [] }; // a bare delta in a batch
  const p = ledger.get(env.producer);
  if (p && env.seq <= p.last) return { duplicate: true };
  if (!p || env.cursor === null) return { duplicate: false, retract: [] };
  return { duplicate: false, retract: p.unconfirmed.filter((u) => u.pseq > env.cursor!) };
}

/** Record `env`, applied as episode seq `seq` (after the retraction `decide` asked for). */
export function record(ledger: ProducerLedger, env: Envelope, seq: number): void {
  if (env.seq <= 0) return;
  const p = ledger.get(env.producer) ?? { last: 0, unconfirmed: [] };
  p.last = env.seq;
  if (env.cursor !== null) {
    // confirmed (at or below the cursor) and retracted (above it) frames both leave the list
    p.unconfirmed = [{ pseq: env.seq, seq }];
  }
  ledger.set(env.producer, p);
}

/** The episode seqs that some producer may still retract (the state before them must stay reachable). */
export function retractable(ledger: ProducerLedger): number[] {
  return [...ledger.values()].flatMap((p) => p.unconfirmed.map((u) => u.seq));
}

/** The run ended: nothing can be retracted any more. */
export function confirmAll(ledger: ProducerLedger): void {
  for (const p of ledger.values()) p.unconfirmed = [];
}

export function copyLedger(ledger: ProducerLedger): ProducerLedger {
  return new Map([...ledger].map(([k, v]) => [k, { last: v.last, unconfirmed: [...v.unconfirmed] }]));
}

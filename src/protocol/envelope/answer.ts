// The producer protocol's answers (relay → producer), the other half of src/protocol/envelope/envelope.ts:
// the JSON body of `POST /v1/episodes/{id}/deltas` and each text message on the ingest socket.
//
//   {ok: true, seq, applied, duplicates, producers: {name: last seq}, unknown?: [key]}   the message committed
//   {ok: false, status, error, message, field?}                         refused; nothing changed
//
// The relay encodes with `encodeAnswer`, clients decode with `parseAnswer` (the Python client
// mirrors it in clients/python/episode_relay/transport.py and sink.py).

import type { ErrorAnswer } from "../http/errors.js";

/** The answer to one message that committed. */
export interface IngestAck {
  ok: true;
  /** The episode's seq after this message. */
  seq: number;
  /** Deltas applied (new). */
  applied: number;
  /** Deltas recognised as already applied (a retry). */
  duplicates: number;
  /** Per producer in this message, the last of its seqs the relay holds. */
  producers: Record<string, number>;
  /**
   * Keys of this message's deltas the relay does not know (a newer producer's), present only when
   * there are some: `foo` a top-level key, `set.foo` a scalar field, `open.foo` a header field. They
   * were kept (src/protocol/assembly/delta.ts says how), and the episode's status names them too.
   */
  unknown?: string[];
}

export type IngestAnswer = IngestAck | ErrorAnswer;

export function encodeAnswer(a: IngestAnswer): string {
  return JSON.stringify(a);
}

/** An answer from its JSON text; throws on anything that is not one. */
export function parseAnswer(text: string): IngestAnswer {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`not a relay answer (not JSON): ${text.slice(0, 80)}`);
  }
  if (typeof v === "object" && v !== null) {
    const o = v as Record<string, unknown>;
    if (
      o.ok === true &&
      isCount(o.seq) &&
      isCount(o.applied) &&
      isCount(o.duplicates) &&
      typeof o.producers === "object" &&
      o.producers !== null &&
      (o.unknown === undefined || (Array.isArray(o.unknown) && o.unknown.every((k) => typeof k === "string")))
    ) {
      return o as unknown as IngestAck;
    }
    if (
      o.ok === false &&
      typeof o.status === "number" &&
      typeof o.error === "string" &&
      typeof o.message === "string"
    ) {
      return o as unknown as ErrorAnswer;
    }
  }
  throw new Error(`not a relay answer: ${text.slice(0, 80)}`);
}

function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

// The producer envelope: an upstream delta, a per-producer sequence number, and where the
// producer's cursor stood when it diffed that delta.
//
//   {"producer": str, "seq": int, "cursor": int, "delta": bin, "dispatch": map}
//
// `delta` is the upstream delta's msgpack bytes, nested as bin so they travel untouched.
// `seq` increases strictly per producer (gaps allowed: a send that never arrived leaves one);
// an envelope whose seq the relay has already applied is acknowledged again and not re-applied.
// `cursor` is the seq of the producer's last send that returned (0: none yet): the frames of this
// producer the relay applied after it, other than this one, were never acknowledged to it, and
// its cursor does not reflect them, so the relay retracts them (src/protocol/envelope/ledger.ts) before it
// applies this delta. Without `cursor` the delta is applied as is (de-duplication by seq only).
// `dispatch` (optional) is the rollout's identity in the trainer (src/protocol/envelope/dispatch.ts).

import { asDeltaError } from "../assembly/delta.js";
import { DeltaError } from "../assembly/errors.js";
import { kindOf } from "../wire/format.js";
import { Reader } from "../wire/reader.js";
import { ChunkWriter } from "../wire/writer.js";
import { checkDispatch } from "./dispatch.js";

export interface Envelope {
  producer: string;
  seq: number;
  /** The seq of the producer's last acknowledged send when it diffed this delta; null when not given. */
  cursor: number | null;
  delta: Uint8Array;
  /** The rollout's dispatch identity (msgpack map), when the envelope carries one. */
  dispatch?: Uint8Array;
}

/** What one ingest message holds: a bare upstream delta, an envelope, or a batch of them. */
export type IngestMessage = { kind: "delta"; delta: Uint8Array } | { kind: "envelopes"; envelopes: Envelope[] };

export function parseIngestMessage(bytes: Uint8Array): IngestMessage {
  if (bytes.length === 0) throw new DeltaError("malformed", "message", "empty body");
  const kind = kindOf(bytes[0]!);
  if (kind === "array") {
    const r = new Reader(bytes);
    try {
      r.span();
      if (!r.atEnd()) r.fail("trailing bytes after the batch");
    } catch (e) {
      throw asDeltaError(e, "batch");
    }
    r.pos = 0;
    const n = r.arrayHeader();
    const envelopes: Envelope[] = [];
    for (let i = 0; i < n; i++) {
      const span = r.span();
      if (kindOf(span[0]!) !== "map")
        throw new DeltaError("wrong_type", `batch[${i}]`, "a batch holds envelopes (maps)");
      const env = tryEnvelope(span, `batch[${i}]`, true);
      envelopes.push(env ?? { producer: "", seq: 0, cursor: null, delta: span });
    }
    return { kind: "envelopes", envelopes };
  }
  if (kind !== "map") {
    try {
      new Reader(bytes).span();
    } catch (e) {
      throw asDeltaError(e, "message");
    }
    throw new DeltaError("wrong_type", "message", "expected a delta map, an envelope map or an array of envelopes");
  }
  const env = tryEnvelope(bytes, "envelope");
  return env ? { kind: "envelopes", envelopes: [env] } : { kind: "delta", delta: bytes };
}

/** The envelope in `span`, or null when the map is a bare delta (it has no `delta` key). */
function tryEnvelope(span: Uint8Array, field: string, trusted = false): Envelope | null {
  const r = new Reader(span, 0, span.length, trusted);
  let n: number;
  // Upstream deltas always lead with `trace`: skip the envelope reading for them.
  try {
    n = r.mapHeader();
    const first = r.pos;
    if (n > 0 && r.str() === "trace") return null;
    r.pos = first;
  } catch {
    return null; // not readable as an envelope either; the delta parser reports it precisely
  }
  // One pass over the map: each known key's value is read in place, others are skipped.
  let delta: Uint8Array | undefined;
  let producer = "";
  let seq: number | undefined;
  let cursor: number | null = null;
  let dispatch: Uint8Array | undefined;
  try {
    for (let i = 0; i < n; i++) {
      const key = r.str();
      if (key === undefined) {
        if (delta === undefined) return null; // a non-str key: a bare delta, the delta parser reports it
        throw new DeltaError("wrong_type", `${field} key ${i}`, "keys must be str");
      }
      switch (key) {
        case "delta":
          delta = r.bin();
          if (!delta) throw new DeltaError("wrong_type", `${field}.delta`, "must be bin (the delta's msgpack bytes)");
          break;
        case "producer": {
          if (r.nil()) break;
          const p = r.str();
          if (p === undefined || p.length > 256)
            throw new DeltaError("wrong_type", `${field}.producer`, "must be a str of at most 256 characters");
          producer = p;
          break;
        }
        case "seq":
          seq = r.int();
          if (seq === undefined || seq < 1) throw new DeltaError("wrong_type", `${field}.seq`, "must be an int ≥ 1");
          break;
        case "cursor": {
          if (r.nil()) break;
          const c = r.int();
          if (c === undefined || c < 0)
            throw new DeltaError(
              "wrong_type",
              `${field}.cursor`,
              "must be an int ≥ 0 (the seq of the last acknowledged send)",
            );
          cursor = c;
          break;
        }
        case "dispatch": {
          if (r.nil()) break;
          dispatch = checkDispatch(r.span(), `${field}.dispatch`);
          break;
        }
        default:
          r.span();
      }
    }
    if (!r.atEnd()) r.fail("trailing bytes");
  } catch (e) {
    if (
      delta === undefined &&
      seq === undefined &&
      e instanceof DeltaError &&
      e.code === "wrong_type" &&
      !e.field.startsWith(field)
    )
      return null;
    throw asDeltaError(e, field);
  }
  if (!delta) return null;
  if (seq === undefined) throw new DeltaError("wrong_type", `${field}.seq`, "must be an int ≥ 1");
  if (cursor !== null && cursor >= seq)
    throw new DeltaError("wrong_type", `${field}.cursor`, `must be below seq (${cursor} ≥ ${seq})`);
  return dispatch === undefined ? { producer, seq, cursor, delta } : { producer, seq, cursor, delta, dispatch };
}

/** Encode an envelope (for TypeScript producers, tools and tests). */
export function encodeEnvelope(e: Envelope): Uint8Array {
  const w = new ChunkWriter();
  w.mapHeader(3 + (e.cursor === null ? 0 : 1) + (e.dispatch === undefined ? 0 : 1));
  w.str("producer");
  w.str(e.producer);
  w.str("seq");
  w.int(e.seq);
  if (e.cursor !== null) {
    w.str("cursor");
    w.int(e.cursor);
  }
  w.str("delta");
  w.binHeader(e.delta.length);
  w.raw(e.delta);
  if (e.dispatch !== undefined) {
    w.str("dispatch");
    w.raw(e.dispatch);
  }
  return w.bytes();
}

// The producer envelope: an upstream delta plus what its producer had had acknowledged when
// it diffed that delta, and a per-producer sequence number.
//
//   {"producer": str, "seq": int, "acked": {"open": bool, "<list field>": int, ...,
//    "links": {node index: int}}, "delta": bin}
//
// `delta` is the upstream delta's msgpack bytes, nested as bin so they travel untouched.
// `seq` increases strictly per producer (gaps allowed: a send that never arrived leaves one);
// an envelope whose seq the relay has already applied is acknowledged again and not re-applied.
// `acked` lets the relay trim a re-diffed delta (sent after a lost ack) to what is new.
// Without `acked` the delta is applied as is.

import { DeltaError } from "../assembly/errors.js";
import { LIST_FIELDS, isListField, type ListField } from "../assembly/fields.js";
import { asDeltaError, mapEntries } from "../assembly/delta.js";
import { Reader, kindOf } from "../wire/reader.js";
import { ChunkWriter } from "../wire/writer.js";

export interface ProducerAck {
  /** Whether the trace's `open` was acknowledged. */
  open: boolean;
  /** Acknowledged item count per list field (absent = 0). */
  counts: Partial<Record<ListField, number>>;
  /** Acknowledged `semantic_parents` count per node, for the nodes this delta's `links` name. */
  links: Map<number, number>;
}

export interface Envelope {
  producer: string;
  seq: number;
  acked: ProducerAck | null;
  delta: Uint8Array;
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
      if (kindOf(span[0]!) !== "map") throw new DeltaError("wrong_type", `batch[${i}]`, "a batch holds envelopes (maps)");
      const env = tryEnvelope(span, `batch[${i}]`, true);
      envelopes.push(env ?? { producer: "", seq: 0, acked: null, delta: span });
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
  let acked: ProducerAck | null = null;
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
          if (p === undefined || p.length > 256) throw new DeltaError("wrong_type", `${field}.producer`, "must be a str of at most 256 characters");
          producer = p;
          break;
        }
        case "seq":
          seq = r.int();
          if (seq === undefined || seq < 1) throw new DeltaError("wrong_type", `${field}.seq`, "must be an int ≥ 1");
          break;
        case "acked":
          acked = r.nil() ? null : readAck(r, `${field}.acked`);
          break;
        default:
          r.span();
      }
    }
    if (!r.atEnd()) r.fail("trailing bytes");
  } catch (e) {
    if (delta === undefined && seq === undefined && e instanceof DeltaError && e.code === "wrong_type" && !e.field.startsWith(field)) return null;
    throw asDeltaError(e, field);
  }
  if (!delta) return null;
  if (seq === undefined) throw new DeltaError("wrong_type", `${field}.seq`, "must be an int ≥ 1");
  return { producer, seq, acked, delta };
}

function readAck(r: Reader, field: string): ProducerAck {
  const n = r.mapHeader();
  if (n < 0) throw new DeltaError("wrong_type", field, "must be a map");
  const ack: ProducerAck = { open: false, counts: {}, links: new Map() };
  for (let i = 0; i < n; i++) {
    const key = r.str();
    if (key === undefined) throw new DeltaError("wrong_type", `${field} key ${i}`, "keys must be str");
    if (key === "open") {
      const b = r.bool();
      if (b === undefined) throw new DeltaError("wrong_type", `${field}.open`, "must be a bool");
      ack.open = b;
    } else if (key === "links") {
      const m = r.mapHeader();
      if (m < 0) throw new DeltaError("wrong_type", `${field}.links`, "must be a map of node index to count");
      for (let j = 0; j < m; j++) {
        const k = r.int();
        const v = k === undefined ? undefined : r.int();
        if (k === undefined || v === undefined || k < 0 || v < 0) {
          throw new DeltaError("wrong_type", `${field}.links`, "keys and counts must be non-negative ints");
        }
        ack.links.set(k, v);
      }
    } else if (isListField(key)) {
      const v = r.int();
      if (v === undefined || v < 0) throw new DeltaError("wrong_type", `${field}.${key}`, "must be a non-negative int");
      ack.counts[key] = v;
    } else r.span();
  }
  return ack;
}

/** Encode an envelope (for TypeScript producers, tools and tests). */
export function encodeEnvelope(e: Envelope): Uint8Array {
  const w = new ChunkWriter();
  w.mapHeader(e.acked ? 4 : 3);
  w.str("producer");
  w.str(e.producer);
  w.str("seq");
  w.int(e.seq);
  if (e.acked) {
    w.str("acked");
    const counts = LIST_FIELDS.filter((f) => e.acked!.counts[f] !== undefined);
    w.mapHeader(2 + counts.length);
    w.str("open");
    w.byte(e.acked.open ? 0xc3 : 0xc2);
    for (const f of counts) {
      w.str(f);
      w.int(e.acked.counts[f]!);
    }
    w.str("links");
    w.mapHeader(e.acked.links.size);
    for (const [k, v] of e.acked.links) {
      w.int(k);
      w.int(v);
    }
  }
  w.str("delta");
  w.binHeader(e.delta.length);
  w.raw(e.delta);
  return w.bytes();
}

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

import { DeltaError } from "../assembly/errors";
import { LIST_FIELDS, isListField, type ListField } from "../assembly/fields";
import { asDeltaError, mapEntries } from "../assembly/delta";
import { Reader, kindOf } from "../wire/reader";
import { ChunkWriter } from "../wire/writer";

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
      const env = tryEnvelope(span, `batch[${i}]`);
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
function tryEnvelope(span: Uint8Array, field: string): Envelope | null {
  const r = new Reader(span);
  // Upstream deltas always lead with `trace`: skip the envelope reading for them.
  try {
    if (r.mapHeader() > 0 && r.str() === "trace") return null;
  } catch {
    return null; // not readable as an envelope either; the delta parser reports it precisely
  }
  r.pos = 0;
  let entries;
  try {
    entries = mapEntries(r, field);
    if (!r.atEnd()) r.fail("trailing bytes");
  } catch (e) {
    // a bare delta with a non-str key is the delta parser's to report
    if (e instanceof DeltaError && e.code === "wrong_type") return null;
    throw asDeltaError(e, field);
  }
  const get = (k: string) => entries.find((e) => e.key === k)?.value;
  const delta = get("delta");
  if (!delta) return null;
  const d = new Reader(delta).bin();
  if (!d) throw new DeltaError("wrong_type", `${field}.delta`, "must be bin (the delta's msgpack bytes)");
  const producerSpan = get("producer");
  let producer = "";
  if (producerSpan && producerSpan[0] !== 0xc0) {
    const p = new Reader(producerSpan).str();
    if (p === undefined || p.length > 256) throw new DeltaError("wrong_type", `${field}.producer`, "must be a str of at most 256 characters");
    producer = p;
  }
  const seqSpan = get("seq");
  const seq = seqSpan ? new Reader(seqSpan).int() : undefined;
  if (seq === undefined || seq < 1) throw new DeltaError("wrong_type", `${field}.seq`, "must be an int ≥ 1");
  const ackedSpan = get("acked");
  const acked = ackedSpan && ackedSpan[0] !== 0xc0 ? parseAck(ackedSpan, `${field}.acked`) : null;
  return { producer, seq, acked, delta: d };
}

function parseAck(span: Uint8Array, field: string): ProducerAck {
  const entries = mapEntries(new Reader(span), field);
  const ack: ProducerAck = { open: false, counts: {}, links: new Map() };
  for (const e of entries) {
    const r = new Reader(e.value);
    if (e.key === "open") {
      const b = r.bool();
      if (b === undefined) throw new DeltaError("wrong_type", `${field}.open`, "must be a bool");
      ack.open = b;
    } else if (e.key === "links") {
      const n = r.mapHeader();
      if (n < 0) throw new DeltaError("wrong_type", `${field}.links`, "must be a map of node index to count");
      for (let i = 0; i < n; i++) {
        const k = r.int();
        const v = r.int();
        if (k === undefined || v === undefined || k < 0 || v < 0) {
          throw new DeltaError("wrong_type", `${field}.links`, "keys and counts must be non-negative ints");
        }
        ack.links.set(k, v);
      }
    } else if (isListField(e.key)) {
      const v = r.int();
      if (v === undefined || v < 0) throw new DeltaError("wrong_type", `${field}.${e.key}`, "must be a non-negative int");
      ack.counts[e.key] = v;
    }
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

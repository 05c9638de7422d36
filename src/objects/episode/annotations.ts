// The trainer's annotations of an episode (src/protocol/annotations/records.ts) in its SQLite: one merged
// record per trace (`annotations`, in parts like every body), merged with each record posted, in
// one transaction with the meta row's count of records (the version watchers are told of) and
// their bytes (bounded by MAX_ANNOTATION_BYTES). They are the trainer's, not the episode's: they
// stay when the archive takes the episode's bodies to R2, and go with the episode.

import {
  decodeTraceAnnotations,
  encodeTraceAnnotations,
  mergeRecord,
  parseAnnotationRecords,
  type TraceAnnotations,
} from "../../protocol/annotations/records.js";
import { parseReply } from "../../protocol/assembly/reply.js";
import { eachPart } from "../../protocol/episode/parts.js";
import { RelayError } from "../../protocol/http/errors.js";
import type { LValue } from "../../protocol/wire/lossless.js";
import { ChunkWriter, concatChunks } from "../../protocol/wire/writer.js";
import type { Meta } from "./record-store.js";
import type { EpisodeState } from "./state.js";

/** What a POST of annotations answers. */
export interface AnnotationsAck {
  ok: true;
  /** Records merged so far (watchers are told this number when it moves). */
  version: number;
  /** Bytes the merged records take (at most MAX_ANNOTATION_BYTES). */
  bytes: number;
}

/**
 * Merge the records in `body` (decoded) into the episode's; one transaction; refused whole (state unchanged) on any
 * problem.
 */
export function commitAnnotations(
  state: EpisodeState,
  body: LValue,
  maxBytes: number,
  now: number,
): { meta: Meta; ack: AnnotationsAck } {
  const m = state.requireMeta();
  const records = parseAnnotationRecords(body);
  const known = traceIds(state, m);
  for (const r of records) {
    if (!known.includes(r.trace)) {
      throw new RelayError(
        "unknown_trace",
        `the annotations name trace ${JSON.stringify(r.trace)}, which this episode does not hold`,
        "trace_id",
      );
    }
  }
  return state.transaction(() => {
    const merged = new Map<string, TraceAnnotations>();
    for (const r of records) merged.set(r.trace, mergeRecord(merged.get(r.trace) ?? readTrace(state.sql, r.trace), r));
    for (const [trace, t] of merged) writeTrace(state.sql, trace, encodeTraceAnnotations(t));
    const bytes = state.sql.exec<{ n: number | null }>("SELECT SUM(LENGTH(data)) AS n FROM annotations").one().n ?? 0;
    if (bytes > maxBytes) {
      throw new RelayError(
        "annotations_too_large",
        `the episode's annotations would take ${bytes} bytes, over the limit of ${maxBytes} (MAX_ANNOTATION_BYTES)`,
      );
    }
    const next: Meta = {
      ...m,
      annotations: m.annotations + records.length,
      annotationBytes: bytes,
      updated: Math.max(m.updated, now),
    };
    state.record.saveMeta(next);
    return { meta: next, ack: { ok: true, version: next.annotations, bytes } };
  });
}

/**
 * `GET .../annotations`: `{episode, version, traces: [merged record...]}` as msgpack, the traces in
 * the episode's order (the reply's once finished, else arrival).
 */
export function annotationsDocument(state: EpisodeState, m: Meta): Uint8Array {
  const sql = state.sql;
  const stored = new Set(
    hasTable(sql)
      ? sql
          .exec<{ trace: string }>("SELECT DISTINCT trace FROM annotations")
          .toArray()
          .map((r) => r.trace)
      : [],
  );
  const order = [
    ...traceIds(state, m).filter((t) => stored.has(t)),
    ...[...stored].filter((t) => !traceIds(state, m).includes(t)).sort(),
  ];
  const w = new ChunkWriter();
  w.mapHeader(3);
  w.str("episode");
  w.str(m.id);
  w.str("version");
  w.int(m.annotations);
  w.str("traces");
  w.arrayHeader(order.length);
  for (const t of order) w.raw(readBytes(sql, t)!);
  return w.bytes();
}

/** The episode's trace ids: the reply's summaries once it ended, then the live ones not among them. */
function traceIds(state: EpisodeState, m: Meta): string[] {
  const out: string[] = [];
  const reply = m.status !== "live" ? state.record.reply() : null;
  if (reply) {
    try {
      for (const s of parseReply(reply).summaries) out.push(s.id);
    } catch {
      // a failed run's reply may have no summaries
    }
  }
  for (const id of state.memory().asm.traces.keys()) if (!out.includes(id)) out.push(id);
  return out;
}

function hasTable(sql: SqlStorage): boolean {
  return sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'annotations'").toArray().length > 0;
}

function readBytes(sql: SqlStorage, trace: string): Uint8Array | null {
  if (!hasTable(sql)) return null;
  const parts = sql
    .exec<{ data: ArrayBuffer }>("SELECT data FROM annotations WHERE trace = ? ORDER BY part", trace)
    .toArray();
  return parts.length ? concatChunks(parts.map((p) => new Uint8Array(p.data))) : null;
}

function readTrace(sql: SqlStorage, trace: string): TraceAnnotations | null {
  const bytes = readBytes(sql, trace);
  return bytes ? decodeTraceAnnotations(bytes) : null;
}

function writeTrace(sql: SqlStorage, trace: string, bytes: Uint8Array): void {
  sql.exec("DELETE FROM annotations WHERE trace = ?", trace);
  eachPart(bytes, (part, data) =>
    sql.exec("INSERT INTO annotations (trace, part, data) VALUES (?, ?, ?)", trace, part, data),
  );
}

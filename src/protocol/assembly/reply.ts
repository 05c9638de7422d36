// The upstream reply that ends a run: `{success, error, head, traces: [{id, nodes, calls}]}`.

import { encodeLossless, LMap } from "../wire/lossless.js";
import { Reader } from "../wire/reader.js";
import { NIL_BYTE } from "../wire/writer.js";
import { asDeltaError, type Entry, mapEntries } from "./delta.js";
import { DeltaError } from "./errors.js";

/** A trace the reply names, with the counts the reference checks. */
export interface TraceSummary {
  id: string;
  nodes: number;
  calls: number;
}

export interface ParsedReply {
  success: boolean;
  error: string | null;
  /** The episode head's entries (nil head → null). */
  head: Entry[] | null;
  summaries: TraceSummary[];
}

export function parseReply(bytes: Uint8Array): ParsedReply {
  const r = new Reader(bytes);
  try {
    r.span();
    if (!r.atEnd()) r.fail("trailing bytes after the reply");
  } catch (e) {
    throw asDeltaError(e, "reply");
  }
  // validated once above; every read below trusts the bytes
  const trusted = (b: Uint8Array) => new Reader(b, 0, b.length, true);
  const top = mapEntries(trusted(bytes), "reply");
  const get = (k: string) => top.find((e) => e.key === k);
  const success = get("success");
  const ok = success ? trusted(success.value).bool() : undefined;
  if (ok === undefined) throw new DeltaError("wrong_type", "success", "reply.success must be a bool");
  let error: string | null = null;
  const err = get("error");
  if (err && err.value[0] !== NIL_BYTE) {
    const s = trusted(err.value).str();
    if (s === undefined) throw new DeltaError("wrong_type", "error", "reply.error must be a str or nil");
    error = s;
  }
  let head: Entry[] | null = null;
  const h = get("head");
  if (h && h.value[0] !== NIL_BYTE) head = mapEntries(trusted(h.value), "head");
  if (ok && !head) throw new DeltaError("wrong_type", "head", "a successful reply needs a head map");
  const summaries: TraceSummary[] = [];
  const t = get("traces");
  if (t && t.value[0] !== NIL_BYTE) {
    const tr = trusted(t.value);
    const n = tr.arrayHeader();
    if (n < 0) throw new DeltaError("wrong_type", "traces", "reply.traces must be an array");
    for (let i = 0; i < n; i++) {
      const entries = mapEntries(tr, `traces[${i}]`);
      const field = (k: string) => entries.find((e) => e.key === k)?.value;
      const id = field("id");
      const nodes = field("nodes");
      const calls = field("calls");
      const idStr = id ? trusted(id).str() : undefined;
      const nodesN = nodes ? trusted(nodes).int() : undefined;
      const callsN = calls ? trusted(calls).int() : undefined;
      if (idStr === undefined) throw new DeltaError("wrong_type", `traces[${i}].id`, "must be a str");
      if (nodesN === undefined || nodesN < 0)
        throw new DeltaError("wrong_type", `traces[${i}].nodes`, "must be a non-negative int");
      if (callsN === undefined || callsN < 0)
        throw new DeltaError("wrong_type", `traces[${i}].calls`, "must be a non-negative int");
      summaries.push({ id: idStr, nodes: nodesN, calls: callsN });
    }
  } else if (ok) throw new DeltaError("wrong_type", "traces", "a successful reply needs traces");
  return { success: ok, error, head, summaries };
}

/** What `encodeReply` writes: a finished run with its traces' counts, or a failed one with its error. */
export type ReplyOf = { success: true; traces: TraceSummary[] } | { success: false; error: string };

/** An upstream reply's bytes, key order as upstream sends it (for tests, tools and benches; the relay only parses). */
export function encodeReply(r: ReplyOf): Uint8Array {
  const traces = r.success
    ? r.traces.map(
        (t) =>
          new LMap([
            ["id", t.id],
            ["nodes", t.nodes],
            ["calls", t.calls],
          ]),
      )
    : [];
  return encodeLossless(
    new LMap([
      ["success", r.success],
      ["error", r.success ? null : r.error],
      ["head", r.success ? new LMap([]) : null],
      ["traces", traces],
    ]),
  );
}

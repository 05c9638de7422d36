// What a watcher asked to see: routing bytes or not (`?routing=0`), all traces or some
// (`?traces=ID,ID`). Watchers with the same variant share the bytes of every message.

import { parseDelta } from "../assembly/delta.js";
import type { NodeState } from "../assembly/node.js";
import { equalBytes } from "../wire/bytes.js";
import { ChunkWriter, encodeStr, NIL, NIL_BYTE } from "../wire/writer.js";

/** A node's binary per-token arrays that travel with routing: kept on the full view, nil without routing. */
const KEY_SAMPLING_MASK = encodeStr("sampling_mask");

export interface Variant {
  routing: boolean;
  /** Trace ids to keep, or null for all. */
  traces: string[] | null;
}

export function parseVariant(params: URLSearchParams): Variant {
  const r = params.get("routing");
  const t = params.get("traces");
  const traces =
    t === null
      ? null
      : [
          ...new Set(
            t
              .split(",")
              .map((s) => s.trim())
              .filter(Boolean),
          ),
        ].sort();
  return { routing: !(r === "0" || r === "false"), traces: traces?.length ? traces : null };
}

/** A stable key for grouping watchers (equal variants, equal keys). */
export function variantKey(v: Variant): string {
  return `r${v.routing ? 1 : 0}${v.traces ? `:${v.traces.join(",")}` : ""}`;
}

export function isFull(v: Variant): boolean {
  return v.routing && v.traces === null;
}

/**
 * The delta as this variant sees it: null when its trace is filtered out; without
 * `routing_repairs` and with every node's `routed_experts` and `sampling_mask` set to nil when routing is off.
 */
export function deltaForVariant(delta: Uint8Array, trace: string, v: Variant): Uint8Array | null {
  if (v.traces && !v.traces.includes(trace)) return null;
  if (v.routing) return delta;
  return stripRouting(delta);
}

/**
 * Drop routing bytes from a delta (routing_repairs removed; node routed_experts and sampling_mask →
 * nil: both are binary arrays per token, upstream's `{__nd__}` maps).
 */
export function stripRouting(delta: Uint8Array): Uint8Array {
  const d = parseDelta(delta);
  const hasRouting =
    d.repairs !== undefined || (d.nodes ?? []).some((n) => (n.routedAt >= 0 && n.routed !== null) || maskAt(n) >= 0);
  if (!hasRouting) return delta;
  const w = new ChunkWriter();
  const entries = d.entries.filter((e) => e.key !== "routing_repairs");
  w.mapHeader(entries.length);
  for (const e of entries) {
    w.raw(e.keySpan);
    if (e.key !== "nodes") {
      w.raw(e.value);
      continue;
    }
    w.arrayHeader(d.nodes!.length);
    for (const n of d.nodes!) {
      if (n.routed === null && maskAt(n) < 0) w.raw(n.span);
      else writeWithoutRouting(w, n);
    }
  }
  return w.bytes();
}

/** Index of a non-nil `sampling_mask` among the node's keys, or -1. */
function maskAt(n: NodeState): number {
  const i = n.keys.findIndex((k) => equalBytes(k, KEY_SAMPLING_MASK));
  return i >= 0 && n.values[i]![0] !== NIL_BYTE ? i : -1;
}

/**
 * The node as received with `routed_experts` and `sampling_mask` nil and every other byte kept (not
 * the assembly's stored form: a nil or missing `semantic_parents` stays as it came).
 */
function writeWithoutRouting(w: ChunkWriter, n: NodeState): void {
  const appended = n.values[n.parentsAt]!.length === 0; // readNode's placeholder for a missing key
  const mask = maskAt(n);
  w.mapHeader(n.keys.length - (appended ? 1 : 0));
  n.keys.forEach((key, i) => {
    if (appended && i === n.parentsAt) return;
    w.raw(key);
    w.raw(i === n.routedAt || i === mask ? NIL : n.values[i]!);
  });
}

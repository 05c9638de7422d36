// The reference client's `EpisodeAssembly`, byte-exact: apply deltas in order, expose the
// live traces (checkpoint form) and `finish(head, summaries)` the episode.
//
// `apply` is all-or-nothing: every check that can fail (types, indices, routing, dtypes)
// runs against the current state first and builds the new values aside; only then is the
// state changed, by steps that cannot fail.

import { parseDelta, type ParsedDelta } from "./delta.js";
import { DeltaError, FinishError } from "./errors.js";
import { LIST_FIELDS, type ListField } from "./fields.js";
import { repairLastRow, type NdArray } from "./ndarray.js";
import type { NodeState } from "./node.js";
import { TraceState } from "./trace.js";
import { ChunkWriter, EMPTY_ARRAY } from "../wire/writer.js";
import type { Entry } from "./delta.js";

/** Inverse operations of applied changes, run in reverse to roll back. */
export type Undo = Array<() => void>;

export interface TraceSummary {
  id: string;
  nodes: number;
  calls: number;
}

export class EpisodeAssembly {
  /** Live traces in arrival order (the order their `open` was first applied). */
  readonly traces = new Map<string, TraceState>();

  /** Parse, check and apply one delta frame. Throws DeltaError and changes nothing on failure. */
  apply(frame: Uint8Array, trusted = false): ParsedDelta {
    const delta = parseDelta(frame, trusted);
    this.applyParsed(delta);
    return delta;
  }

  /**
   * Apply an already parsed delta (all-or-nothing). With `undo`, the inverse of each change is
   * pushed there, so a caller can roll back several applied deltas (a batch) in reverse.
   */
  applyParsed(delta: ParsedDelta, undo?: Undo): void {
    if (delta.discard) {
      if (undo && this.traces.has(delta.trace)) {
        const order = [...this.traces];
        undo.push(() => {
          this.traces.clear();
          for (const [k, v] of order) this.traces.set(k, v);
        });
      }
      this.traces.delete(delta.trace);
      return;
    }
    const held = this.traces.get(delta.trace);
    if (!held && !delta.open) {
      throw new DeltaError("unknown_trace", "trace", `unknown trace ${JSON.stringify(delta.trace)} and no \`open\``);
    }
    const nodeCount = held ? held.nodes.length : 0;
    const nodes = held ? held.nodes : [];

    // Checks and new values, before any change.
    for (const { index } of delta.links ?? []) {
      if (index >= nodeCount) throw outOfRange("links", index, nodeCount);
    }
    const repaired: Array<[NodeState, NdArray]> = [];
    for (const { index, row } of delta.repairs ?? []) {
      if (index >= nodeCount) throw outOfRange("routing_repairs", index, nodeCount);
      const node = nodes[index]!;
      if (!node.routed) throw new DeltaError("no_routing", `routing_repairs[${index}]`, `node ${index} has no routed_experts to repair`);
      repaired.push([node, repairLastRow(node.routed, row, `routing_repairs[${index}]`)]);
    }

    // Commit: nothing below can fail.
    let trace = held;
    if (!trace) {
      trace = new TraceState(delta.trace, delta.open!);
      this.traces.set(delta.trace, trace);
      undo?.push(() => this.traces.delete(delta.trace));
    } else if (undo) {
      const t = trace;
      const counts = LIST_FIELDS.map((f) => t.count(f));
      const pending = t.pending;
      // the slots `set` will overwrite (undefined: a key it adds, which goes last and is deleted)
      const before = (delta.set ?? []).map((e) => [e.key, t.fields.get(e.key)] as const);
      undo.push(() => {
        t.nodes.length = counts[0]!;
        LIST_FIELDS.forEach((f, i) => {
          if (f !== "nodes") t.items[f].length = counts[i]!;
        });
        t.pending = pending;
        for (let i = before.length - 1; i >= 0; i--) {
          const [k, slot] = before[i]!;
          if (slot) t.fields.set(k, slot);
          else t.fields.delete(k);
        }
      });
    }
    for (const { index, items } of delta.links ?? []) {
      const node = nodes[index]!;
      if (items.length === 0) continue;
      if (undo) {
        const { parents, pristine } = node;
        undo.push(() => Object.assign(node, { parents, pristine }));
      }
      node.parents = node.parents.concat(items);
      node.pristine = false;
    }
    for (const [node, routed] of repaired) {
      if (undo) {
        const { routed: before, pristine } = node;
        undo.push(() => Object.assign(node, { routed: before, pristine }));
      }
      node.routed = routed;
      node.pristine = false;
    }
    // The parsed nodes become the trace's own (later links and repairs change them in place):
    // a ParsedDelta is applied once, to one assembly; re-applying means parsing again.
    if (delta.nodes) for (const node of delta.nodes) trace.nodes.push(node);
    for (const f of LIST_FIELDS) {
      if (f === "nodes") continue;
      const items = delta.lists[f];
      if (items) for (const item of items) trace.items[f].push(item);
    }
    if (delta.set) trace.set(delta.set);
    if (delta.nodes) trace.pending = EMPTY_ARRAY;
    if (delta.pending) trace.pending = delta.pending;
  }

  count(traceId: string, field: ListField): number {
    return this.traces.get(traceId)?.count(field) ?? 0;
  }

  /** The live traces as one msgpack array, in arrival order, each with its `pending`. */
  writeTraces(w: ChunkWriter): void {
    w.arrayHeader(this.traces.size);
    for (const t of this.traces.values()) t.write(w, true);
  }

  tracesBytes(): Uint8Array {
    const w = new ChunkWriter();
    this.writeTraces(w);
    return w.bytes();
  }

  /**
   * `{**head, "traces": [...]}` with the traces in the summaries' order, checked against the
   * summaries' counts. Throws FinishError with the reference's message. Returns chunks.
   */
  finish(head: Entry[], summaries: TraceSummary[]): Uint8Array[] {
    const picked: TraceState[] = [];
    for (const s of summaries) {
      const t = this.traces.get(s.id);
      if (!t) throw new FinishError(`served episode is missing trace ${s.id}`);
      const n = t.nodes.length;
      const c = t.items.calls.length;
      if (n !== s.nodes || c !== s.calls) {
        throw new FinishError(`served trace ${s.id} assembled ${n} nodes / ${c} calls, server reports ${s.nodes} / ${s.calls}`);
      }
      picked.push(t);
    }
    const w = new ChunkWriter();
    const hasTraces = head.some((e) => e.key === "traces");
    w.mapHeader(head.length + (hasTraces ? 0 : 1));
    const writeTraces = () => {
      w.arrayHeader(picked.length);
      for (const t of picked) t.write(w, false);
    };
    for (const e of head) {
      w.raw(e.keySpan);
      if (e.key === "traces") writeTraces();
      else w.raw(e.value);
    }
    if (!hasTraces) {
      w.str("traces");
      writeTraces();
    }
    return w.finish();
  }
}

function outOfRange(field: string, index: number, count: number): DeltaError {
  return new DeltaError("index_out_of_range", `${field}[${index}]`, `node ${index} does not exist (the trace holds ${count} node(s))`);
}

// The reference client's `EpisodeAssembly`, byte-exact: apply deltas in order, expose the
// current traces (checkpoint form) and `finish(head, summaries)` the episode.
//
// The assembly holds an index (traces in arrival order, their fields and pending, per node its
// NodeInfo, per item list a count and a size) and applies the rules; node and item bytes go to
// its Bodies (src/protocol/assembly/bodies.ts): in memory by default, SQLite in the relay.
//
// `apply` is all-or-nothing: every check that can fail (types, indices, routing, dtypes) runs
// against the current state first and builds the new values aside; only then is the state
// changed, by steps that cannot fail.

import { equalBytes } from "../wire/bytes.js";
import { concatChunks, EMPTY_ARRAY } from "../wire/writer.js";
import { type Bodies, MemoryBodies } from "./bodies.js";
import { type Entry, type ParsedDelta, parseDelta } from "./delta.js";
import { DeltaError, FinishError } from "./errors.js";
import { ITEM_FIELDS, type ItemField, type ListField } from "./fields.js";
import { type NdArray, repairLastRow } from "./ndarray.js";
import { infoOf, type NodeState, nodeLength } from "./node.js";
import { drain, MsgpackOut, type TraceView, viewOf, writeCheckpoint, writeFinished } from "./render.js";
import { parseReply, type TraceSummary } from "./reply.js";
import { TraceState } from "./trace.js";

/** Inverse operations of applied changes, run in reverse to roll back. */
export type Undo = Array<() => void>;

/** A node a link or a repair touches: as stored, and as the delta leaves it (and whether a repair did). */
interface Touched {
  before: NodeState;
  after: NodeState;
  repaired: boolean;
}

export type { TraceSummary } from "./reply.js";

export class EpisodeAssembly {
  /** Current traces in arrival order (the order their `open` was first applied). */
  readonly traces = new Map<string, TraceState>();
  /** The number the next new trace incarnation gets in its bodies. */
  private nextTnum = 1;
  /** Written into each NodeInfo the next apply makes (the relay sets it to the frame's seq). */
  version = 0;

  constructor(
    readonly bodies: Bodies = new MemoryBodies(),
    loaded: Iterable<TraceState> = [],
  ) {
    for (const t of loaded) {
      this.traces.set(t.id, t);
      this.nextTnum = Math.max(this.nextTnum, t.tnum + 1);
    }
  }

  /**
   * Hold `loaded` instead of the current traces (the relay reads its index back after rewinding
   * its bodies); the bodies themselves are the caller's business.
   */
  reset(loaded: Iterable<TraceState> = [], nextTnum = 1): void {
    this.traces.clear();
    for (const t of loaded) this.traces.set(t.id, t);
    this.reserveTnums(nextTnum);
  }

  /** The next incarnation number is at least `n` (numbers are never reused). */
  reserveTnums(n: number): void {
    this.nextTnum = Math.max(this.nextTnum, n);
  }

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
    if (delta.discard) return this.discard(delta.trace, undo);
    const held = this.traces.get(delta.trace);
    if (!held && !delta.open) {
      throw new DeltaError("unknown_trace", "trace", `unknown trace ${JSON.stringify(delta.trace)} and no \`open\``);
    }
    // checks and new values, before any change; then the changes, none of which can fail
    const touched = this.touchedNodes(held, delta);
    let trace: TraceState;
    if (held) {
      trace = held;
      undo?.push(undoOfChanges(held, delta, this.bodies));
    } else trace = this.open(delta, undo);
    this.change(trace, delta, touched, undo);
  }

  /** The trace leaves (its incarnation goes to its bodies); a trace not held is ignored. */
  private discard(id: string, undo?: Undo): void {
    const bodies = this.bodies;
    const gone = this.traces.get(id);
    if (!gone) return;
    if (undo) {
      const order = [...this.traces];
      undo.push(() => {
        this.traces.clear();
        for (const [k, v] of order) this.traces.set(k, v);
        bodies.restored(gone);
      });
    }
    this.traces.delete(id);
    bodies.dropped(gone);
  }

  /** The nodes a link or a repair touches, each read once, before and after; throws if one cannot apply. */
  private touchedNodes(held: TraceState | undefined, delta: ParsedDelta): Map<number, Touched> {
    const nodeCount = held ? held.nodes.length : 0;
    const touched = new Map<number, Touched>();
    const read = (index: number) => {
      let t = touched.get(index);
      if (!t) {
        const n = this.bodies.node(held!, index);
        touched.set(index, (t = { before: n, after: n, repaired: false }));
      }
      return t;
    };
    for (const { index, items } of delta.links ?? []) {
      if (index >= nodeCount) throw outOfRange("links", index, nodeCount);
      if (items.length === 0) continue;
      const t = read(index);
      t.after = { ...t.after, parents: t.after.parents.concat(items), pristine: false };
    }
    for (const { index, row } of delta.repairs ?? []) {
      if (index >= nodeCount) throw outOfRange("routing_repairs", index, nodeCount);
      const t = read(index);
      const routed: NdArray | null = t.after.routed;
      if (!routed)
        throw new DeltaError(
          "no_routing",
          `routing_repairs[${index}]`,
          `node ${index} has no routed_experts to repair`,
        );
      t.after = { ...t.after, routed: repairLastRow(routed, row, `routing_repairs[${index}]`), pristine: false };
      t.repaired = true;
    }
    return touched;
  }

  /** A new trace incarnation, from the delta's `open`. */
  private open(delta: ParsedDelta, undo?: Undo): TraceState {
    const bodies = this.bodies;
    const t = new TraceState(delta.trace, this.nextTnum++, delta.open!);
    this.traces.set(delta.trace, t);
    bodies.opened(t);
    undo?.push(() => {
      this.traces.delete(delta.trace);
      bodies.dropped(t);
    });
    return t;
  }

  /**
   * The delta's changes to `trace` (nothing here can fail): touched nodes, new nodes and items, set fields, pending.
   */
  private change(trace: TraceState, delta: ParsedDelta, touched: Map<number, Touched>, undo?: Undo): void {
    const bodies = this.bodies;
    for (const [index, { before, after, repaired }] of touched) {
      const info = trace.nodes[index]!;
      if (undo) {
        undo.push(() => {
          trace.nodes[index] = info;
          bodies.nodeRestored(trace, index, before);
        });
      }
      trace.nodes[index] = infoOf(after, nodeLength(after), this.version, info.repaired || repaired);
      bodies.nodeChanged(trace, index, after, info);
    }
    // The parsed nodes become its bodies (a ParsedDelta is applied once, to one assembly).
    if (delta.nodes?.length) {
      const from = trace.nodes.length;
      for (const node of delta.nodes) trace.nodes.push(infoOf(node, nodeLength(node), this.version));
      bodies.nodesAdded(trace, from, delta.nodes);
    }
    for (const f of ITEM_FIELDS) {
      const items = delta.lists[f];
      if (!items?.length) continue;
      const list = trace.items[f];
      let bytes = 0;
      for (const item of items) bytes += item.length;
      trace.items[f] = { count: list.count + items.length, bytes: list.bytes + bytes };
      bodies.itemsAdded(trace, f, list.count, items);
    }
    // lists the relay does not know, after the known ones (the reference's list order)
    if (delta.extra.length) {
      const extended = delta.extra.filter((e) => trace.extend(e)).map((e) => e.key);
      if (extended.length) bodies.fieldsSet(trace, extended);
    }
    if (delta.set) {
      trace.set(delta.set);
      bodies.fieldsSet(
        trace,
        delta.set.map((e) => e.key),
      );
    }
    const pending = delta.pending ?? (delta.nodes ? EMPTY_ARRAY : null);
    // by bytes, not identity: a woken object reads its preview back as a new array, and rewriting
    // the same bytes would cost a version (and its stale row) at every turn
    if (pending !== null && !equalBytes(pending, trace.pending)) {
      trace.pending = pending;
      bodies.pendingSet(trace);
    }
  }

  count(traceId: string, field: ListField): number {
    return this.traces.get(traceId)?.count(field) ?? 0;
  }

  /** Node `index` of a trace, parsed (from its bodies). */
  node(t: TraceState, index: number): NodeState {
    return this.bodies.node(t, index);
  }

  /** Every item of one list of a trace (from its bodies). */
  items(t: TraceState, field: ItemField): Uint8Array[] {
    return this.bodies.items(t.tnum, field, 0, t.items[field].count);
  }

  /** The current traces as they stand, in arrival order, for the writers. */
  views(): TraceView[] {
    return [...this.traces.values()].map(viewOf);
  }

  /** The current traces as one msgpack array, in arrival order, each with its `pending`. */
  tracesBytes(): Uint8Array {
    const out = new MsgpackOut();
    return concatChunks(drain(out, writeCheckpoint(out, this.bodies, this.views())));
  }

  /**
   * The traces the reply names, in its order, checked against its counts (the reference's
   * check). Throws FinishError with the reference's message.
   */
  pick(summaries: readonly TraceSummary[]): TraceView[] {
    const picked: TraceView[] = [];
    for (const s of summaries) {
      const t = this.traces.get(s.id);
      if (!t) throw new FinishError(`served episode is missing trace ${s.id}`);
      const n = t.nodes.length;
      const c = t.items.calls.count;
      if (n !== s.nodes || c !== s.calls) {
        throw new FinishError(
          `served trace ${s.id} assembled ${n} nodes / ${c} calls, server reports ${s.nodes} / ${s.calls}`,
        );
      }
      picked.push(viewOf(t));
    }
    return picked;
  }

  /** `{**head, "traces": [...]}` with the traces in the summaries' order, as chunks. Throws FinishError. */
  finish(head: readonly Entry[], summaries: readonly TraceSummary[]): Uint8Array[] {
    const out = new MsgpackOut();
    return drain(out, writeFinished(out, this.bodies, head, this.pick(summaries)));
  }

  /** The finished episode's bytes for an upstream reply (its bytes). Throws FinishError, DeltaError. */
  finishReply(reply: Uint8Array): Uint8Array {
    const r = parseReply(reply);
    return concatChunks(this.finish(r.head ?? [], r.summaries));
  }
}

function outOfRange(field: string, index: number, count: number): DeltaError {
  return new DeltaError(
    "index_out_of_range",
    `${field}[${index}]`,
    `node ${index} does not exist (the trace holds ${count} node(s))`,
  );
}

/**
 * The inverse of a delta's changes to a trace it did not open: its node count, list sizes,
 * pending and the fields `set` overwrites or adds, as they were.
 */
function undoOfChanges(t: TraceState, delta: ParsedDelta, bodies: Bodies): () => void {
  const nodes = t.nodes.length;
  const items = ITEM_FIELDS.map((f) => ({ ...t.items[f] }));
  const pending = t.pending;
  // the slots `set` and unknown lists will overwrite (undefined: a key they add, which is deleted)
  const before = [...delta.extra, ...(delta.set ?? [])].map((e) => [e.key, t.fields.get(e.key)] as const);
  return () => {
    if (t.nodes.length !== nodes) {
      t.nodes.length = nodes;
      bodies.nodesRemoved(t, nodes);
    }
    ITEM_FIELDS.forEach((f, i) => {
      if (t.items[f].count !== items[i]!.count) {
        t.items[f] = items[i]!;
        bodies.itemsRemoved(t, f, items[i]!.count);
      }
    });
    if (t.pending !== pending) {
      t.pending = pending;
      bodies.pendingSet(t);
    }
    for (let i = before.length - 1; i >= 0; i--) {
      const [k, slot] = before[i]!;
      if (slot) t.fields.set(k, slot);
      else t.fields.delete(k);
    }
    if (before.length)
      bodies.fieldsSet(
        t,
        before.map(([k]) => k),
      );
  };
}

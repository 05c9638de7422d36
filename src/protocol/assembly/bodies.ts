// Where the assembly keeps node and item bytes. The assembly (episode-assembly.ts) holds an index
// (traces, fields, per node its NodeInfo) and applies the rules; every body it writes or reads
// goes through its Bodies:
// - MemoryBodies (here): the bodies in memory, for clients, tools, tests and benches;
// - the relay's SqlStore (src/objects/episode/sql-store.ts): the bodies, and the index, in the Durable
//   Object's SQLite, so the object holds only the index.
//
// The write methods are the assembly's commit steps, called in order once every check passed;
// their inverses (used to roll back a refused batch) are the same methods called with the state
// to go back to. An implementation that writes inside a transaction may leave those to the rollback.

import type { ItemField } from "./fields.js";
import type { NodeInfo, NodeState } from "./node.js";
import type { TraceState } from "./trace.js";

/** Bytes of stored nodes and items, for the writers (the episode, checkpoints, snapshots). */
export interface BodyReader {
  /** Nodes [from, to) of trace incarnation `tnum`: parsed nodes or their encodings. */
  nodes(tnum: number, from: number, to: number): Array<NodeState | Uint8Array>;
  /** Items [from, to) of one list of trace incarnation `tnum`. */
  items(tnum: number, field: ItemField, from: number, to: number): Uint8Array[];
}

export interface Bodies extends BodyReader {
  /** Node `index` of `t` as it stands, parsed (a link or a repair starts from it). */
  node(t: TraceState, index: number): NodeState;

  /** A new trace (its open fields, list slots and pending are in `t`). */
  opened(t: TraceState): void;
  /** The trace was discarded. */
  dropped(t: TraceState): void;
  /** Undo of `dropped`: the trace is back, bodies and all. */
  restored(t: TraceState): void;
  /** Nodes appended at `from` (their NodeInfo is in `t.nodes`). */
  nodesAdded(t: TraceState, from: number, nodes: NodeState[]): void;
  /** Undo of `nodesAdded`: nodes from `from` on are gone. */
  nodesRemoved(t: TraceState, from: number): void;
  /** Node `index` is now `node` (its NodeInfo is in `t.nodes`; `before` was its NodeInfo). */
  nodeChanged(t: TraceState, index: number, node: NodeState, before: NodeInfo): void;
  /** Undo of `nodeChanged`: node `index` is `node` again. */
  nodeRestored(t: TraceState, index: number, node: NodeState): void;
  /** Items appended at `from` to one list. */
  itemsAdded(t: TraceState, field: ItemField, from: number, items: Uint8Array[]): void;
  /** Undo of `itemsAdded`. */
  itemsRemoved(t: TraceState, field: ItemField, from: number): void;
  /** These fields (scalars, unknown lists) changed, or (undo) are gone: their slots in `t.fields` say which. */
  fieldsSet(t: TraceState, keys: string[]): void;
  /** `t.pending` changed. */
  pendingSet(t: TraceState): void;
}

interface TraceBodies {
  nodes: NodeState[];
  items: Record<ItemField, Uint8Array[]>;
}

/** Bodies in memory: nodes as parsed (views of the frames they came in), items as spans. */
export class MemoryBodies implements Bodies {
  private readonly bodies = new Map<number, TraceBodies>();
  /** Bodies of discarded traces, until the trace object is gone (kept for `restored`). */
  private readonly discarded = new WeakMap<TraceState, TraceBodies>();

  private of(tnum: number): TraceBodies {
    const b = this.bodies.get(tnum);
    if (!b) throw new Error(`no trace incarnation ${tnum} in these bodies`);
    return b;
  }

  node(t: TraceState, index: number): NodeState {
    return this.of(t.tnum).nodes[index]!;
  }

  nodes(tnum: number, from: number, to: number): NodeState[] {
    return this.of(tnum).nodes.slice(from, to);
  }

  items(tnum: number, field: ItemField, from: number, to: number): Uint8Array[] {
    return this.of(tnum).items[field].slice(from, to);
  }

  opened(t: TraceState): void {
    this.bodies.set(t.tnum, {
      nodes: [],
      items: { calls: [], payload: [], errors: [], extra_usage: [], request_rewrites: [], response_rewrites: [] },
    });
  }

  dropped(t: TraceState): void {
    const b = this.bodies.get(t.tnum);
    if (b) this.discarded.set(t, b);
    this.bodies.delete(t.tnum);
  }

  restored(t: TraceState): void {
    const b = this.discarded.get(t);
    if (b) this.bodies.set(t.tnum, b);
  }

  nodesAdded(t: TraceState, from: number, nodes: NodeState[]): void {
    const list = this.of(t.tnum).nodes;
    list.length = from;
    for (const n of nodes) list.push(n);
  }

  nodesRemoved(t: TraceState, from: number): void {
    this.of(t.tnum).nodes.length = from;
  }

  nodeChanged(t: TraceState, index: number, node: NodeState): void {
    this.of(t.tnum).nodes[index] = node;
  }

  nodeRestored(t: TraceState, index: number, node: NodeState): void {
    this.of(t.tnum).nodes[index] = node;
  }

  itemsAdded(t: TraceState, field: ItemField, from: number, items: Uint8Array[]): void {
    const list = this.of(t.tnum).items[field];
    list.length = from;
    for (const i of items) list.push(i);
  }

  itemsRemoved(t: TraceState, field: ItemField, from: number): void {
    this.of(t.tnum).items[field].length = from;
  }

  fieldsSet(): void {
    // the index holds scalar fields
  }

  pendingSet(): void {
    // the index holds pending
  }
}

// A trace's merged annotations (records.ts) folded onto its nodes, as prime-rl's readers fold
// them (update.py `fold_trace_updates`, `branch_node_paths`): branch i is the path from a root to
// the i-th leaf in ascending node index (verifiers' `Trace.branches`); a stream's values run along
// the concatenated token_ids of the path's nodes; each node takes its slice's values at its
// sampled tokens (mask true), compact like its `logprobs`, unless the slice is shorter than the
// node (a truncated stream stops there), it has no sampled token, or (all streams but the partial
// ones) a value is null there. Entries are folded in order: a later one overwrites what an earlier
// one gave a node. Pure: the dashboard draws what this returns; tests check it on hand-made traces.

import { PARTIAL_STREAMS, type StreamValue } from "./records.js";

/** What the fold reads of a node (the episode's JSON view has these keys). */
export interface FoldNode {
  parent?: number | null;
  token_ids?: readonly number[] | null;
  mask?: readonly boolean[] | null;
}

/** A merged record as JSON (GET .../annotations): its branches' streams. */
export interface FoldRecord {
  branches: ReadonlyArray<{ index: number } & Record<string, unknown>>;
}

/** Per node index, per stream name: the node's values, one per sampled token. */
export type NodeSignals = Map<number, Map<string, StreamValue[]>>;

/** The node paths of a trace's branches: root → the i-th leaf (ascending), along `parent`, cycles cut. */
export function branchPaths(nodes: readonly FoldNode[]): number[][] {
  const isParent = new Uint8Array(nodes.length);
  for (const n of nodes) {
    const p = n.parent;
    if (typeof p === "number" && p >= 0 && p < nodes.length) isParent[p] = 1;
  }
  const paths: number[][] = [];
  for (let leaf = 0; leaf < nodes.length; leaf++) {
    if (isParent[leaf]) continue;
    const path: number[] = [];
    const seen = new Set<number>();
    for (let at: number | null = leaf; at !== null && at >= 0 && at < nodes.length && !seen.has(at); ) {
      seen.add(at);
      path.push(at);
      const p: number | null | undefined = nodes[at]!.parent;
      at = typeof p === "number" ? p : null;
    }
    paths.push(path.reverse());
  }
  return paths;
}

/** Fold `record`'s streams onto `nodes` (see the header). */
export function foldOntoNodes(nodes: readonly FoldNode[], record: FoldRecord): NodeSignals {
  const out: NodeSignals = new Map();
  const paths = branchPaths(nodes);
  for (const b of record.branches) {
    const path = Number.isSafeInteger(b.index) && b.index >= 0 ? paths[b.index] : undefined;
    if (!path) continue;
    for (const [name, stream] of Object.entries(b)) {
      if (name === "index" || !Array.isArray(stream) || stream.length === 0) continue;
      let cursor = 0;
      for (const idx of path) {
        const node = nodes[idx]!;
        const tokens = node.token_ids ?? [];
        const span = stream.slice(cursor, cursor + tokens.length) as StreamValue[];
        cursor += tokens.length;
        if (span.length < tokens.length) break; // a truncated stream leaves the rest of the path
        const mask = node.mask ?? [];
        const values = span.filter((_v, k) => mask[k] === true);
        if (values.length === 0) continue;
        const nulls = values.filter((v) => v === null).length;
        if (PARTIAL_STREAMS.has(name) ? nulls === values.length : nulls > 0) continue;
        let signals = out.get(idx);
        if (!signals) out.set(idx, (signals = new Map()));
        signals.set(name, values);
      }
    }
  }
  return out;
}

/** prime-rl's mismatch: exp(Δ) − Δ − 1 with Δ = trainer logprob − sampling logprob (null where either is missing). */
export function mismatchKl(trainer: readonly StreamValue[], sampled: readonly (number | null)[]): Array<number | null> {
  return trainer.map((t, i) => {
    const s = sampled[i];
    if (typeof t !== "number" || typeof s !== "number") return null;
    const d = t - s;
    return Math.exp(d) - d - 1;
  });
}

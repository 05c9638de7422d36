// The text batches an episode sends its run's index (src/objects/registry/search-store.ts), and how
// two of them held back one after the other add up to one: a running episode's text waits in the
// index up to SEARCH_FLUSH_MS (limits/vars.ts) and goes into the search in one write, so the later
// batch must say exactly what the two said in turn. Pure: no runtime imports.

import type { Segment } from "./segments.js";

/**
 * What an episode sends with its row: the traces it holds, per trace the node its segments start from, and the
 * segments.
 */
export interface TextBatch {
  traces: string[];
  /** Per trace: segments of nodes at or after this index (-1: the task too) are replaced by the batch's. */
  from: Record<string, number>;
  segments: Segment[];
}

/**
 * `first` then `next` as one batch: the traces `next` holds; per trace the earlier of the two `from`s; `first`'s
 * segments that `next` does not replace, then `next`'s.
 */
export function mergeBatches(first: TextBatch, next: TextBatch): TextBatch {
  const from: Record<string, number> = {};
  for (const t of next.traces) {
    const a = first.traces.includes(t) ? first.from[t] : undefined;
    const b = next.from[t];
    if (a !== undefined || b !== undefined) from[t] = Math.min(a ?? b!, b ?? a!);
  }
  return {
    traces: [...next.traces],
    from,
    segments: [...first.segments.filter((s) => !replaced(next, s)), ...next.segments],
  };
}

/** Whether `next` replaces any of `first`'s segments (a retraction or a discarded trace while they waited). */
export function replacesAny(first: TextBatch, next: TextBatch): boolean {
  return first.segments.some((s) => replaced(next, s));
}

function replaced(batch: TextBatch, s: Segment): boolean {
  if (!batch.traces.includes(s.trace)) return true;
  const from = batch.from[s.trace];
  return from !== undefined && s.node >= from;
}

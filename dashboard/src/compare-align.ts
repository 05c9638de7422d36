// What the compare page computes, without the DOM (the ranking and its tie rule are the protocol's:
// src/protocol/registry/ranking.ts, the group API's order too): the turn-by-turn alignment of two or more rollouts' traces with the first turn where
// they diverge, and a word-level diff of one turn's text (the `diff` package's diffWords, pinned:
// a well-kept implementation of Myers' algorithm rather than one of our own).
import { diffWords } from "diff";

/** One row of an alignment: turn `index` of every rollout (null: that rollout has no such turn). */
export interface AlignedTurn {
  index: number;
  /** Each rollout's turn key (what "the same" compares), or null. */
  keys: (string | null)[];
  /** Rollouts with equal turns share a class number (0 is the first rollout's); -1: no turn. */
  classes: number[];
  /** Every rollout has this turn and all are equal. */
  same: boolean;
}

export interface Alignment {
  turns: AlignedTurn[];
  /** The first turn where the rollouts are not all the same, or null when they never differ. */
  divergence: number | null;
}

/** Align the rollouts' turn keys (`keys[r][i]`: rollout r's turn i) turn by turn. */
export function alignTurns(keys: readonly (readonly string[])[]): Alignment {
  const n = Math.max(0, ...keys.map((k) => k.length));
  const turns: AlignedTurn[] = [];
  let divergence: number | null = null;
  for (let i = 0; i < n; i++) {
    const row = keys.map((k) => (i < k.length ? k[i]! : null));
    const seen: string[] = [];
    const classes = row.map((k) => {
      if (k === null) return -1;
      let c = seen.indexOf(k);
      if (c < 0) c = seen.push(k) - 1;
      return c;
    });
    const same = keys.length > 0 && row.every((k) => k !== null) && seen.length === 1;
    if (!same && divergence === null) divergence = i;
    turns.push({ index: i, keys: row, classes, same });
  }
  return { turns, divergence };
}

/**
 * Pair up the rollouts' traces: trace slot t holds each rollout's t-th trace (rollouts of one
 * environment have the same traces in the same order); a rollout with fewer traces has none there.
 */
export function traceSlots<T>(traces: readonly (readonly T[])[]): (T | null)[][] {
  const n = Math.max(0, ...traces.map((t) => t.length));
  return Array.from({ length: n }, (_, s) => traces.map((t) => t[s] ?? null));
}

/** One piece of a word diff: kept, added (only in `b`) or removed (only in `a`). */
export interface DiffPart {
  kind: "same" | "added" | "removed";
  text: string;
}

/** The word-level diff of `a` into `b`. */
export function wordDiff(a: string, b: string): DiffPart[] {
  return diffWords(a, b).map((c) => ({ kind: c.added ? "added" : c.removed ? "removed" : "same", text: c.value }));
}

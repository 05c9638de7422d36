// The orders a run's episodes are listed in, exactly as the relay pages them
// (src/objects/registry/episode-pages.ts: `updated DESC, id DESC`, or `reward DESC, id DESC` / `step DESC,
// id DESC` with the rows without one last), so rows the socket brings and rows a page brings
// interleave the same way on both sides.
import type { IndexEntry, SortKey } from "../../src/protocol/index.js";

export type { SortKey };

/** Negative when `a` is listed before `b`. */
export function compareEntries(sort: SortKey, a: IndexEntry, b: IndexEntry): number {
  if (sort === "updated") {
    const d = Date.parse(b.updated) - Date.parse(a.updated);
    if (d !== 0) return d;
  } else {
    const [x, y] = sort === "reward" ? [a.reward, b.reward] : [a.step, b.step];
    if (x !== y) {
      if (x === null) return 1;
      if (y === null) return -1;
      return y - x;
    }
  }
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

/** The newer of two versions of one episode's row (the relay's own rule: later update, then higher seq). */
export function newer(a: IndexEntry | undefined, b: IndexEntry): IndexEntry {
  if (!a) return b;
  if (a.updated !== b.updated) return Date.parse(b.updated) > Date.parse(a.updated) ? b : a;
  return b.seq >= a.seq ? b : a;
}

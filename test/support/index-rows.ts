// Index rows (src/protocol/registry/entry.ts) for the tests of a run's index and its numbers, built from
// what each test sets over one set of defaults. Plain data: used both in Node and inside workerd.
import type { IndexRow } from "../../src/protocol/registry/entry.js";

type Named = Pick<IndexRow, "id" | "run" | "status"> & Partial<IndexRow>;

/** A row with only the fields every release writes: one trace, one node, one call, one token, no rewards, no error, unless `fields` say otherwise. */
export function indexRow({ id, run, status, ...fields }: Named): IndexRow {
  return {
    id,
    run,
    status,
    created: 1,
    updated: 2,
    ended: null,
    seq: 1,
    traces: 1,
    nodes: 1,
    calls: 1,
    tokens: 1,
    rewards: null,
    error: null,
    ...fields,
  };
}

/**
 * A row as this release writes it, the fields beyond the first release's at their "none" (no task,
 * group, stop condition, run name, dispatch identity, progress facts or flags; not truncated); `ended` is `updated` once finished or failed,
 * and a failed one's error is "crashed", unless `fields` say otherwise.
 */
export function currentRow({ id, run, status, ...fields }: Named & Pick<IndexRow, "updated">): IndexRow {
  return indexRow({
    id,
    run,
    status,
    ended: status === "finished" || status === "failed" ? fields.updated : null,
    error: status === "failed" ? "crashed" : null,
    task: null,
    group: null,
    stop_condition: null,
    is_truncated: false,
    is_timeout: false,
    run_name: null,
    dispatch: null,
    live: null,
    flags: [],
    ...fields,
  });
}

/** `rewards` of a row: each score at weight 1. */
export function weightOne(scores: Record<string, number>): IndexRow["rewards"] {
  return Object.fromEntries(Object.entries(scores).map(([k, s]) => [k, { score: s, weight: 1 }]));
}

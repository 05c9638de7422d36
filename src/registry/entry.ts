// An episode index row and its API form: types and a pure conversion with no runtime imports,
// shared by the index, the Episode object, the dashboard and tests.

import type { Json } from "../wire/json-view.js";

export type IndexStatus = "live" | "finished" | "failed" | "finish_refused";
export const INDEX_STATUSES: readonly IndexStatus[] = ["live", "finished", "failed", "finish_refused"];

/** One episode as the index holds it (what the Episode object sends; times in ms since epoch). */
export interface IndexRow {
  id: string;
  status: IndexStatus;
  created: number;
  updated: number;
  seq: number;
  traces: number;
  nodes: number;
  calls: number;
  /** The first (orchestrator) trace's `rewards` scalar as JSON, null when it has none yet. */
  rewards: Json;
  error: string | null;
}

/** A row as the API shows it (`GET /v1/episodes`, the index socket): times as ISO strings. */
export interface IndexEntry extends Omit<IndexRow, "created" | "updated"> {
  created: string;
  updated: string;
}

export function entryOf(r: IndexRow): IndexEntry {
  return { ...r, created: new Date(r.created).toISOString(), updated: new Date(r.updated).toISOString() };
}

// The index socket's protocol (`GET /v1/episodes/watch`), both directions, encode and decode side
// by side: the index encodes, the dashboard and clients decode with `parseIndexMessage`.
//
// Server → client, JSON text:
//   {type: "snapshot", episodes: [entry...], truncated, limit}   the newest episodes in scope, at connect
//   {type: "upsert", episode: entry}                              an episode changed (or appeared)
//   {type: "delete", id}                                          an episode was deleted or expired
// Client → server: only "ping" (answered "pong" by the platform); anything else closes the socket.

import type { IndexEntry } from "./entry.js";

export type IndexMessage =
  | { type: "snapshot"; episodes: IndexEntry[]; truncated: boolean; limit: number }
  | { type: "upsert"; episode: IndexEntry }
  | { type: "delete"; id: string };

export function encodeIndexMessage(m: IndexMessage): string {
  return JSON.stringify(m);
}

/** One server → client message; throws on anything else. */
export function parseIndexMessage(text: string): IndexMessage {
  const m = JSON.parse(text) as Record<string, unknown> | null;
  if (typeof m === "object" && m !== null) {
    if (m.type === "snapshot" && Array.isArray(m.episodes) && m.episodes.every(isEntry) && typeof m.truncated === "boolean" && typeof m.limit === "number") {
      return m as unknown as IndexMessage;
    }
    if (m.type === "upsert" && isEntry(m.episode)) return m as unknown as IndexMessage;
    if (m.type === "delete" && typeof m.id === "string") return m as unknown as IndexMessage;
  }
  throw new Error(`not an index message: ${text.slice(0, 80)}`);
}

function isEntry(v: unknown): v is IndexEntry {
  if (typeof v !== "object" || v === null) return false;
  const e = v as Record<string, unknown>;
  return typeof e.id === "string" && typeof e.status === "string" && typeof e.updated === "string" && typeof e.created === "string";
}

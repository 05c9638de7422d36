// The episode index's row and the pure parts of its queries (parameters, cursors, scope checks),
// kept apart from the Durable Object so they can be reasoned about (and tested) on their own.

import { inScope } from "../http/auth.js";
import { RelayError } from "../http/errors.js";

export { INDEX_STATUSES, entryOf, type IndexEntry, type IndexRow, type IndexStatus } from "./entry.js";
import { INDEX_STATUSES, type IndexStatus } from "./entry.js";

/** Header the Worker sets on requests to the index: the viewer's `episodes` patterns as JSON. */
export const SCOPE_HEADER = "x-episode-scope";

/** Who may see what: null = everything (a `*` pattern, or auth off on loopback). */
export type Scope = string[] | null;

export function scopeOf(patterns: readonly string[]): Scope {
  return patterns.includes("*") ? null : [...patterns];
}

export function visible(scope: Scope, id: string, prefix: string | null = null): boolean {
  if (prefix !== null && !id.startsWith(prefix)) return false;
  return scope === null || inScope(scope, id);
}

// ---- listing parameters ----

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 500;

export interface ListQuery {
  status: IndexStatus | null;
  prefix: string | null;
  limit: number;
  /** Continue after this (updated, id), in newest-updated-first order. */
  after: { updated: number; id: string } | null;
}

const PREFIX = /^[A-Za-z0-9._:-]{0,128}$/;

/** `?status=&prefix=&limit=&cursor=`; throws a RelayError (400, naming the parameter) on a bad value. */
export function parseListQuery(params: URLSearchParams, defaultLimit = DEFAULT_LIMIT): ListQuery {
  const status = params.get("status") || null;
  if (status !== null && !(INDEX_STATUSES as readonly string[]).includes(status)) {
    throw new RelayError("bad_status", `status must be one of ${INDEX_STATUSES.join(", ")}`, "status");
  }
  const prefix = params.get("prefix") || null;
  if (prefix !== null && !PREFIX.test(prefix)) {
    throw new RelayError("bad_prefix", "prefix must be up to 128 characters of [A-Za-z0-9._:-]", "prefix");
  }
  const rawLimit = params.get("limit");
  let limit = defaultLimit;
  if (rawLimit !== null && rawLimit !== "") {
    limit = Number(rawLimit);
    if (!Number.isSafeInteger(limit) || limit < 1) throw new RelayError("bad_limit", `limit must be an integer from 1 to ${MAX_LIMIT}`, "limit");
    limit = Math.min(limit, MAX_LIMIT);
  }
  const cursor = params.get("cursor") || null;
  return { status: status as IndexStatus | null, prefix, limit, after: cursor === null ? null : decodeCursor(cursor) };
}

/** An opaque cursor: base64url of `[updated, id]` of the last row of a page. */
export function encodeCursor(updated: number, id: string): string {
  const bytes = new TextEncoder().encode(JSON.stringify([updated, id]));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function decodeCursor(cursor: string): { updated: number; id: string } {
  try {
    const bin = atob(cursor.replace(/-/g, "+").replace(/_/g, "/"));
    const v = JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)))) as unknown;
    if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === "string") {
      return { updated: v[0] as number, id: v[1] };
    }
  } catch {
    // fall through
  }
  throw new RelayError("bad_cursor", "cursor is not one this relay handed out", "cursor");
}

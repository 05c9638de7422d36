// Which representation of an episode a GET asks for (msgpack, or the JSON view) and its ETags:
// shared by the Episode object's reads (src/objects/episode/read.ts), the archive's (archive-read.ts) and
// the Worker. Pure: no runtime imports.

/** What the Worker passes on of a GET or HEAD of the episode. */
export interface ReadRequest {
  /** The JSON view (Accept: application/json), else msgpack. */
  json: boolean;
  head: boolean;
  ifNoneMatch: string | null;
}

export const MSGPACK = "application/msgpack";

export function wantsJson(accept: string | null): boolean {
  const a = accept ?? "";
  return /application\/json/.test(a) && !/application\/(x-)?msgpack/.test(a);
}

/** The representation's ETag, quoted: the msgpack and JSON forms are two representations. */
export function representationEtag(etag: string, json: boolean): string {
  return `"${etag}-${json ? "json" : "msgpack"}"`;
}

/** Whether an If-None-Match header names `etag` (or `*`). */
export function matchesEtag(ifNoneMatch: string | null, etag: string): boolean {
  return ifNoneMatch?.split(",").some((t) => t.trim() === etag || t.trim() === "*") ?? false;
}

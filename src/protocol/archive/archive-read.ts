// GET and HEAD of an archived episode, answered from R2 by the Worker (src/objects/episode/archive.ts wrote
// it under `archiveKey`): the same bytes, ETag and caching headers the episode's object answers (plus
// X-Episode-Archive), and the object is not woken. The episode's object reads an archived episode through it too.
// Pure but for the bucket it is given (the part of R2 it uses is typed here, the runtime's is not). R2 keeps the msgpack only: the JSON view is
// rendered from it as it streams out (src/protocol/archive/json-view.ts), the same text the object wrote
// from SQLite (so no Content-Length for JSON: its size is known only once written). A JSON copy
// an older release wrote is never read. Null when the episode is not archived, or R2 fails: the
// object answers then.

import { MSGPACK, matchesEtag, type ReadRequest, representationEtag } from "../http/representation.js";
import { archivedJsonStream } from "./json-view.js";

/** The R2 key of an episode's archived msgpack (ids never hold `/`). */
export function archiveKey(id: string): string {
  return `episodes/msgpack/${id}`;
}

/** R2 custom metadata the Worker answers from: the episode's ETag (without the representation). */
export interface ArchiveMetadata extends Record<string, string> {
  etag: string;
  seq: string;
}

/** What an archived read asks of R2 (an `R2Bucket` is one). */
export interface ArchiveBucket {
  head(key: string): Promise<{ size: number; customMetadata?: Record<string, string> } | null>;
  get(
    key: string,
  ): Promise<{ size: number; customMetadata?: Record<string, string>; body: ReadableStream<Uint8Array> } | null>;
}

/** Set on answers served from the archive (tests and benches tell the two paths apart by it). */
export const ARCHIVE_HEADER = "x-episode-archive";

export async function readArchived(bucket: ArchiveBucket, id: string, req: ReadRequest): Promise<Response | null> {
  try {
    return await fromR2(bucket, id, req);
  } catch (e) {
    // R2 unreachable: the episode's object answers (from SQLite, or with the error if it is archived)
    console.warn(`episode ${id}: archive read failed, asking the object`, e);
    return null;
  }
}

async function fromR2(bucket: ArchiveBucket, id: string, req: ReadRequest): Promise<Response | null> {
  const key = archiveKey(id);
  // a conditional or HEAD request needs only the metadata; a GET that will send the body gets it at once
  const probe = req.head || req.ifNoneMatch !== null ? await bucket.head(key) : null;
  if ((req.head || req.ifNoneMatch !== null) && !probe) return null;
  const meta = probe?.customMetadata as ArchiveMetadata | undefined;
  if (probe && !meta?.etag) return null; // not written by the archive step
  if (probe && meta && matchesEtag(req.ifNoneMatch, representationEtag(meta.etag, req.json))) {
    return new Response(null, { status: 304, headers: headersFor(meta, req.json, probe.size) });
  }
  if (req.head) return new Response(null, { headers: headersFor(meta!, req.json, probe!.size) });
  const obj = await bucket.get(key);
  if (!obj) return null;
  if (!(obj.customMetadata as Partial<ArchiveMetadata> | undefined)?.etag) {
    await obj.body.cancel();
    return null;
  }
  const headers = headersFor(obj.customMetadata as ArchiveMetadata, req.json, obj.size);
  return new Response(req.json ? archivedJsonStream(obj.body) : obj.body, { headers });
}

function headersFor(meta: ArchiveMetadata, json: boolean, size: number): Headers {
  return new Headers({
    "content-type": json ? "application/json" : MSGPACK,
    ...(json ? {} : { "content-length": String(size) }),
    etag: representationEtag(meta.etag, json),
    "cache-control": "private, max-age=0, must-revalidate",
    vary: "Accept",
    [ARCHIVE_HEADER]: "1",
  });
}

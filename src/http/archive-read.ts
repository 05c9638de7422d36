// GET and HEAD of an archived episode, answered from R2 by the Worker (src/episode/archive.ts wrote
// it): the same bytes, ETag, Content-Length and caching headers the episode's object answers, and
// the object is not woken. Null when the episode is not archived (the object answers then).

import { type ArchiveMetadata, archiveKey } from "../episode/archive.js";
import { matchesEtag, MSGPACK, type ReadRequest, representationEtag } from "../episode/read.js";

/** Set on answers served from the archive (tests and benches tell the two paths apart by it). */
export const ARCHIVE_HEADER = "x-episode-archive";

export async function readArchived(bucket: R2Bucket, id: string, req: ReadRequest): Promise<Response | null> {
  const key = archiveKey(id, req.json);
  // a conditional or HEAD request needs only the metadata; a GET that will send the body gets it at once
  const probe = req.head || req.ifNoneMatch !== null ? await bucket.head(key) : null;
  if ((req.head || req.ifNoneMatch !== null) && !probe) return null;
  const meta = probe?.customMetadata as ArchiveMetadata | undefined;
  if (probe && meta && matchesEtag(req.ifNoneMatch, representationEtag(meta.etag, req.json))) {
    return new Response(null, { status: 304, headers: headersFor(meta, req.json, probe.size) });
  }
  if (req.head) return new Response(null, { headers: headersFor(meta!, req.json, probe!.size) });
  const obj = await bucket.get(key);
  if (!obj) return null;
  return new Response(obj.body, { headers: headersFor(obj.customMetadata as ArchiveMetadata, req.json, obj.size) });
}

function headersFor(meta: ArchiveMetadata, json: boolean, size: number): Headers {
  return new Headers({
    "content-type": json ? "application/json" : MSGPACK,
    "content-length": String(size),
    etag: representationEtag(meta.etag, json),
    "cache-control": "private, max-age=0, must-revalidate",
    vary: "Accept",
    [ARCHIVE_HEADER]: "1",
  });
}

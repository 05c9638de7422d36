// The archive's multipart upload under way (archive.ts `putInParts`), kept in SQLite as it goes:
// which upload, for which ETag and part size, and each part R2 took. A step cut by a restart (a
// deploy drops every object) resumes it at the next alarm and sends only the parts R2 lacks; one
// that cannot go on (another part size, an ETag that moved, an upload R2 no longer knows) is
// aborted, so no upload's parts are left for R2's lifecycle rule to find a week later.

/** The tables (episode schema version 5; layout.ts has their latest layout). */
export function createArchiveUploadTables(sql: SqlStorage): void {
  sql.exec(
    "CREATE TABLE IF NOT EXISTS archive_upload (upload_id TEXT NOT NULL, etag TEXT NOT NULL, part_bytes INTEGER NOT NULL)",
  );
  sql.exec("CREATE TABLE IF NOT EXISTS archive_parts (part INTEGER PRIMARY KEY, etag TEXT NOT NULL)");
}

import { emptyTable } from "./layout.js";

/** An upload under way: R2's id, what it uploads, and the parts R2 has taken (in part order). */
interface UploadUnderWay {
  uploadId: string;
  etag: string;
  partBytes: number;
  parts: R2UploadedPart[];
}

/** The record of the multipart upload under way (`archive_upload`, `archive_parts`) and every query on it. */
export class ArchiveUploadStore {
  constructor(private readonly sql: SqlStorage) {}

  /** The upload under way, if any. */
  get(): UploadUnderWay | null {
    const u = this.sql
      .exec<{ upload_id: string; etag: string; part_bytes: number }>(
        "SELECT upload_id, etag, part_bytes FROM archive_upload",
      )
      .toArray()[0];
    if (!u) return null;
    const parts = this.sql
      .exec<{ part: number; etag: string }>("SELECT part, etag FROM archive_parts ORDER BY part")
      .toArray()
      .map((p) => ({ partNumber: p.part, etag: p.etag }));
    return { uploadId: u.upload_id, etag: u.etag, partBytes: u.part_bytes, parts };
  }

  /** A new upload began (any earlier record goes). */
  began(uploadId: string, etag: string, partBytes: number): void {
    this.clear();
    this.sql.exec("INSERT INTO archive_upload VALUES (?, ?, ?)", uploadId, etag, partBytes);
  }

  /** R2 took a part. */
  took(part: R2UploadedPart): void {
    this.sql.exec("INSERT OR REPLACE INTO archive_parts VALUES (?, ?)", part.partNumber, part.etag);
  }

  /** The upload completed or was aborted. */
  clear(): void {
    emptyTable(this.sql, "archive_upload");
    emptyTable(this.sql, "archive_parts"); // a row per part: dropped, not deleted row by row
  }
}

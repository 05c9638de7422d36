// INDEX_SCHEMA version 14: each episode's text segments get ids in a block of their own (search-store.ts
// SEGMENT_BLOCK, from the row's `seg_base`), so they are found by a range of the table's key and the index
// segments_by_episode (an entry written per segment) goes. The segments are copied with their new ids in their
// order, and FTS5's index is built again from them (its rowids are the segments' ids). Safe to run again: once
// the index is gone there is nothing to do.

import { addColumns } from "../storage/schema.js";
import { SEGMENT_BLOCK } from "./search-store.js";

export function blockSegments(sql: SqlStorage): void {
  addColumns(sql, "rows", ["seg_base INTEGER"]);
  const pending =
    sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'segments_by_episode'").toArray().length > 0;
  if (!pending) return;
  // a block per episode with text, in the order its text came
  sql.exec(`UPDATE rows SET seg_base = b.n FROM
    (SELECT episode, ROW_NUMBER() OVER (ORDER BY MIN(id)) AS n FROM segments GROUP BY episode) b WHERE b.episode = rows.id`);
  sql.exec(`CREATE TABLE segments_v14 (id INTEGER PRIMARY KEY, episode TEXT NOT NULL, trace TEXT NOT NULL,
    node INTEGER NOT NULL, role TEXT NOT NULL, tool TEXT, kind TEXT NOT NULL, body TEXT NOT NULL)`);
  // a segment whose episode has no row could not be found again: it is left out
  sql.exec(`INSERT INTO segments_v14 (id, episode, trace, node, role, tool, kind, body)
    SELECT r.seg_base * ${SEGMENT_BLOCK} + ROW_NUMBER() OVER (PARTITION BY s.episode ORDER BY s.id) - 1,
      s.episode, s.trace, s.node, s.role, s.tool, s.kind, s.body
    FROM segments s JOIN rows r ON r.id = s.episode ORDER BY s.id`);
  sql.exec("DROP TABLE segments");
  sql.exec("ALTER TABLE segments_v14 RENAME TO segments");
  sql.exec("INSERT INTO search (search) VALUES ('rebuild')");
  const top = sql.exec<{ n: number | null }>("SELECT MAX(seg_base) AS n FROM rows").one().n;
  if (top !== null)
    sql.exec("INSERT INTO state VALUES ('seg_base', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", String(top));
}

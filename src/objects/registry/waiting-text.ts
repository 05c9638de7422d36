// INDEX_SCHEMA version 16: a running episode's text waits in its own row (`text_since`, `text_waiting`), written with
// the row's update, instead of a row of its own in `search_pending` (one more row written per update). The episodes
// whose text waits are found by `rows_text_waiting` (an entry when text begins to wait, gone when it goes into the
// search). Rows are read without the waiting text wherever they are listed (sql-row.ts ROW_COLUMNS). Safe to run again:
// the batches are moved only while the old table is there.

import { addColumns } from "../storage/schema.js";

export function textInRows(sql: SqlStorage): void {
  addColumns(sql, "rows", ["text_since INTEGER", "text_waiting TEXT"]);
  sql.exec("CREATE INDEX IF NOT EXISTS rows_text_waiting ON rows (text_since) WHERE text_since IS NOT NULL");
  const held = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_pending'").toArray();
  if (held.length === 0) return;
  // a batch whose episode has no row could not be found again (its text would never be searched): it is left out
  sql.exec(
    `UPDATE rows SET text_since = p.since, text_waiting = p.batch FROM search_pending p WHERE p.episode = rows.id`,
  );
  sql.exec("DROP TABLE search_pending");
}

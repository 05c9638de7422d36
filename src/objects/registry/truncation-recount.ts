// Migration 13 of a run's index (schemas.ts): truncation becomes the trainer's (src/protocol/registry/truncation.ts).
// The column `truncated` held the first trace's `is_timeout`; it is renamed `is_timeout` (its meaning), and a
// new column `is_truncated` holds the trainer's truncation. The index holds no calls, so it cannot count it:
// a row whose stop condition truncates is truncated whatever its calls say; every other row starts uncounted
// (NULL) and its episode is asked to send its row again, which counts it from its calls (the alarm's resends,
// reward-recount.ts `resendDue`: RESEND_BATCH rows by id per alarm). What stays uncounted (the episode gone, or
// archived by a release that kept no truncation) shows as not counted (null) and counts as not truncated.
//
// What was kept from the old meaning is recounted here: a step counted as truncated the rows whose stop
// condition truncates, exactly the rows now set, so the steps stand; the reward rules' flags read `truncated`
// (a timeout), so they are recounted for every row, a page at a time.

import { TRUNCATING_STOPS } from "../../protocol/registry/truncation.js";
import { addColumns } from "../storage/schema.js";
import { FlagStore } from "./flag-store.js";
import { RESEND_STATE } from "./reward-recount.js";
import { rowPages } from "./sql-row.js";

export function recountTruncation(sql: SqlStorage): void {
  // as every migration, safe to run again over storage that has it (a column renamed already stays)
  if (sql.exec("SELECT 1 FROM pragma_table_info('rows') WHERE name = 'truncated'").toArray().length)
    sql.exec("ALTER TABLE rows RENAME COLUMN truncated TO is_timeout");
  sql.exec("DROP INDEX IF EXISTS rows_truncated");
  sql.exec("CREATE INDEX IF NOT EXISTS rows_is_timeout ON rows (updated DESC, id DESC) WHERE is_timeout = 1");
  addColumns(sql, "rows", ["is_truncated INTEGER"]);
  // the `is_truncated=1` filter walks this as `truncated=1` walked its index (episode-pages.ts)
  sql.exec("CREATE INDEX IF NOT EXISTS rows_is_truncated ON rows (updated DESC, id DESC) WHERE is_truncated = 1");
  const stops = [...TRUNCATING_STOPS];
  sql.exec(`UPDATE rows SET is_truncated = 1 WHERE stop IN (${stops.map(() => "?").join(", ")})`, ...stops);

  const flags = new FlagStore(sql);
  for (const page of rowPages(sql)) {
    for (const r of page) {
      const now = flags.update(r, null);
      sql.exec("UPDATE rows SET flags = ? WHERE id = ?", now.length ? JSON.stringify(now) : null, r.id);
    }
  }
  // every row is to be sent again from the first (a resend left under way is covered: it starts over)
  if (sql.exec("SELECT 1 FROM rows LIMIT 1").toArray().length)
    sql.exec(`INSERT OR REPLACE INTO state VALUES ('${RESEND_STATE}', '')`);
}

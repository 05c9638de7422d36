// The run directory's SQLite table and every query on it: one row per run with its counts (what
// each run's index last sent), read newest-created first by keyset. The object
// (run-directory.ts) calls these; nothing here decides whom to tell. The table is
// DIRECTORY_SCHEMA's (schemas.ts).

import type { RunPosition } from "../../protocol/registry/list-cursors.js";

/** A run's row (times in ms). */
export interface RunRow {
  run: string;
  created: number;
  updated: number;
  episodes: number;
  live: number;
  finished: number;
  failed: number;
  finish_refused: number;
  /** Per reward key, the mean over the finished episodes; null for a row written before the directory kept it. */
  mean_rewards: Record<string, number> | null;
}

/** A row as SQLite holds it: the mean rewards as JSON text (NULL in rows written before schema version 2). */
type SqlRunRow = Omit<RunRow, "mean_rewards"> & { mean_rewards: string | null } & Record<string, SqlStorageValue>;

function runRowOf(r: SqlRunRow): RunRow {
  return {
    ...r,
    mean_rewards: r.mean_rewards === null ? null : (JSON.parse(r.mean_rewards) as Record<string, number>),
  };
}

/** Directory rows one page may read past (the runs a token may see can be few among many). */
export const DIRECTORY_SCAN_BUDGET = 1000;

export class DirectoryStore {
  constructor(private readonly sql: SqlStorage) {}

  /** Insert or replace the run's row. */
  put(r: RunRow): void {
    this.sql.exec(
      "INSERT OR REPLACE INTO runs (run, created, updated, episodes, live, finished, failed, finish_refused, mean_rewards) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
      r.run,
      r.created,
      r.updated,
      r.episodes,
      r.live,
      r.finished,
      r.failed,
      r.finish_refused,
      r.mean_rewards === null ? null : JSON.stringify(r.mean_rewards),
    );
  }

  /** Drop the run's row; false when there was none. */
  delete(run: string): boolean {
    return this.sql.exec("DELETE FROM runs WHERE run = ?", run).rowsWritten > 0;
  }

  /**
   * Runs newest-created first after `after` that `keep` accepts: at most `limit`, and where the
   * next page starts (null: the table ended). Reads `limit + 1` rows at a time until the page is
   * full, the table ends, or `budget` rows were read: a `keep` that passes few runs then gives a
   * short page whose position is the last row read (not one the caller may see: the Worker seals it).
   */
  page(
    after: RunPosition | null,
    limit: number,
    keep: (run: string) => boolean,
    budget = DIRECTORY_SCAN_BUDGET,
  ): { rows: RunRow[]; next: RunPosition | null } {
    const out: RunRow[] = [];
    let from = after;
    let read = 0;
    for (;;) {
      const batch = this.after(from, limit + 1);
      for (const r of batch) {
        read++;
        if (!keep(r.run)) continue;
        if (out.length === limit) return { rows: out, next: out.at(-1)! };
        out.push(r);
      }
      if (batch.length <= limit) return { rows: out, next: null };
      from = batch.at(-1)!;
      if (read >= budget) return { rows: out, next: { created: from.created, run: from.run } };
    }
  }

  /** Up to `n` rows after `from`, newest-created first (runs_by_created). */
  private after(from: RunPosition | null, n: number): RunRow[] {
    return this.sql
      .exec<SqlRunRow>(
        // a row value: SQLite seeks runs_by_created to it (an OR of the two would scan the table)
        `SELECT * FROM runs ${from ? "WHERE (created, run) < (?, ?)" : ""} ORDER BY created DESC, run DESC LIMIT ?`,
        ...(from ? [from.created, from.run] : []),
        n,
      )
      .toArray()
      .map(runRowOf);
  }
}

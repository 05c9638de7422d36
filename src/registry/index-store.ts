// A run index's SQLite tables and every query on them: the episodes' rows (with their bulk-fetch
// order), the per-key reward scores (for min/max), the ended-per-minute throughput, the kept
// counters and a few state values. The object (episode-index.ts) calls these inside its own
// transactions; nothing here decides when to write or whom to tell.

import type { Json } from "../wire/json-view.js";
import { aggregatesOf, applyContribution, type Contribution, type Counters, contributionOf, emptyCounters, type RunAggregates } from "./aggregates.js";
import { GroupStore } from "./group-store.js";
import type { RunRow } from "./run-directory.js";
import { rewardOf } from "./rewards.js";
import { type IndexRow, type ListQuery, type Scope, visible } from "./rows.js";

/**
 * A finished episode in bulk-fetch order: the order its row became finished here (`finished_seq`,
 * assigned by this index), so an update that lands late still comes after a cursor handed out
 * before it, whatever the episodes' clocks said.
 */
export interface FinishedItem {
  id: string;
  /** Its `finished_seq`: the bulk fetch's cursor position after it. */
  seq: number;
}

/** A row as SQLite holds it: rewards as JSON text, and the sort key `reward` beside them. */
type SqlRow = Omit<IndexRow, "status" | "rewards" | "task" | "group" | "stop_condition" | "truncated" | "run_name"> & {
  status: string;
  rewards: string | null;
  reward: number | null;
  task: string | null;
  grp: string | null;
  stop: string | null;
  truncated: number | null;
  run_name: string | null;
} & Record<string, SqlStorageValue>;

export class IndexStore {
  /** The counters as saved (read once per object lifetime, then kept in step with every write). */
  private counters: Counters | null = null;

  /** The run's rollout groups, recounted as their rows change. */
  readonly groups: GroupStore;

  /** The tables are INDEX_SCHEMA's (schemas.ts), created by the object before this is used. */
  constructor(private readonly sql: SqlStorage) {
    this.groups = new GroupStore(sql);
  }

  /** The run these rows belong to (null before the first row). */
  get run(): string | null {
    return this.state("run");
  }

  row(id: string): IndexRow | null {
    const r = this.sql.exec<SqlRow>("SELECT * FROM rows WHERE id = ?", id).toArray()[0];
    return r ? rowOf(r) : null;
  }

  /**
   * Replace `old` (if any) by `row`: the row, its part of the aggregates, its bulk-fetch place, the
   * run's times. Call inside a transaction.
   */
  put(row: IndexRow, old: IndexRow | null): void {
    const c = this.loadCounters();
    if (old) this.apply(c, old, contributionOf(old), -1);
    this.sql.exec(
      `INSERT OR REPLACE INTO rows (id, run, status, created, updated, ended, seq, traces, nodes, calls, tokens, rewards, reward, error, finished_seq,
         task, grp, stop, truncated, run_name)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      row.id,
      row.run,
      row.status,
      row.created,
      row.updated,
      row.ended,
      row.seq,
      row.traces,
      row.nodes,
      row.calls,
      row.tokens,
      row.rewards === null ? null : JSON.stringify(row.rewards),
      rewardOf(row.rewards),
      row.error,
      this.finishedSeq(row, old),
      row.task ?? null,
      row.group ?? null,
      row.stop_condition ?? null,
      row.truncated ? 1 : 0,
      row.run_name ?? null,
    );
    this.apply(c, row, contributionOf(row), 1);
    if (old?.group && old.group !== row.group) this.groups.recount(old.group);
    this.groups.recount(row.group);
    if (old?.task && old.task !== row.task) this.groups.recountTask(old.task);
    this.groups.recountTask(row.task);
    this.saveRun(c, row.run, row.created, row.updated);
  }

  /** Drop `old` and take back its part of the aggregates. Call inside a transaction. */
  delete(old: IndexRow): void {
    const c = this.loadCounters();
    this.apply(c, old, contributionOf(old), -1);
    this.sql.exec("DELETE FROM rows WHERE id = ?", old.id);
    this.groups.recount(old.group);
    this.groups.recountTask(old.task);
    this.saveRun(c, old.run, old.created, Date.now());
  }

  /** After a transaction that threw: the counters in memory may hold its changes; read them again as saved. */
  forgetCached(): void {
    this.counters = null;
  }

  loadCounters(): Counters {
    if (!this.counters) {
      const saved = this.state("counters");
      this.counters = saved === null ? emptyCounters() : (JSON.parse(saved) as Counters);
    }
    return this.counters;
  }

  aggregates(run: string, now: number): RunAggregates {
    const throughput = new Map<number, number>();
    for (const r of this.sql.exec<{ minute: number; n: number }>("SELECT minute, n FROM throughput ORDER BY minute DESC LIMIT 60")) {
      throughput.set(r.minute, r.n);
    }
    return aggregatesOf(run, this.loadCounters(), throughput, now, (key) => {
      const r = this.sql.exec<{ lo: number | null; hi: number | null }>("SELECT MIN(score) AS lo, MAX(score) AS hi FROM scores WHERE key = ?", key).one();
      return { min: r.lo, max: r.hi };
    });
  }

  /** The run's line in the directory. */
  runRow(run: string): RunRow {
    const c = this.loadCounters();
    return {
      run,
      created: Number(this.state("created") ?? Date.now()),
      updated: Number(this.state("updated") ?? Date.now()),
      episodes: c.episodes,
      live: c.live,
      finished: c.finished,
      failed: c.failed,
      finish_refused: c.finish_refused,
    };
  }

  /** Rows in the sort's order, after `q.after`, within `scope`. */
  query(q: ListQuery, scope: Scope, limit: number): IndexRow[] {
    const where: string[] = [];
    const args: SqlStorageValue[] = [];
    if (q.status !== null) {
      where.push("status = ?");
      args.push(q.status);
    }
    if (q.prefix !== null) {
      where.push("substr(id, 1, ?) = ?");
      args.push(q.prefix.length, q.prefix);
    }
    if (q.after !== null) {
      if (q.sort === "updated") {
        where.push("(updated < ? OR (updated = ? AND id < ?))");
        args.push(q.after.key, q.after.key, q.after.id);
      } else if (q.after.key === null) {
        where.push("(reward IS NULL AND id < ?)");
        args.push(q.after.id);
      } else {
        where.push("(reward < ? OR (reward = ? AND id < ?) OR reward IS NULL)");
        args.push(q.after.key, q.after.key, q.after.id);
      }
    }
    if (scope !== null) {
      // the patterns travel as one JSON parameter: exact ids, or PREFIX*; json_each has an `id` column of its own
      where.push(`EXISTS (SELECT 1 FROM json_each(?) AS p WHERE
        CASE WHEN substr(p.value, -1) = '*'
          THEN substr(rows.id, 1, length(p.value) - 1) = substr(p.value, 1, length(p.value) - 1)
          ELSE rows.id = p.value END)`);
      args.push(JSON.stringify(scope));
    }
    const order = q.sort === "updated" ? "updated DESC, id DESC" : "reward IS NULL, reward DESC, id DESC";
    args.push(limit);
    return this.sql
      .exec<SqlRow>(`SELECT * FROM rows ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY ${order} LIMIT ?`, ...args)
      .toArray()
      .map(rowOf);
  }

  /** Finished episodes after `after` (a `finished_seq`), in the order they became finished here, within `scope`. */
  finished(after: number, limit: number, scope: Scope): FinishedItem[] {
    const out: FinishedItem[] = [];
    let from = after;
    // scope filtering is done here, so a narrow scope may need more than one batch
    while (out.length < limit) {
      const batch = this.sql
        .exec<{ id: string; f: number }>("SELECT id, finished_seq AS f FROM rows WHERE finished_seq > ? ORDER BY finished_seq LIMIT ?", from, limit)
        .toArray();
      for (const r of batch) if (visible(scope, r.id) && out.length < limit) out.push({ id: r.id, seq: r.f });
      if (batch.length < limit) break;
      from = batch.at(-1)!.f;
    }
    return out;
  }

  state(k: string): string | null {
    return this.sql.exec<{ v: string }>("SELECT v FROM state WHERE k = ?", k).toArray()[0]?.v ?? null;
  }

  setState(k: string, v: string): void {
    this.sql.exec("INSERT OR REPLACE INTO state VALUES (?, ?)", k, v);
  }

  /** The row's place in bulk-fetch order: a new one when it becomes finished, else the one it had. */
  private finishedSeq(row: IndexRow, old: IndexRow | null): number | null {
    if (row.status !== "finished") return null;
    if (old?.status === "finished") {
      return this.sql.exec<{ f: number | null }>("SELECT finished_seq AS f FROM rows WHERE id = ?", row.id).one().f;
    }
    const next = Number(this.state("finished_seq") ?? 0) + 1;
    this.setState("finished_seq", String(next));
    return next;
  }

  /** Add or take back one row's part: counters, throughput minute, score rows. */
  private apply(c: Counters, row: Pick<IndexRow, "id">, x: Contribution, sign: 1 | -1): void {
    applyContribution(c, x, sign);
    if (x.endedMinute !== null) {
      this.sql.exec("INSERT INTO throughput VALUES (?, ?) ON CONFLICT (minute) DO UPDATE SET n = n + excluded.n", x.endedMinute, sign);
      this.sql.exec("DELETE FROM throughput WHERE minute = ? AND n = 0", x.endedMinute);
    }
    if (sign < 0) this.sql.exec("DELETE FROM scores WHERE id = ?", row.id);
    else for (const s of x.scores) this.sql.exec("INSERT OR REPLACE INTO scores VALUES (?, ?, ?)", row.id, s.key, s.score);
  }

  private saveRun(c: Counters, run: string, created: number, updated: number): void {
    this.setState("counters", JSON.stringify(c));
    if (this.state("run") === null) this.setState("run", run);
    const first = Number(this.state("created") ?? created);
    this.setState("created", String(Math.min(first, created)));
    this.setState("updated", String(Math.max(Number(this.state("updated") ?? 0), updated)));
  }
}

function rowOf(r: SqlRow): IndexRow {
  return {
    id: r.id,
    run: r.run,
    status: r.status as IndexRow["status"],
    created: r.created,
    updated: r.updated,
    ended: r.ended,
    seq: r.seq,
    traces: r.traces,
    nodes: r.nodes,
    calls: r.calls,
    tokens: r.tokens,
    rewards: r.rewards === null ? null : (JSON.parse(r.rewards) as Json),
    error: r.error,
    task: r.task,
    group: r.grp,
    stop_condition: r.stop,
    truncated: r.truncated === 1,
    run_name: r.run_name,
  };
}

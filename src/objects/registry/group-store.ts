// A run index's rollout groups in SQLite (src/protocol/registry/groups.ts computes them): one row per group
// with its summary, kept by recounting the group from its members (`rows WHERE grp = ?`, indexed)
// whenever one of them is written or goes, and the run's counts of complete and zero-variance
// groups (in all, and per minute of completion) kept in step. Called by IndexStore inside its
// transactions; pages are read by keyset.

import {
  type GroupMember,
  type GroupSort,
  type GroupSummary,
  groupSummary,
  type TaskSummary,
} from "../../protocol/registry/groups.js";
import { positionText, readPosition } from "../../protocol/registry/list-cursors.js";
import { rowScore } from "../../protocol/registry/rewards.js";
import { completedMinute, type ZeroVarianceTrend } from "../../protocol/registry/zero-variance-trend.js";
import type { Json } from "../../protocol/wire/json-view.js";
import { writeChanged } from "./sql-row.js";
import type { StepStore } from "./step-store.js";
import { TrendStore } from "./trend-store.js";

/** The run's group counts (what the aggregates and the groups page show). */
export interface GroupCounts {
  groups: number;
  complete: number;
  zeroVariance: number;
}

const ORDER: Record<GroupSort, { key: string; dir: "ASC" | "DESC" }> = {
  spread: { key: "spread_key", dir: "DESC" },
  size: { key: "size", dir: "DESC" },
  task: { key: "task_key", dir: "ASC" },
};

/** Rows one page of tasks may read (its tasks' rows, for the mean reward and the solve rate). */
export const TASK_ROWS_BUDGET = 5000;

/** A group's row as kept (its columns but the id). */
type GroupRecord = {
  task_key: string;
  size: number;
  spread_key: number;
  complete: number;
  zero: number;
  summary: string;
  done_minute: number | null;
  step: number | null;
  kind: string | null;
};

function sameRecord(a: GroupRecord, b: GroupRecord): boolean {
  return (Object.keys(b) as Array<keyof GroupRecord>).every((k) => a[k] === b[k]);
}

/** A member's columns a group's recount reads. */
type GroupRow = {
  status: string;
  rewards: string | null;
  trace_rewards: string | null;
  task: string | null;
  ended: number | null;
  updated: number;
  step: number | null;
  kind: string | null;
};

export class GroupStore {
  /** The per-minute completions, kept by each recount. */
  private readonly trends: TrendStore;

  constructor(
    private readonly sql: SqlStorage,
    /** Each complete group counts in its step's zero-variance share. */
    private readonly steps: StepStore,
  ) {
    this.trends = new TrendStore(sql);
  }

  /**
   * Recount group `id` from its members (none left: it goes), and keep the run's counts and the
   * per-minute completions (trend-store.ts) in step: the old state taken back, the new one added.
   */
  recount(id: string | null | undefined): void {
    if (!id) return;
    const members = this.sql
      .exec<GroupRow>(
        "SELECT status, rewards, trace_rewards, task, ended, updated, step, kind FROM rows WHERE grp = ?",
        id,
      )
      .toArray()
      .map((r) => ({
        ...r,
        status: r.status as GroupMember["status"],
        rewards: r.rewards === null ? null : (JSON.parse(r.rewards) as Json),
        trace_rewards: r.trace_rewards === null ? null : (JSON.parse(r.trace_rewards) as Json[]),
      }));
    const before = this.sql
      .exec<GroupRecord>(
        "SELECT task_key, size, spread_key, complete, zero, summary, done_minute, step, kind FROM groups WHERE grp = ?",
        id,
      )
      .toArray()[0];
    const g = members.length ? groupSummary(id, members) : null;
    const done = g?.complete ? completedMinute(members) : null;
    const now: GroupRecord | null = g && {
      task_key: g.task ?? "",
      size: g.size,
      spread_key: g.spread ?? -1,
      complete: g.complete ? 1 : 0,
      zero: g.zeroVariance ? 1 : 0,
      summary: JSON.stringify(g),
      done_minute: done,
      step: g.step,
      kind: g.step === null ? null : (g.kind ?? ""),
    };
    // a member's update that moves nothing the group shows (most turns) writes nothing
    if (now === null ? before === undefined : before !== undefined && sameRecord(before, now)) return;
    const c = this.counts();
    if (before) {
      c.groups--;
      c.complete -= before.complete;
      c.zeroVariance -= before.zero;
      if (before.complete && before.done_minute !== null)
        this.trends.addGroup(before.done_minute, before.zero === 1, -1);
      if (before.complete && before.step !== null)
        this.steps.addGroup({ step: before.step, kind: before.kind ?? "" }, before.zero === 1, -1);
    }
    if (g === null || now === null) this.sql.exec("DELETE FROM groups WHERE grp = ?", id);
    else {
      writeChanged(this.sql, "groups", { grp: id }, now, before ?? null);
      c.groups++;
      c.complete += g.complete ? 1 : 0;
      c.zeroVariance += g.zeroVariance ? 1 : 0;
      if (done !== null) this.trends.addGroup(done, g.zeroVariance, 1);
      if (g.complete && g.step !== null) this.steps.addGroup({ step: g.step, kind: g.kind ?? "" }, g.zeroVariance, 1);
    }
    const counts = JSON.stringify(c);
    if (counts !== JSON.stringify(this.counts()))
      this.sql.exec(
        "INSERT INTO state VALUES ('group_counts', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
        counts,
      );
  }

  /** The zero-variance trend over the last hour (the minutes kept by `recount`). */
  zeroVarianceTrend(now: number): ZeroVarianceTrend {
    const c = this.counts();
    return this.trends.zeroVarianceTrend({ complete: c.complete, zero: c.zeroVariance }, now);
  }

  counts(): GroupCounts {
    const v = this.sql.exec<{ v: string }>("SELECT v FROM state WHERE k = 'group_counts'").toArray()[0]?.v;
    return v ? (JSON.parse(v) as GroupCounts) : { groups: 0, complete: 0, zeroVariance: 0 };
  }

  group(id: string): GroupSummary | null {
    const r = this.sql.exec<{ summary: string }>("SELECT summary FROM groups WHERE grp = ?", id).toArray()[0];
    return r ? (JSON.parse(r.summary) as GroupSummary) : null;
  }

  /**
   * A page of groups in `sort`'s order after `cursor`: at most `limit`, and the cursor after them (null at the end).
   */
  page(sort: GroupSort, limit: number, cursor: string | null): { groups: GroupSummary[]; cursor: string | null } {
    const { key, dir } = ORDER[sort];
    const args: SqlStorageValue[] = [];
    let where = "";
    if (cursor !== null) {
      const v = readPosition("groups", cursor);
      where = `WHERE (${key} ${dir === "DESC" ? "<" : ">"} ? OR (${key} = ? AND grp > ?))`;
      args.push(v[0] as SqlStorageValue, v[0] as SqlStorageValue, v[1] as string);
    }
    const rows = this.sql
      .exec<{ grp: string; k: number | string; summary: string }>(
        `SELECT grp, ${key} AS k, summary FROM groups ${where} ORDER BY ${key} ${dir}, grp ASC LIMIT ?`,
        ...args,
        limit + 1,
      )
      .toArray();
    const more = rows.length > limit;
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      groups: page.map((r) => JSON.parse(r.summary) as GroupSummary),
      cursor: more && last ? positionText("groups", [last.k, last.grp]) : null,
    };
  }

  /** Recount task `task` from its rollouts (none left: it goes). */
  recountTask(task: string | null | undefined): void {
    if (!task) return;
    const t = this.sql
      .exec<{
        n: number;
        finished: number | null;
        failed: number | null;
        calls: number | null;
        turns: number | null;
        turned: number;
        tokens: number | null;
      }>(
        `SELECT COUNT(*) AS n, SUM(status = 'finished') AS finished, SUM(status = 'failed') AS failed, SUM(calls) AS calls,
           SUM(turns) AS turns, COUNT(turns) AS turned, SUM(tokens) AS tokens
         FROM rows WHERE task = ?`,
        task,
      )
      .one();
    const held =
      this.sql
        .exec<Record<string, SqlStorageValue>>(
          "SELECT rollouts, finished, failed, calls, tokens, turns, turned FROM tasks WHERE task = ?",
          task,
        )
        .toArray()[0] ?? null;
    if (t.n === 0) {
      if (held) this.sql.exec("DELETE FROM tasks WHERE task = ?", task);
    } else {
      const now = {
        rollouts: t.n,
        finished: t.finished ?? 0,
        failed: t.failed ?? 0,
        calls: t.calls ?? 0,
        tokens: t.tokens ?? 0,
        turns: t.turns ?? 0,
        turned: t.turned,
      };
      writeChanged(this.sql, "tasks", { task }, now, held);
    }
  }

  /**
   * A page of tasks (by name) after `cursor`: rollouts, finished, failed, mean turns and tokens, and
   * over the finished rollouts the mean of `key` and the share at or above `threshold` (the solve
   * rate). Reads the rows of the tasks on the page only (their finished ones are parsed), and ends
   * the page before a task whose rows would take it past `budget` (a page has at least one task):
   * a short page with a cursor.
   */
  tasks(
    key: string,
    threshold: number,
    limit: number,
    cursor: string | null,
    budget = TASK_ROWS_BUDGET,
  ): { tasks: TaskSummary[]; cursor: string | null } {
    const listed = this.sql
      .exec<{
        task: string;
        rollouts: number;
        finished: number;
        failed: number;
        calls: number;
        tokens: number;
        turns: number;
        turned: number;
      }>(
        `SELECT * FROM tasks ${cursor === null ? "" : "WHERE task > ?"} ORDER BY task LIMIT ?`,
        ...(cursor === null ? [] : [cursor]),
        limit + 1,
      )
      .toArray();
    // the tasks table counts each task's rows (the query below walks them all): the page stops before the budget is
    // passed
    let rowsToRead = 0;
    let fit = 0;
    while (fit < Math.min(limit, listed.length) && (fit === 0 || rowsToRead + listed[fit]!.rollouts <= budget))
      rowsToRead += listed[fit++]!.rollouts;
    const rows = listed.slice(0, fit + 1);
    const page = rows.slice(0, fit).map((t) => {
      const scores: number[] = [];
      // `+status`: the task's rows by rows_of_task; left to itself the planner took rows_by_status once rows had
      // trace_rewards, walking every finished row of the run per task (72 s for a page of 5,000 tasks' rows)
      for (const r of this.sql.exec<{ rewards: string | null; trace_rewards: string | null }>(
        "SELECT rewards, trace_rewards FROM rows WHERE task = ? AND +status = 'finished'",
        t.task,
      )) {
        const s = rowScore(
          {
            rewards: r.rewards === null ? null : (JSON.parse(r.rewards) as Json),
            trace_rewards: r.trace_rewards === null ? null : (JSON.parse(r.trace_rewards) as Json[]),
          },
          key,
        );
        if (s !== undefined) scores.push(s);
      }
      return {
        task: t.task,
        rollouts: t.rollouts,
        finished: t.finished,
        failed: t.failed,
        mean_turns: t.turned > 0 ? t.turns / t.turned : null,
        mean_tokens: t.tokens / t.rollouts,
        mean_reward: scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : null,
        solve_rate: scores.length ? scores.filter((s) => s >= threshold).length / scores.length : null,
      };
    });
    return { tasks: page, cursor: rows.length > fit ? page.at(-1)!.task : null };
  }

  /** The rows of group `id` (the caller ranks them: src/protocol/registry/ranking.ts). */
  members(id: string): string[] {
    return this.sql
      .exec<{ id: string }>("SELECT id FROM rows WHERE grp = ? ORDER BY id", id)
      .toArray()
      .map((r) => r.id);
  }
}

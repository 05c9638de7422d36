// A run index's SQLite tables and every query on them: the episodes' rows (with their bulk-fetch
// order), the per-key reward scores (for min/max, with their row's status), the ended-per-minute
// throughput and reward minutes (trend-store.ts), the kept counters and a few state values. The object
// (episode-index.ts) calls these inside its own
// transactions; nothing here decides when to write or whom to tell.

import {
  aggregatesOf,
  applyContribution,
  type Contribution,
  type Counters,
  contributionOf,
  emptyCounters,
  finishedMeans,
  type RunAggregates,
} from "../../protocol/registry/aggregates.js";
import { identityOf } from "../../protocol/registry/entry.js";
import { type GroupDetailJson, groupJson, rolloutJson } from "../../protocol/registry/groups.js";
import { rankRollouts } from "../../protocol/registry/ranking.js";
import { rewardMinutesOf } from "../../protocol/registry/reward-trend.js";
import { rowReward } from "../../protocol/registry/rewards.js";
import type { FinishedSelection, IndexRow, ListQuery, Scope } from "../../protocol/registry/rows.js";
import type { RunRow } from "./directory-store.js";
import { type EpisodePage, episodePage } from "./episode-pages.js";
import { FINISHED_WALK_BUDGET, type FinishedPage, finishedPage } from "./finished-pages.js";
import { FlagStore } from "./flag-store.js";
import { GroupStore } from "./group-store.js";
import { ENDED, LIVE, liveContributions, SETTLED_STATE } from "./live-rows.js";
import { type SearchBatch, SearchStore, waitingOf } from "./search-store.js";
import { ROW_COLUMNS, rowOf, type SqlRow, writeChanged } from "./sql-row.js";
import { StepStore } from "./step-store.js";
import { TrendStore } from "./trend-store.js";

export class IndexStore {
  /**
   * The run's counters: the ended rows' part as saved plus the live rows' part recounted from them (read once per
   * object lifetime, then kept in step with every write).
   */
  private counters: Counters | null = null;
  /** The ended rows' part, as saved (`settled`): a live row's update leaves it, so it writes no state row. */
  private settled: Counters | null = null;

  /** The run's rollout groups, recounted as their rows change. */
  readonly groups: GroupStore;

  /** The run's training steps, kept with each row's and group's part. */
  readonly steps: StepStore;

  /** The episodes' text, searched. */
  readonly search: SearchStore;

  /** The run's flag rules and the rollouts' flags. */
  readonly flags: FlagStore;

  /** The reward minutes, kept with each row's part. */
  private readonly trends: TrendStore;

  /** The tables are INDEX_SCHEMA's (schemas.ts), created by the object before this is used. */
  constructor(private readonly sql: SqlStorage) {
    this.steps = new StepStore(sql);
    this.search = new SearchStore(sql);
    this.flags = new FlagStore(sql);
    this.groups = new GroupStore(sql, this.steps);
    this.trends = new TrendStore(sql);
  }

  /** The run these rows belong to (null before the first row). */
  get run(): string | null {
    return this.state("run");
  }

  row(id: string): IndexRow | null {
    const r = this.sql.exec<SqlRow>(`SELECT ${ROW_COLUMNS} FROM rows WHERE id = ?`, id).toArray()[0];
    return r ? rowOf(r) : null;
  }

  /**
   * Replace `old` (if any) by `row`: the row, its part of the aggregates, its bulk-fetch place, the
   * run's times, and its text (a running episode's waits up to `searchFlushMs`: search-store.ts `take`). Call inside a
   * transaction.
   */
  put(row: IndexRow, old: IndexRow | null, text: SearchBatch | null = null, searchFlushMs = 0): void {
    const c = this.loadCounters();
    // the flags are read from the text as sent (and from the row's rewards)
    const flags = this.flags.update(row, text);
    const { id, ...values } = this.columnsOf(row, flags, this.finishedSeq(row, old));
    // only what the row shows that changed is written (each index entry on a changed column is a row written)
    const held = old
      ? (this.sql
          .exec<SqlRow>(`SELECT ${ROW_COLUMNS}, text_since, text_waiting FROM rows WHERE id = ?`, row.id)
          .toArray()[0] ?? null)
      : null;
    // the block of its text's segment ids (search-store.ts), given with its first text
    const segBase = (held?.seg_base as number | null | undefined) ?? (text ? this.nextSegBase() : null);
    // a running episode's text waits in its row, written with it (a running episode's waits up to `searchFlushMs`)
    const holdMs = row.status === "live" ? searchFlushMs : 0;
    const plan = this.search.plan(
      row.id,
      segBase,
      text,
      holdMs,
      Date.now(),
      waitingOf(held as Record<string, SqlStorageValue> | null),
    );
    const waiting: Record<string, SqlStorageValue> =
      plan.waiting === undefined
        ? {}
        : plan.waiting === null
          ? { text_since: null, text_waiting: null }
          : { text_since: plan.waiting.since, text_waiting: JSON.stringify(plan.waiting.batch) };
    writeChanged(this.sql, "rows", { id }, { ...values, seg_base: segBase, ...waiting }, held);
    this.replaceContribution(c, old, row);
    this.steps.replaceRow(old, row);
    if (old?.group && old.group !== row.group) this.groups.recount(old.group);
    this.groups.recount(row.group);
    if (old?.task && old.task !== row.task) this.groups.recountTask(old.task);
    this.groups.recountTask(row.task);
    this.saveRun(row.run, row.created, row.updated);
    this.settle(old, row);
    // the text last: FTS5's shadow rows are counted from its first statement to the commit (search-store.ts `settle`)
    plan.apply();
  }

  /** The `rows` columns of `row`. */
  private columnsOf(
    row: IndexRow,
    flags: readonly unknown[],
    finishedSeq: number | null,
  ): Record<string, SqlStorageValue> {
    const identity = identityOf(row);
    return {
      id: row.id,
      run: row.run,
      status: row.status,
      created: row.created,
      updated: row.updated,
      ended: row.ended,
      seq: row.seq,
      traces: row.traces,
      nodes: row.nodes,
      calls: row.calls,
      tokens: row.tokens,
      rewards: row.rewards === null ? null : JSON.stringify(row.rewards),
      reward: rowReward(row),
      error: row.error,
      finished_seq: finishedSeq,
      task: row.task ?? null,
      grp: row.group ?? null,
      stop: row.stop_condition ?? null,
      is_timeout: row.is_timeout ? 1 : 0,
      is_truncated: typeof row.is_truncated === "boolean" ? (row.is_truncated ? 1 : 0) : null,
      run_name: row.run_name ?? null,
      dispatch: row.dispatch ? JSON.stringify(row.dispatch) : null,
      kind: identity.kind,
      env: identity.env,
      step: identity.step,
      policy_version: identity.policy_version,
      live: row.live ? JSON.stringify(row.live) : null,
      flags: flags.length ? JSON.stringify(flags) : null,
      trace_rewards: row.trace_rewards ? JSON.stringify(row.trace_rewards) : null,
      turns: row.turns ?? null,
    };
  }

  /**
   * `old`'s part of the aggregates replaced by `row`'s: the counters (in memory; the ended rows' part saved by `settle`),
   * and of the tables only what differs (an update during a turn seldom moves a score or a minute).
   */
  private replaceContribution(c: Counters, old: IndexRow | null, row: IndexRow): void {
    const was = old ? contributionOf(old) : null;
    const now = contributionOf(row);
    if (was) applyContribution(c, was, -1);
    applyContribution(c, now, 1);
    if (JSON.stringify(was ? rewardMinutesOf(was) : []) !== JSON.stringify(rewardMinutesOf(now))) {
      if (was) this.trends.addRewards(was, -1);
      this.trends.addRewards(now, 1);
    }
    if (was?.endedMinute !== now.endedMinute) {
      if (was && was.endedMinute !== null) this.addThroughput(was.endedMinute, -1);
      if (now.endedMinute !== null) this.addThroughput(now.endedMinute, 1);
    }
    if (was === null || was.status !== now.status || JSON.stringify(was.scores) !== JSON.stringify(now.scores)) {
      if (was) this.sql.exec("DELETE FROM scores WHERE id = ?", row.id);
      this.insertScores(row.id, now);
    }
  }

  /** Drop `old` and take back its part of the aggregates. Call inside a transaction. */
  delete(old: IndexRow): void {
    const c = this.loadCounters();
    const base = this.sql
      .exec<{ b: number | null }>("SELECT seg_base AS b FROM rows WHERE id = ?", old.id)
      .toArray()[0]?.b;
    this.apply(c, old, contributionOf(old), -1);
    this.sql.exec("DELETE FROM rows WHERE id = ?", old.id);
    this.steps.replaceRow(old, null);
    this.flags.remove(old.id);
    this.groups.recount(old.group);
    this.groups.recountTask(old.task);
    this.saveRun(old.run, old.created, Date.now(), true);
    this.settle(old, null);
    this.search.remove(old.id, base ?? null);
  }

  /** The rows whose flags a rescan moved: their `flags` rewritten from the flags table; the rows as they are now. */
  refreshFlags(ids: readonly string[]): IndexRow[] {
    const out: IndexRow[] = [];
    for (const id of ids) {
      const flags = this.flags.of(id);
      this.sql.exec("UPDATE rows SET flags = ? WHERE id = ?", flags.length ? JSON.stringify(flags) : null, id);
      const row = this.row(id);
      if (row) out.push(row);
    }
    return out;
  }

  /**
   * After a transaction that threw, or the storage freed: what is kept in memory (counters, rules) is read again as
   * saved.
   */
  forgetCached(): void {
    this.counters = null;
    this.settled = null;
    this.flags.forget();
  }

  /** The run's counters: the ended rows' part as saved, and the live rows' part from the live rows (`rows_live`). */
  loadCounters(): Counters {
    if (!this.counters) {
      const settled = this.loadSettled();
      const c = structuredClone(settled);
      for (const x of liveContributions(this.sql)) applyContribution(c, x, 1);
      this.counters = c;
    }
    return this.counters;
  }

  private loadSettled(): Counters {
    if (!this.settled) {
      const saved = this.state(SETTLED_STATE);
      this.settled = saved === null ? emptyCounters() : { ...emptyCounters(), ...(JSON.parse(saved) as Counters) };
    }
    return this.settled;
  }

  /**
   * `old` replaced by `row` (null: deleted) in the ended rows' counters, saved when they moved: a live row's part is
   * not saved (the live rows are counted again on load), so a live row's update writes no state row.
   */
  private settle(old: IndexRow | null, row: IndexRow | null): void {
    const was = old !== null && old.status !== "live" ? contributionOf(old) : null;
    const now = row !== null && row.status !== "live" ? contributionOf(row) : null;
    if (was === null && now === null) return;
    const s = this.loadSettled();
    if (was) applyContribution(s, was, -1);
    if (now) applyContribution(s, now, 1);
    this.setChanged(SETTLED_STATE, JSON.stringify(s));
  }

  aggregates(run: string, now: number): RunAggregates {
    const throughput = new Map<number, number>();
    for (const r of this.sql.exec<{ minute: number; n: number }>(
      "SELECT minute, n FROM throughput ORDER BY minute DESC LIMIT 60",
    )) {
      throughput.set(r.minute, r.n);
    }
    const a = aggregatesOf(run, this.loadCounters(), throughput, now, (key, finished) => this.extremes(key, finished));
    // the run's first row's creation (saveRun keeps the least): run time 0
    const created = this.state("created");
    return {
      ...a,
      reward_trend: this.trends.rewardTrend(now),
      ...(created === null ? {} : { timeline: this.trends.timeline(Number(created), now) }),
      groups: this.groupSummary(now),
      flags: this.flags.counts(),
    };
  }

  /** The run's groups in all: how many, finished, of zero variance (and their share and trend). */
  groupSummary(now: number): Required<NonNullable<RunAggregates["groups"]>> {
    const c = this.groups.counts();
    return {
      total: c.groups,
      finished: c.complete,
      zero_variance: c.zeroVariance,
      zero_variance_share: c.complete > 0 ? c.zeroVariance / c.complete : null,
      trend: this.groups.zeroVarianceTrend(now),
    };
  }

  /** One group with its rollouts, best first by the tie rule (src/protocol/registry/ranking.ts); null: no such group. */
  groupDetail(id: string): GroupDetailJson | null {
    const g = this.groups.group(id);
    if (!g) return null;
    const rollouts = rankRollouts(
      this.groups.members(id).flatMap((m) => {
        const row = this.row(m);
        return row ? [rolloutJson(row, g)] : [];
      }),
    );
    return { ...groupJson(g), rollouts };
  }

  /**
   * A key's smallest and largest score, over every row or the finished ones: one MIN and one MAX
   * each (SQLite answers a lone MIN or MAX with one seek in scores_by_key or, finished only, the
   * partial scores_finished_by_key; both in one SELECT would walk every score of the key).
   */
  private extremes(key: string, finished: boolean): { min: number | null; max: number | null } {
    const where = finished ? "key = ? AND status = 'finished'" : "key = ?";
    const r = this.sql
      .exec<{ lo: number | null; hi: number | null }>(
        `SELECT (SELECT MIN(score) FROM scores WHERE ${where}) AS lo, (SELECT MAX(score) FROM scores WHERE ${where}) AS hi`,
        key,
        key,
      )
      .one();
    return { min: r.lo, max: r.hi };
  }

  /** The run's line in the directory. */
  runRow(run: string): RunRow {
    const c = this.loadCounters();
    return {
      run,
      created: Number(this.state("created") ?? Date.now()),
      updated: this.updated() ?? Date.now(),
      episodes: c.episodes,
      live: c.live,
      finished: c.finished,
      failed: c.failed,
      finish_refused: c.finish_refused,
      mean_rewards: finishedMeans(c),
    };
  }

  /** A page of rows in the sort's order, after `q.after`, within `scope`, passing `q`'s filters. */
  query(q: ListQuery, scope: Scope): EpisodePage {
    return episodePage(this.sql, q, scope);
  }

  /**
   * A page of finished episodes after `after` (a `finished_seq`), in the order they became finished here, within
   * `scope`.
   */
  finished(after: number, limit: number, scope: Scope, selection?: FinishedSelection): FinishedPage {
    return finishedPage(this.sql, after, limit, scope, FINISHED_WALK_BUDGET, selection);
  }

  /**
   * A run with no row that set rules of its own: its name and times (the directory lists it) and
   * when its storage goes if no row comes (`until`, epoch ms).
   */
  keepRules(run: string, now: number, until: number): void {
    if (this.state("run") === null) this.setState("run", run);
    if (this.state("created") === null) this.setState("created", String(now));
    this.setState("updated", String(Math.max(Number(this.state("updated") ?? 0), now)));
    this.setState("rules_until", String(until));
  }

  /** Until when rules set while the run had no row keep its storage without one (epoch ms; 0: not at all). */
  rulesUntil(): number {
    return Number(this.state("rules_until") ?? 0);
  }

  /** A row came: rules set before it no longer wait for one (true when they did). */
  rowCame(): boolean {
    if (this.rulesUntil() === 0) return false;
    this.setState("rules_until", "0");
    return true;
  }

  /**
   * The directory took the run's row: failed attempts start again from none. Absent is none, so a run
   * whose updates land writes nothing here (each alarm wrote a "0" before: a row per directory update).
   */
  directoryReached(): void {
    if (this.state("dir_attempts") !== null) this.deleteState("dir_attempts");
  }

  state(k: string): string | null {
    return this.sql.exec<{ v: string }>("SELECT v FROM state WHERE k = ?", k).toArray()[0]?.v ?? null;
  }

  deleteState(k: string): void {
    this.sql.exec("DELETE FROM state WHERE k = ?", k);
  }

  setState(k: string, v: string): void {
    // an upsert: a key held is updated in place (INSERT OR REPLACE would write its key's index entry again)
    this.sql.exec("INSERT INTO state VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", k, v);
  }

  /** A block of segment ids for an episode's text (search-store.ts SEGMENT_BLOCK): the next one. */
  private nextSegBase(): number {
    const next = Number(this.state("seg_base") ?? 0) + 1;
    this.setState("seg_base", String(next));
    return next;
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

  /** Add or take back one row's part: counters, throughput minute, reward minutes, score rows. */
  private apply(c: Counters, row: Pick<IndexRow, "id">, x: Contribution, sign: 1 | -1): void {
    applyContribution(c, x, sign);
    this.trends.addRewards(x, sign);
    if (x.endedMinute !== null) this.addThroughput(x.endedMinute, sign);
    if (sign < 0) this.sql.exec("DELETE FROM scores WHERE id = ?", row.id);
    else this.insertScores(row.id, x);
  }

  private addThroughput(minute: number, sign: 1 | -1): void {
    this.sql.exec(
      "INSERT INTO throughput VALUES (?, ?) ON CONFLICT (minute) DO UPDATE SET n = n + excluded.n",
      minute,
      sign,
    );
    this.sql.exec("DELETE FROM throughput WHERE minute = ? AND n = 0", minute);
  }

  /** Each score carries its row's status, for the finished-only extremes (`extremes`). */
  private insertScores(id: string, x: Contribution): void {
    const insert = "INSERT OR REPLACE INTO scores (id, key, score, status) VALUES (?, ?, ?, ?)";
    for (const s of x.scores) this.sql.exec(insert, id, s.key, s.score, x.status);
  }

  /**
   * The run's last update (epoch ms): the newest row's (one seek in rows_by_updated for the ended rows, the live
   * ones read by rows_live), or the time kept in the state when later (a delete, rules set before the first row);
   * null: neither.
   */
  private updated(): number | null {
    const newest = this.sql
      .exec<{ u: number | null }>(
        `SELECT MAX(u) AS u FROM (SELECT (SELECT updated FROM rows INDEXED BY rows_by_updated WHERE ${ENDED}
           ORDER BY updated DESC, id DESC LIMIT 1) AS u UNION ALL SELECT MAX(updated) FROM rows INDEXED BY rows_live WHERE ${LIVE})`,
      )
      .one().u;
    const kept = this.state("updated");
    if (kept === null) return newest;
    return Math.max(Number(kept), newest ?? 0);
  }

  /**
   * The run's name and times, each written only when it changed (the counters: `settle`). A row's own time
   * is not kept apart (the rows hold it: `updated()`), only a later one that no row holds (`rowless`:
   * a delete's).
   */
  private saveRun(run: string, created: number, updated: number, rowless = false): void {
    if (this.state("run") === null) this.setState("run", run);
    const first = Number(this.state("created") ?? created);
    this.setChanged("created", String(Math.min(first, created)));
    if (rowless) this.setChanged("updated", String(Math.max(Number(this.state("updated") ?? 0), updated)));
  }

  private setChanged(k: string, v: string): void {
    if (this.state(k) !== v) this.setState(k, v);
  }
}

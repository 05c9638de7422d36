// A run's episode index: one SQLite-backed Durable Object per run (by name `run:<run>`), holding
// one row per episode of the run and the run's aggregates, kept incrementally (aggregates.ts).
// Episode objects keep their rows current over RPC (src/objects/episode/run-row-sync.ts); each answer says
// how often the episode may send (backpressure: the run's live episodes together stay under INDEX_WRITES_PER_S;
// less often while nobody attends the run, attention.ts). The run's counts reach the directory within DIRECTORY_MS.
// Sockets (`GET /v1/runs/{run}` upgraded) get a snapshot, then coalesced changes with the aggregates.
//
// Nothing is stored for a run nobody wrote: the tables come with the first row (reads of an empty
// object answer "no run" to a viewer covering the run, an empty page to one covering part of it),
// and an index left without rows by deletes and retention frees its storage (deleteAll) once the
// directory has dropped the run. Rules, alerts and a tokenizer set before the first row are the one
// exception: they are kept, and the directory lists the run (no episode), for RETENTION_SECONDS; then
// the alarm frees them as it frees an index whose rows all went, unless a row came. A run's
// tokenizer.json lives in R2 (src/worker/run-routes.ts); freeing the run deletes it.

import { parseAlerts } from "../../protocol/alerts/config.js";
import { noWork } from "../../protocol/flags/rules.js";
import { type Answer, answerOf, errorResponse, RelayError, upgradeRequired } from "../../protocol/http/errors.js";
import { isWebSocketUpgrade, parseRoute } from "../../protocol/http/route.js";
import { limitsFrom } from "../../protocol/limits/limits.js";
import { flushIntervalMs, indexPacingFrom, searchFlushMsFrom } from "../../protocol/limits/vars.js";
import type { RunAggregates } from "../../protocol/registry/aggregates.js";
import {
  type GroupDetailJson,
  type GroupSort,
  type GroupsPage,
  groupJson,
  type TasksPage,
} from "../../protocol/registry/groups.js";
import { encodeRunMessage } from "../../protocol/registry/index-protocol.js";
import { positionText } from "../../protocol/registry/list-cursors.js";
import { NO_FILTER } from "../../protocol/registry/row-filter.js";
import {
  type EpisodesPage,
  entryOf,
  type FinishedSelection,
  type IndexEntry,
  type IndexRow,
  keptRow,
  type ListQuery,
  MAX_LIMIT,
  parseListQuery,
  SCOPE_HEADER,
  type Scope,
  visible,
} from "../../protocol/registry/rows.js";
import { coversRun, RUNS_NAME } from "../../protocol/registry/run.js";
import type { StepsPage } from "../../protocol/registry/steps.js";
import { tokenizerKey } from "../../protocol/registry/tokenizer-key.js";
import { parseSearchQuery, type SearchQuery } from "../../protocol/search/query.js";
import { usageOf } from "../billing/metered.js";
import { armAlarm } from "../storage/alarm-window.js";
import { armAlertAlarm, sendDue } from "./alert-delivery.js";
import type { AlertsJson } from "./alert-json.js";
import { AlertStore } from "./alert-store.js";
import { Attention, type UpdateAnswer } from "./attention.js";
import { DirectoryPush } from "./directory-push.js";
import type { FinishedPage } from "./finished-pages.js";
import { type FlagEvaluations, FlagStore, type RulesJson, readRules } from "./flag-store.js";
import { IndexStore } from "./index-store.js";
import { askResends, resendDue } from "./reward-recount.js";
import { RunSideObject } from "./run-side-object.js";
import { readScopeHeader } from "./run-sockets.js";
import { INDEX_SCHEMA } from "./schemas.js";
import { type SearchBatch, type SearchPage, TEXT_FLUSH_BATCH } from "./search-store.js";

/** The meter's name for the rows FTS5 writes to its shadow tables (search-store.ts `settle`). */
export const FTS_SHADOW = "search (FTS5 shadow)";

/** Rows one `rowsById` call reads at most: a page's worth (a search page holds at most MAX_LIMIT results). */
export const MAX_ROWS_BY_ID = MAX_LIMIT;

/** Episodes in the snapshot a socket starts with (`?limit=` up to MAX_LIMIT). */
export const SNAPSHOT_LIMIT = 200;
/** Between two rescan steps (src/objects/registry/flag-store.ts): live writes go first. */
export const RESCAN_PAUSE_MS = 50;
/** The run's counts go to the directory at most this often. */
export const DIRECTORY_MS = 1000;

/** Its rows changed since the last push (`changes`, by episode id) are pushed to its sockets. */
export class EpisodeIndex extends RunSideObject<IndexRow> {
  private readonly store: IndexStore;
  /** The run's alerts: evaluated in the upsert's transaction, queued, sent by the alarm (alert-delivery.ts). */
  private readonly alerts: AlertStore;
  /** The steps changed since the last push, read once per push (for the sockets covering the run). */
  private pushSteps: ReturnType<IndexStore["steps"]["touchedSteps"]> | null = null;
  /** The R2 delete of the run's tokenizer while the run is being freed (a new tokenizer waits for it). */
  private freeing: Promise<void> | null = null;
  /** When the directory hears of the run's row: at once, or by the alarm. */
  private readonly directory = new DirectoryPush(this.ctx, DIRECTORY_MS);
  /** Whether someone attends the run: its updates' interval (attention.ts). */
  private readonly attention = new Attention();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env, INDEX_SCHEMA, "run socket");
    this.store = new IndexStore(ctx.storage.sql);
    this.alerts = new AlertStore(ctx.storage.sql);
    // rows a migration could not recount alone: their episodes are asked by the alarm (reward-recount.ts)
    if (this.schema.present() && this.schema.failed === null && resendDue(ctx.storage.sql) !== null)
      void armAlarm(ctx.storage, Date.now());
  }

  protected override pushed(): void {
    super.pushed();
    this.store.steps.clearTouched();
    this.pushSteps = null;
  }

  // ---- RPC from Episode objects ----

  /** Insert or replace the episode's row (an older update is ignored), with the text it sends for the search. */
  upsert(sent: IndexRow, text: SearchBatch | null = null): UpdateAnswer {
    this.schema.check();
    const row = keptRow(sent);
    let waited = false;
    let fired = 0;
    const applied = this.write(() => {
      this.schema.ensure();
      const old = this.store.row(row.id);
      if (old && !(row.updated > old.updated || (row.updated === old.updated && row.seq >= old.seq))) return false;
      this.store.put(row, old, text, searchFlushMsFrom(this.env));
      // others' text that waited SEARCH_FLUSH_MS goes in though their episodes send no more (a few an update)
      this.store.search.flushWaiting(Date.now() - searchFlushMsFrom(this.env), TEXT_FLUSH_BATCH);
      waited = this.store.rowCame();
      // queued with the row, sent by the alarm: no outbound fetch here
      fired = this.alerts.afterRow(row, old, () => this.store.flags.of(row.id), row.run, Date.now());
      return true;
    });
    if (applied) this.changed(row.id, row);
    if (fired > 0) void armAlertAlarm(this.ctx.storage, Date.now());
    // the alarm was set for when rules waiting for this first row would go: the directory hears of it now
    if (waited) void armAlarm(this.ctx.storage, Date.now() + DIRECTORY_MS);
    return { applied, flushMs: this.flushMs() };
  }

  /** Drop the episode's row (deleted or expired). */
  remove(id: string): UpdateAnswer {
    this.schema.check();
    if (!this.schema.present()) return { applied: false, flushMs: this.flushMs() };
    const removed = this.write(() => {
      const old = this.store.row(id);
      if (old) this.store.delete(old);
      return old !== null;
    });
    if (removed) this.changed(id, null);
    return { applied: removed, flushMs: this.flushMs() };
  }

  // ---- RPC from the Worker ----

  /**
   * A page of the run's episodes within `scope` passing `q`'s filters. A rare filter may give a
   * short page with a cursor: the walk stopped on its budget (episode-pages.ts), the next page goes on.
   */
  list(q: ListQuery, scope: Scope): EpisodesPage | null {
    this.reading();
    if (!this.hasRows()) return scope === null ? null : { episodes: [], cursor: null, searched: 0 };
    const page = this.store.query(q, scope);
    const cursor = page.next === null ? null : positionText("episodes", page.next);
    return { episodes: page.rows.map(entryOf), cursor, searched: page.searched };
  }

  /** The run's aggregates (the Worker asks only for viewers covering the run); null: no run. */
  aggregates(run: string): RunAggregates | null {
    this.reading();
    return this.hasRows() ? this.store.aggregates(run, Date.now()) : null;
  }

  /** A page of the run's rollout groups (the Worker asks only for viewers covering the run). */
  groups(run: string, sort: GroupSort, limit: number, cursor: string | null): GroupsPage | null {
    this.reading();
    if (!this.hasRows()) return null;
    const page = this.store.groups.page(sort, limit, cursor);
    const g = this.store.groupSummary(Date.now());
    return {
      run,
      groups_total: g.total,
      finished_groups: g.finished,
      zero_variance_groups: g.zero_variance,
      zero_variance_share: g.zero_variance_share,
      zero_variance_trend: g.trend,
      groups: page.groups.map(groupJson),
      cursor: page.cursor,
    };
  }

  /**
   * One group, its rollouts (best first by the tie rule: src/protocol/registry/ranking.ts) and their advantages; null:
   * no such group; "no_run": the run has no row.
   */
  group(id: string): GroupDetailJson | null | "no_run" {
    this.reading();
    if (!this.hasRows()) return "no_run";
    return this.store.groupDetail(id);
  }

  /** A page of the run's tasks (solve rate: `key` at or above `threshold`). */
  tasks(key: string, threshold: number, limit: number, cursor: string | null): TasksPage | null {
    this.reading();
    if (!this.hasRows()) return null;
    return { key, threshold, ...this.store.groups.tasks(key, threshold, limit, cursor) };
  }

  /**
   * The search bench (no route): one word found by the index (its first page) and by a scan (search-store.ts `scan`),
   * `repeats` times each, here so no time carries an RPC's (a local runtime's clock moves during a request); means, finds.
   */
  searchAgainstScan(
    word: string,
    limit: number,
    repeats: number,
  ): { indexMs: number; scanMs: number; indexFound: number; scanFound: number } {
    this.schema.check();
    if (!this.schema.present()) return { indexMs: 0, scanMs: 0, indexFound: 0, scanFound: 0 };
    return this.store.search.againstScan(parseSearchQuery(word), word, limit, repeats);
  }

  /** What the run's search holds, and the rows its text wrote since this object started (benches; no route). */
  searchSize(): { segments: number; chars: number; textBytes: number; ftsBytes: number; rowsWritten: number } {
    this.schema.check();
    if (!this.schema.present()) return { segments: 0, chars: 0, textBytes: 0, ftsBytes: 0, rowsWritten: 0 };
    return { ...this.store.search.size(), rowsWritten: this.store.search.rowsWritten };
  }

  /** How often the run's rules ran since this object started, and how many there are (the flags bench; no route). */
  flagEvaluations(): FlagEvaluations & { textRules: number; rewardRules: number } {
    this.schema.check();
    if (!this.schema.present())
      return { segments: 0, textChecks: 0, work: noWork(), rows: 0, rewardChecks: 0, textRules: 0, rewardRules: 0 };
    const { rules, text } = this.store.flags.rules();
    return { ...this.store.flags.evaluations, textRules: text.length, rewardRules: rules.length - text.length };
  }

  /** The run's flag rules (src/protocol/flags/rules.ts) and a rescan's progress; null: no run (no row, no rules set). */
  rules(): RulesJson | null {
    this.schema.check();
    return this.hasRows() || (this.schema.present() && this.store.flags.set()) ? this.store.flags.json() : null;
  }

  /**
   * Replace the run's flag rules; the alarm rescans what was written for them (paced). Set before the run's first row,
   * they are kept and the run listed, and all is freed RETENTION_SECONDS later if no row came (the defaults keep
   * nothing). Rules go with the run's rows (when all went and the directory dropped the run, nothing is kept).
   */
  setRules(run: string, body: unknown): Answer<RulesJson> {
    this.schema.check();
    return answerOf(() => {
      const rules = readRules(body); // a bad body touches nothing
      const rows = this.hasRows();
      if (!rows && rules === null && !this.schema.present()) return FlagStore.defaultsJson();
      const now = Date.now();
      this.write(() => {
        this.schema.ensure();
        // the rescan reads the search's text: what waits goes in first (the new rules see all of it)
        this.store.search.flushWaiting(null, Number.MAX_SAFE_INTEGER);
        this.store.flags.setRules(rules, rows);
        // the defaults need nothing kept, unless a tokenizer waits for the run's first row too
        const kept = rules !== null || this.store.state("tokenizer") !== null;
        if (!rows) this.store.keepRules(run, now, kept ? now + limitsFrom(this.env).retention * 1000 : 0);
      });
      void armAlarm(this.ctx.storage, now);
      return this.store.flags.json();
    });
  }

  /**
   * The Worker is about to put the run's tokenizer.json in R2: it lives as the run does (before a first row, as
   * rules set then), and freeing the run deletes it. A free in progress is waited for: the put lands after its delete.
   */
  async keepTokenizer(run: string): Promise<void> {
    this.schema.check();
    await this.freeing?.catch(() => undefined);
    const rows = this.hasRows();
    if (rows && this.store.state("tokenizer") !== null) return;
    const now = Date.now();
    this.write(() => {
      this.schema.ensure();
      this.store.setState("tokenizer", "1");
      if (!rows) this.store.keepRules(run, now, now + limitsFrom(this.env).retention * 1000);
    });
    if (!rows) void armAlarm(this.ctx.storage, now);
  }

  /**
   * The run's alerts (webhook URLs in full for an admin, else their origin; never a secret), what fired and how
   * delivery went; null: no run (no row, and no alerts or rules set).
   */
  alertsJson(admin: boolean): AlertsJson | null {
    this.schema.check();
    return this.schema.present() && (this.hasRows() || this.store.run !== null) ? this.alerts.json(admin) : null;
  }

  /**
   * Replace the run's webhooks and alert rules (src/protocol/alerts/config.ts; a bad body touches nothing); links in
   * the alerts start with `origin`. A run with no row yet keeps them as it keeps rules set before its first row.
   */
  setAlerts(run: string, body: unknown, origin: string): Answer<AlertsJson> {
    this.schema.check();
    return answerOf(() => {
      const config = parseAlerts(body);
      const rows = this.hasRows();
      const none = config.rules.length === 0 && config.webhooks.length === 0;
      if (!rows && none && !this.schema.present()) return AlertStore.emptyJson();
      const now = Date.now();
      this.write(() => {
        this.schema.ensure();
        this.alerts.set(config, origin);
        if (!rows && !none) this.store.keepRules(run, now, now + limitsFrom(this.env).retention * 1000);
      });
      if (!rows) void armAlarm(this.ctx.storage, now);
      return this.alerts.json(true);
    });
  }

  /** A page of the run's episodes matching a search, best first, in `scope` and passing `q`'s filters; null: no run. */
  search(
    query: SearchQuery,
    q: Pick<ListQuery, "status" | "prefix" | "filter" | "limit">,
    scope: Scope,
    cursor: string | null,
  ): SearchPage | null {
    this.reading();
    if (!this.hasRows()) return scope === null ? null : { episodes: [], cursor: null };
    return this.store.search.search(query, q, scope, cursor);
  }

  /** A page of the run's training steps, by step then kind (`kind` null: both; covering viewers only); null: no run. */
  steps(kind: string | null, limit: number, cursor: string | null): StepsPage | null {
    this.reading();
    if (!this.hasRows()) return null;
    return this.store.steps.page(kind, limit, cursor);
  }

  /** The rows of `ids` (at most MAX_ROWS_BY_ID) in `scope` as the list shows them, in order; others are left out. */
  rowsById(ids: string[], scope: Scope): IndexEntry[] {
    this.reading();
    if (!this.hasRows()) return [];
    const out: IndexEntry[] = [];
    for (const id of ids.slice(0, MAX_ROWS_BY_ID)) {
      if (!visible(scope, id)) continue;
      const row = this.store.row(id);
      if (row !== null) out.push(entryOf(row));
    }
    return out;
  }

  /** Finished episodes after `after` (a `finished_seq`) as they became finished, in `scope`; null: no run. */
  finished(after: number, limit: number, scope: Scope, selection?: FinishedSelection): FinishedPage | null {
    this.schema.check();
    if (!this.hasRows()) return scope === null ? null : { items: [], next: null, unsent: 0 };
    return this.store.finished(after, limit, scope, selection);
  }

  // ---- the socket ----

  async fetch(request: Request): Promise<Response> {
    try {
      this.schema.check();
      if (!isWebSocketUpgrade(request)) throw upgradeRequired("the run socket");
      const url = new URL(request.url);
      const route = parseRoute(url.pathname);
      if (route.kind !== "run" || route.action !== "run")
        throw new RelayError("not_found", "a run's index answers only its run socket over fetch");
      const { run } = route;
      const refused = this.sockets.refusal();
      if (refused) return refused;
      const scope = readScopeHeader(request.headers.get(SCOPE_HEADER));
      const q = parseListQuery(url.searchParams, SNAPSHOT_LIMIT);
      // a run nobody wrote yet may be watched (its first rows arrive as changes): its socket stores nothing
      const rows = this.hasRows();
      // the socket pushes every change in scope: its first page is unfiltered too (clients match rows with
      // row-filter.ts)
      const page = rows ? this.store.query({ ...q, filter: NO_FILTER, after: null }, scope) : { rows: [], next: null };
      const first = encodeRunMessage({
        type: "snapshot",
        run,
        aggregates: rows && coversRun(scope, run) ? this.store.aggregates(run, Date.now()) : null,
        episodes: page.rows.map(entryOf),
        truncated: page.next !== null,
        limit: Math.min(q.limit, MAX_LIMIT),
      });
      return await this.sockets.accept(scope, first);
    } catch (e) {
      return errorResponse(e, "run socket");
    }
  }

  // ---- the alarm: rescans, the directory (retried until it lands), alerts ----

  /** The index's own work, then the alerts due (a bounded batch), then the alarm armed for the next alert due. */
  async alarm(): Promise<void> {
    if (this.schema.failed !== null || !this.schema.present()) return;
    await this.indexAlarm();
    if (!this.schema.present()) return; // freed
    await sendDue(this.alerts, (body) => this.write(body), this.ctx.storage, this.store.run, DIRECTORY_MS);
  }

  private async indexAlarm(): Promise<void> {
    const run = this.store.run;
    if (run === null) return;
    await askResends(this.ctx.storage, this.env.EPISODES, RESCAN_PAUSE_MS, DIRECTORY_MS * 10);
    // a rescan for rules set since: one paced step per alarm, the next one soon after
    if (this.store.flags.rescanning()) {
      const moved = this.write(() => {
        const rows = this.store.refreshFlags(this.store.flags.rescanStep());
        this.alerts.afterRescan(rows, (id) => this.store.flags.of(id), run, Date.now());
        return rows;
      });
      for (const row of moved) this.changed(row.id, row);
      // the directory hears of the run when the rescan is done (it sees nothing of flags)
      if (this.store.flags.rescanning()) return armAlarm(this.ctx.storage, Date.now() + RESCAN_PAUSE_MS);
    }
    const dir = this.env.RUN_DIRECTORY.getByName(RUNS_NAME);
    await this.directory.alarmSends();
    try {
      const until = this.store.rulesUntil();
      if (this.store.loadCounters().episodes === 0 && until > Date.now()) {
        // rules waiting for the run's first row: listed until they go
        await dir.upsertRun(this.store.runRow(run));
        this.store.directoryReached();
        // a first row that came meanwhile ended the wait: the directory hears of it soon, not then
        return armAlarm(this.ctx.storage, this.store.rulesUntil() === 0 ? Date.now() + DIRECTORY_MS : until);
      }
      if (this.store.loadCounters().episodes === 0) {
        await dir.removeRun(run);
        await this.freeIfEmpty(run);
        return;
      }
      await dir.upsertRun(this.store.runRow(run));
      this.store.directoryReached();
    } catch (e) {
      const attempts = Number(this.store.state("dir_attempts") ?? 0) + 1;
      this.store.setState("dir_attempts", String(attempts));
      console.warn(
        `run ${run}: directory update failed (attempt ${attempts}): ${e instanceof Error ? e.message : String(e)}`,
      );
      await armAlarm(this.ctx.storage, Date.now() + Math.min(60_000, DIRECTORY_MS * 2 ** attempts));
    }
  }

  // ---- internals ----

  /** Whether the run has a row (no storage, or every row gone: no run). */
  private hasRows(): boolean {
    return this.schema.present() && this.store.loadCounters().episodes > 0;
  }

  /**
   * The directory dropped the run and no row came back since: nothing is kept (deleteAll; the
   * next row creates the tables again). Not while changes wait to be pushed to sockets, nor while
   * a socket of an earlier release keeps its scope in the table: the next alarm tries again. The run's
   * tokenizer goes first (a failed delete keeps all for the next alarm; a row that came meanwhile keeps the run).
   */
  private async freeIfEmpty(run: string): Promise<void> {
    if (this.store.loadCounters().episodes !== 0) return;
    if (this.store.state("tokenizer") !== null) {
      this.freeing = this.env.ARCHIVE.delete(tokenizerKey(run)).finally(() => {
        this.freeing = null;
      });
      const deleted = await this.freeing.then(
        () => true,
        (e) => console.warn(`run ${run}: its tokenizer was not deleted, the next alarm tries again: ${String(e)}`),
      );
      if (!deleted) return void armAlarm(this.ctx.storage, Date.now() + DIRECTORY_MS);
      this.write(() => this.store.deleteState("tokenizer"));
      if (this.store.loadCounters().episodes !== 0) return;
    }
    if (this.changes.size > 0 || this.sockets.keepsStoredScopes()) {
      void armAlarm(this.ctx.storage, Date.now() + DIRECTORY_MS);
      return;
    }
    // issued before any later event's writes, which then find no tables and create them
    void this.ctx.storage.deleteAll();
    this.schema.forget();
    this.store.forgetCached();
    this.alerts.forget();
  }

  /**
   * One transaction; if it throws, the counters kept in memory are dropped with it (reloaded as saved).
   * The rows FTS5 wrote to its own tables (its statements' cursors do not count them) go to the meter.
   */
  private write<T>(body: () => T): T {
    let out: T;
    try {
      out = this.ctx.storage.transactionSync(body);
    } catch (e) {
      this.store.forgetCached();
      this.alerts.forget();
      this.store.search.abandon();
      throw e;
    }
    const shadow = this.store.search.settle();
    if (shadow > 0) usageOf(this.ctx.storage)?.rows(0, shadow, FTS_SHADOW);
    return out;
  }

  private changed(id: string, row: IndexRow | null): void {
    this.changes.set(id, row);
    this.sockets.changed();
    // the directory hears of it within DIRECTORY_MS: at once, or by the alarm (directory-push.ts)
    const run = this.store.run;
    const direct = run !== null && this.hasRows() && this.store.rulesUntil() === 0;
    this.directory.changed(direct ? () => this.sendRun(run) : null);
  }

  /** The run's row to the directory (failed attempts start again from none once one lands). */
  private async sendRun(run: string): Promise<void> {
    await this.env.RUN_DIRECTORY.getByName(RUNS_NAME).upsertRun(this.store.runRow(run));
    if (this.schema.present()) this.write(() => this.store.directoryReached());
  }

  protected changesFor(scope: Scope): string | null {
    const upserts: IndexEntry[] = [];
    const deletes: string[] = [];
    for (const [id, row] of this.changes) {
      if (!visible(scope, id)) continue;
      if (row) upserts.push(entryOf(row));
      else deletes.push(id);
    }
    const run = this.store.run ?? "";
    const covers = coversRun(scope, run);
    if (upserts.length === 0 && deletes.length === 0 && !covers) return null;
    if (!covers) return encodeRunMessage({ type: "changes", upserts, deletes, aggregates: null });
    const touched = (this.pushSteps ??= this.store.steps.touchedSteps());
    return encodeRunMessage({
      type: "changes",
      upserts,
      deletes,
      aggregates: this.store.aggregates(run, Date.now()),
      ...(touched.steps.length ? { steps: touched.steps } : {}),
      ...(touched.gone.length ? { steps_gone: touched.gone } : {}),
    });
  }

  /** A read of the run's rows, search or aggregates (the Worker's): the run is attended a while (attention.ts). */
  private reading(): void {
    this.schema.check();
    this.attention.read(Date.now());
  }

  /** The interval told to the episodes (src/protocol/limits/vars.ts): backpressure, and attention (attention.ts). */
  private flushMs(): number {
    const present = this.schema.present();
    const c = present ? this.store.loadCounters() : null;
    const attended = this.attention.attended(Date.now(), this.sockets.open(), present && this.alerts.readsLiveRows());
    return flushIntervalMs(indexPacingFrom(this.env), c ? c.live + c.finish_refused : 0, attended);
  }
}

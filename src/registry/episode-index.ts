// A run's episode index: one SQLite-backed Durable Object per run (by name `run:<run>`), holding
// one row per episode of the run and the run's aggregates, kept incrementally (aggregates.ts).
// Episode objects keep their rows current over RPC (src/episode/index-sync.ts); each answer says
// how often the episode may send (backpressure: the run's live episodes together stay under
// INDEX_WRITES_PER_S). The run's counts reach the run directory at most every DIRECTORY_MS, by
// alarm, retried until they land. Sockets (`GET /v1/runs/{run}` upgraded) get a snapshot, then
// coalesced changes with the aggregates.

import { DurableObject } from "cloudflare:workers";
import { errorResponse, upgradeRequired } from "../http/errors.js";
import type { Json } from "../wire/json-view.js";
import { aggregatesOf, applyContribution, type Contribution, type Counters, contributionOf, emptyCounters, type RunAggregates } from "./aggregates.js";
import { encodeRunMessage } from "./index-protocol.js";
import { IndexSockets, readScopeHeader } from "./index-sockets.js";
import { RUNS_NAME, type RunRow } from "./run-directory.js";
import { coversRun } from "./run.js";
import { rewardOf } from "./rewards.js";
import {
  encodeCursor,
  encodeListCursor,
  entryOf,
  type IndexEntry,
  type IndexRow,
  type ListQuery,
  MAX_LIMIT,
  parseListQuery,
  SCOPE_HEADER,
  type Scope,
  visible,
} from "./rows.js";

/** The object of a run's index. */
export function runIndexName(run: string): string {
  return `run:${run}`;
}

/** Episodes in the snapshot a socket starts with (`?limit=` up to MAX_LIMIT). */
export const SNAPSHOT_LIMIT = 200;
/** The run's counts go to the directory at most this often. */
export const DIRECTORY_MS = 1000;
const DEFAULT_WRITES_PER_S = 250;

/** The answer to an update: whether it was newer than the row held, and the episode's next interval. */
export interface UpdateAnswer {
  applied: boolean;
  /** Least ms between this episode's next updates (backpressure). */
  flushMs: number;
}

/**
 * A finished episode in bulk-fetch order: the order its row became finished here (`finished_seq`,
 * assigned by this index), so an update that lands late still comes after a cursor handed out
 * before it, whatever the episodes' clocks said.
 */
export interface FinishedItem {
  id: string;
  cursor: string;
}

interface SqlRow extends Record<string, SqlStorageValue> {
  id: string;
  run: string;
  status: string;
  created: number;
  updated: number;
  ended: number | null;
  seq: number;
  traces: number;
  nodes: number;
  calls: number;
  tokens: number;
  rewards: string | null;
  reward: number | null;
  error: string | null;
}

export class EpisodeIndex extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly sockets: IndexSockets;
  private counters: Counters | null = null;
  /** Rows changed since the last push (null: removed). */
  private changes = new Map<string, IndexRow | null>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`CREATE TABLE IF NOT EXISTS rows (
      id TEXT PRIMARY KEY, run TEXT NOT NULL, status TEXT NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL,
      ended INTEGER, seq INTEGER NOT NULL, traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
      tokens INTEGER NOT NULL, rewards TEXT, reward REAL, error TEXT, finished_seq INTEGER)`);
    this.sql.exec("CREATE INDEX IF NOT EXISTS rows_by_updated ON rows (updated DESC, id DESC)");
    this.sql.exec("CREATE INDEX IF NOT EXISTS rows_by_reward ON rows (reward DESC, id DESC)");
    this.sql.exec("CREATE INDEX IF NOT EXISTS rows_finished ON rows (finished_seq) WHERE finished_seq IS NOT NULL");
    this.sql.exec("CREATE TABLE IF NOT EXISTS scores (id TEXT NOT NULL, key TEXT NOT NULL, score REAL NOT NULL, PRIMARY KEY (id, key))");
    this.sql.exec("CREATE INDEX IF NOT EXISTS scores_by_key ON scores (key, score)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS throughput (minute INTEGER PRIMARY KEY, n INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS state (k TEXT PRIMARY KEY, v TEXT NOT NULL)");
    this.sockets = new IndexSockets(
      ctx,
      this.sql,
      (scope) => this.changesFor(scope),
      () => this.changes.clear(),
    );
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  // ---- RPC from Episode objects ----

  /** Insert or replace the episode's row (an update older than the held one is ignored). */
  upsert(row: IndexRow): UpdateAnswer {
    const applied = this.ctx.storage.transactionSync(() => {
      const old = this.row(row.id);
      if (old && !(row.updated > old.updated || (row.updated === old.updated && row.seq >= old.seq))) return false;
      const c = this.loadCounters();
      if (old) this.apply(c, old, contributionOf(old), -1);
      this.sql.exec(
        `INSERT OR REPLACE INTO rows (id, run, status, created, updated, ended, seq, traces, nodes, calls, tokens, rewards, reward, error, finished_seq)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
      );
      this.apply(c, row, contributionOf(row), 1);
      this.saveRun(c, row.run, row.created, row.updated);
      return true;
    });
    if (applied) this.changed(row.id, row);
    return { applied, flushMs: this.flushMs() };
  }

  /** Drop the episode's row (deleted or expired). */
  remove(id: string): UpdateAnswer {
    const old = this.ctx.storage.transactionSync(() => {
      const o = this.row(id);
      if (!o) return null;
      const c = this.loadCounters();
      this.apply(c, o, contributionOf(o), -1);
      this.sql.exec("DELETE FROM rows WHERE id = ?", id);
      this.saveRun(c, o.run, o.created, Date.now());
      return o;
    });
    if (old) this.changed(id, null);
    return { applied: old !== null, flushMs: this.flushMs() };
  }

  // ---- RPC from the Worker ----

  /** A page of the run's episodes within `scope`, as JSON text `{episodes, cursor}` (rewards are free-form JSON). */
  list(q: ListQuery, scope: Scope): string {
    const rows = this.query(q, scope, q.limit + 1);
    const page = rows.slice(0, q.limit);
    const last = page.at(-1);
    const cursor = rows.length > q.limit && last ? encodeListCursor({ key: q.sort === "reward" ? rewardOf(last.rewards) : last.updated, id: last.id }) : null;
    return JSON.stringify({ episodes: page.map(entryOf), cursor });
  }

  /** The run's aggregates as JSON text (the Worker shows them only to viewers covering the run). */
  aggregates(run: string): string {
    return JSON.stringify(this.aggregatesNow(run));
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
      for (const r of batch) if (visible(scope, r.id) && out.length < limit) out.push({ id: r.id, cursor: encodeCursor({ f: r.f }) });
      if (batch.length < limit) break;
      from = batch.at(-1)!.f;
    }
    return out;
  }

  // ---- the socket ----

  async fetch(request: Request): Promise<Response> {
    try {
      if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") throw upgradeRequired("the run socket");
      const url = new URL(request.url);
      const scope = readScopeHeader(request.headers.get(SCOPE_HEADER));
      const run = decodeURIComponent(url.pathname.split("/")[3] ?? "");
      const q = parseListQuery(url.searchParams, SNAPSHOT_LIMIT);
      const rows = this.query({ ...q, after: null }, scope, q.limit + 1);
      const first = encodeRunMessage({
        type: "snapshot",
        run,
        aggregates: coversRun(scope, run) ? this.aggregatesNow(run) : null,
        episodes: rows.slice(0, q.limit).map(entryOf),
        truncated: rows.length > q.limit,
        limit: Math.min(q.limit, MAX_LIMIT),
      });
      return await this.sockets.accept(scope, first);
    } catch (e) {
      return errorResponse(e, "run socket");
    }
  }

  async webSocketMessage(ws: WebSocket): Promise<void> {
    this.sockets.message(ws);
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.sockets.closed(ws, code, reason);
  }

  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    console.warn("run socket error", error);
    this.sockets.closed(ws, 1006, "");
  }

  // ---- the directory (by alarm, retried until it lands) ----

  async alarm(): Promise<void> {
    const run = this.state("run");
    if (run === null) return;
    const c = this.loadCounters();
    const dir = this.env.RUN_DIRECTORY.getByName(RUNS_NAME);
    try {
      if (c.episodes === 0) await dir.removeRun(run);
      else await dir.upsertRun(this.runRow(run, c));
      this.setState("dir_attempts", "0");
    } catch (e) {
      const attempts = Number(this.state("dir_attempts") ?? 0) + 1;
      this.setState("dir_attempts", String(attempts));
      console.warn(`run ${run}: directory update failed (attempt ${attempts}): ${e instanceof Error ? e.message : String(e)}`);
      await this.ctx.storage.setAlarm(Date.now() + Math.min(60_000, DIRECTORY_MS * 2 ** attempts));
    }
  }

  // ---- internals ----

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

  private changed(id: string, row: IndexRow | null): void {
    this.changes.set(id, row);
    this.sockets.changed();
    // the directory hears of it within DIRECTORY_MS (an alarm already set stays)
    void this.ctx.storage.getAlarm().then((at) => (at === null ? this.ctx.storage.setAlarm(Date.now() + DIRECTORY_MS) : undefined));
  }

  private changesFor(scope: Scope): string | null {
    const upserts: IndexEntry[] = [];
    const deletes: string[] = [];
    for (const [id, row] of this.changes) {
      if (!visible(scope, id)) continue;
      if (row) upserts.push(entryOf(row));
      else deletes.push(id);
    }
    const run = this.state("run") ?? "";
    const covers = coversRun(scope, run);
    if (upserts.length === 0 && deletes.length === 0 && !covers) return null;
    return encodeRunMessage({ type: "changes", upserts, deletes, aggregates: covers ? this.aggregatesNow(run) : null });
  }

  /** The interval that keeps this run's live episodes under INDEX_WRITES_PER_S together. */
  private flushMs(): number {
    const base = Number(this.env.INDEX_FLUSH_MS) || 2000;
    const rate = Number(this.env.INDEX_WRITES_PER_S) || DEFAULT_WRITES_PER_S;
    const c = this.loadCounters();
    return Math.max(base, Math.ceil(((c.live + c.finish_refused) * 1000) / rate));
  }

  private aggregatesNow(run: string): RunAggregates {
    const throughput = new Map<number, number>();
    for (const r of this.sql.exec<{ minute: number; n: number }>("SELECT minute, n FROM throughput ORDER BY minute DESC LIMIT 60")) {
      throughput.set(r.minute, r.n);
    }
    return aggregatesOf(run, this.loadCounters(), throughput, Date.now(), (key) => {
      const r = this.sql.exec<{ lo: number | null; hi: number | null }>("SELECT MIN(score) AS lo, MAX(score) AS hi FROM scores WHERE key = ?", key).one();
      return { min: r.lo, max: r.hi };
    });
  }

  /** Add or take back one row's part: counters, throughput minute, score rows. Inside the caller's transaction. */
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

  private runRow(run: string, c: Counters): RunRow {
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

  private loadCounters(): Counters {
    if (!this.counters) {
      const saved = this.state("counters");
      this.counters = saved === null ? emptyCounters() : (JSON.parse(saved) as Counters);
    }
    return this.counters;
  }

  private state(k: string): string | null {
    return this.sql.exec<{ v: string }>("SELECT v FROM state WHERE k = ?", k).toArray()[0]?.v ?? null;
  }

  private setState(k: string, v: string): void {
    this.sql.exec("INSERT OR REPLACE INTO state VALUES (?, ?)", k, v);
  }

  private row(id: string): IndexRow | null {
    const r = this.sql.exec<SqlRow>("SELECT * FROM rows WHERE id = ?", id).toArray()[0];
    return r ? rowOf(r) : null;
  }

  /** Rows in the sort's order, after `q.after`, within `scope`. */
  private query(q: ListQuery, scope: Scope, limit: number): IndexRow[] {
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
  };
}

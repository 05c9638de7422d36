// The run directory: one small Durable Object (by name "runs") listing the runs with their counts,
// so runs can be listed without touching their indexes. Each run's index writes its row here at
// most every DIRECTORY_MS (whatever its episodes do), so the directory's load grows with the
// number of active runs, not episodes. Sockets (`GET /v1/runs` upgraded) get the runs, then
// coalesced changes.

import { DurableObject } from "cloudflare:workers";
import { SchemaState } from "../storage/schema.js";
import { DIRECTORY_SCHEMA } from "./schemas.js";
import { errorResponse, upgradeRequired } from "../http/errors.js";
import { isWebSocketUpgrade } from "../http/route.js";
import { encodeRunsMessage, type RunSummary } from "./index-protocol.js";
import { IndexSockets, readScopeHeader } from "./index-sockets.js";
import { coversRun, mayHold } from "./run.js";
import { badCursor, decodeCursor, encodeCursor, MAX_LIMIT, SCOPE_HEADER, type Scope } from "./rows.js";

export const RUNS_NAME = "runs";
/** Runs in the list a socket starts with. */
export const RUNS_SNAPSHOT_LIMIT = 200;

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
  return { ...r, mean_rewards: r.mean_rewards === null ? null : (JSON.parse(r.mean_rewards) as Record<string, number>) };
}

/** A run as the API lists it; `mean_rewards` is left out until the run's index sends it (older rows answer as before). */
export function summaryOf(r: RunRow): RunSummary {
  const { mean_rewards, ...rest } = r;
  const summary: RunSummary = { ...rest, created: new Date(r.created).toISOString(), updated: new Date(r.updated).toISOString() };
  if (mean_rewards) summary.mean_rewards = mean_rewards;
  return summary;
}

/** Where a page of runs ends: newest-created first. */
export interface RunCursor {
  created: number;
  run: string;
}

export function encodeRunCursor(c: RunCursor): string {
  return encodeCursor([c.created, c.run]);
}

export function decodeRunCursor(cursor: string): RunCursor {
  const v = decodeCursor(cursor);
  if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === "string") return { created: v[0] as number, run: v[1] };
  throw badCursor();
}

export class RunDirectory extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly schema: SchemaState;
  private readonly sockets: IndexSockets;
  private changes = new Map<string, RunRow | null>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.schema = new SchemaState(ctx.storage, DIRECTORY_SCHEMA);
    // no request is delivered until storage is at this release's schema (or the object refuses them)
    void ctx.blockConcurrencyWhile(async () => this.schema.open(true));
    this.sockets = new IndexSockets(
      ctx,
      this.sql,
      (scope) => this.changesFor(scope),
      () => this.changes.clear(),
    );
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  // ---- RPC from run indexes ----

  upsertRun(r: RunRow): void {
    this.schema.check();
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
    this.changes.set(r.run, r);
    this.sockets.changed();
  }

  removeRun(run: string): void {
    this.schema.check();
    if (this.sql.exec("DELETE FROM runs WHERE run = ?", run).rowsWritten === 0) return;
    this.changes.set(run, null);
    this.sockets.changed();
  }

  // ---- RPC from the Worker ----

  /** Runs newest-created first after `after`, whose ids may fall in `scope` and start with `prefix`. */
  runs(after: RunCursor | null, limit: number, scope: Scope, prefix: string | null, whole: boolean): { runs: RunSummary[]; cursor: string | null } {
    this.schema.check();
    const out: RunRow[] = [];
    let from = after;
    let more = false;
    while (out.length <= limit) {
      const batch = this.sql
        .exec<SqlRunRow>(
          `SELECT * FROM runs ${from ? "WHERE (created < ? OR (created = ? AND run < ?))" : ""} ORDER BY created DESC, run DESC LIMIT ?`,
          ...(from ? [from.created, from.created, from.run] : []),
          limit + 1,
        )
        .toArray()
        .map(runRowOf);
      for (const r of batch) {
        if (prefix !== null && !mayHold([`${prefix}*`], r.run)) continue; // no id of the run can start with it
        if (whole ? coversRun(scope, r.run) : mayHold(scope, r.run)) out.push(r);
      }
      if (batch.length <= limit) break;
      const last = batch.at(-1)!;
      from = { created: last.created, run: last.run };
    }
    if (out.length > limit) {
      more = true;
      out.length = limit;
    }
    const last = out.at(-1);
    return { runs: out.map(summaryOf), cursor: more && last ? encodeRunCursor({ created: last.created, run: last.run }) : null };
  }

  /** One run's row, or null. */
  run(run: string): RunSummary | null {
    this.schema.check();
    const r = this.sql.exec<SqlRunRow>("SELECT * FROM runs WHERE run = ?", run).toArray()[0];
    return r ? summaryOf(runRowOf(r)) : null;
  }

  // ---- the socket ----

  async fetch(request: Request): Promise<Response> {
    try {
      if (!isWebSocketUpgrade(request)) throw upgradeRequired("the runs socket");
      const scope = readScopeHeader(request.headers.get(SCOPE_HEADER));
      const page = this.runs(null, RUNS_SNAPSHOT_LIMIT, scope, null, true);
      return await this.sockets.accept(
        scope,
        encodeRunsMessage({ type: "runs", runs: page.runs, truncated: page.cursor !== null, limit: Math.min(RUNS_SNAPSHOT_LIMIT, MAX_LIMIT) }),
      );
    } catch (e) {
      return errorResponse(e, "runs socket");
    }
  }

  async webSocketMessage(ws: WebSocket): Promise<void> {
    this.sockets.message(ws);
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.sockets.closed(ws, code, reason);
  }

  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    console.warn("runs socket error", error);
    this.sockets.closed(ws, 1006, "");
  }

  private changesFor(scope: Scope): string | null {
    const upserts: RunSummary[] = [];
    const deletes: string[] = [];
    for (const [run, row] of this.changes) {
      if (!coversRun(scope, run)) continue;
      if (row) upserts.push(summaryOf(row));
      else deletes.push(run);
    }
    if (upserts.length === 0 && deletes.length === 0) return null;
    return encodeRunsMessage({ type: "run_changes", upserts, deletes });
  }
}

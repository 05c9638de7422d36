// The episode index: one SQLite-backed Durable Object (by name "global") holding one row per
// episode, for the dashboard's list. Episode objects keep it up to date over RPC (`upsert`,
// `remove`): on creation, at most every ~2 s while turns arrive, on finish or failure, and on
// delete or expiry. It is advisory: an Episode never waits for it, and a lost update is
// repaired by that episode's next one.
//
// - `GET /v1/episodes?status=&prefix=&limit=&cursor=`: newest-updated first, paged by an opaque
//   cursor, filtered to the viewer's scope (the Worker passes the token's `episodes` patterns in
//   the x-episode-scope header after checking the token).
// - `GET /v1/episodes/watch`: a hibernating WebSocket that gets `{type: "snapshot", episodes}`
//   then `{type: "upsert", episode}` / `{type: "delete", id}` as JSON text for the episodes in its
//   scope. "ping" is answered "pong" by the platform without waking the object.

import { DurableObject } from "cloudflare:workers";
import { CLOSE_POLICY, echoClose, errorResponse, safeClose, upgradeRequired } from "../http/errors.js";
import type { Json } from "../wire/json-view.js";
import { encodeIndexMessage } from "./index-protocol.js";
import {
  encodeCursor,
  entryOf,
  type IndexEntry,
  type IndexRow,
  type ListQuery,
  MAX_LIMIT,
  parseListQuery,
  SCOPE_HEADER,
  type Scope,
  scopeOf,
  visible,
} from "./rows.js";

/** A page of `GET /v1/episodes`. */
export interface ListPage {
  episodes: IndexEntry[];
  /** Pass as `?cursor=` for the next page; null on the last. */
  cursor: string | null;
}

/** Name of the one index object. */
export const INDEX_NAME = "global";
export const INDEX_TAG = "index";
/** Episodes in the snapshot an index socket starts with (`?limit=` up to MAX_LIMIT). */
export const SNAPSHOT_LIMIT = 200;
/** Attachments are limited to 2 KiB: larger scopes are kept in the `scopes` table by hash. */
const INLINE_SCOPE_BYTES = 1500;

type Attachment = { prefix: string | null } & ({ scope: Scope } | { scopeKey: string });

interface SqlRow extends Record<string, SqlStorageValue> {
  id: string;
  status: string;
  created: number;
  updated: number;
  seq: number;
  traces: number;
  nodes: number;
  calls: number;
  rewards: string | null;
  error: string | null;
}

export class EpisodeIndex extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly scopes = new Map<string, string[]>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`CREATE TABLE IF NOT EXISTS episodes (
      id TEXT PRIMARY KEY, status TEXT NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL,
      seq INTEGER NOT NULL, traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
      rewards TEXT, error TEXT)`);
    this.sql.exec("CREATE INDEX IF NOT EXISTS episodes_by_updated ON episodes (updated DESC, id DESC)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS scopes (key TEXT PRIMARY KEY, patterns TEXT NOT NULL)");
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  // ---- RPC from Episode objects ----

  /** Insert or replace the episode's row (an update older than the held one is ignored). */
  upsert(row: IndexRow): boolean {
    const rewards = row.rewards === null || row.rewards === undefined ? null : JSON.stringify(row.rewards);
    const cur = this.sql.exec(
      `INSERT INTO episodes (id, status, created, updated, seq, traces, nodes, calls, rewards, error)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET status = excluded.status, created = excluded.created, updated = excluded.updated,
         seq = excluded.seq, traces = excluded.traces, nodes = excluded.nodes, calls = excluded.calls,
         rewards = excluded.rewards, error = excluded.error
       WHERE excluded.updated > episodes.updated OR (excluded.updated = episodes.updated AND excluded.seq >= episodes.seq)`,
      row.id,
      row.status,
      row.created,
      row.updated,
      row.seq,
      row.traces,
      row.nodes,
      row.calls,
      rewards,
      row.error,
    );
    if (cur.rowsWritten === 0) return false;
    this.broadcast(row.id, encodeIndexMessage({ type: "upsert", episode: entryOf(row) }));
    return true;
  }

  /** Drop the episode's row (deleted or expired). */
  remove(id: string): boolean {
    const cur = this.sql.exec("DELETE FROM episodes WHERE id = ?", id);
    if (cur.rowsWritten === 0) return false;
    this.broadcast(id, encodeIndexMessage({ type: "delete", id }));
    return true;
  }

  // ---- RPC from the Worker: a page of the list ----

  /**
   * Newest-updated first, paged by an opaque cursor, within the viewer's scope. The page comes
   * as its JSON text: the Worker answers it as is (and rows carry free-form JSON rewards, which
   * RPC's types cannot spell).
   */
  list(q: ListQuery, scope: Scope): string {
    const rows = this.query(q, scope, q.limit + 1);
    const page = rows.slice(0, q.limit);
    const last = page.at(-1);
    const body: ListPage = { episodes: page.map(entryOf), cursor: rows.length > q.limit && last ? encodeCursor(last.updated, last.id) : null };
    return JSON.stringify(body);
  }

  // ---- the index socket (an upgrade: fetch) ----

  async fetch(request: Request): Promise<Response> {
    try {
      if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") throw upgradeRequired("the index watch endpoint");
      return await this.acceptWatch(new URL(request.url), readScope(request));
    } catch (e) {
      return errorResponse(e, "index socket");
    }
  }

  /** Rows newest-updated first, after `q.after`, within `scope`. */
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
      where.push("(updated < ? OR (updated = ? AND id < ?))");
      args.push(q.after.updated, q.after.updated, q.after.id);
    }
    if (scope !== null) {
      // the patterns travel as one JSON parameter: exact ids, or PREFIX* (a `*` scope is null);
      // json_each has an `id` column of its own, hence `episodes.id`
      where.push(`EXISTS (SELECT 1 FROM json_each(?) AS p WHERE
        CASE WHEN substr(p.value, -1) = '*'
          THEN substr(episodes.id, 1, length(p.value) - 1) = substr(p.value, 1, length(p.value) - 1)
          ELSE episodes.id = p.value END)`);
      args.push(JSON.stringify(scope));
    }
    const sql = `SELECT * FROM episodes ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY updated DESC, id DESC LIMIT ?`;
    args.push(limit);
    return this.sql
      .exec<SqlRow>(sql, ...args)
      .toArray()
      .map(rowOf);
  }

  private async acceptWatch(url: URL, scope: Scope): Promise<Response> {
    const q = parseListQuery(url.searchParams, SNAPSHOT_LIMIT);
    const prefix = q.prefix;
    const pair = new WebSocketPair();
    const [client, server] = Object.values(pair) as [WebSocket, WebSocket];
    this.ctx.acceptWebSocket(server, [INDEX_TAG]);
    server.serializeAttachment(await this.attachmentFor(scope, prefix));
    const rows = this.query({ status: null, prefix, limit: q.limit, after: null }, scope, q.limit + 1);
    const episodes: IndexEntry[] = rows.slice(0, q.limit).map(entryOf);
    server.send(encodeIndexMessage({ type: "snapshot", episodes, truncated: rows.length > q.limit, limit: Math.min(q.limit, MAX_LIMIT) }));
    return new Response(null, { status: 101, webSocket: client });
  }

  private async attachmentFor(scope: Scope, prefix: string | null): Promise<Attachment> {
    const json = JSON.stringify(scope);
    if (scope === null || json.length <= INLINE_SCOPE_BYTES) return { scope, prefix };
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(json)));
    const key = [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
    this.sql.exec("INSERT OR IGNORE INTO scopes VALUES (?, ?)", key, json);
    this.scopes.set(key, scope);
    return { scopeKey: key, prefix };
  }

  private scopeOfSocket(att: Attachment): Scope | undefined {
    if ("scope" in att) return att.scope;
    let s = this.scopes.get(att.scopeKey);
    if (!s) {
      const row = this.sql.exec<{ patterns: string }>("SELECT patterns FROM scopes WHERE key = ?", att.scopeKey).toArray()[0];
      if (!row) return undefined;
      s = JSON.parse(row.patterns) as string[];
      this.scopes.set(att.scopeKey, s);
    }
    return s;
  }

  private broadcast(id: string, message: string): void {
    for (const ws of this.ctx.getWebSockets(INDEX_TAG)) {
      const att = ws.deserializeAttachment() as Attachment | null;
      if (!att) continue;
      const scope = this.scopeOfSocket(att);
      if (scope === undefined || !visible(scope, id, att.prefix)) continue;
      try {
        ws.send(message);
      } catch {
        // the socket went away between listing and sending
      }
    }
  }

  async webSocketMessage(ws: WebSocket): Promise<void> {
    // "ping" never gets here (the platform answers it)
    safeClose(ws, CLOSE_POLICY, 'the index socket is read-only: send only "ping"');
  }

  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    console.warn("index socket error", error);
    await this.webSocketClose(ws, 1006, "");
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    echoClose(ws, code, reason);
    // forget stored scopes no open socket uses any more
    const used = new Set<string>();
    for (const s of this.ctx.getWebSockets(INDEX_TAG)) {
      if (s === ws) continue;
      const att = s.deserializeAttachment() as Attachment | null;
      if (att && "scopeKey" in att) used.add(att.scopeKey);
    }
    for (const { key } of this.sql.exec<{ key: string }>("SELECT key FROM scopes").toArray()) {
      if (!used.has(key)) {
        this.sql.exec("DELETE FROM scopes WHERE key = ?", key);
        this.scopes.delete(key);
      }
    }
  }
}

/** The viewer's scope from the Worker's header; no header (never from the Worker) sees nothing. */
function readScope(request: Request): Scope {
  const h = request.headers.get(SCOPE_HEADER);
  if (h === null) return [];
  try {
    const v = JSON.parse(h) as unknown;
    if (Array.isArray(v) && v.every((p) => typeof p === "string")) return scopeOf(v as string[]);
  } catch {
    // fall through: nothing visible
  }
  return [];
}

function rowOf(r: SqlRow): IndexRow {
  return {
    id: r.id,
    status: r.status as IndexRow["status"],
    created: r.created,
    updated: r.updated,
    seq: r.seq,
    traces: r.traces,
    nodes: r.nodes,
    calls: r.calls,
    rewards: r.rewards === null ? null : (JSON.parse(r.rewards) as Json),
    error: r.error,
  };
}

// The read-only sockets of the two registry objects: a run's sockets (its EpisodeIndex) and the
// runs sockets (the RunDirectory). Each socket remembers its viewer's scope in its attachment
// (16 KiB: a token's patterns always fit; sockets of earlier releases kept larger scopes in
// SQLite by hash, and are still read), and pushes are coalesced: changes collect for
// PUSH_MS, then each socket gets one message built for its scope. The short timer only delays a
// push; nothing keeps running while idle. Newcomers are admitted as a hub admits watchers
// (src/protocol/hub/admission.ts): at most `maxRunSockets` per object and `runSocketRate` starting per
// second; past either a socket is closed at once with 1013 and a jittered retry hint.

import { CLOSE_POLICY, CLOSE_TRY_LATER, echoClose, safeClose } from "../../protocol/http/errors.js";
import { Admission } from "../../protocol/hub/admission.js";
import type { Limits } from "../../protocol/limits/limits.js";
import { PUSH_MS } from "../../protocol/registry/index-protocol.js";
import type { Scope } from "../../protocol/registry/rows.js";
import { retryReason } from "../../protocol/watch/protocol.js";

/**
 * The tag of these sockets. Hibernated sockets keep the tag they were accepted with, across
 * deploys: the string stays what earlier releases gave them.
 */
export const RUN_SOCKET_TAG = "index";
/**
 * Scopes up to this long go in the attachment: every token's (at most MAX_TOKEN_CHARS, src/protocol/http/auth.ts), so
 * reads store nothing.
 */
const INLINE_SCOPE_BYTES = 12 * 1024;

type Attachment = { scope: Scope } | { scopeKey: string };

export class RunSockets {
  private readonly scopes = new Map<string, string[]>();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly admission: Admission;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly sql: SqlStorage,
    /** Build one socket's message for what changed since the last push (null: nothing for it). */
    private readonly messageFor: (scope: Scope) => string | null,
    /** Called after every socket got its push: the caller forgets what it collected. */
    private readonly pushed: () => void,
    limits: Pick<Limits, "maxRunSockets" | "runSocketRate">,
  ) {
    // the scopes table is in the object's schema (schemas.ts)
    this.admission = new Admission(
      {
        maxWatchers: limits.maxRunSockets,
        maxWaiting: Number.POSITIVE_INFINITY,
        catchUpsPerSecond: limits.runSocketRate,
        maxQueuedBytes: Number.POSITIVE_INFINITY,
      },
      Date.now(),
      Math.random,
      "sockets on this object",
    );
  }

  /**
   * Whether a newcomer may open a socket now; null when it may, else a closed socket's answer
   * (1013 with a retry hint). Ask before building its snapshot.
   */
  refusal(): Response | null {
    const d = this.admission.startNow(
      { watchers: this.ctx.getWebSockets(RUN_SOCKET_TAG).length, waiting: 0, queuedBytes: 0 },
      Date.now(),
    );
    if (d.ok) return null;
    const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
    // accepted only to be closed: not a hibernating socket (as a hub refuses a watcher)
    server.accept();
    safeClose(server, CLOSE_TRY_LATER, retryReason(d.reason, d.retryMs));
    return new Response(null, { status: 101, webSocket: client });
  }

  /** Accept a socket for a viewer with `scope` (admitted: `refusal` said null); `first` is its snapshot message. */
  async accept(scope: Scope, first: string): Promise<Response> {
    const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
    this.ctx.acceptWebSocket(server, [RUN_SOCKET_TAG]);
    server.serializeAttachment(await this.attachmentFor(scope));
    server.send(first);
    return new Response(null, { status: 101, webSocket: client });
  }

  /** How many sockets are open (hibernated ones too; one closing is not). */
  open(): number {
    return this.ctx.getWebSockets(RUN_SOCKET_TAG).filter((ws) => ws.readyState === WebSocket.OPEN).length;
  }

  /** Whether an open socket's scope is kept in the table (accepted by an earlier release). */
  keepsStoredScopes(): boolean {
    return this.ctx.getWebSockets(RUN_SOCKET_TAG).some((ws) => {
      const att = ws.deserializeAttachment() as Attachment | null;
      return att !== null && "scopeKey" in att;
    });
  }

  /** Something changed: push within PUSH_MS (one message per socket, however many changes). */
  changed(): void {
    if (this.timer !== null) return;
    this.timer = setTimeout(() => this.push(), PUSH_MS);
  }

  private push(): void {
    this.timer = null;
    const byScope = new Map<string, string | null>();
    for (const ws of this.ctx.getWebSockets(RUN_SOCKET_TAG)) {
      const scope = this.scopeOf(ws);
      if (scope === undefined) continue;
      const key = JSON.stringify(scope);
      if (!byScope.has(key)) byScope.set(key, this.messageFor(scope)); // built once per scope, sent to each
      const message = byScope.get(key);
      if (message == null || ws.readyState !== WebSocket.OPEN) continue;
      try {
        ws.send(message);
      } catch {
        // the socket went away between listing and sending
      }
    }
    this.pushed();
  }

  /** A viewer sent something other than "ping" (the platform answers that): the socket is read-only. */
  message(ws: WebSocket): void {
    // (the close reason is what clients have always been told: "index socket")
    safeClose(ws, CLOSE_POLICY, 'the index socket is read-only: send only "ping"');
  }

  /** The socket closed: answer the close, forget stored scopes no open socket uses. */
  closed(ws: WebSocket, code: number, reason: string): void {
    echoClose(ws, code, reason);
    const mine = ws.deserializeAttachment() as Attachment | null;
    if (!mine || !("scopeKey" in mine)) return; // an inline scope: nothing stored for it
    const used = new Set<string>();
    for (const s of this.ctx.getWebSockets(RUN_SOCKET_TAG)) {
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

  private async attachmentFor(scope: Scope): Promise<Attachment> {
    const json = JSON.stringify(scope);
    if (scope === null || json.length <= INLINE_SCOPE_BYTES) return { scope };
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(json)));
    const key = [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
    this.sql.exec("INSERT OR IGNORE INTO scopes VALUES (?, ?)", key, json);
    this.scopes.set(key, scope);
    return { scopeKey: key };
  }

  private scopeOf(ws: WebSocket): Scope | undefined {
    const att = ws.deserializeAttachment() as Attachment | null;
    if (!att) return undefined;
    if ("scope" in att) return att.scope;
    let s = this.scopes.get(att.scopeKey);
    if (!s) {
      const row = this.sql
        .exec<{ patterns: string }>("SELECT patterns FROM scopes WHERE key = ?", att.scopeKey)
        .toArray()[0];
      if (!row) return undefined;
      s = JSON.parse(row.patterns) as string[];
      this.scopes.set(att.scopeKey, s);
    }
    return s;
  }
}

/** The viewer's scope from the Worker's header; no header (never from the Worker) sees nothing. */
export function readScopeHeader(value: string | null): Scope {
  if (value === null) return [];
  try {
    const v = JSON.parse(value) as unknown;
    if (v === null) return null;
    if (Array.isArray(v) && v.every((p) => typeof p === "string")) return v.includes("*") ? null : v;
  } catch {
    // fall through: nothing visible
  }
  return [];
}

// What a run's index (episode-index.ts) and the run directory (run-directory.ts) share: storage
// opened at this release's schema in the constructor, the sockets that watch it (run-sockets.ts)
// fed the changes collected since the last push, and the platform answering their pings.

import { DurableObject } from "cloudflare:workers";
import { limitsFrom } from "../../protocol/limits/limits.js";
import type { Scope } from "../../protocol/registry/rows.js";
import { type Schema, SchemaState } from "../storage/schema.js";
import { RunSockets } from "./run-sockets.js";

export abstract class RunSideObject<Change> extends DurableObject<Env> {
  protected readonly schema: SchemaState;
  protected readonly sockets: RunSockets;
  /** What changed since the last push, by key (an episode id, a run); null: removed. */
  protected readonly changes = new Map<string, Change | null>();

  /** `socketName` names its sockets in logs ("run socket", "runs socket"). */
  constructor(
    ctx: DurableObjectState,
    env: Env,
    schema: Schema,
    private readonly socketName: string,
  ) {
    super(ctx, env);
    this.schema = new SchemaState(ctx.storage, schema);
    // storage is brought to this release's schema before any event (SQLite opens synchronously, so
    // the constructor does it, in every object alike: src/objects/storage/schema.ts); an empty storage
    // stays empty until the first write
    this.schema.open();
    this.sockets = new RunSockets(
      ctx,
      ctx.storage.sql,
      (scope) => this.changesFor(scope),
      () => this.pushed(),
      limitsFrom(env),
    );
    // Watchers' keep-alive pings are answered by the platform: they never wake the object.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  /** The message for sockets of `scope` about the changes collected, or null if none is theirs. */
  protected abstract changesFor(scope: Scope): string | null;

  /** Every socket had its message: the collected changes are dropped. */
  protected pushed(): void {
    this.changes.clear();
  }

  async webSocketMessage(ws: WebSocket): Promise<void> {
    this.sockets.message(ws);
  }

  async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.sockets.closed(ws, code, reason);
  }

  async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    console.warn(`${this.socketName} error`, error);
    this.sockets.closed(ws, 1006, "");
  }
}

// The run directory: one small Durable Object (by name "runs") listing the runs with their counts,
// so runs can be listed without touching their indexes. Each run's index writes its row here at
// most every DIRECTORY_MS (whatever its episodes do), so the directory's load grows with the
// number of active runs, not episodes. Its table and queries are directory-store.ts's. Sockets
// (`GET /v1/runs` upgraded) get the runs, then coalesced changes (run-sockets.ts). Its table comes
// with the first run: reads before that store nothing.

import { errorResponse, upgradeRequired } from "../../protocol/http/errors.js";
import { isWebSocketUpgrade } from "../../protocol/http/route.js";
import { encodeRunsMessage, type RunSummary } from "../../protocol/registry/index-protocol.js";
import { positionText, type RunPosition } from "../../protocol/registry/list-cursors.js";
import { MAX_LIMIT, SCOPE_HEADER, type Scope } from "../../protocol/registry/rows.js";
import { coversRun, mayHold } from "../../protocol/registry/run.js";
import { DirectoryStore, type RunRow } from "./directory-store.js";
import { RunSideObject } from "./run-side-object.js";
import { readScopeHeader } from "./run-sockets.js";
import { DIRECTORY_SCHEMA } from "./schemas.js";

/** Runs in the list a socket starts with. */
export const RUNS_SNAPSHOT_LIMIT = 200;

/**
 * A run as the API lists it; `mean_rewards` is left out until the run's index sends it (rows written before schema
 * version 2 have none).
 */
export function summaryOf(r: RunRow): RunSummary {
  const { mean_rewards, ...rest } = r;
  const summary: RunSummary = {
    ...rest,
    created: new Date(r.created).toISOString(),
    updated: new Date(r.updated).toISOString(),
  };
  if (mean_rewards) summary.mean_rewards = mean_rewards;
  return summary;
}

/** Its runs changed since the last push (`changes`, by run) are pushed to its sockets. */
export class RunDirectory extends RunSideObject<RunRow> {
  private readonly store: DirectoryStore;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env, DIRECTORY_SCHEMA, "runs socket");
    this.store = new DirectoryStore(ctx.storage.sql);
  }

  // ---- RPC from run indexes ----

  upsertRun(r: RunRow): void {
    this.schema.check();
    this.ctx.storage.transactionSync(() => {
      this.schema.ensure();
      this.store.put(r);
    });
    this.changes.set(r.run, r);
    this.sockets.changed();
  }

  removeRun(run: string): void {
    this.schema.check();
    if (!this.schema.present() || !this.store.delete(run)) return;
    this.changes.set(run, null);
    this.sockets.changed();
  }

  // ---- RPC from the Worker ----

  /**
   * Runs newest-created first after `after`, whose ids may fall in `scope` (`whole`: runs `scope`
   * covers entirely) and start with `prefix`; the cursor is the position to go on from, which may
   * be a run outside the scope (the Worker seals it before a client sees it).
   */
  runs(
    after: RunPosition | null,
    limit: number,
    scope: Scope,
    prefix: string | null,
    whole: boolean,
  ): { runs: RunSummary[]; cursor: string | null } {
    this.schema.check();
    if (!this.schema.present()) return { runs: [], cursor: null };
    const page = this.store.page(after, limit, (run) => {
      if (prefix !== null && !mayHold([`${prefix}*`], run)) return false; // no id of the run can start with it
      return whole ? coversRun(scope, run) : mayHold(scope, run);
    });
    return { runs: page.rows.map(summaryOf), cursor: page.next === null ? null : positionText("runs", page.next) };
  }

  // ---- the socket ----

  async fetch(request: Request): Promise<Response> {
    try {
      if (!isWebSocketUpgrade(request)) throw upgradeRequired("the runs socket");
      const refused = this.sockets.refusal();
      if (refused) return refused;
      const scope = readScopeHeader(request.headers.get(SCOPE_HEADER));
      const page = this.runs(null, RUNS_SNAPSHOT_LIMIT, scope, null, true);
      return await this.sockets.accept(
        scope,
        encodeRunsMessage({
          type: "runs",
          runs: page.runs,
          truncated: page.cursor !== null,
          limit: Math.min(RUNS_SNAPSHOT_LIMIT, MAX_LIMIT),
        }),
      );
    } catch (e) {
      return errorResponse(e, "runs socket");
    }
  }

  protected changesFor(scope: Scope): string | null {
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

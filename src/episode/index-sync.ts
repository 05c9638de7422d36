// Keeping the episode's row in the episode index: sent on creation, at most every
// `indexFlushMs` while turns arrive (the alarm carries the pending update), on finish, failure
// or a refused finish, and removed on delete or expiry. Advisory: an answer never waits for it,
// and updates go out in order (each after the one before); a failure is logged.

import { INDEX_NAME, type EpisodeIndex } from "../registry/episode-index.js";
import type { IndexRow } from "../registry/rows.js";
import { decodeLossless } from "../wire/lossless.js";
import { type Json, toJson } from "../wire/json-view.js";
import type { EpisodeState } from "./state.js";
import { type IndexState, type Meta, publicStatus } from "./storage.js";

/** When the alarm must next run: the earlier of retention and a pending index update. */
export function alarmAt(expiresAt: number, index: IndexState): number {
  return index.due !== 0 ? Math.min(index.due, expiresAt) : expiresAt;
}

/** When a turn's update is due: now, unless the last one went out less than `flushMs` ago. */
export function dueAfter(index: IndexState, now: number, flushMs: number): number {
  return Math.max(now, index.lastFlush + flushMs);
}

export class IndexSync {
  /** Index updates from this object, in order (each waits for the one before). */
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly ns: DurableObjectNamespace<EpisodeIndex> | undefined,
    private readonly state: EpisodeState,
    private readonly flushMs: number,
  ) {}

  /**
   * A turn changed the episode: schedule an update unless one is pending (throttled). Returns
   * when it is due (the caller sets the alarm), or null when nothing changed.
   */
  changed(now: number): number | null {
    if (!this.ns) return null;
    const st = this.state.record.indexState();
    if (st.due !== 0) return null;
    const due = dueAfter(st, now, this.flushMs);
    this.state.record.saveIndexState({ lastFlush: st.lastFlush, due });
    return due;
  }

  /** Whether an update is pending (the alarm sends it). */
  pending(): boolean {
    return this.state.record.indexState().due !== 0;
  }

  /** Send the episode's row now (in the background of this request). */
  send(m: Meta, now: number): Promise<void> {
    if (!this.ns) return Promise.resolve();
    let row: IndexRow;
    try {
      row = rowOf(m, this.rewards());
    } catch (e) {
      console.warn(`episode index: could not build the row: ${e instanceof Error ? e.message : String(e)}`);
      return Promise.resolve();
    }
    this.state.record.saveIndexState({ lastFlush: now, due: 0 });
    return this.enqueue((index) => index.upsert(row));
  }

  /** The episode is gone: its row goes too. */
  removed(id: string): Promise<void> {
    return this.enqueue((index) => index.remove(id));
  }

  /** Resolves once every update sent so far has settled. */
  settled(): Promise<void> {
    return this.chain;
  }

  /** The first (orchestrator) trace's `rewards` as JSON, or null. */
  private rewards(): Json {
    const first = this.state.index().asm.traces.values().next();
    if (first.done) return null;
    const slot = first.value.fields.get("rewards");
    if (!slot || (slot.from !== "set" && slot.from !== "open")) return null;
    return toJson(decodeLossless(slot.value));
  }

  /** Run `op` on the index after the updates before it; kept alive by waitUntil, errors logged. */
  private enqueue(op: (index: DurableObjectStub<EpisodeIndex>) => Promise<unknown>): Promise<void> {
    const ns = this.ns;
    if (!ns) return Promise.resolve();
    const next = this.chain
      .then(() => op(ns.getByName(INDEX_NAME)))
      .then(
        () => undefined,
        (e: unknown) => console.warn(`episode index update failed: ${e instanceof Error ? e.message : String(e)}`),
      );
    this.chain = next;
    this.ctx.waitUntil(next);
    return next;
  }
}

/** The row the index holds for this episode. */
export function rowOf(m: Meta, rewards: Json): IndexRow {
  return {
    id: m.id,
    status: publicStatus(m),
    created: m.created,
    updated: m.updated,
    seq: m.seq,
    traces: m.traces,
    nodes: m.nodes,
    calls: m.calls,
    rewards,
    error: m.refused ?? m.error,
  };
}

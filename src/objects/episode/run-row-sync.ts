// Keeping the episode's row in its run's index (src/objects/registry/episode-index.ts): sent on creation,
// on finish, failure or a refused finish, and while turns arrive at most every `flushMs` (the
// configured interval, or longer when the run's index asks: backpressure). The alarm carries a
// pending update. An answer never waits for the index, but an update is not lost either: a send
// that fails stays due and is retried by the alarm, backing off, until it lands; a delete leaves a
// tombstone retried the same way. Updates go out in order (each after the one before).

import { parseReply } from "../../protocol/assembly/reply.js";
import type { Slot } from "../../protocol/assembly/trace.js";
import { dispatchFacts, dispatchJson } from "../../protocol/envelope/dispatch.js";
import { rolloutGroup } from "../../protocol/registry/groups.js";
import type { IndexRow } from "../../protocol/registry/rows.js";
import { runIndexName, runOf } from "../../protocol/registry/run.js";
import { type Json, toJson } from "../../protocol/wire/json-view.js";
import { decodeLossless } from "../../protocol/wire/lossless.js";
import { rpcAnswer } from "../rpc-answer.js";
import { armAlarm } from "../storage/alarm-window.js";
import { type IndexState, type Meta, publicStatus } from "./record-store.js";
import { RowFacts } from "./row-facts.js";
import { type Pending, SearchSync } from "./search-sync.js";
import type { EpisodeState } from "./state.js";

/** Retries back off from this, doubling, up to RETRY_MAX_MS. */
export const RETRY_FIRST_MS = 1000;
export const RETRY_MAX_MS = 60_000;

/** When the alarm must next run: the earlier of retention and a pending index update. */
export function alarmAt(expiresAt: number, index: Pick<IndexState, "due">): number {
  return index.due !== 0 ? Math.min(index.due, expiresAt) : expiresAt;
}

/**
 * Where the alarm that just sent a throttled update goes next while turns arrive: the next interval's
 * slot, when episode `m` is live and took a turn within the last interval; else 0 (its
 * other deadlines alone). A turn within that interval then finds the alarm already armed for its update
 * and arms nothing: one alarm set per interval, not two (the slot, then back to retention). A
 * producer that stopped costs one more wake, whose send finds no turn within the interval and ends it.
 */
export function nextFlushSlot(
  m: Pick<Meta, "status" | "updated">,
  index: IndexState,
  now: number,
  defaultFlushMs: number,
): number {
  if (m.status !== "live") return 0;
  const interval = Math.max(defaultFlushMs, index.flushMs);
  // the time a turn's update would be due (`dueAfter`), so that the turn finds it armed; none unless ahead (a send
  // that has not gone)
  const slot = index.lastFlush + interval;
  return m.updated > now - interval && slot > now ? slot : 0;
}

/** When a turn's update is due: now, unless the last one went out less than the interval ago. */
export function dueAfter(index: IndexState, now: number, defaultFlushMs: number): number {
  return Math.max(now, index.lastFlush + Math.max(defaultFlushMs, index.flushMs));
}

export function retryDelay(attempts: number): number {
  return Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.max(0, attempts - 1));
}

export class RunRowSync {
  /** Index updates from this object, in order (each waits for the one before). */
  private chain: Promise<void> = Promise.resolve();
  /** The row's progress facts, read from what is new since the last row. */
  private readonly facts: RowFacts;
  /** The episode's text for its run's search, sent with the rows. */
  readonly search: SearchSync;
  /** Whether this object scheduled or sent a row since it started (else a throttled turn's due may be lost with memory). */
  private held = false;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly ns: Env["EPISODE_INDEX"] | undefined,
    private readonly state: EpisodeState,
    private readonly flushMs: number,
    /** Set the alarm for an update now due at `due` (the object takes the earlier of it and retention). */
    private readonly rearm: (due: number) => void,
  ) {
    this.facts = new RowFacts(state.store);
    this.search = new SearchSync(ctx.storage.sql, state.store);
  }

  /**
   * A turn changed the episode: send its row now if the interval since the last one has passed,
   * else schedule an update (due, and the alarm) unless one is pending (throttled). Sent at once,
   * nothing is written for it before the answer: the row is derived from the episode, and a send
   * that fails is scheduled then (a crash in between leaves the row as the last update sent until
   * the next one). A throttled one is due in memory only: the alarm, set for it, is what storage
   * keeps (a row written per turn cost more than the update itself), and an alarm that finds an
   * object started since sends a live episode's row (`pending`). `armed`: the alarm's time, when known (a woken
   * object's turn within an armed slot waits for it).
   */
  changed(m: Meta, now: number, armed?: number | null): void {
    if (!this.ns) return;
    const woken = !this.held;
    this.held = true;
    const st = this.state.record.indexState();
    if (st.due !== 0) return;
    let due = dueAfter(st, now, this.flushMs);
    // a woken object does not know when the last update went (memory only: storage is not written for the throttle's
    // clock), but an alarm armed within the interval is the slot the last send armed (nextFlushSlot) or an earlier
    // deadline: it sends this turn's update (a woken object's alarm sends a live episode's row), as if throttled
    if (woken && armed != null && armed > now && armed <= now + Math.max(this.flushMs, st.flushMs))
      due = Math.max(due, armed);
    if (due <= now) {
      void this.send(m, now);
      return;
    }
    this.state.record.holdIndexState({ ...st, due });
    this.rearm(due);
  }

  /** Whether rows are sent at all (a relay without run indexes sends none). */
  get sends(): boolean {
    return this.ns !== undefined;
  }

  /** The interval between throttled sends as configured (the index may ask for a longer one: IndexState.flushMs). */
  get interval(): number {
    return this.flushMs;
  }

  /**
   * Whether an update is pending (the alarm sends it): one is due, or, for a live episode `m`, this
   * object started after its last turn (a throttled turn's due was in memory).
   */
  pending(m?: Meta): boolean {
    return this.state.record.indexState().due !== 0 || (m?.status === "live" && !this.held);
  }

  /** Send the episode's row now (in the background of this request). */
  send(m: Meta, now: number): Promise<void> {
    if (!this.ns) return Promise.resolve();
    this.held = true;
    const row = rowFromMeta(m, this.state, this.facts, now);
    // once the run ended its facts are kept: the archive takes the bodies they are read from
    const kept = row.live ? { ...row.live, turns: row.turns ?? null, is_truncated: row.is_truncated ?? null } : null;
    if (m.status !== "live" && m.archived === null && kept && JSON.stringify(kept) !== JSON.stringify(m.progress)) {
      this.state.record.saveMeta({ ...m, progress: kept });
    }
    // the text the run's search lacks (none once archived: what the index holds stays), read when its turn to go
    // comes, in slices a producer's turn can come between (search-sync.ts)
    const asm = this.state.memory().asm;
    let text: Pending | null = null;
    // in memory until the answer (saveIndexState writes what storage must keep: a due update stays
    // due there until the index took this one, so a crash meanwhile leaves it to the alarm)
    const st = this.state.record.indexState();
    this.state.record.holdIndexState({ ...st, lastFlush: now, due: 0 });
    return this.enqueue(
      m.id,
      async (index) => {
        if (m.archived === null)
          text = await this.search.batch(asm, (tnum, name) => traceScalar(this.state, tnum, name), pause);
        return index.upsert(row, text?.batch ?? null);
      },
      (answer) => {
        const cur = this.state.record.indexState();
        if (!this.state.meta()) return;
        this.state.record.saveIndexState({ ...cur, flushMs: answer.flushMs, attempts: 0 });
        if (text && answer.applied) this.search.sent(text);
      },
      () => {
        if (!this.state.meta()) return; // deleted meanwhile: its tombstone takes over
        const cur = this.state.record.indexState();
        const attempts = cur.attempts + 1;
        const due = cur.due === 0 ? Date.now() + retryDelay(attempts) : cur.due;
        this.state.record.saveIndexState({ ...cur, attempts, due });
        this.rearm(due);
      },
    );
  }

  /**
   * The episode was erased (storage holds its tombstone only): drop its row, then free the storage;
   * a failed removal keeps the tombstone for the alarm to retry.
   */
  removed(id: string, attempts = 0): Promise<void> {
    return this.enqueue(
      id,
      (index) => index.remove(id),
      () => {
        if (this.state.meta()) {
          // written again meanwhile: its own row replaces the old one, and its storage stays
          if (this.state.record.tombstone()) this.state.record.saveTombstone(null);
          return;
        }
        // nothing of the episode is needed any more (issued before any later event writes, so it cannot take their
        // rows)
        void this.ctx.storage.deleteAll();
        this.state.forget();
      },
      () => {
        if (this.state.meta()) return; // the id was written again: its own row replaces the old one
        this.state.record.saveTombstone({ id, attempts: attempts + 1 });
        void armAlarm(this.ctx.storage, Date.now() + retryDelay(attempts + 1));
      },
    );
  }

  /** The alarm fired with no episode: retry a tombstone, if any. */
  retryTombstone(): Promise<void> {
    const t = this.state.record.tombstone();
    return t ? this.removed(t.id, t.attempts) : Promise.resolve();
  }

  /** Resolves once every update sent so far has settled. */
  settled(): Promise<void> {
    return this.chain;
  }

  /** Run `op` on the run's index after the updates before it; kept alive by waitUntil. */
  private enqueue<T>(
    id: string,
    op: (index: ReturnType<Env["EPISODE_INDEX"]["get"]>) => Promise<T>,
    ok: (value: T) => void,
    failed: () => void,
  ): Promise<void> {
    const ns = this.ns;
    if (!ns) return Promise.resolve();
    const next = this.chain
      .then(() => rpcAnswer(op(ns.getByName(runIndexName(runOf(id)))) as Promise<T>))
      .then(ok, (e: unknown) => {
        console.warn(`episode ${id}: index update failed, will retry: ${e instanceof Error ? e.message : String(e)}`);
        failed();
      });
    this.chain = next;
    this.ctx.waitUntil(next);
    return next;
  }
}

/** A turn of the event loop: what waits for the episode (a producer's turn) runs first. */
const pause = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

/** The row the run's index holds for this episode, its progress facts as of `now` (ms). */
export function rowFromMeta(
  m: Meta,
  state: EpisodeState,
  facts: RowFacts = new RowFacts(state.store),
  now = Date.now(),
): IndexRow {
  const { asm } = state.memory();
  let rewards: Json = null;
  const traceRewards: Json[] = [];
  let tokens = 0;
  let first = true;
  let task: string | null = null;
  let stop: string | null = null;
  let timeout = false;
  for (const t of asm.traces.values()) {
    // every trace's: the episode's reward is the mean over the rewarded ones (src/protocol/registry/rewards.ts)
    traceRewards.push(scalar(t.fields.get("rewards")) ?? null);
    if (first) {
      rewards = traceRewards[0]!;
      task = stringAt(scalar(t.fields.get("task")), "key");
      const s = scalar(t.fields.get("stop_condition"));
      stop = typeof s === "string" ? s : null;
      timeout = scalar(t.fields.get("is_timeout")) === true;
    }
    first = false;
    const n = scalar(t.fields.get("num_total_tokens"));
    if (typeof n === "number") tokens += n;
  }
  const ended = m.status === "finished" || m.status === "failed" ? m.updated : null;
  // the reply's head names the rollout group and the run (once the run ended, or a reply was refused);
  // the trainer's identity names the group from the start, so a rollout stays in its group when it ends
  const head = ended !== null || m.refused !== null ? replyHead(state) : null;
  const dispatch = m.dispatch ? dispatchJson(m.dispatch) : null;
  return {
    id: m.id,
    run: runOf(m.id),
    status: publicStatus(m),
    created: m.created,
    updated: m.updated,
    ended,
    seq: m.seq,
    traces: m.traces,
    nodes: m.nodes,
    calls: m.calls,
    turns: facts.turns(m, asm),
    tokens,
    rewards,
    trace_rewards: traceRewards,
    error: m.refused ?? m.error,
    task,
    group: rolloutGroup(dispatchFacts(dispatch).group, stringAt(head?.group, "id"), task),
    stop_condition: stop,
    is_truncated: facts.truncated(m, asm, (t, name) => scalar(t.fields.get(name))),
    is_timeout: timeout,
    run_name: stringAt(head?.run, "name"),
    dispatch,
    live: facts.facts(m, asm, dispatchFacts(dispatch), (t, name) => scalar(t.fields.get(name)), now),
  };
}

/** `v[key]` when `v` is a map and that entry a string. */
function stringAt(v: Json | undefined, key: string): string | null {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return null;
  const s = (v as Record<string, Json>)[key];
  return typeof s === "string" ? s : null;
}

/** The stored reply's head entries `group` and `run` as JSON (null when unreadable). */
function replyHead(state: EpisodeState): { group: Json; run: Json } | null {
  const bytes = state.record.reply();
  if (!bytes) return null;
  try {
    const head = parseReply(bytes).head ?? [];
    const get = (k: string): Json => {
      const e = head.find((x) => x.key === k);
      return e ? toJson(decodeLossless(e.value)) : null;
    };
    return { group: get("group"), run: get("run") };
  } catch {
    return null;
  }
}

/** Trace `tnum`'s field `name` (an open or set one) as JSON. */
function traceScalar(state: EpisodeState, tnum: number, name: string): Json | undefined {
  for (const t of state.memory().asm.traces.values()) if (t.tnum === tnum) return scalar(t.fields.get(name));
  return undefined;
}

/** A trace's scalar field as JSON (undefined when unset or unreadable). */
function scalar(slot: Slot | undefined): Json | undefined {
  if (!slot || (slot.from !== "set" && slot.from !== "open")) return undefined;
  try {
    return toJson(decodeLossless(slot.value));
  } catch {
    return undefined;
  }
}

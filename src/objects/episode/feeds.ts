// The episode's viewer hubs (src/objects/hub/hub.ts) and what each has been fed. The episode keeps no
// watcher socket: a hub joins when its first watcher arrives and leaves when its last one goes,
// and after each commit every member hub is sent what its view lacks (src/protocol/hub/feed.ts): one call
// in flight per hub, in seq order, frames read from the recent ones kept in memory or else from
// the log. Nothing is queued per hub: a hub that is slow just gets more frames in its next call,
// and one too far behind (the log was trimmed past it) or behind a retraction is told to restart
// its watchers. Feed calls carry at most FEED_BYTES each and FEEDS_IN_FLIGHT_BYTES together.
//
// Membership (shard, session, watchers) is kept in SQLite so that a restarted episode goes on
// feeding its hubs; what each hub holds is asked again (a call with no feed) after a restart.
// A failed call is retried by the episode's alarm, backing off.

import { traceOf } from "../../protocol/assembly/delta.js";
import {
  type Feed,
  type FeedAnswer,
  type FeedFrame,
  feedBytes,
  type HubView,
  type Joined,
  sameView,
  viewEnded,
} from "../../protocol/hub/feed.js";
import { framed } from "../../protocol/hub/frames.js";
import { hubCount, hubName } from "../../protocol/hub/shards.js";
import { rpcAnswer } from "../rpc-answer.js";
import type { Meta } from "./record-store.js";
import { retryDelay } from "./run-row-sync.js";
import type { EpisodeState } from "./state.js";

/** Frames one feed call carries at most (at least one frame). */
const FEED_BYTES = 4 * 1024 * 1024;
/** Frame bytes in feed calls in flight, all hubs together. */
const FEEDS_IN_FLIGHT_BYTES = 32 * 1024 * 1024;
/** Recent frames kept in memory to feed hubs from, while it has any (older ones are read from the log). */
const RECENT_BYTES = 4 * 1024 * 1024;

interface HubLimits {
  /** Watchers a hub should carry: the hub count follows total / perHub. */
  perHub: number;
  maxHubs: number;
}

interface Member {
  shard: number;
  session: number;
  watchers: number;
  /** What the hub holds, as it last said (null: ask first). */
  view: HubView | null;
  /** The hub count it was last told. */
  hubsTold: number;
  busy: boolean;
  failures: number;
}

/** A budget of bytes shared by concurrent calls (a call larger than the whole budget waits for all of it). */
class ByteBudget {
  private used = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly max: number) {}

  async take(n: number): Promise<() => void> {
    const need = Math.min(n, this.max);
    while (this.used > 0 && this.used + need > this.max) await new Promise<void>((r) => this.waiting.push(r));
    this.used += need;
    return () => {
      this.used -= need;
      for (const w of this.waiting.splice(0)) w();
    };
  }
}

export class HubFeeds {
  private members: Map<number, Member> | null = null;
  private id: string | null = null;
  /** Shards that were members since this object woke (their usage belongs to the episode's). */
  private readonly seen = new Set<number>();
  /** Frames committed lately (seq order, after `recentAfter`), copied out of their request. */
  private recent: FeedFrame[] = [];
  private recentAfter: number | null = null;
  private recentBytes = 0;
  private readonly budget = new ByteBudget(FEEDS_IN_FLIGHT_BYTES);

  constructor(
    private readonly sql: SqlStorage,
    private readonly ns: Env["HUBS"] | undefined,
    private readonly state: EpisodeState,
    private readonly limits: HubLimits,
    /** Have the alarm run at `due` (a failed feed is retried then). */
    private readonly rearm: (due: number) => void,
  ) {}

  // ---- membership (RPC from the hubs, through the Episode) ----

  /** A hub's first watcher arrived: it joins with a new session and starts from the episode as it is now. */
  join(id: string, shard: number, session: number, watchers: number): Joined {
    this.id = id;
    this.seen.add(shard);
    const view = this.target();
    const m: Member = { shard, session, watchers, view, hubsTold: 0, busy: false, failures: 0 };
    this.all().set(shard, m);
    this.save(m);
    m.hubsTold = this.hubs();
    return { view, reply: viewEnded(view) ? this.state.record.reply() : null, hubs: m.hubsTold };
  }

  /**
   * A hub's watcher count changed a good deal: the hub count may follow. The hub is fed at once
   * (it may have restarted and missed feeds). Null when it is not a member of that session (it
   * joins again).
   */
  load(shard: number, session: number, watchers: number): number | null {
    const m = this.all().get(shard);
    if (m?.session !== session) return null;
    if (m.watchers !== watchers) {
      m.watchers = watchers;
      this.save(m);
    }
    m.failures = 0;
    void this.pump(m);
    return this.hubs();
  }

  /** A hub's last watcher left. */
  leave(shard: number, session: number): void {
    const m = this.all().get(shard);
    if (m?.session === session) this.drop(m);
  }

  /** Watchers on all hubs, as they last said. */
  watchers(): number {
    let n = 0;
    for (const m of this.all().values()) n += m.watchers;
    return n;
  }

  /** Names of the hubs that are members, or were since this object woke (memory only). */
  names(): string[] {
    for (const shard of this.all().keys()) this.seen.add(shard);
    const id = this.id;
    return id === null ? [] : [...this.seen].sort((a, b) => a - b).map((shard) => hubName(id, shard));
  }

  /** How many hubs new watchers are spread over. */
  hubs(): number {
    return hubCount(this.watchers(), this.limits.perHub, this.limits.maxHubs);
  }

  /** Watchers and hubs as the hubs say now (one call per hub; a hub that does not answer counts as it last said). */
  async viewers(): Promise<{ watchers: number; hubs: number }> {
    const members = [...this.all().values()];
    if (!this.ns || this.id === null) return { watchers: this.watchers(), hubs: members.length };
    const counts = await Promise.allSettled(members.map((m) => this.hub(m.shard).count(m.session)));
    let watchers = 0;
    counts.forEach((c, i) => {
      const m = members[i]!;
      if (c.status === "fulfilled" && c.value !== null) m.watchers = c.value;
      watchers += m.watchers;
    });
    return { watchers, hubs: members.length };
  }

  // ---- feeding ----

  /** Frames were committed (consecutive, as applied): keep them for the feeds, and feed. */
  committed(frames: ReadonlyArray<{ seq: number; trace: string; delta: Uint8Array }>, before: number): void {
    if (this.all().size === 0) {
      // nobody to feed: nothing kept (a hub that joins starts from the head)
      this.forgetRecent(frames.at(-1)?.seq ?? before);
      return;
    }
    if (this.recentAfter === null || (this.recent.length === 0 && this.recentAfter !== before))
      this.recentAfter = before;
    for (const f of frames) {
      // a copy (the frame is a view of its whole request body), as the watchers' message: the hub
      // passes those bytes through to every watcher of the whole episode (older hubs read `delta`,
      // a view of the same buffer, which the call carries once)
      this.recent.push(framed(f));
      this.recentBytes += f.delta.length;
    }
    while (this.recent.length > 1 && this.recentBytes > RECENT_BYTES) {
      const f = this.recent.shift()!;
      this.recentBytes -= f.delta.length;
      this.recentAfter = f.seq;
    }
    this.kick();
  }

  /** A retraction rewound the episode: the recent frames may be gone; every hub restarts. */
  rewound(head: number): void {
    this.forgetRecent(head);
    this.kick();
  }

  private forgetRecent(head: number): void {
    this.recent = [];
    this.recentBytes = 0;
    this.recentAfter = head;
  }

  /** Send each member what it lacks (after a commit, a finish, a refused reply, a retry). */
  kick(): void {
    if (!this.ns) return;
    for (const m of this.all().values()) void this.pump(m);
  }

  /** The episode is gone: every hub closes its watchers; membership ends. */
  async closeAll(reason: string): Promise<void> {
    const members = [...this.all().values()];
    this.members = new Map();
    this.forgetRecent(0);
    this.recentAfter = null;
    if (!this.ns || this.id === null) return;
    await Promise.allSettled(members.map((m) => this.hub(m.shard).closeAll(m.session, reason)));
  }

  /** The stub of hub `shard` (the caller checked there is a namespace and an id). */
  private hub(shard: number) {
    return this.ns!.getByName(hubName(this.id!, shard));
  }

  private async pump(m: Member): Promise<void> {
    if (m.busy || !this.ns || this.id === null) return;
    m.busy = true;
    const hub = this.hub(m.shard);
    try {
      for (;;) {
        if (this.all().get(m.shard) !== m) return; // left, or joined again with a new session
        let answer: FeedAnswer;
        let sent: Feed | null = null;
        if (m.view === null) answer = await rpcAnswer(hub.feed(m.session, null));
        else {
          sent = this.feedFor(m, m.view);
          if (!sent) break;
          const release = await this.budget.take(feedBytes(sent.frames));
          try {
            answer = await rpcAnswer(hub.feed(m.session, sent));
          } finally {
            release();
          }
        }
        if (this.all().get(m.shard) !== m) return;
        if (!answer.member) {
          this.drop(m);
          return;
        }
        if (answer.view === null) throw new Error(`hub ${m.shard} is still joining`);
        if (sent && !answer.applied && sameView(answer.view, m.view!))
          throw new Error(`hub ${m.shard} refused a feed that follows its own view`);
        m.view = answer.view;
        m.watchers = answer.watchers;
        if (sent && answer.applied) m.hubsTold = sent.hubs;
      }
      m.failures = 0;
    } catch (e) {
      // ask the hub what it holds next time; the alarm tries again
      m.view = null;
      m.failures++;
      console.warn(
        `episode ${this.id}: feeding hub ${m.shard} failed (attempt ${m.failures}): ${(e as Error).message}`,
      );
      this.rearm(Date.now() + retryDelay(m.failures));
    } finally {
      m.busy = false;
    }
  }

  /** What a hub holding `v` lacks, as one feed, or null when it lacks nothing. */
  private feedFor(m: Member, v: HubView): Feed | null {
    const meta = this.state.meta();
    const target = this.target(meta);
    const hubs = this.hubs();
    const base = { session: m.session, after: v.head, hubs };
    if (v.epoch !== target.epoch) return this.restart(base, target, "rewind");
    if (v.head < target.head) {
      if (v.head < (meta?.base ?? 0)) return this.restart(base, target, "trimmed");
      const frames = this.framesAfter(v.head, target.head);
      const last = frames.at(-1)?.seq ?? target.head; // no frame logged up to the head: retracted ones leave gaps
      const ends = last === target.head;
      return {
        ...base,
        restart: null,
        frames,
        view: ends ? target : { ...v, head: last },
        reply: ends ? this.replyFor(v, target) : null,
      };
    }
    if (!sameView(v, target))
      return { ...base, restart: null, frames: [], view: target, reply: this.replyFor(v, target) };
    if (m.hubsTold !== hubs) return { ...base, restart: null, frames: [], view: target, reply: null };
    return null;
  }

  private restart(
    base: { session: number; after: number; hubs: number },
    target: HubView,
    reason: NonNullable<Feed["restart"]>,
  ): Feed {
    return {
      ...base,
      restart: reason,
      frames: [],
      view: target,
      reply: viewEnded(target) ? this.state.record.reply() : null,
    };
  }

  /** The reply goes with the feed that tells a hub the run ended. */
  private replyFor(v: HubView, target: HubView): Uint8Array | null {
    return viewEnded(target) && !viewEnded(v) ? this.state.record.reply() : null;
  }

  /** The view a hub fed up to now would hold. */
  private target(meta: Meta | null = this.state.meta()): HubView {
    return {
      head: meta?.seq ?? 0,
      epoch: meta ? this.state.record.rewindCount() : 0,
      status: meta?.status ?? "new",
      refused: meta?.refused ?? null,
      error: meta?.error ?? null,
      annotations: meta?.annotations ?? 0,
    };
  }

  /** Frames after `after` up to `upTo` (at most about FEED_BYTES): the recent ones, else the log's. */
  private framesAfter(after: number, upTo: number): FeedFrame[] {
    const out: FeedFrame[] = [];
    let bytes = 0;
    if (this.recentAfter !== null && after >= this.recentAfter) {
      for (const f of this.recent) {
        if (f.seq <= after || f.seq > upTo) continue;
        if (out.length > 0 && bytes + f.delta.length > FEED_BYTES) break;
        out.push(f);
        bytes += f.delta.length;
      }
      return out;
    }
    for (const { seq, frame } of this.state.record.frames(after, upTo, FEED_BYTES))
      out.push({ seq, trace: traceOf(frame), delta: frame });
    return out;
  }

  // ---- the membership table ----

  private all(): Map<number, Member> {
    if (this.members) return this.members;
    this.members = new Map();
    if (this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'hubs'").toArray().length === 0)
      return this.members;
    for (const r of this.sql.exec<{ id: string; shard: number; session: number; watchers: number }>(
      "SELECT id, shard, session, watchers FROM hubs",
    )) {
      this.id = r.id;
      this.members.set(r.shard, {
        shard: r.shard,
        session: r.session,
        watchers: r.watchers,
        view: null,
        hubsTold: 0,
        busy: false,
        failures: 0,
      });
    }
    return this.members;
  }

  private save(m: Member): void {
    this.state.schema.ensure();
    this.sql.exec(
      "INSERT INTO hubs (shard, id, session, watchers) VALUES (?, ?, ?, ?) ON CONFLICT(shard) DO UPDATE SET id = excluded.id, session = excluded.session, watchers = excluded.watchers",
      m.shard,
      this.id ?? "",
      m.session,
      m.watchers,
    );
  }

  private drop(m: Member): void {
    this.all().delete(m.shard);
    if (this.all().size === 0) this.forgetRecent(this.state.meta()?.seq ?? 0);
    this.sql.exec("DELETE FROM hubs WHERE shard = ?", m.shard);
    // an id nobody wrote keeps no storage once nobody watches it
    if (this.all().size === 0 && !this.state.record.exists() && !this.state.record.tombstone())
      this.state.schema.drop();
  }
}

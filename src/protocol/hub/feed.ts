// The episode → hub feed. The episode object keeps no watcher: after each commit it tells each of
// its hubs what changed, one call at a time per hub and in seq order, and the hub fans it out to
// its watchers. What a hub holds is its *view*: the seq its watchers stand at, the rewinds it has
// seen, and the run's status. A feed names the view it follows (`after`) and the view it leads to;
// a hub whose view differs (it restarted, or a call was lost) applies nothing and answers its
// view, and the episode sends what that view lacks. A hub too far behind (the log no longer holds
// what it lacks) or behind a retraction is told to restart: its watchers start over from a
// snapshot. So no feed is queued in memory, and a slow hub never holds back ingest.

import type { SnapshotReason } from "../watch/protocol.js";

type HubStatus = "new" | "live" | "finished" | "failed";

/** What a hub holds of its episode (kept in its storage). */
export interface HubView {
  /** The episode's seq its watchers are fed up to. */
  head: number;
  /** Retractions the episode had (a new one makes every watcher start over). */
  epoch: number;
  status: HubStatus;
  /** The reference's message of a refused reply while the run stays live (finish_refused). */
  refused: string | null;
  /** A failed run's error. */
  error: string | null;
  /**
   * Trainer annotation records merged (src/objects/episode/annotations.ts); absent in views stored by older releases
   * (0).
   */
  annotations?: number;
}

export interface FeedFrame {
  seq: number;
  trace: string;
  delta: Uint8Array;
  /**
   * The frame alone as the watchers' `frames` message (src/protocol/hub/frames.ts `framed`),
   * `delta` a view of its tail (one buffer: the feed call carries its bytes once). Watchers of the
   * whole episode get these bytes as they are. Absent in feeds of older releases, and for frames
   * read back from the log: the hub builds it.
   */
  message?: Uint8Array;
}

/** Why a hub's watchers start over: frames they hold were retracted, or the frames they lack are gone from the log. */
type Restart = Extract<SnapshotReason, "rewind" | "trimmed">;

export interface Feed {
  /** The subscription this feed belongs to (a hub that left and came back has a new one). */
  session: number;
  /** The frames follow this seq: the hub must stand at it (unless `restart`). */
  after: number;
  restart: Restart | null;
  frames: FeedFrame[];
  /** The hub's view once applied. */
  view: HubView;
  /** The upstream reply, with the feed that ends the run. */
  reply: Uint8Array | null;
  /** How many hubs the episode has (for the Worker's spread). */
  hubs: number;
}

export interface FeedAnswer {
  /** The feed was applied (else the hub's view did not match). */
  applied: boolean;
  /** The hub's view now (null: it has none). */
  view: HubView | null;
  /** False when the hub no longer belongs to this session (it left, or has no watchers): the episode drops it. */
  member: boolean;
  watchers: number;
}

/** What a hub gets when it joins: its first view, the reply if the run ended, the hub count. */
export interface Joined {
  view: HubView;
  reply: Uint8Array | null;
  hubs: number;
}

export function sameView(a: HubView | null, b: HubView): boolean {
  return (
    a !== null &&
    a.head === b.head &&
    a.epoch === b.epoch &&
    a.status === b.status &&
    a.refused === b.refused &&
    a.error === b.error &&
    (a.annotations ?? 0) === (b.annotations ?? 0)
  );
}

/** The run ended (finished or failed): the reply goes with the view. */
export function viewEnded(v: HubView): boolean {
  return v.status === "finished" || v.status === "failed";
}

/** The public status a view shows (a hello, a status message). */
export function viewStatus(v: HubView): string {
  return v.status === "live" && v.refused !== null ? "finish_refused" : v.status;
}

/** Bytes of a feed's frames (what its call carries). */
export function feedBytes(frames: readonly FeedFrame[]): number {
  let n = 0;
  for (const f of frames) n += f.delta.length;
  return n;
}

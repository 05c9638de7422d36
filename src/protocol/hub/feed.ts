// The episode → hub feed. The episode object keeps no watcher: after each commit it tells each of
// its hubs what changed, one call at a time per hub and in seq order, and the hub fans it out to
// its watchers. What a hub holds is its *view*: the seq its watchers stand at, the rewinds it has
// seen, and the run's status. A feed names the view it follows (`after`) and the view it leads to;
// a hub whose view differs (it restarted, or a call was lost) applies nothing and answers its
// view, and the episode sends what that view lacks. A hub too far behind (the log no longer holds
// what it lacks) or behind a retraction is told to restart: its watchers start over from a
// snapshot. So no feed is queued in memory, and a slow hub never holds back ingest.

import {
  type Frame,
  frameMessage,
  framesMessage,
  isFrameMessageOf,
  joinFrameMessages,
  type SnapshotReason,
} from "../watch/protocol.js";
import { deltaForVariant, isFull, type Variant } from "../watch/variant.js";

export type HubStatus = "new" | "live" | "finished" | "failed";

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
   * The frame alone as the watchers' `frames` message (`frameMessage`), `delta` a view of its tail
   * (one buffer: the feed call carries its bytes once). Watchers of the whole episode get these
   * bytes as they are. Absent in feeds of older releases, and for frames read back from the log:
   * the hub builds it.
   */
  message?: Uint8Array;
}

/** A frame as a hub holds it: with its message. */
export type HubFrame = FeedFrame & { message: Uint8Array };

/** A frame with its message built once (one copy of its delta, which then is the message's tail). */
export function framed(f: { seq: number; trace: string; delta: Uint8Array }): HubFrame {
  const message = frameMessage(f.seq, f.delta);
  return { seq: f.seq, trace: f.trace, delta: message.subarray(message.length - f.delta.length), message };
}

/** A fed frame as the hub keeps it: the message the episode sent when it is sound, else one built here. */
export function received(f: FeedFrame): HubFrame {
  if (f.message instanceof Uint8Array && isFrameMessageOf(f.message, f.seq, f.delta)) return f as HubFrame;
  return framed(f);
}

/** Why a hub's watchers start over: frames they hold were retracted, or the frames they lack are gone from the log. */
export type Restart = Extract<SnapshotReason, "rewind" | "trimmed">;

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

/**
 * Frames fed back to back share a live message up to this many bytes: small frames go a dozen to
 * a send (a hub's cost is its sends); a frame this large goes alone, the very bytes the episode
 * built. Joining large frames saves sends but costs each watcher more than it saves the hub: a
 * message that spans a client's socket reads is reassembled (a copy) there. Measured (bench
 * `fanout`, 1000 × 16 KiB): joined 3–4 to a message, watchers spent 36.8 µs CPU per delivery
 * against 31.5 µs from a bare ws server in the same run; one frame per message, 29.5 µs against 32.8.
 */
export const LIVE_MESSAGE_BYTES = 16 * 1024;

/**
 * Consecutive frames cut into runs to send as one message each: a run holds frames while their
 * messages total at most `maxBytes`, and at least one frame.
 */
export function messageRuns(frames: readonly HubFrame[], maxBytes = LIVE_MESSAGE_BYTES): HubFrame[][] {
  const runs: HubFrame[][] = [];
  let run: HubFrame[] = [];
  let bytes = 0;
  for (const f of frames) {
    if (run.length > 0 && bytes + f.message.length > maxBytes) {
      runs.push(run);
      run = [];
      bytes = 0;
    }
    run.push(f);
    bytes += f.message.length;
  }
  if (run.length > 0) runs.push(run);
  return runs;
}

/**
 * Consecutive frames as one `frames` message for `variant` (null: it sees none of them). For the
 * whole episode, the frames' own messages as the episode sent them (one frame: those very bytes).
 */
export function variantMessage(frames: readonly HubFrame[], variant: Variant): Uint8Array | null {
  if (frames.length === 0) return null;
  if (isFull(variant)) return joinFrameMessages(frames.map((f) => f.message));
  const visible: Frame[] = [];
  for (const f of frames) {
    const d = deltaForVariant(f.delta, f.trace, variant);
    if (d) visible.push({ seq: f.seq, delta: d });
  }
  return visible.length ? framesMessage(visible) : null;
}

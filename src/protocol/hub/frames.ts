// A frame on its way from the episode to a hub's watchers: built once as the watchers' message
// (the episode sends it so, the hub checks it), held in the hub's window, and cut into the
// messages each variant of watchers gets.
//
// The window is a hub's recent frames, in memory: the last `maxBytes` (and `maxFrames`) of what its
// feed brought. Watchers resuming with `?after=` inside it, and catch-ups bridging from their
// snapshot to the hub's head, read it without asking the episode. It starts empty whenever the hub
// wakes (memory only); what it lacks, a catch-up reads from the episode.

import { type Frame, frameMessage, framesMessage, isFrameMessageOf, joinFrameMessages } from "../watch/protocol.js";
import { deltaForVariant, isFull, type Variant } from "../watch/variant.js";
import type { FeedFrame } from "./feed.js";

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

/**
 * Frames fed back to back share a fan-out message up to this many bytes: small frames go a dozen to
 * a send (a hub's cost is its sends); a frame this large goes alone, the very bytes the episode
 * built. Joining large frames saves sends but costs each watcher more than it saves the hub: a
 * message that spans a client's socket reads is reassembled (a copy) there. Measured (bench
 * `fanout`, 1000 × 16 KiB): joined 3–4 to a message, watchers spent 36.8 µs CPU per delivery
 * against 31.5 µs from a bare ws server in the same run; one frame per message, 29.5 µs against 32.8.
 */
export const FANOUT_MESSAGE_BYTES = 16 * 1024;

/**
 * Consecutive frames cut into runs to send as one message each: a run holds frames while their
 * messages total at most `maxBytes`, and at least one frame.
 */
export function messageRuns(frames: readonly HubFrame[], maxBytes = FANOUT_MESSAGE_BYTES): HubFrame[][] {
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

export class HubWindow {
  /** `frames[first..]` are held; slots before `first` are emptied as they drop (null), so their bytes go at once. */
  private frames: Array<HubFrame | null> = [];
  private first = 0;
  private bytes = 0;
  /** The window holds the frames after this seq. */
  private base: number;

  constructor(
    head: number,
    private readonly maxBytes: number,
    private readonly maxFrames: number,
  ) {
    this.base = head;
  }

  /** Start over at `head` (a restart, a rewind, a new subscription). */
  reset(head: number): void {
    this.frames = [];
    this.first = 0;
    this.bytes = 0;
    this.base = head;
  }

  append(frames: readonly HubFrame[]): void {
    for (const f of frames) {
      this.frames.push(f);
      this.bytes += f.delta.length;
    }
    while (
      this.first < this.frames.length &&
      (this.bytes > this.maxBytes || this.frames.length - this.first > this.maxFrames)
    ) {
      const f = this.frames[this.first]!;
      this.frames[this.first] = null;
      this.bytes -= f.delta.length;
      this.base = f.seq;
      this.first++;
    }
    // the emptied slots go once they are half the array (amortised: each frame is moved about once)
    if (this.first > 64 && this.first * 2 > this.frames.length) {
      this.frames = this.frames.slice(this.first);
      this.first = 0;
    }
  }

  /** Whether the frames after `seq` are all here. */
  covers(seq: number): boolean {
    return seq >= this.base;
  }

  /** Frames with seq > `after`, in order, at most about `maxBytes` (at least one). */
  after(after: number, maxBytes: number): HubFrame[] {
    const out: HubFrame[] = [];
    let bytes = 0;
    // frames are in seq order: find the first after `after` by bisection
    let lo = this.first;
    let hi = this.frames.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.frames[mid]!.seq <= after) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < this.frames.length; i++) {
      const f = this.frames[i]!;
      if (out.length > 0 && bytes + f.delta.length > maxBytes) break;
      out.push(f);
      bytes += f.delta.length;
    }
    return out;
  }

  stats(): { frames: number; bytes: number; base: number } {
    return { frames: this.frames.length - this.first, bytes: this.bytes, base: this.base };
  }
}

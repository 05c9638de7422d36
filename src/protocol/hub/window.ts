// A hub's recent frames, in memory: the last `maxBytes` (and `maxFrames`) of what its feed brought.
// Watchers resuming with `?after=` inside it, and catch-ups bridging from their snapshot to the
// hub's head, read it without asking the episode. It starts empty whenever the hub wakes (memory
// only); what it lacks, a catch-up reads from the episode.

import type { HubFrame } from "./feed.js";

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

// Catching a watcher up, on the hub's side. The episode builds the catch-up stream (a snapshot as
// of its head, or the log after `?after=`; src/objects/episode/catchup-stream.ts) and the hub reads
// it message by message (src/protocol/hub/catchup-stream.ts), into buffers it uses again
// (src/protocol/hub/message-pool.ts), as its watchers acknowledge. Watchers that join together with the
// same view share one stream (a Cohort): each message is fetched once and the same bytes go to
// each of them; the cohort keeps the messages between its slowest and its fastest member, up to
// COHORT_BYTES (until then from the first, so a watcher arriving a little later still joins).
// Where the stream ends (the episode's head when it was read), the watcher bridges to the hub's
// own head with the frames in the hub's window, or, when the window no longer reaches back that
// far, with a further stream from the episode; then it is caught up.

import { MESSAGE_BYTES, type SnapshotReason } from "../watch/protocol.js";
import { type Variant, variantKey } from "../watch/variant.js";
import { type CatchUpStream, type MessageBuffers, StreamReader } from "./catchup-stream.js";
import { type HubWindow, variantMessage } from "./frames.js";
import type { Lease, MessagePool } from "./message-pool.js";

/** Messages a cohort keeps between its slowest and its fastest member, bytes. */
export const COHORT_BYTES = 8 * 1024 * 1024;
/**
 * A cohort whose members all left stays joinable this long: watchers arriving in a stream (a
 * reconnect storm, a deploy) join it and get the messages it kept, so the episode builds one
 * stream for all of them, not one each.
 */
export const LINGER_MS = 10_000;
/**
 * A newcomer joins a stream that started at most this many frame bytes ago (fed to the hub since):
 * it gets that snapshot and the frames after it, instead of a stream of its own. So a storm of
 * arrivals during a live run asks the episode for a stream every few turns, not one per turn.
 */
export const STALE_BYTES = 4 * 1024 * 1024;

interface Opened {
  stream: CatchUpStream;
  reader: StreamReader;
}

/** Stop reading, close the episode's side and drop the stub. */
async function letGo(stream: CatchUpStream, reader?: StreamReader): Promise<void> {
  reader?.cancel();
  try {
    await stream.close();
  } finally {
    stream[Symbol.dispose]?.();
  }
}

function release(opened: Promise<Opened>): void {
  void opened.then(({ stream, reader }) => letGo(stream, reader)).catch(() => undefined);
}

/** Ask the episode for a catch-up stream. */
export type OpenStream = (
  variant: Variant,
  after: number | null,
  forced: SnapshotReason | undefined,
) => Promise<CatchUpStream>;

/** A catch-up stream shared by the watchers that need the same one. */
export class Cohort {
  private cache: Uint8Array[] = [];
  private cacheBytes = 0;
  /** `cache[i]` is message `first + i`. */
  private first = 0;
  private stream: Promise<Opened> | null;
  private fetching = false;
  /** Where messages are read: the hub's pool, through this cohort (it gives up kept messages when the pool runs dry). */
  private readonly buffers: MessageBuffers;
  /** The stream ended: its messages bring a watcher up to this seq. */
  end: number | null = null;
  /** A retraction took back what the stream gave: its members wait for the hub's restart. */
  rewound = false;
  failed: Error | null = null;
  private shut = false;
  readonly members = new Set<CatchUp>();

  constructor(
    open: OpenStream,
    readonly key: string,
    /** The frame bytes the hub had been fed when the stream was asked for (how stale it is, later). */
    readonly fedAt: number,
    readonly variant: Variant,
    after: number | null,
    forced: SnapshotReason | undefined,
    /** Called when a message arrived, the stream ended or failed (members may go on). */
    private readonly wake: (c: Cohort) => void,
    /** Called when the last member left (the owner keeps it joinable a while, or closes it). */
    private readonly idle: (c: Cohort) => void,
    /** Called once closed (the owner forgets the cohort). */
    private readonly done: (c: Cohort) => void,
    private readonly pool: MessagePool,
  ) {
    this.stream = open(variant, after, forced).then(async (stream) => {
      try {
        return { stream, reader: StreamReader.of(await stream.bytes()) };
      } catch (e) {
        void letGo(stream).catch(() => undefined);
        throw e;
      }
    });
    this.buffers = {
      take: (n) => this.lease(n),
      adopt: (l, v) => pool.adopt(l, v),
      giveBack: (l) => pool.giveBack(l),
    };
    // a failed open is reported by the first fetch
    this.stream.catch(() => undefined);
  }

  static key(variant: Variant, after: number | null, forced: SnapshotReason | undefined): string {
    return `${after ?? "join"}|${forced ?? ""}|${variantKey(variant)}`;
  }

  /** Whether a new watcher can start here (the first message is still kept, the stream is sound). */
  joinable(): boolean {
    return this.first === 0 && this.failed === null && !this.rewound && !this.shut;
  }

  /**
   * Message `k`, "wait" (on its way, or held until a slower member moves), or "end" past the last. Throws when the
   * stream failed.
   */
  message(k: number): Uint8Array | "wait" | "end" {
    if (this.failed) throw this.failed;
    if (this.shut) throw new Error("catch-up stream closed");
    if (k < this.first) throw new Error("catch-up message no longer kept");
    if (k < this.first + this.cache.length) {
      if (k + 1 === this.first + this.cache.length) this.fill(); // fetch the next one while this one is sent
      return this.cache[k - this.first]!;
    }
    if (this.end !== null) return "end";
    this.fill();
    return "wait";
  }

  /** The member furthest behind. */
  slowest(): CatchUp | null {
    let slow: CatchUp | null = null;
    for (const m of this.members) if (!slow || m.position < slow.position) slow = m;
    return slow;
  }

  leave(member: CatchUp): void {
    this.members.delete(member);
    if (this.members.size === 0) this.idle(this);
    else this.trim();
  }

  /** Whether it is closed (its stream let go). */
  get closed(): boolean {
    return this.shut;
  }

  /** Let go of the stream and what is kept (no member left, or the hub starts over). */
  close(): void {
    if (this.shut) return;
    this.shut = true;
    for (const m of this.cache) this.pool.drop(m);
    this.cache = [];
    this.cacheBytes = 0;
    const c = this.stream;
    this.stream = null;
    if (c) release(c);
    this.pool.retry(); // a read waiting for a buffer gives up
    this.done(this);
  }

  /** Fetch the next message, unless one is on its way, the stream ended, or the cohort keeps enough. */
  private fill(): void {
    if (this.fetching || this.end !== null || this.failed || this.rewound || !this.stream) return;
    if (this.cacheBytes > COHORT_BYTES && this.trim()) return;
    this.fetching = true;
    const stream = this.stream;
    void stream
      .then((c) => {
        Promise.resolve(c.stream.pull()).catch(() => undefined); // a broken pipe fails the read too
        return c.reader.next(this.buffers);
      })
      .then((step) => {
        if (this.stream !== stream) {
          if ("message" in step) this.pool.drop(step.message); // closed meanwhile
          return;
        }
        if ("message" in step) {
          this.cache.push(step.message);
          this.cacheBytes += step.message.length;
        } else if ("end" in step) {
          this.end = step.end;
          this.stream = null;
          release(stream);
        } else this.rewound = true;
      })
      .catch((e: unknown) => {
        this.failed = e instanceof Error ? e : new Error(String(e));
      })
      .finally(() => {
        this.fetching = false;
        if (this.members.size > 0) this.wake(this);
      });
  }

  /**
   * A buffer for the next message: from the pool, or, when it is dry, once this cohort gave back
   * what every member has sent (no longer joinable then), or once acknowledgements free one.
   */
  private lease(length: number): Lease | Promise<Lease> {
    return this.pool.lease(
      length,
      () => this.trim(0),
      () => this.shut,
    );
  }

  /**
   * Keep at most `keep` bytes (COHORT_BYTES unless the pool ran dry): drop the oldest messages
   * every member has sent; true when the members themselves are further apart than that (the
   * fastest waits).
   */
  private trim(keep = COHORT_BYTES): boolean {
    let low = Number.MAX_SAFE_INTEGER;
    for (const m of this.members) low = Math.min(low, m.position);
    while (this.cacheBytes > keep && this.first < low && this.cache.length > 0) {
      const m = this.cache.shift()!;
      this.cacheBytes -= m.length;
      this.pool.drop(m);
      this.first++;
    }
    return this.cacheBytes > keep;
  }
}

/** What a catch-up bridges with: the hub's head, its window, and further streams from the episode. */
export interface BridgeSource {
  head(): number;
  readonly window: HubWindow;
  cohortFor(variant: Variant, after: number | null, forced?: SnapshotReason): Cohort;
  /** Bridge messages already built, shared by the watchers that need the same one (see `bridgeMessage`). */
  readonly bridges?: BridgeCache;
}

/** The frames after `at` in the window, as one message for `variant`, and the seq it brings a watcher to. */
function bridgeMessage(
  window: HubWindow,
  head: number,
  variant: Variant,
  at: number,
): { message: Uint8Array | null; last: number } {
  const frames = window.after(at, MESSAGE_BYTES);
  const last = frames.at(-1)?.seq ?? head; // nothing after `at` up to the head: retracted frames leave gaps
  return { message: variantMessage(frames, variant), last };
}

/**
 * Bridge messages by (variant, from seq), valid until the hub is fed again: watchers that arrive
 * together end their stream at the same seq, and get the same bytes instead of one copy each.
 */
export class BridgeCache {
  private head = -1;
  private readonly built = new Map<string, { message: Uint8Array | null; last: number }>();

  get(window: HubWindow, head: number, variant: Variant, at: number): { message: Uint8Array | null; last: number } {
    if (head !== this.head) {
      this.built.clear();
      this.head = head;
    }
    const key = `${variantKey(variant)}|${at}`;
    let b = this.built.get(key);
    if (!b) {
      b = bridgeMessage(window, head, variant, at);
      if (this.built.size >= 16) this.built.clear();
      this.built.set(key, b);
    }
    return b;
  }

  clear(): void {
    this.built.clear();
    this.head = -1;
  }
}

/** One watcher's catch-up: its place in a stream from the episode, then the bridge to the hub's head. */
export class CatchUp {
  private cohort: Cohort | null = null;
  /** The next message of the cohort's stream to send. */
  position = 0;
  /** The seq the watcher holds once its stream ended (null while streaming). */
  private at: number | null = null;

  /**
   * @param after resume after this seq: from the hub's window when it reaches back that far
   * @param forced a snapshot for this reason, whatever `after` says (after a restart)
   */
  constructor(
    private readonly src: BridgeSource,
    private readonly variant: Variant,
    after: number | null,
    forced?: SnapshotReason,
  ) {
    if (!forced && after !== null && after <= src.head() && src.window.covers(after)) this.at = after;
    else this.join(src.cohortFor(variant, after, forced));
  }

  get snapshotting(): Cohort | null {
    return this.cohort;
  }

  private join(c: Cohort): void {
    this.cohort = c;
    this.position = 0;
    c.members.add(this);
  }

  /**
   * The next messages; "wait" (the stream or the hub's feed has to bring more first); "done": caught up to the hub's
   * head.
   */
  next(): Uint8Array[] | "wait" | "done" {
    for (;;) {
      const c = this.cohort;
      if (c) {
        const m = c.message(this.position);
        if (m === "wait") return "wait";
        if (m !== "end") {
          this.position++;
          return [m];
        }
        this.at = c.end;
        this.cohort = null;
        c.leave(this);
      }
      const at = this.at!;
      const head = this.src.head();
      if (at > head) return "wait"; // the episode is further than this hub's feed so far
      if (at === head) return "done";
      if (!this.src.window.covers(at)) {
        this.join(this.src.cohortFor(this.variant, at));
        continue;
      }
      const b = this.src.bridges
        ? this.src.bridges.get(this.src.window, head, this.variant, at)
        : bridgeMessage(this.src.window, head, this.variant, at);
      this.at = b.last;
      if (b.message) return [b.message];
    }
  }

  /** Done, or the watcher is gone. */
  release(): void {
    this.cohort?.leave(this);
    this.cohort = null;
  }
}

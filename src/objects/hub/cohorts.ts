// The catch-up streams a hub has asked of its episode (src/protocol/hub/catchup.ts `Cohort`), by what
// they carry (variant, resume point, reason): watchers that need the same one join it instead of
// asking for their own. A stream stays joinable while it still has its first message and while
// less than STALE_BYTES of frames were fed since it started; one whose members all left lingers
// LINGER_MS for the next arrivals (a reconnect storm, a deploy), then goes, or at once when the
// hub's catch-up buffers run short (the watchers under way come first). So the episode builds a
// stream every few turns for a stampede, not one per watcher.

import { Cohort, LINGER_MS, type OpenStream, STALE_BYTES } from "../../protocol/hub/catchup.js";
import type { MessagePool } from "../../protocol/hub/message-pool.js";
import type { SnapshotReason } from "../../protocol/watch/protocol.js";
import type { Variant } from "../../protocol/watch/variant.js";

export class Cohorts {
  private readonly cohorts = new Map<string, Cohort>();
  /** Frame bytes fed to the hub since it woke (a stream's age). */
  private fed = 0;
  /** Streams asked of the episode since the hub woke (for benches and tests). */
  opened = 0;

  constructor(
    private readonly open: OpenStream,
    /** A stream moved (a message arrived, it ended or failed): its waiting members go on. */
    private readonly wake: (c: Cohort) => void,
    /** What the streams' messages are read into. */
    private readonly pool: MessagePool,
  ) {
    // buffers run short: streams kept for joiners that nobody is on go first
    pool.whenDry(() => this.forgetIdle());
  }

  get size(): number {
    return this.cohorts.size;
  }

  /** Frames were fed to the hub (streams started before them age). */
  fedBytes(n: number): void {
    this.fed += n;
  }

  /** Whether a catch-up for this view would join a stream under way (and cost the episode nothing). */
  joinable(variant: Variant, after: number | null, forced: SnapshotReason | undefined): boolean {
    return this.current(this.cohorts.get(Cohort.key(variant, after, forced)));
  }

  /** The stream for a new catch-up: one under way for the same view, or a new one. */
  for(variant: Variant, after: number | null, forced: SnapshotReason | undefined): Cohort {
    const key = Cohort.key(variant, after, forced);
    const have = this.cohorts.get(key);
    if (have && this.current(have)) return have;
    if (have?.members.size === 0) have.close();
    this.opened++;
    const c = new Cohort(
      this.open,
      key,
      this.fed,
      variant,
      after,
      forced,
      this.wake,
      (x) => this.linger(x),
      (x) => {
        if (this.cohorts.get(x.key) === x) this.cohorts.delete(x.key);
      },
      this.pool,
    );
    this.cohorts.set(key, c);
    return c;
  }

  /** Cohorts nobody is on go now (the hub left its episode). */
  forgetIdle(): void {
    for (const c of [...this.cohorts.values()]) if (c.members.size === 0) c.close();
  }

  /** Every stream goes (the hub starts over): nothing under way is joinable any more. */
  closeAll(): void {
    for (const c of [...this.cohorts.values()]) c.close();
    this.cohorts.clear();
    this.fed += STALE_BYTES + 1;
  }

  private current(c: Cohort | undefined): boolean {
    return c?.joinable() === true && this.fed - c.fedAt <= STALE_BYTES;
  }

  /** Its last member left: a stream still joinable stays for LINGER_MS, then goes. */
  private linger(c: Cohort): void {
    if (!c.joinable() || this.cohorts.get(c.key) !== c) return c.close();
    setTimeout(() => {
      if (c.members.size === 0) c.close();
    }, LINGER_MS);
  }
}

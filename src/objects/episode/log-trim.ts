// Keeping the log short: its last `logKeepFrames` frames and about `logKeepBytes` bytes (the
// state is in the store; the log only serves watchers that resume or catch up), never dropping a
// frame a catching-up watcher still has to read (the store's holds).

import type { Meta } from "./record-store.js";
import type { EpisodeState } from "./state.js";

/** The byte rule reads the log's sizes: every this many frames, not every frame. */
export const BYTE_CHECK_FRAMES = 16;

/**
 * The seq up to which the log can go (frames ≤ cut), or null when nothing can: the frame rule,
 * the byte rule (sizes newest first, when given), and what readers still hold.
 */
export function trimPoint(
  m: Pick<Meta, "seq" | "base">,
  keepFrames: number,
  keepBytes: number,
  sizesNewestFirst: Iterable<{ seq: number; bytes: number }> | null,
  oldestHold: number | null,
): number | null {
  let keepFrom = m.seq - keepFrames;
  if (sizesNewestFirst) {
    let bytes = 0;
    for (const f of sizesNewestFirst) {
      bytes += f.bytes;
      if (bytes > keepBytes) {
        keepFrom = Math.max(keepFrom, f.seq);
        break;
      }
    }
  }
  const cut = Math.min(keepFrom, oldestHold ?? keepFrom, m.seq);
  return cut > m.base ? cut : null;
}

export class LogTrim {
  /** Frames logged since the byte rule last ran (memory only: a restart just checks sooner). */
  private sinceCheck = 0;

  constructor(
    private readonly state: EpisodeState,
    private readonly keepFrames: number,
    private readonly keepBytes: number,
  ) {}

  /** After `applied` frames were committed. */
  afterIngest(m: Meta, applied: number): void {
    this.sinceCheck += applied;
    const bytesRule = this.sinceCheck >= BYTE_CHECK_FRAMES;
    if (!bytesRule && m.seq - m.base <= this.keepFrames) return;
    if (bytesRule) this.sinceCheck = 0;
    const cut = trimPoint(
      m,
      this.keepFrames,
      this.keepBytes,
      bytesRule ? this.state.record.logSizes() : null,
      this.state.store.oldestHold(),
    );
    if (cut === null) return;
    try {
      this.state.transaction(
        () => {
          this.state.record.trimLog(cut);
          this.state.record.saveMeta({ ...m, base: cut });
        },
        () => true, // a trim does not touch the index
      );
    } catch (e) {
      // the log stays as it was; trimming is tried again after the next frames
      console.error(`episode ${m.id}: log trim failed: ${(e as Error).message}`);
    }
  }
}

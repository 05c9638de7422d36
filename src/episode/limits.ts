import type { Env } from "../env.js";

export interface Limits {
  /** Largest request body or WebSocket message, bytes. */
  maxMessage: number;
  /** Largest episode (sum of its logged frames), bytes. */
  maxEpisode: number;
  /** Seconds an episode is kept after its last write. */
  retention: number;
  /** Watchers per episode; one more is closed with 1013. */
  maxWatchers: number;
  /** Bytes sent to a watcher since its last ping before it is closed with 4008 (too far behind). */
  watcherLagBytes: number;
  /** Frames in the log past the base snapshot before the log is compacted. */
  compactFrames: number;
  /** Least time between two throttled updates of an episode's row in the episode index, ms. */
  indexFlushMs: number;
}

function num(v: string | undefined, fallback: number): number {
  const n = v === undefined || v === "" ? NaN : Number(v);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

export function limitsFrom(env: Partial<Env>): Limits {
  return {
    maxMessage: num(env.MAX_MESSAGE_BYTES, 32 * 1024 * 1024),
    maxEpisode: num(env.MAX_EPISODE_BYTES, 1024 * 1024 * 1024),
    retention: num(env.RETENTION_SECONDS, 7 * 24 * 3600),
    maxWatchers: num(env.MAX_WATCHERS, 10_000),
    watcherLagBytes: num(env.WATCHER_LAG_BYTES, 64 * 1024 * 1024),
    compactFrames: num(env.LOG_COMPACT_FRAMES, 4096),
    indexFlushMs: num(env.INDEX_FLUSH_MS, 2000),
  };
}

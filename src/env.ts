import type { Episode } from "./episode/episode";

/** Bindings and vars of the episode-relay Worker (see wrangler.toml). */
export interface Env {
  EPISODES: DurableObjectNamespace<Episode>;
  /** Largest single message accepted, in bytes (decimal string). */
  MAX_MESSAGE_BYTES: string;
  /** Largest total episode size, in bytes (decimal string). */
  MAX_EPISODE_BYTES: string;
  /** How long finished episodes are kept, in seconds (decimal string). */
  RETENTION_SECONDS: string;
  /** Watchers per episode (decimal string). */
  MAX_WATCHERS?: string;
  /** Bytes sent to a watcher since its last ping before it is closed as too slow (decimal string). */
  WATCHER_LAG_BYTES?: string;
  /** Log frames past the base snapshot before compaction (decimal string). */
  LOG_COMPACT_FRAMES?: string;
  /** Optional shared secret (from .dev.vars or `wrangler secret put`). */
  RELAY_SECRET?: string;
}

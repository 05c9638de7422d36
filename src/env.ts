import type { Episode } from "./episode/episode.js";
import type { EpisodeIndex } from "./registry/episode-index.js";

/** Bindings and vars of the episode-relay Worker (see wrangler.toml). */
export interface Env {
  EPISODES: DurableObjectNamespace<Episode>;
  /** The episode index (one object, by name "global"): the dashboard's list. */
  EPISODE_INDEX: DurableObjectNamespace<EpisodeIndex>;
  /** Largest single message accepted, in bytes (decimal string). */
  MAX_MESSAGE_BYTES: string;
  /** Largest total episode size, in bytes (decimal string). */
  MAX_EPISODE_BYTES: string;
  /** How long finished episodes are kept, in seconds (decimal string). */
  RETENTION_SECONDS: string;
  /** Watchers per episode (decimal string). */
  MAX_WATCHERS?: string;
  /** Bytes a live watcher may leave unacknowledged before it is closed as too slow (decimal string). */
  WATCHER_LAG_BYTES?: string;
  /** Bytes a catching-up watcher may leave unacknowledged (decimal string). */
  WATCHER_WINDOW_BYTES?: string;
  /** Watchers catching up at once (decimal string). */
  MAX_CATCHUPS?: string;
  /** Frames the log keeps for watchers resuming with ?after= (decimal string). */
  LOG_KEEP_FRAMES?: string;
  /** Bytes of frames the log keeps, about (decimal string). */
  LOG_KEEP_BYTES?: string;
  /** Least ms between two throttled index updates of one episode while turns arrive (default 2000). */
  INDEX_FLUSH_MS?: string;
  /**
   * HMAC key (its UTF-8 bytes) of the HS256 bearer tokens: a Wrangler secret in production
   * (`wrangler secret put RELAY_SECRET`), .dev.vars or the environment of `npm start` locally.
   * Set: every request but /v1/health needs a token. Unset: see AUTH_OFF_ON_LOOPBACK.
   */
  RELAY_SECRET?: string;
  /**
   * "true" only from `npm start` (scripts/dev.mjs, `--var`) when no RELAY_SECRET is configured:
   * auth is then off for requests addressed to a local host name. Never set in wrangler.toml;
   * without it and without a secret the Worker refuses everything but /v1/health (503).
   */
  AUTH_OFF_ON_LOOPBACK?: string;
  /** Origins allowed by CORS: "" (none), "*" (any), or a comma list of origins. */
  CORS_ORIGINS?: string;
}

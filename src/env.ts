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
  /** Optional shared secret (from .dev.vars or `wrangler secret put`). */
  RELAY_SECRET?: string;
}

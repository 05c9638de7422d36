// The relay's limits, from wrangler.toml [vars] (each through vars.ts's one parser, with the
// default written here): what the Worker, the Episode object and the hubs read at construction.
// Pure: no runtime imports.

import { CATCHUP_POOL_BYTES } from "../hub/message-pool.js";
import { DEFAULT_INDEX_FLUSH_MS, limitFrom } from "./vars.js";

export interface Limits {
  /** Largest request body or WebSocket message, bytes. */
  maxMessage: number;
  /** Largest episode (sum of its logged frames), bytes. */
  maxEpisode: number;
  /** Seconds an episode is kept after its last write. */
  retention: number;
  /** Watchers per viewer hub; one more is closed with 1013. */
  maxWatchers: number;
  /** Watchers a hub should carry: an episode has one hub per this many watchers... */
  watchersPerHub: number;
  /** ... and at most this many hubs. */
  maxHubs: number;
  /** Catch-ups a hub starts per second at most (bursts of as many). */
  catchUpRate: number;
  /** Watchers a hub lets wait for a catch-up slot; one more is closed 1013 with a retry hint. */
  maxWaiting: number;
  /** Bytes a hub has sent to its watchers and not yet had acknowledged; past it newcomers get 1013. */
  hubQueueBytes: number;
  /** Recent frames a hub keeps in memory for resumes and catch-ups, bytes. */
  hubWindowBytes: number;
  /** Buffers a hub reads catch-up messages into, at most, bytes (src/protocol/hub/message-pool.ts). */
  hubPoolBytes: number;
  /** Bytes a live watcher may leave unacknowledged before it is closed with 4008 (too far behind). */
  watcherLagBytes: number;
  /** Bytes a catching-up watcher may leave unacknowledged (its window). */
  watcherWindowBytes: number;
  /** Watchers catching up at once, per hub; the others wait their turn. */
  maxCatchUps: number;
  /** The log keeps at most this many frames (for watchers resuming with ?after=)... */
  logKeepFrames: number;
  /**
   * ... and at most about this many bytes of them: every frame trimmed is a row deleted (billed as written), while the
   * archive drops the whole log at once, so the bound is set past a long episode's log (~115 MiB for 200
   * routing-heavy turns) and an episode's SQLite stays within MAX_EPISODE_BYTES of bodies plus this.
   */
  logKeepBytes: number;
  /** Least time between two throttled updates of an episode's row in its run's index, ms. */
  indexFlushMs: number;
  /** How long after the reply a finished episode goes to R2 and leaves SQLite (src/objects/episode/archive.ts), ms. */
  archiveAfterMs: number;
  /** Past this size a finished episode goes to R2 in parts of this many bytes (src/objects/episode/archive.ts). */
  archivePartBytes: number;
  /** Archive steps at once per object class (src/objects/archive/gate.ts); 0: unlimited, no gate asked. */
  archiveSlots: number;
  /** How long a rollout announced by `POST .../dispatch` may stream nothing before it is dropped, ms. */
  pendingTimeoutMs: number;
  /** Bytes an episode's merged trainer annotations may take (src/objects/episode/annotations.ts). */
  maxAnnotations: number;
  /** Sockets per run index or run directory (run and runs sockets); one more is closed with 1013. */
  maxRunSockets: number;
  /**
   * Run or runs sockets that may start per second per object (each sends a snapshot); past it 1013 with a retry hint.
   */
  runSocketRate: number;
  /** Largest `tokenizer.json` a run may keep (PUT /v1/runs/{run}/tokenizer), bytes. */
  maxTokenizer: number;
}

/** The vars the limits are read from (the Worker's Env has them as strings; absent ones take their defaults). */
export type LimitVars = { readonly [K in LimitVar]?: string };
type LimitVar =
  | "MAX_MESSAGE_BYTES"
  | "HUB_POOL_BYTES"
  | "MAX_EPISODE_BYTES"
  | "RETENTION_SECONDS"
  | "MAX_WATCHERS"
  | "WATCHERS_PER_HUB"
  | "MAX_HUBS"
  | "CATCHUP_RATE"
  | "MAX_WAITING"
  | "HUB_QUEUE_BYTES"
  | "HUB_WINDOW_BYTES"
  | "WATCHER_LAG_BYTES"
  | "WATCHER_WINDOW_BYTES"
  | "MAX_CATCHUPS"
  | "LOG_KEEP_FRAMES"
  | "LOG_KEEP_BYTES"
  | "INDEX_FLUSH_MS"
  | "ARCHIVE_AFTER_SECONDS"
  | "PENDING_TIMEOUT_SECONDS"
  | "MAX_ANNOTATION_BYTES"
  | "MAX_RUN_SOCKETS"
  | "RUN_SOCKET_RATE"
  | "ARCHIVE_SLOTS"
  | "ARCHIVE_PART_BYTES"
  | "MAX_TOKENIZER_BYTES";

/**
 * Deepest nesting (arrays and maps) of any JSON or msgpack body the relay parses: every reader
 * refuses one level more with 400 malformed naming it, before anything recurses over the value.
 * The golden cases reach about 70 levels; msgpack-python's packer stops at 511 (its
 * DEFAULT_RECURSE_LIMIT), far past any rollout's shape.
 */
export const MAX_DEPTH = 200;

/** R2's least multipart part (every part but the last; all of them the same size). */
export const R2_MIN_PART_BYTES = 5 * 1024 * 1024;
/** A multipart archive's part unless ARCHIVE_PART_BYTES says otherwise. */
export const DEFAULT_ARCHIVE_PART_BYTES = 8 * 1024 * 1024;

export function limitsFrom(env: LimitVars): Limits {
  return {
    maxMessage: limitFrom(env.MAX_MESSAGE_BYTES, 32 * 1024 * 1024),
    maxEpisode: limitFrom(env.MAX_EPISODE_BYTES, 1024 * 1024 * 1024),
    retention: limitFrom(env.RETENTION_SECONDS, 7 * 24 * 3600),
    maxWatchers: limitFrom(env.MAX_WATCHERS, 5000),
    watchersPerHub: limitFrom(env.WATCHERS_PER_HUB, 2000),
    maxHubs: limitFrom(env.MAX_HUBS, 64),
    catchUpRate: limitFrom(env.CATCHUP_RATE, 20),
    maxWaiting: limitFrom(env.MAX_WAITING, 256),
    hubQueueBytes: limitFrom(env.HUB_QUEUE_BYTES, 32 * 1024 * 1024),
    hubWindowBytes: limitFrom(env.HUB_WINDOW_BYTES, 8 * 1024 * 1024),
    hubPoolBytes: limitFrom(env.HUB_POOL_BYTES, CATCHUP_POOL_BYTES),
    watcherLagBytes: limitFrom(env.WATCHER_LAG_BYTES, 64 * 1024 * 1024),
    watcherWindowBytes: limitFrom(env.WATCHER_WINDOW_BYTES, 4 * 1024 * 1024),
    maxCatchUps: limitFrom(env.MAX_CATCHUPS, 4),
    logKeepFrames: limitFrom(env.LOG_KEEP_FRAMES, 4096),
    logKeepBytes: limitFrom(env.LOG_KEEP_BYTES, 256 * 1024 * 1024),
    indexFlushMs: limitFrom(env.INDEX_FLUSH_MS, DEFAULT_INDEX_FLUSH_MS),
    archiveAfterMs: limitFrom(env.ARCHIVE_AFTER_SECONDS, 10) * 1000,
    archiveSlots: Math.floor(limitFrom(env.ARCHIVE_SLOTS, 0)),
    archivePartBytes: Math.max(
      R2_MIN_PART_BYTES,
      Math.floor(limitFrom(env.ARCHIVE_PART_BYTES, DEFAULT_ARCHIVE_PART_BYTES)),
    ),
    pendingTimeoutMs: limitFrom(env.PENDING_TIMEOUT_SECONDS, 900) * 1000,
    maxAnnotations: limitFrom(env.MAX_ANNOTATION_BYTES, 16 * 1024 * 1024),
    maxRunSockets: limitFrom(env.MAX_RUN_SOCKETS, 1000),
    runSocketRate: limitFrom(env.RUN_SOCKET_RATE, 20),
    // Qwen's and Llama 3's are 7-11 MiB; the Worker parses it once to refuse what is not JSON, and a
    // 32 MiB one (Gemma 3) parsed would not fit beside its bytes in an isolate's 128 MB
    maxTokenizer: limitFrom(env.MAX_TOKENIZER_BYTES, 16 * 1024 * 1024),
  };
}

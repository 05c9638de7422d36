import type { Env } from "../env";

export interface Limits {
  /** Largest request body or WebSocket message, bytes. */
  maxMessage: number;
  /** Largest episode (sum of its logged frames), bytes. */
  maxEpisode: number;
  /** Seconds an episode is kept after its last write. */
  retention: number;
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
  };
}

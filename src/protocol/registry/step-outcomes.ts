// What a GRPO user checks first about a training step besides its reward: how long the responses were
// (output tokens per rollout: mean and p90) and how its rollouts ended (truncated, timed out, errored).
// Pure, and kept like the rest of a step's counters (steps.ts): a row's part added and taken back in
// integers, so the numbers equal a recount from the rows. The p90 needs the distribution, not a sum: the
// step keeps a count per length bucket (exact below 256 tokens, above that the length's 8 leading bits),
// so its row stays a few KB whatever the step's size, and the p90 is exact for short responses and at
// most 0.8% under the true one for long ones.

import type { IndexRow } from "./entry.js";

export { stopTruncates, TRUNCATING_STOPS } from "./truncation.js";

/** Lengths below this are kept exactly; above, to LENGTH_BITS leading bits. */
const EXACT_BELOW = 256;
const LENGTH_BITS = 8;

/** The quantile the step shows beside the mean length (nearest rank). */
export const LENGTH_QUANTILE = 0.9;

/** A step's outcome counters (in its `steps` row; every field absent: 0 or none). */
export interface OutcomeCounters {
  /**
   * Ended rollouts (finished or failed) the trainer counts as truncated (`is_truncated`: truncation.ts), that timed
   * out (`is_timeout`), that errored.
   */
  truncated?: number;
  timeouts?: number;
  errored?: number;
  /** Finished rollouts with progress facts: how many, their output tokens summed, and a count per length bucket. */
  lengths?: { count: number; sum: number; buckets: Record<string, number> };
}

export type OutcomeRow = Pick<IndexRow, "status" | "live"> &
  Partial<Pick<IndexRow, "error" | "is_truncated" | "is_timeout">>;

/** The bucket a length counts in: itself below EXACT_BELOW, else rounded down to its LENGTH_BITS leading bits. */
export function lengthBucket(tokens: number): number {
  const n = Math.max(0, Math.floor(tokens));
  if (n < EXACT_BELOW) return n;
  const drop = Math.floor(Math.log2(n)) + 1 - LENGTH_BITS;
  const unit = 2 ** drop;
  return Math.floor(n / unit) * unit;
}

/** Add (1) or take back (-1) one row's part of the outcome counters. */
export function applyOutcomeRow(c: OutcomeCounters, row: OutcomeRow, sign: 1 | -1): void {
  if (row.status !== "finished" && row.status !== "failed") return;
  const add = (k: "truncated" | "timeouts" | "errored") => {
    const v = (c[k] ?? 0) + sign;
    if (v === 0) delete c[k];
    else c[k] = v;
  };
  // a row whose truncation is not counted (null: entry.ts) counts as not truncated until its episode counts it
  if (row.is_truncated === true) add("truncated");
  if (row.is_timeout === true) add("timeouts");
  if (row.error !== null && row.error !== undefined) add("errored");
  // rows of releases before the progress facts carry no token counts: they have no length
  if (row.status !== "finished" || !row.live) return;
  const l = (c.lengths ??= { count: 0, sum: 0, buckets: {} });
  const tokens = Math.max(0, Math.floor(row.live.output_tokens));
  const b = String(lengthBucket(tokens));
  l.count += sign;
  l.sum += sign * tokens;
  l.buckets[b] = (l.buckets[b] ?? 0) + sign;
  if (l.buckets[b] === 0) delete l.buckets[b];
  if (l.count === 0) delete c.lengths;
}

/** The smallest bucket with at least `q` of the counts at or below it (nearest rank); null when empty. */
export function bucketQuantile(buckets: Record<string, number>, q: number): number | null {
  const entries = Object.entries(buckets)
    .map(([k, n]) => [Number(k), n] as const)
    .sort((a, b) => a[0] - b[0]);
  const total = entries.reduce((s, [, n]) => s + n, 0);
  if (total <= 0) return null;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (const [v, n] of entries) {
    seen += n;
    if (seen >= rank) return v;
  }
  return entries.at(-1)![0];
}

/** What a step's JSON says of its outcomes, over `ended` (finished + failed) rollouts. */
export interface OutcomeJson {
  /** Ended rollouts, and of them the truncated, timed out and errored ones. */
  ended: { count: number; truncated: number; timeouts: number; errored: number };
  truncated_share: number | null;
  timeout_share: number | null;
  error_share: number | null;
  /** Output tokens per finished rollout (all traces): mean and p90 (nearest rank, bucketed as above); null: none. */
  output_tokens: { mean: number | null; p90: number | null };
}

export function outcomeJson(c: OutcomeCounters, ended: number): OutcomeJson {
  const truncated = c.truncated ?? 0;
  const timeouts = c.timeouts ?? 0;
  const errored = c.errored ?? 0;
  const share = (n: number) => (ended > 0 ? n / ended : null);
  const l = c.lengths;
  return {
    ended: { count: ended, truncated, timeouts, errored },
    truncated_share: share(truncated),
    timeout_share: share(timeouts),
    error_share: share(errored),
    output_tokens: {
      mean: l && l.count > 0 ? l.sum / l.count : null,
      p90: l ? bucketQuantile(l.buckets, LENGTH_QUANTILE) : null,
    },
  };
}

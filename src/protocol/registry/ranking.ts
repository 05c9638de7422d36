// The one ranking of rollouts, best first, with its tie rule: the group API's order
// (`GET /v1/runs/{run}/groups/{group}`), the group page's best and worst and the compare page's.
// Ties in reward go to fewer tokens (the cheaper answer), then to the id, so the order is total
// and the same everywhere.

/** What the ranking reads of a rollout. */
export interface Rankable {
  id: string;
  reward: number | null;
  tokens: number;
}

/** The tie rule, as the pages state it. */
export const TIE_RULE =
  "ranked by reward (higher first); ties go to fewer tokens, then to the episode id in alphabetical order; unscored last";

/** Best first: reward descending, then fewer tokens, then id ascending; unscored rollouts last (by id). */
export function rankRollouts<T extends Rankable>(rollouts: readonly T[]): T[] {
  return [...rollouts].sort((a, b) => {
    if (a.reward === null || b.reward === null) return a.reward === b.reward ? byId(a, b) : a.reward === null ? 1 : -1;
    return b.reward - a.reward || a.tokens - b.tokens || byId(a, b);
  });
}

const byId = (a: Rankable, b: Rankable) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** The best and the worst scored rollout by the tie rule (null when fewer than two are scored). */
export function bestAndWorst<T extends Rankable>(rollouts: readonly T[]): { best: T; worst: T } | null {
  const scored = rankRollouts(rollouts).filter((r) => r.reward !== null);
  return scored.length > 1 ? { best: scored[0]!, worst: scored.at(-1)! } : null;
}

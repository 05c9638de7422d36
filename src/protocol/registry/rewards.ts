// Reading an episode's `rewards` scalar (verifiers: `{name: {score, weight}}`, entries may be null;
// a bare number is read as one reward named "reward"). Pure.

import type { Json } from "../wire/json-view.js";

/** A reward's score: `{score, weight}` entries (verifiers) or a bare number. */
export function scoresOf(rewards: Json): Array<[string, number]> {
  if (typeof rewards === "number") return Number.isFinite(rewards) ? [["reward", rewards]] : [];
  if (typeof rewards !== "object" || rewards === null || Array.isArray(rewards)) return [];
  const out: Array<[string, number]> = [];
  for (const [k, v] of Object.entries(rewards)) {
    const s =
      typeof v === "number"
        ? v
        : typeof v === "object" && v !== null && !Array.isArray(v)
          ? (v as Record<string, Json>).score
          : undefined;
    if (typeof s === "number" && Number.isFinite(s)) out.push([k, s]);
  }
  return out;
}

/** One number per episode to sort by: the weighted mean of its scores (weight 1 when absent), or null. */
export function rewardOf(rewards: Json): number | null {
  if (typeof rewards === "number") return Number.isFinite(rewards) ? rewards : null;
  if (typeof rewards !== "object" || rewards === null || Array.isArray(rewards)) return null;
  let sum = 0;
  let weights = 0;
  for (const v of Object.values(rewards)) {
    if (typeof v === "number" && Number.isFinite(v)) {
      sum += v;
      weights += 1;
    } else if (typeof v === "object" && v !== null && !Array.isArray(v)) {
      const { score, weight } = v as Record<string, Json>;
      if (typeof score !== "number" || !Number.isFinite(score)) continue;
      const w = typeof weight === "number" && Number.isFinite(weight) ? weight : 1;
      sum += score * w;
      weights += w;
    }
  }
  return weights > 0 ? sum / weights : null;
}

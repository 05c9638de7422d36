// Reward chips coloured by value, on one scale from bad to good wherever a reward is shown (the
// run's list, a group, an episode, the compare page): 0 (and below) red, ½ amber, 1 (and above)
// green, so a 0 never reads as a success. The scale is fixed rather than stretched to what a page
// happens to hold: the same score is the same colour on every page. A score that is not a number
// (a string, a map without `score`) gets a neutral chip.

import type { Json } from "../../src/protocol/index.js";
import { episodeReward, REWARD_DEFINITION, TOTAL_KEY } from "../../src/protocol/index.js";
import { fmtNumber, h } from "./dom.js";
import { fmt, isObject } from "./model.js";

/** The scale's ends: at or below BAD is the worst colour, at or above GOOD the best. */
export const REWARD_BAD = 0;
export const REWARD_GOOD = 1;
/** Hues along the scale (HSL degrees): red, amber, green. */
const HUES: ReadonlyArray<[number, number]> = [
  [0, 4],
  [0.5, 38],
  [1, 138],
];

/** The hue of `score` on the scale (pure; tests and charts use it too). */
export function rewardHue(score: number): number {
  const t = Math.min(1, Math.max(0, (score - REWARD_BAD) / (REWARD_GOOD - REWARD_BAD)));
  for (let i = 1; i < HUES.length; i++) {
    const [t0, h0] = HUES[i - 1]!;
    const [t1, h1] = HUES[i]!;
    if (t <= t1) return Math.round(h0 + ((t - t0) / (t1 - t0)) * (h1 - h0));
  }
  return HUES.at(-1)![1];
}

/** Attributes that colour an element by `score` (none for a missing one): a `--rh` hue and the score itself. */
export function toneAttrs(score: number | null): Record<string, string | number> {
  if (score === null || !Number.isFinite(score)) return {};
  return { style: `--rh: ${rewardHue(score)}`, "data-score": score };
}

/** One reward key's score: its number (null when it is not one) and how it is written. */
export interface RewardScore {
  key: string;
  score: number | null;
  text: string;
}

/** Rewards as scores: `{name: {score, weight}}` or `{name: number}`. */
export function rewardScores(v: Json | undefined): RewardScore[] {
  if (!isObject(v)) return [];
  return Object.entries(v).map(([key, x]) => {
    const raw = isObject(x) && "score" in x ? x.score : x;
    return { key, score: typeof raw === "number" && Number.isFinite(raw) ? raw : null, text: fmt(raw) };
  });
}

/**
 * A key and its value as one chip, coloured by `score` (`text` defaults to the score written out; `attrs` go on the
 * chip).
 */
export function rewardChip(
  key: string,
  score: number | null,
  text?: string,
  opts: { big?: boolean; attrs?: Record<string, string | number> } = {},
): HTMLElement {
  const cls = `span.reward${score !== null && Number.isFinite(score) ? ".scored" : ""}${opts.big ? ".big" : ""}`;
  return h(
    cls as "span",
    { "data-key": key, ...opts.attrs, ...toneAttrs(score) },
    h("span.reward-k", null, key),
    h("span.reward-v", null, text ?? (score === null ? "–" : fmtNumber(score))),
  );
}

/** Every key of a `rewards` value as chips. */
export function rewardChips(v: Json | undefined, big = false): HTMLElement[] {
  return rewardScores(v).map((r) => rewardChip(r.key, r.score, r.text, { big }));
}

/**
 * An episode's rewards from its traces' (src/protocol/registry/rewards.ts): the reward first (with the definition as
 * its title, unless `total` is false), then each key's mean over the traces.
 */
export function episodeRewardChips(traceRewards: readonly Json[], big = false, total = true): HTMLElement[] {
  const e = episodeReward(traceRewards);
  const shown = total && e.reward !== null;
  // a bare-number reward is the key "reward": shown once, as the total it equals
  const keys = e.scores
    .filter(([k]) => !shown || k !== TOTAL_KEY)
    .map(([k, s]) => rewardChip(k, s, fmtNumber(s), { big }));
  if (!shown) return keys;
  return [rewardChip(TOTAL_KEY, e.reward, fmtNumber(e.reward), { big, attrs: { title: REWARD_DEFINITION } }), ...keys];
}

/** A bare number coloured by the scale (the episode's reward in a list's cell). */
export function rewardNumber(score: number | null, text: string): HTMLElement {
  return score === null ? h("span.muted", null, "–") : h("span.reward-mean.toned", toneAttrs(score), text);
}

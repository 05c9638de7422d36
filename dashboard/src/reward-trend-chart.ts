// The run's reward over its whole run time (the aggregates' `timeline`, run-timeline.ts): per point, the mean
// of the episodes that finished in it, one line per reward key (the trainer's total, "reward", first; a point
// where none finished is joined across). Only finished episodes count: a failed one's scores say nothing of
// what was learnt. Beside it, in text, each key's mean over the whole run. Drawn by plot.ts like the per-step
// charts; a run with training steps reads the same numbers per step in "Reward by step".

import type { RunTimeline } from "../../src/protocol/index.js";
import { fmtNumber, h } from "./dom.js";
import type { PlotSeries } from "./plot.js";
import type { KeyTones } from "./reward-choice.js";
import { perPoint, pointX, type RunTimeChart, runTimeAxis, runTimeChart } from "./run-time.js";

/** Keys drawn (the trainer's total first, then by name); more would not be told apart. */
const MAX_KEYS = 4;

const round = (v: number) => fmtNumber(Math.round(v * 1000) / 1000);

/** A key's mean over the run: its points' means weighted by their counts (null: none finished). */
function runMean(k: RunTimeline["rewards"][string]): number | null {
  let n = 0;
  let sum = 0;
  k.count.forEach((c, i) => {
    n += c;
    sum += c * (k.mean[i] ?? 0);
  });
  return n ? sum / n : null;
}

/** The keys drawn: "reward" (the trainer's total) first, then the others by name. */
export function trendKeys(t: RunTimeline): string[] {
  const all = Object.keys(t.rewards);
  return [...all.filter((k) => k === "reward"), ...all.filter((k) => k !== "reward")].slice(0, MAX_KEYS);
}

/** `tones`: the page's reward key colours (the same in the per-step charts). */
export function rewardTrendChart(tones: KeyTones): RunTimeChart {
  return runTimeChart(
    "reward-trend",
    "Reward over run time",
    "No episode has finished with a reward yet.",
    (t, { el, sub, stats }) => {
      const keys = t ? trendKeys(t) : [];
      tones.meet(keys);
      el.dataset.keys = keys.join(",");
      sub.textContent = t ? `mean of the episodes finished ${perPoint(t)}` : "";
      stats.replaceChildren(
        ...keys.map((k) => {
          const m = runMean(t!.rewards[k]!);
          return h(
            "div",
            { "data-stat": k, "data-mean": m ?? "", title: "mean over every finished episode of the run" },
            h(`dt.tk-key.tk-${tones.tone(k) % 4}` as "dt", null, k),
            h("dd", null, m === null ? "–" : round(m)),
          );
        }),
      );
      if (!t || keys.length === 0) return null;
      const series: PlotSeries[] = keys.map((key) => {
        const k = t.rewards[key]!;
        // only the points where some finished: a point without is joined across, not a fall to 0
        const points = new Map<number, number | null>();
        k.count.forEach((c, i) => {
          if (c > 0) points.set(pointX(t, i), k.mean[i]!);
        });
        return { label: key, key, kind: "finished", tone: tones.tone(key), points };
      });
      return {
        ...runTimeAxis(t),
        yLabel: "mean score",
        yMin: 0,
        yMax: 1,
        format: round,
        series,
      };
    },
  );
}

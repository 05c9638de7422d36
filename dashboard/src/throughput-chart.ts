// Ended episodes per minute over the whole run time (the aggregates' `timeline`, run-timeline.ts: from the
// run's first rollout, at most 120 points of 1, 2, 5 … minutes each; a point of several minutes shows their
// mean per minute). Drawn by plot.ts like the per-step charts: axes with values and units, a legend with the
// exact numbers at the crosshair (off the plot: the latest point). Totals in text above it.

import { fmtNumber, h } from "./dom.js";
import { pointX, type RunTimeChart, runTimeAxis, runTimeChart, runTimeText } from "./run-time.js";

const rate = (v: number) => fmtNumber(Math.round(v * 100) / 100);

export function throughputChart(): RunTimeChart {
  return runTimeChart("throughput", "Throughput", "No episode has ended yet.", (t, { el, sub, stats }) => {
    const ended = t?.ended ?? [];
    const total = ended.reduce((a, b) => a + b, 0);
    const w = t?.minutes ?? 1;
    const peak = Math.max(0, ...ended) / w;
    const span = ended.length * w;
    el.dataset.total = String(total);
    el.dataset.points = String(ended.length);
    sub.textContent = t
      ? `episodes ended per minute, from the first rollout${w > 1 ? ` (each point the mean of ${w} minutes)` : ""}`
      : "";
    stats.replaceChildren(
      ...[
        ["ended", total.toLocaleString("en-US"), `over ${runTimeText(span)} of run time`],
        [
          "peak",
          `${rate(peak)}/min`,
          t && w > 1 ? `the most in one point, per minute of its ${w}` : "the most in one minute",
        ],
        ["latest", `${rate((ended.at(-1) ?? 0) / w)}/min`, "the point holding now (still filling)"],
      ].map(([k, v, title]) => h("div", { "data-stat": k!, title }, h("dt", null, k), h("dd", null, v))),
    );
    if (!t || total === 0) return null;
    return {
      ...runTimeAxis(t),
      yLabel: "episodes ended / min",
      yMin: 0,
      yMax: 1,
      format: rate,
      series: [
        {
          label: "ended / min",
          key: "ended",
          kind: "all",
          tone: 0,
          points: new Map(ended.map((n, i) => [pointX(t, i), n / w])),
        },
      ],
    };
  });
}

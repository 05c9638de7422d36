// The zero-variance share over the last hour, small enough for its counter tile (the aggregates'
// `groups.trend`): a step line of the run's share as it stood at the end of each minute (over every
// group completed by then), and under it a faint bar per minute for the share among the groups
// that completed in that minute. Both on 0–100%; a minute with no completed group has no bar.
// Its numbers are written beside it (the hour's completed groups, the zero-variance ones, the
// scale), so the tile reads without hovering.

import type { ZeroVarianceTrend } from "../../src/protocol/index.js";
import { h, s } from "./dom.js";
import { stepPath } from "./step-path.js";

const W = 120;
const H = 28;

const y = (share: number) => H - 1 - share * (H - 3);
const percent = (share: number) => `${Math.round(share * 1000) / 10}%`;

/** The spark and its numbers in text beside it. */
export function zeroVarianceTrend(t: ZeroVarianceTrend): HTMLElement {
  const n = t.completed.length;
  const completed = t.completed.reduce((a, b) => a + b, 0);
  const zero = t.zero_variance.reduce((a, b) => a + b, 0);
  return h(
    "div.zv-trend",
    null,
    zeroVarianceSpark(t),
    h(
      "div.zv-text",
      {
        title: `groups completed in the last ${n} minutes, and of them the ones with zero variance; the chart's scale`,
      },
      h("span", { "data-zv": "hour" }, `last ${n} min: `),
      h("span", { "data-zv": "counts" }, `${zero} of ${completed} zero`),
      h("span", { "data-zv": "scale" }, " · y 0–100%"),
    ),
  );
}

export function zeroVarianceSpark(t: ZeroVarianceTrend): SVGSVGElement {
  const n = t.completed.length;
  const completed = t.completed.reduce((a, b) => a + b, 0);
  const zero = t.zero_variance.reduce((a, b) => a + b, 0);
  const last = t.cumulative_share.at(-1) ?? null;
  const bars = t.share.flatMap((v, i) =>
    v === null
      ? []
      : [s("rect", { class: "zv-bar", x: (i / n) * W, y: y(v), width: W / n, height: H - 1 - y(v), "data-minute": i })],
  );
  return s(
    "svg",
    {
      class: "zv-spark",
      viewBox: `0 0 ${W} ${H}`,
      preserveAspectRatio: "none",
      role: "img",
      "aria-label": `last ${n} minutes: ${completed} groups completed, ${zero} with zero variance${last === null ? "" : `; the share now ${percent(last)}`}`,
      "data-completed": completed,
      "data-zero": zero,
      "data-points": t.cumulative_share.filter((v) => v !== null).length,
      "data-last": last ?? "",
    },
    s(
      "title",
      null,
      `zero-variance share over the last hour: ${completed} groups completed, ${zero} with zero variance`,
    ),
    s("line", { class: "spark-base", x1: 0, y1: H - 1, x2: W, y2: H - 1 }),
    ...bars,
    s("path", { class: "zv-line", d: stepPath(t.cumulative_share, W, y) }),
  );
}

// Ended episodes per minute over the last hour, as an inline SVG sparkline (the aggregates'
// `throughput.per_minute`, oldest first, the last value being the current, unfinished minute).
// The SVG stretches to its box; strokes keep their width (non-scaling-stroke). Each minute has an
// invisible column with a tooltip.

import type { RunAggregates } from "../../src/protocol/index.js";
import { h, s } from "./dom.js";

const W = 600;
const H = 64;

export function throughputSparkline(t: RunAggregates["throughput"]): HTMLElement {
  const values = t.per_minute;
  const n = values.length;
  const total = values.reduce((a, b) => a + b, 0);
  const peak = Math.max(0, ...values);
  const top = Math.max(1, peak);
  const x = (i: number) => (n <= 1 ? W : (i / (n - 1)) * W);
  const y = (v: number) => H - 2 - (v / top) * (H - 8);
  const points = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const start = Date.parse(t.start);
  const minute = (i: number) =>
    new Date(start + i * 60_000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const svg = s(
    "svg",
    {
      class: "sparkline",
      viewBox: `0 0 ${W} ${H}`,
      preserveAspectRatio: "none",
      role: "img",
      "aria-label": `${total} episodes ended in the last ${n} minutes, at most ${peak} in one minute`,
      "data-total": total,
      "data-points": n,
    },
    s("line", { class: "spark-base", x1: 0, y1: H - 2, x2: W, y2: H - 2 }),
    s("path", { class: "spark-area", d: n ? `M0,${H - 2} L${points.replace(/ /g, " L")} L${W},${H - 2} Z` : "" }),
    s("polyline", { class: "spark-line", points }),
    ...values.map((v, i) =>
      s(
        "rect",
        { class: "spark-hit", x: Math.max(0, x(i) - W / n / 2), y: 0, width: W / n, height: H },
        s("title", null, `${minute(i)}: ${v} ended`),
      ),
    ),
  );
  return h(
    "div.card.throughput",
    { id: "throughput" },
    h("div.card-title", null, h("span", null, "Throughput"), h("span.muted", null, "ended episodes / min")),
    h(
      "dl.hist-stats.spark-stats",
      null,
      [
        ["last hour", String(total)],
        ["peak", `${peak}/min`],
        ["this minute", String(values.at(-1) ?? 0)],
      ].map(([k, v]) => h("div", { "data-stat": k }, h("dt", null, k), h("dd", null, v))),
    ),
    h("div.spark-box", null, svg),
    h("div.spark-axis", null, h("span", null, `${n} min ago`), h("span", null, "now")),
  );
}

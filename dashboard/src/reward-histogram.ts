// One reward key's distribution over a run: count, mean, min, max and a bar per histogram bin
// (20 bins over [0, 1], plus "below 0" and "above 1" bars when any score falls outside), read
// without hovering: a count axis with values and grid lines on the left, the bins' edges under
// them (every fifth edge), and the axes named with their units. Plain DOM bars: each carries its
// bin and count, so its tooltip (and a test) can read them exactly.

import type { RunAggregates } from "../../src/protocol/index.js";
import { fmtNumber, h, plural } from "./dom.js";

type RewardStats = RunAggregates["rewards"][string];

const score = (v: number | null) => (v === null ? "–" : fmtNumber(v));

/** Count ticks: a step of 1, 2 or 5 × 10^k giving at most 4 steps to a top at or above `peak`. */
export function countTicks(peak: number): number[] {
  let step = 1;
  for (let k = 1; ; k *= 10) {
    const s = [1, 2, 5].map((m) => m * k).find((x) => Math.ceil(peak / x) <= 4);
    if (s !== undefined) {
      step = s;
      break;
    }
  }
  const top = Math.max(1, Math.ceil(peak / step)) * step;
  return Array.from({ length: top / step + 1 }, (_, i) => i * step);
}

/** Every fifth edge is labelled under the bins (0, 0.25, 0.5, 0.75, 1 for 20 bins). */
const LABEL_EVERY = 5;

export function rewardHistogram(key: string, r: RewardStats): HTMLElement {
  const { edges, counts, below, above } = r.histogram;
  const peak = Math.max(0, below, above, ...counts);
  const ticks = countTicks(peak);
  const top = ticks.at(-1)!;
  const bar = (count: number, from: string, to: string, label: string, extra = "") =>
    h(
      `div.hist-bar${extra}` as "div",
      { "data-count": count, "data-from": from, "data-to": to, title: `${label}: ${plural(count, "episode")}` },
      h("div.hist-fill", { style: `height: ${count === 0 ? 0 : Math.max(1, (count / top) * 100)}%` }),
    );
  const bins = counts.map((c, i) => {
    const from = edges[i]!;
    const to = edges[i + 1]!;
    return bar(
      c,
      String(from),
      String(to),
      `${fmtNumber(from)} – ${fmtNumber(to)}${i === counts.length - 1 ? " (incl.)" : ""}`,
    );
  });
  const at = (count: number) => `${(count / top) * 100}%`;
  const xTicks = edges.flatMap((e, i) => (i % LABEL_EVERY === 0 || i === edges.length - 1 ? [[i, e] as const] : []));
  const width = edges.length > 1 ? edges[1]! - edges[0]! : 0;
  return h(
    "div.card.hist",
    { "data-key": key, "data-count": r.count },
    h(
      "div.card-title",
      null,
      h("span.hist-key", { title: key }, key),
      h("span.hist-peak.muted", { title: "most episodes in one bin" }, `max bin ${peak}`),
    ),
    h(
      "dl.hist-stats",
      null,
      [
        ["count", String(r.count)],
        ["mean", score(r.mean)],
        ["min", score(r.min)],
        ["max", score(r.max)],
      ].map(([k, v]) => h("div", { "data-stat": k }, h("dt", null, k), h("dd", null, v))),
    ),
    h(
      "div.hist-chart",
      null,
      h("div.hist-ylabel", null, "episodes"),
      h(
        "div.hist-yaxis",
        { "data-y-ticks": JSON.stringify(ticks) },
        ticks.map((t) => h("span.hist-ytick", { style: `bottom: ${at(t)}` }, t.toLocaleString("en-US"))),
      ),
      h(
        "div.hist-plot",
        {
          role: "img",
          "aria-label": `${key}: ${plural(r.count, "score")} over ${counts.length} bins from ${edges[0]} to ${edges.at(-1)}, at most ${peak} in one`,
        },
        h(
          "div.hist-grid",
          { "aria-hidden": "true" },
          ticks.map((t) => h("span", { style: `bottom: ${at(t)}` })),
        ),
        below > 0 ? bar(below, "-Infinity", String(edges[0]), `below ${edges[0]}`, ".outside") : null,
        h("div.hist-bins", null, bins),
        above > 0 ? bar(above, String(edges.at(-1)), "Infinity", `above ${edges.at(-1)}`, ".outside") : null,
      ),
      h("div.hist-corner"),
      h("div.hist-corner"),
      h(
        "div.hist-axis",
        { "data-x-ticks": JSON.stringify(xTicks.map(([, e]) => e)) },
        below > 0 ? h("span.axis-out", null, `<${edges[0]}`) : null,
        h(
          "span.axis-bins",
          null,
          xTicks.map(([i, e]) =>
            h("span.hist-xtick", { style: `left: ${(i / (edges.length - 1)) * 100}%` }, fmtNumber(e)),
          ),
        ),
        above > 0 ? h("span.axis-out", null, `>${edges.at(-1)}`) : null,
      ),
    ),
    h("div.hist-xlabel.muted", null, `score (${counts.length} bins of ${fmtNumber(width)})`),
  );
}

// One reward key's distribution over a run: count, mean, min, max and a bar per histogram bin
// (20 bins over [0, 1], plus "below 0" and "above 1" bars when any score falls outside). Plain
// DOM bars: each carries its bin and count, so its tooltip (and a test) can read them.

import type { RunAggregates } from "../../src/protocol/index.js";
import { fmtNumber, h, plural } from "./dom.js";

type RewardStats = RunAggregates["rewards"][string];

const score = (v: number | null) => (v === null ? "–" : fmtNumber(v));

export function rewardHistogram(key: string, r: RewardStats): HTMLElement {
  const { edges, counts, below, above } = r.histogram;
  const peak = Math.max(1, below, above, ...counts);
  const bar = (count: number, from: string, to: string, label: string, extra = "") =>
    h(
      `div.hist-bar${extra}` as "div",
      { "data-count": count, "data-from": from, "data-to": to, title: `${label}: ${plural(count, "episode")}` },
      h("div.hist-fill", { style: `height: ${count === 0 ? 0 : Math.max(2, (count / peak) * 100)}%` }),
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
      "div.hist-plot",
      {
        role: "img",
        "aria-label": `${key}: ${plural(r.count, "score")} over ${counts.length} bins from ${edges[0]} to ${edges.at(-1)}`,
      },
      below > 0 ? bar(below, "-Infinity", String(edges[0]), `below ${edges[0]}`, ".outside") : null,
      h("div.hist-bins", null, bins),
      above > 0 ? bar(above, String(edges.at(-1)), "Infinity", `above ${edges.at(-1)}`, ".outside") : null,
    ),
    h(
      "div.hist-axis",
      null,
      below > 0 ? h("span.axis-out", null, `<${edges[0]}`) : null,
      h(
        "span.axis-bins",
        null,
        h("span", null, String(edges[0])),
        h("span", null, fmtNumber(edges[Math.floor(edges.length / 2)]!)),
        h("span", null, String(edges.at(-1))),
      ),
      above > 0 ? h("span.axis-out", null, `>${edges.at(-1)}`) : null,
    ),
  );
}

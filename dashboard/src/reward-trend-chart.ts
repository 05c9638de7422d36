// The run's mean reward per minute over the last hour, one step line per reward key (the
// aggregates' `reward_trend`: finished episodes by the minute they ended; step-path.ts leaves a
// minute with none empty). Each minute has an invisible column whose tooltip lists the keys' means
// and counts. Drawn beside the throughput sparkline.

import type { RewardTrend } from "../../src/protocol/index.js";
import { fmtNumber, h, s } from "./dom.js";
import { stepPath } from "./step-path.js";

const W = 600;
const H = 64;
/** Keys drawn (the first by name); more would not be told apart. */
const MAX_KEYS = 4;

const round = (v: number) => fmtNumber(Math.round(v * 1000) / 1000);

/** A key's mean over the hour: its minutes' means weighted by their counts (null: none finished). */
function hourMean(k: RewardTrend["keys"][string]): number | null {
  let n = 0;
  let sum = 0;
  k.count.forEach((c, i) => {
    n += c;
    sum += c * (k.mean[i] ?? 0);
  });
  return n ? sum / n : null;
}

export function rewardTrendChart(t: RewardTrend): HTMLElement {
  const keys = Object.keys(t.keys).slice(0, MAX_KEYS);
  const n = Object.values(t.keys)[0]?.count.length ?? 60;
  const all = keys.flatMap((k) => t.keys[k]!.mean.filter((v): v is number => v !== null));
  const [lo, hi] = [Math.min(0, ...all), Math.max(1, ...all)];
  const y = (v: number) => H - 2 - ((v - lo) / (hi - lo)) * (H - 8);
  const start = Date.parse(t.start);
  const minute = (i: number) =>
    new Date(start + i * 60_000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const tip = (i: number) => {
    const shown = keys.filter((k) => t.keys[k]!.count[i]! > 0);
    return `${minute(i)}: ${shown.length ? shown.map((k) => `${k} ${round(t.keys[k]!.mean[i]!)} (${t.keys[k]!.count[i]} finished)`).join(", ") : "none finished"}`;
  };
  const svg = s(
    "svg",
    {
      class: "trendline",
      viewBox: `0 0 ${W} ${H}`,
      preserveAspectRatio: "none",
      role: "img",
      "aria-label": `mean reward of the finished episodes per minute over the last ${n} minutes: ${keys.join(", ") || "none yet"}`,
      "data-keys": keys.join(","),
    },
    s("line", { class: "spark-base", x1: 0, y1: y(lo), x2: W, y2: y(lo) }),
    ...keys.map((k, i) =>
      s("path", {
        class: `trend-line tk-${i}`,
        d: stepPath(t.keys[k]!.mean, W, y),
        "data-key": k,
        "data-points": t.keys[k]!.mean.filter((v) => v !== null).length,
      }),
    ),
    ...Array.from({ length: n }, (_, i) =>
      s("rect", { class: "spark-hit", x: (i / n) * W, y: 0, width: W / n, height: H }, s("title", null, tip(i))),
    ),
  );
  return h(
    "div.card.reward-trend",
    { id: "reward-trend" },
    h("div.card-title", null, h("span", null, "Reward trend"), h("span.muted", null, "mean of finished / min")),
    keys.length
      ? h(
          "dl.hist-stats.spark-stats",
          null,
          keys.map((k, i) => {
            const m = hourMean(t.keys[k]!);
            return h(
              "div",
              { "data-stat": k, "data-mean": m ?? "" },
              h(`dt.tk-key.tk-${i}` as "dt", null, k),
              h("dd", { title: "over the last hour" }, m === null ? "–" : round(m)),
            );
          }),
        )
      : h("p.muted.spark-stats", null, "No episode finished in the last hour."),
    h("div.spark-box", null, svg),
    h(
      "div.spark-axis",
      null,
      h("span", null, `${n} min ago`),
      h("span", null, `${round(lo)} – ${round(hi)}`),
      h("span", null, "now"),
    ),
  );
}

// A run's counters (from its aggregates): episodes by status, how fast they end, and how big they
// are; the zero-variance tile carries its trend over the last hour. Tiles keep their elements; an
// update only rewrites the numbers (and redraws that small chart).

import type { RunAggregates } from "../../src/protocol/index.js";
import { clear, h } from "./dom.js";
import { TURNS_HINT } from "./turns.js";
import { zeroVarianceTrend } from "./zero-variance-spark.js";

type StatKey =
  | "episodes"
  | "live"
  | "finished"
  | "failed"
  | "finish_refused"
  | "per_minute"
  | "mean_turns"
  | "mean_tokens"
  | "zero_variance";

// Labels short enough for one line in a tile at 1280 px (they wrap rather than cut); the hint says it whole.
const TILES: Array<{ key: StatKey; label: string; hint: string }> = [
  { key: "episodes", label: "episodes", hint: "episodes in the run" },
  { key: "live", label: "live", hint: "still streaming" },
  { key: "finished", label: "finished", hint: "ended with a reply" },
  { key: "failed", label: "failed", hint: "ended with a failure reply" },
  {
    key: "finish_refused",
    label: "refused",
    hint: "finish refused: the reply disagreed with the assembled episode; waiting for a corrected one",
  },
  { key: "per_minute", label: "ended / min", hint: "episodes ended per minute, over the last 10 minutes" },
  { key: "mean_turns", label: "mean turns", hint: `${TURNS_HINT}, per episode` },
  { key: "mean_tokens", label: "mean tokens", hint: "total tokens per episode, all traces" },
  {
    key: "zero_variance",
    label: "zero var.",
    hint: "finished rollout groups whose rewards are all equal (their advantages are all 0: no learning signal), over the finished groups",
  },
];

/** A share as a percentage with one decimal ("33.3%"). */
export const percent = (v: number) => `${(Math.round(v * 1000) / 10).toLocaleString("en-US")}%`;

const oneDecimal = (v: number) => (Math.round(v * 10) / 10).toLocaleString("en-US");

export interface RunStats {
  el: HTMLElement;
  update(a: RunAggregates): void;
}

export function runStats(): RunStats {
  const values = new Map<StatKey, { value: HTMLElement; sub: HTMLElement; tile: HTMLElement }>();
  const zeroTrend = h("div.stat-spark", { id: "zero-variance-trend" });
  const el = h(
    "section.stats",
    { id: "run-stats", "aria-label": "run counters" },
    TILES.map(({ key, label, hint }) => {
      const value = h("div.stat-value", null, "–");
      const sub = h("div.stat-sub");
      const tile = h(
        `div.stat.st-${key}` as "div",
        { "data-stat": key, title: hint },
        h("div.stat-label", null, label),
        value,
        sub,
        key === "zero_variance" ? zeroTrend : null,
      );
      values.set(key, { value, sub, tile });
      return tile;
    }),
  );
  return {
    el,
    update(a) {
      const share = (n: number) => (a.episodes > 0 ? `${Math.round((n / a.episodes) * 100)}%` : "");
      const set = (key: StatKey, text: string, raw: number | null, sub = "") => {
        const v = values.get(key)!;
        v.value.textContent = text;
        v.tile.dataset.value = raw === null ? "" : String(raw);
        v.tile.classList.toggle("zero", raw === 0);
        v.sub.textContent = sub;
      };
      set("episodes", a.episodes.toLocaleString("en-US"), a.episodes);
      for (const k of ["live", "finished", "failed", "finish_refused"] as const)
        set(k, a.counts[k].toLocaleString("en-US"), a.counts[k], share(a.counts[k]));
      set("per_minute", oneDecimal(a.episodes_per_minute), a.episodes_per_minute, "last 10 min");
      set(
        "mean_turns",
        a.mean_turns === null ? "–" : oneDecimal(a.mean_turns),
        a.mean_turns,
        "assistant nodes / episode",
      );
      set("mean_tokens", a.mean_tokens === null ? "–" : oneDecimal(a.mean_tokens), a.mean_tokens, "tokens / episode");
      const g = a.groups;
      const zv = g?.zero_variance_share ?? null;
      set(
        "zero_variance",
        zv === null ? "–" : percent(zv),
        zv,
        g && g.finished > 0
          ? `${g.zero_variance.toLocaleString("en-US")} of ${g.finished.toLocaleString("en-US")} finished group${g.finished === 1 ? "" : "s"}`
          : "no finished group yet",
      );
      clear(zeroTrend);
      if (g?.trend) zeroTrend.append(zeroVarianceTrend(g.trend));
    },
  };
}

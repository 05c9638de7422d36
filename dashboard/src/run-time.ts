// The x axis of the run page's run-time charts (throughput-chart.ts, reward-trend-chart.ts): minutes since
// the run's first rollout (its first row in the index), written h:mm, ticks on whole minutes, hours and
// days, from 0, so a young run fills the chart instead of a corner of the last hour.

import type { RunTimeline } from "../../src/protocol/index.js";
import { h } from "./dom.js";
import { Plot, type PlotSpec } from "./plot.js";

/** Tick increments in minutes: they read as times (never 0:50, 1:40). */
const INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 7200, 14_400, 43_200];

/** Minutes of run time as h:mm ("0:05", "1:30", "26:00"). */
export function runTimeText(minutes: number): string {
  const m = Math.round(minutes);
  const sign = m < 0 ? "−" : "";
  const a = Math.abs(m);
  return `${sign}${Math.floor(a / 60)}:${String(a % 60).padStart(2, "0")}`;
}

/** Points a run-time chart always has room for: a young run's first minutes spread over the chart. */
const LEAST_POINTS = 5;

/** What the run-time charts share: the x axis from 0, at least LEAST_POINTS points wide, its label with the unit, and the legend's x. */
export function runTimeAxis(t: RunTimeline): Pick<PlotSpec, "xLabel" | "xFormat" | "xIncrs" | "xMin" | "xSpan"> {
  return {
    xLabel: "run time (h:mm since the first rollout)",
    xFormat: runTimeText,
    xIncrs: INCRS,
    xMin: 0,
    xSpan: LEAST_POINTS * t.minutes,
  };
}

/** Each point's x: the run time its minutes start at. */
export const pointX = (t: RunTimeline, i: number) => i * t.minutes;

/** What one point is, for a card's sub-title ("per minute", "per 5 minutes"). */
export const perPoint = (t: RunTimeline) => (t.minutes === 1 ? "per minute" : `per ${t.minutes} minutes`);

export interface RunTimeChart {
  el: HTMLElement;
  update(t: RunTimeline | undefined): void;
  destroy(): void;
}

/**
 * A run-time chart's card (`id` names the card, its class and its plot): the title, a sub-title and stats
 * in text, a note when there is nothing to plot, and the plot. The page pushes the aggregates often;
 * `draw` runs only when the timeline changed, fills the text and returns what to plot (null: the note).
 */
export function runTimeChart(
  id: string,
  title: string,
  empty: string,
  draw: (
    t: RunTimeline | undefined,
    card: { el: HTMLElement; sub: HTMLElement; stats: HTMLElement },
  ) => PlotSpec | null,
): RunTimeChart {
  const plot = new Plot(id);
  const sub = h("span.muted");
  const stats = h("dl.hist-stats");
  const note = h("p.muted.plot-empty", { hidden: true }, empty);
  const el = h(
    `div.card.${id}` as "div",
    { id },
    h("div.card-title", null, h("span", null, title), sub),
    stats,
    note,
    plot.el,
  );
  let drawn: string | null = null;
  return {
    el,
    update(t) {
      const now = JSON.stringify(t ?? null);
      if (now === drawn) return;
      drawn = now;
      const spec = draw(t, { el, sub, stats });
      note.hidden = spec !== null;
      plot.el.hidden = spec === null;
      if (spec) plot.update(spec);
    },
    destroy() {
      plot.destroy();
    },
  };
}

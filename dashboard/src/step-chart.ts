// A chart over training steps (x: the trainer's step, y: a value per step): one line per series
// (a reward key of train or eval rollouts, or a kind's zero-variance share), a marker per step
// that has a value (a step of the series without one, e.g. nothing finished yet, leaves a gap
// rather than reading as 0; steps the series has no row for, e.g. between evals, are joined), and per step an invisible
// column whose tooltip lists every series there and which links
// to the run's list filtered by that step. Train lines are solid, eval lines dashed. Markers are
// zero-length round-capped strokes, so they stay round when the SVG stretches to its box.
import { fmtNumber, s } from "./dom.js";

const W = 600;
const H = 120;
/** Room above and below the lines, in user units. */
const PAD = 8;

export interface StepSeries {
  /** What the series is, as its legend and tooltips say it ("correct · train"). */
  label: string;
  /** A key the page and tests find it by (a reward key, or "zero_variance"). */
  key: string;
  kind: string;
  /** Colour slot (tk-0 … tk-3). */
  tone: number;
  /** step → value (steps missing or null: no value there). */
  values: ReadonlyMap<number, number | null>;
}

export interface StepChartOptions {
  /** The y range (widened to hold every value). */
  domain: [number, number];
  /** How a value is written in tooltips. */
  format(v: number): string;
  /** Where a step's column links (the run's list filtered by it). */
  stepHref(step: number): string;
  label: string;
}

export function stepChart(series: StepSeries[], o: StepChartOptions): SVGSVGElement {
  const steps = [...new Set(series.flatMap((x) => [...x.values.keys()]))].sort((a, b) => a - b);
  const all = series.flatMap((x) => [...x.values.values()].filter((v): v is number => v !== null));
  const lo = Math.min(o.domain[0], ...all);
  const hi = Math.max(o.domain[1], ...all);
  const first = steps[0] ?? 0;
  const last = steps.at(-1) ?? 0;
  // one step in the middle; else the first at the left edge, the last at the right (inset by a column's half)
  const col = steps.length > 1 ? W / steps.length : W;
  const x = (step: number) => (last === first ? W / 2 : col / 2 + ((step - first) / (last - first)) * (W - col));
  const y = (v: number) => H - PAD - ((v - lo) / (hi - lo || 1)) * (H - 2 * PAD);
  const lines = series.map((sr) =>
    s("path", {
      class: `step-line tk-${sr.tone}${sr.kind === "eval" ? " eval" : ""}`,
      d: linePath(sr.values, x, y),
      "data-key": sr.key,
      "data-kind": sr.kind,
    }),
  );
  const markers = series.flatMap((sr) =>
    steps.flatMap((st) => {
      const v = sr.values.get(st);
      if (v === null || v === undefined) return [];
      const [px, py] = [x(st).toFixed(1), y(v).toFixed(1)];
      return [
        s("path", {
          class: `step-dot tk-${sr.tone}${sr.kind === "eval" ? " eval" : ""}`,
          d: `M${px},${py} l0,0`,
          "data-key": sr.key,
          "data-kind": sr.kind,
          "data-step": st,
          "data-value": v,
        }),
      ];
    }),
  );
  const tip = (st: number) => {
    const parts = series.flatMap((sr) => {
      const v = sr.values.get(st);
      return v === null || v === undefined ? [] : [`${sr.label} ${o.format(v)}`];
    });
    return `step ${st}: ${parts.length ? parts.join(", ") : "nothing finished"} (click: this step's episodes)`;
  };
  const hits = steps.map((st) =>
    s(
      "a",
      { href: o.stepHref(st), "data-nav": "", "data-step": st, class: "step-hit-link" },
      s(
        "rect",
        { class: "spark-hit", x: Math.max(0, x(st) - col / 2), y: 0, width: Math.min(col, W), height: H },
        s("title", null, tip(st)),
      ),
    ),
  );
  return s(
    "svg",
    {
      class: "step-chart",
      viewBox: `0 0 ${W} ${H}`,
      preserveAspectRatio: "none",
      role: "img",
      "aria-label": `${o.label}, steps ${first}–${last}`,
      "data-steps": steps.length,
      "data-lo": lo,
      "data-hi": hi,
    },
    s("line", { class: "spark-base", x1: 0, y1: y(lo), x2: W, y2: y(lo) }),
    ...(lo < 0 && hi > 0 ? [s("line", { class: "step-zero", x1: 0, y1: y(0), x2: W, y2: y(0) })] : []),
    ...lines,
    ...markers,
    ...hits,
  );
}

/**
 * The series' values joined step to step (an eval every few steps is one line); a step of its own without a value
 * breaks it.
 */
function linePath(
  values: ReadonlyMap<number, number | null>,
  x: (s: number) => number,
  y: (v: number) => number,
): string {
  const parts: string[] = [];
  let joined = false;
  for (const st of [...values.keys()].sort((a, b) => a - b)) {
    const v = values.get(st);
    if (v === null || v === undefined) {
      joined = false;
      continue;
    }
    parts.push(`${joined ? "L" : "M"}${x(st).toFixed(1)},${y(v).toFixed(1)}`);
    joined = true;
  }
  return parts.join(" ");
}

/** Three values rounded, for the charts' tooltips and stats. */
export const round3 = (v: number) => fmtNumber(Math.round(v * 1000) / 1000);

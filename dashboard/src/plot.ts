// A chart a researcher reads without hovering: x and y axes with tick values and a label each (units in
// the label), a legend naming every series, a marker per value, and a crosshair whose position the legend
// reads out with exact values. Drawn by uPlot (MIT, canvas, ~50 KB minified / 22 KB gzipped): small and
// fast enough to redraw live, and loaded only when a chart is first drawn (its own chunk), so pages without
// charts never fetch it. Its stylesheet (2 KB) is in the main bundle.
//
// What is plotted is also written on the chart's box (`data-x`, `data-series`, and the tick labels uPlot
// drew, `data-x-ticks`, `data-y-ticks`), so a test can read the numbers back. A series' points are the
// x values it has a row for: a null there is a gap (nothing to show yet), an x it has no row for is
// joined across (an eval every few steps is one line).
import type uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h } from "./dom.js";

export interface PlotSeries {
  /** As the legend names it ("reward · train"). */
  label: string;
  /** What tests and styles find it by ("reward", "p90", "truncated"), and its kind ("train", "eval"). */
  key: string;
  kind: string;
  /** Colour slot (the tk-0 … tk-3 colours of rewards.css). */
  tone: number;
  /** Dashed (eval rollouts). */
  dashed?: boolean;
  /** x → value (null: a gap). */
  points: ReadonlyMap<number, number | null>;
  /** ± this around the value (e.g. the std of the reward), in the legend as "± v", shaded unless dashed. */
  spread?: ReadonlyMap<number, number | null>;
}

export interface PlotSpec {
  /** Axis labels, with units ("training step", "output tokens per rollout"). */
  xLabel: string;
  yLabel: string;
  series: PlotSeries[];
  /** The y range always shown (widened to hold every value). */
  yMin?: number;
  yMax?: number;
  /** How a y value is written on the axis and in the legend. */
  format(v: number): string;
  /** How an x value is written (default: as is). */
  xFormat?(v: number): string;
  /** Only whole x ticks (steps). */
  integerX?: boolean;
  /** The x tick increments to choose from (e.g. minutes that read as times: 1, 5, 15, 60, …). */
  xIncrs?: number[];
  /** The x range always starts here or before (run time 0). */
  xMin?: number;
  /** The x range is at least this wide from its start (a young run's first minutes fill the chart, not a dot on an axis uPlot stretched). */
  xSpan?: number;
  /** A click on the plot picks the nearest x that has a value (e.g. opens that step's episodes). */
  onPick?(x: number): void;
}

const HEIGHT = 210;
/** Whole-number tick increments (steps), and any for minutes and values. */
const WHOLE = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10_000, 20_000, 50_000, 100_000];

let lib: Promise<typeof uPlot> | null = null;
const loadPlot = () => (lib ??= import("uplot").then((m) => m.default));

/** A tone's colour, as the page's stylesheet sets it (`--tk` of `.tk-N`). */
function toneColour(tone: number): string {
  const probe = h(`span.tk-${tone % 4}` as "span", { hidden: true });
  document.body.append(probe);
  const c = getComputedStyle(probe).getPropertyValue("--tk").trim() || "#2563eb";
  probe.remove();
  return c;
}

/** The series laid out on one sorted x: its values (undefined where it has no row), and the band's edges. */
function aligned(spec: PlotSpec): { xs: number[]; data: Array<Array<number | null | undefined>> } {
  const xs = [...new Set(spec.series.flatMap((s) => [...s.points.keys()]))].sort((a, b) => a - b);
  const data: Array<Array<number | null | undefined>> = [];
  for (const s of spec.series) {
    data.push(xs.map((x) => s.points.get(x)));
    if (s.spread && !s.dashed) {
      const edge = (sign: number) =>
        xs.map((x) => {
          const v = s.points.get(x);
          const d = s.spread!.get(x);
          return v === undefined ? undefined : v === null || d === null || d === undefined ? null : v + sign * d;
        });
      data.push(edge(1), edge(-1));
    }
  }
  return { xs, data };
}

export class Plot {
  readonly el: HTMLElement;
  private u: uPlot | null = null;
  private spec: PlotSpec | null = null;
  private readonly resize: ResizeObserver;
  private width = 0;
  private stopped = false;

  constructor(name: string) {
    this.el = h("div.plot", { "data-plot": name });
    this.resize = new ResizeObserver(() => {
      const w = Math.floor(this.el.clientWidth);
      // 0 while the page takes the card out to redraw around it: keep the canvas as it is
      if (w === this.width || w === 0) return;
      this.width = w;
      if (this.u) this.u.setSize({ width: w, height: HEIGHT });
      else void this.draw();
    });
    this.resize.observe(this.el);
  }

  /** Draw `spec` (the numbers are on the box at once; the canvas once uPlot is loaded and the box laid out). */
  update(spec: PlotSpec): void {
    this.spec = spec;
    const { xs } = aligned(spec);
    this.el.dataset.x = JSON.stringify(xs);
    this.el.dataset.xLabel = spec.xLabel;
    this.el.dataset.yLabel = spec.yLabel;
    this.el.dataset.series = JSON.stringify(
      spec.series.map((s) => ({
        key: s.key,
        kind: s.kind,
        label: s.label,
        dashed: s.dashed === true,
        tone: s.tone,
        points: [...s.points].sort((a, b) => a[0] - b[0]),
        ...(s.spread ? { spread: [...s.spread].sort((a, b) => a[0] - b[0]) } : {}),
      })),
    );
    void this.draw();
  }

  destroy(): void {
    this.stopped = true;
    this.resize.disconnect();
    this.u?.destroy();
    this.u = null;
  }

  private async draw(): Promise<void> {
    const UPlot = await loadPlot();
    const spec = this.spec;
    if (this.stopped || !spec || this.width === 0) return;
    this.u?.destroy();
    const { xs, data } = aligned(spec);
    const series: uPlot.Series[] = [{ label: spec.xLabel, value: (_u, v) => (v == null ? "–" : xText(spec, v)) }];
    const bands: uPlot.Band[] = [];
    for (const s of spec.series) {
      const stroke = toneColour(s.tone);
      const at = series.length;
      series.push({
        label: s.label,
        stroke,
        width: 1.75,
        dash: s.dashed ? [6, 4] : undefined,
        points: { show: true, size: s.dashed ? 5 : 6, fill: stroke },
        value: (u, v, _i, idx) => {
          if (v == null || idx === null) return "–";
          const d = s.spread?.get(xs[idx]!);
          const text = d == null ? spec.format(v) : `${spec.format(v)} ± ${spec.format(d)}`;
          // a series without a value at the legend's x reads its nearest (off the plot: its latest): say where
          return idx !== (u.cursor.idx ?? xs.length - 1)
            ? `${text} (${spec.integerX ? "step" : "at"} ${xText(spec, xs[idx]!)})`
            : text;
        },
      });
      if (s.spread && !s.dashed) {
        const edge: uPlot.Series = { label: "", stroke: "transparent", points: { show: false }, class: "plot-edge" };
        series.push({ ...edge }, { ...edge });
        bands.push({ series: [at + 1, at + 2], fill: `${stroke}22` });
      }
    }
    const values = [...spec.series.flatMap((s) => [...s.points.values()]), ...data.flat()].filter(
      (v): v is number => typeof v === "number",
    );
    const lo = Math.min(spec.yMin ?? Number.POSITIVE_INFINITY, ...values);
    const hi = Math.max(spec.yMax ?? Number.NEGATIVE_INFINITY, ...values);
    const yRange: [number, number] =
      Number.isFinite(lo) && Number.isFinite(hi) ? [lo, hi === lo ? lo + 1 : hi] : [0, 1];
    const record = (name: "xTicks" | "yTicks", labels: string[]) => {
      this.el.dataset[name] = JSON.stringify(labels);
      return labels;
    };
    const axis = { stroke: "#4b5563", grid: { stroke: "#e3e6ea", width: 1 }, ticks: { stroke: "#d5d9df", width: 1 } };
    const opts: uPlot.Options = {
      width: this.width,
      height: HEIGHT,
      series,
      bands,
      legend: { live: true },
      cursor: { points: { size: 8 }, drag: { x: false, y: false } },
      scales: {
        // from the x values themselves: uPlot pads a lone value's range (0 becomes 0..100) before asking
        x: {
          time: false,
          range: (_u, a, b) => (xs.length > 0 ? xRange(spec, xs[0]!, xs.at(-1)!) : xRange(spec, a, b)),
        },
        y: { range: () => yRange },
      },
      axes: [
        {
          ...axis,
          label: spec.xLabel,
          labelSize: 16,
          size: 34,
          space: 28,
          incrs: spec.xIncrs ?? (spec.integerX ? WHOLE : undefined),
          values: (_u, splits) =>
            record(
              "xTicks",
              splits.map((v) => xText(spec, v)),
            ),
        },
        {
          ...axis,
          label: spec.yLabel,
          labelSize: 16,
          size: 50,
          space: 24,
          values: (_u, splits) =>
            record(
              "yTicks",
              splits.map((v) => spec.format(v)),
            ),
        },
      ],
      hooks: {
        draw: [() => (this.el.dataset.drawn = String(Number(this.el.dataset.drawn ?? 0) + 1))],
        // off the plot the legend reads the latest x, so its numbers show without hovering
        setCursor: [(u) => latest(u, xs)],
      },
    };
    this.u = new UPlot(opts, [xs, ...data] as uPlot.AlignedData, this.el);
    latest(this.u, xs);
    if (spec.onPick) this.u.over.addEventListener("click", (e) => this.pick(spec, xs, e));
  }

  /** The x nearest the click (read off the event: uPlot's cursor may lag a layout change), if a series has a value there. */
  private pick(spec: PlotSpec, xs: number[], e: MouseEvent): void {
    const u = this.u;
    if (!u || xs.length === 0) return;
    const i = u.posToIdx(e.clientX - u.over.getBoundingClientRect().left);
    if (i < 0 || i >= xs.length) return;
    const x = xs[i]!;
    if (spec.series.some((s) => typeof s.points.get(x) === "number")) spec.onPick?.(x);
  }
}

/** Off the plot, the legend reads each series at its latest x with a value (the x series at the last). */
function latest(u: uPlot, xs: number[]): void {
  if (u.cursor.idx !== null && u.cursor.idx !== undefined) return;
  const idxs = u.data.map((col, i) => {
    if (i === 0) return xs.length - 1;
    for (let j = col.length - 1; j >= 0; j--) if (typeof col[j] === "number") return j;
    return null;
  });
  u.setLegend({ idxs }, false);
}

/** The x range: the values', from `xMin` if set; one x alone gets room on both sides (or after xMin). */
function xRange(spec: PlotSpec, a: number, b: number): [number, number] {
  const lo = spec.xMin === undefined ? a : Math.min(spec.xMin, a);
  if (spec.xSpan !== undefined) return [lo, Math.max(b, lo + spec.xSpan)];
  if (lo !== b) return [lo, b];
  return spec.xMin === undefined ? [a - 1, b + 1] : [lo, b + 1];
}

const xText = (spec: PlotSpec, v: number) => (spec.xFormat ? spec.xFormat(v) : String(v));

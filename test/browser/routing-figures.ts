// The episode page's routing figures against a golden case: the heatmap's colour key and the
// per-layer expert load of every routed node, as the page shows them, compared with figures
// counted here, the plain way, from the case's expected episode (the reference's own assembly,
// with every routing repair applied). The page's numbers come through the relay, the watcher
// and the dashboard's code; these come from none of them.
import { decode } from "@msgpack/msgpack";
import type { Page } from "playwright-core";
import { expect } from "vitest";
import type { GoldenCase } from "../../tools/conformance/case-format.js";

interface Nd {
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

interface Expected {
  tokens: number;
  k: number;
  /** Cells (token × layer) per top-1 expert: what the heatmap paints, when it is not sampled. */
  top1: Map<number, number>;
  layers: Array<{
    used: number;
    busiest: number;
    count: number;
    routings: number;
    share: number;
    maxOverMean: number;
    cv: number;
  }>;
}

/** `${trace}\n${node}` → the figures of each routed node of the case's episode. */
export function expectedRouting(c: GoldenCase): Map<string, Expected> {
  const episode = decode(c.episode!) as { traces: Array<{ id: string; nodes: Array<{ routed_experts: Nd | null }> }> };
  const out = new Map<string, Expected>();
  for (const t of episode.traces) {
    t.nodes.forEach((n, i) => {
      if (n.routed_experts) out.set(`${t.id}\n${i}`, figures(n.routed_experts));
    });
  }
  return out;
}

function figures(nd: Nd): Expected {
  const [tokens = 0, layers = 0, k = 1] = nd.shape;
  const wide = nd.dtype === "uint16";
  const id = (t: number, l: number, j: number) => {
    const i = (t * layers * k + l * k + j) * (wide ? 2 : 1);
    return wide ? nd.data[i]! + 256 * nd.data[i + 1]! : nd.data[i]!;
  };
  const top1 = new Map<number, number>();
  const perLayer: Expected["layers"] = [];
  for (let l = 0; l < layers; l++) {
    const load = new Map<number, number>();
    for (let t = 0; t < tokens; t++) {
      top1.set(id(t, l, 0), (top1.get(id(t, l, 0)) ?? 0) + 1);
      for (let j = 0; j < k; j++) load.set(id(t, l, j), (load.get(id(t, l, j)) ?? 0) + 1);
    }
    const counts = [...load.values()];
    const routings = tokens * k;
    const mean = routings / load.size;
    const count = Math.max(...counts);
    const busiest = Math.min(...[...load].filter(([, n]) => n === count).map(([e]) => e));
    const cv = Math.sqrt(counts.reduce((s, n) => s + (n - mean) ** 2, 0) / counts.length) / mean;
    perLayer.push({
      used: load.size,
      busiest,
      count,
      routings,
      share: count / routings,
      maxOverMean: count / mean,
      cv,
    });
  }
  return { tokens, k, top1, layers: perLayer };
}

/** The page's share format: whole percents from 10% up, one decimal below. */
function percent(share: number): string {
  const p = share * 100;
  return `${p >= 9.95 || p === 0 ? Math.round(p) : p.toFixed(1)}%`;
}

/** What the page shows beside each heatmap. */
export function shownRouting(page: Page) {
  return page.evaluate(() =>
    [...(globalThis as any).document.querySelectorAll("li.turn")]
      .filter((li: any) => li.querySelector("canvas.heatmap"))
      .map((li: any) => {
        const legend = li.querySelector(".heatmap-legend");
        const cv = li.querySelector("canvas.heatmap");
        const d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
        const painted = new Set<string>();
        for (let i = 0; i < d.length; i += 4)
          if (d[i + 3] === 255) painted.add(`rgb(${d[i]}, ${d[i + 1]}, ${d[i + 2]})`);
        const details = li.querySelector("details.expert-load");
        return {
          key: `${li.closest("section.trace").dataset.trace}\n${li.dataset.node}`,
          legend: {
            min: Number(legend.dataset.min),
            max: Number(legend.dataset.max),
            experts: Number(legend.dataset.experts),
            cells: Number(legend.dataset.cells),
            minLabel: legend.querySelector(".legend-min").textContent as string,
            maxLabel: legend.querySelector(".legend-max").textContent as string,
            swatches: [...legend.querySelectorAll(".legend-swatch")].map((s: any) => ({
              expert: Number(s.dataset.expert),
              cells: Number(s.dataset.cells),
              colour: (globalThis as any).getComputedStyle(s).backgroundColor as string,
            })),
          },
          painted: [...painted],
          load: {
            open: details.open as boolean,
            summary: details.querySelector("summary").textContent as string,
            rows: [...details.querySelectorAll("tbody tr")].map((tr: any) => ({
              layer: Number(tr.dataset.layer),
              used: Number(tr.dataset.used),
              busiest: Number(tr.dataset.busiest),
              count: Number(tr.dataset.count),
              routings: Number(tr.dataset.routings),
              share: Number(tr.dataset.share),
              maxOverMean: Number(tr.dataset.maxOverMean),
              cv: Number(tr.dataset.cv),
              cells: [...tr.cells].map((td: any) => td.textContent as string),
            })),
          },
        };
      }),
  );
}

type Shown = Awaited<ReturnType<typeof shownRouting>>[number];

/**
 * Every routed node of `c` shows a colour key and a per-layer expert-load table whose figures are
 * the ones counted here. `sampled`: the heatmaps are too long to draw whole (≥ 120 tokens), so
 * the key covers the sampled columns only: its experts are some of the node's, its cells add up.
 */
export async function expectRoutingFigures(page: Page, c: GoldenCase, { sampled = false } = {}): Promise<void> {
  const expected = expectedRouting(c);
  const shown = await shownRouting(page);
  expect(shown.map((s) => s.key).sort()).toEqual([...expected.keys()].sort());
  for (const s of shown) {
    const want = expected.get(s.key)!;
    if (sampled) expectSampledLegend(s, want);
    else expectLegend(s, want);
    expectLoad(s, want);
  }
}

/** Drawn whole: one swatch per top-1 expert in id order, min and max labelled, each swatch's colour painted. */
function expectLegend(s: Shown, want: Expected): void {
  const ids = [...want.top1.keys()].sort((a, b) => a - b);
  expect(s.legend, s.key).toMatchObject({
    min: ids[0],
    max: ids.at(-1),
    experts: ids.length,
    cells: want.tokens * want.layers.length,
  });
  expect([s.legend.minLabel, s.legend.maxLabel]).toEqual([`#${ids[0]}`, `#${ids.at(-1)}`]);
  expect(s.legend.swatches.map((w) => [w.expert, w.cells])).toEqual(ids.map((e) => [e, want.top1.get(e)]));
  for (const w of s.legend.swatches)
    expect(s.painted, `${s.key}: expert ${w.expert}'s swatch colour is painted`).toContain(w.colour);
}

function expectSampledLegend(s: Shown, want: Expected): void {
  const ids = s.legend.swatches.map((w) => w.expert);
  expect(ids).toEqual([...ids].sort((a, b) => a - b));
  for (const id of ids) expect(want.top1.has(id), `${s.key}: expert ${id} is a top-1 expert of the node`).toBe(true);
  expect([s.legend.min, s.legend.max, s.legend.experts]).toEqual([ids[0], ids.at(-1), ids.length]);
  expect([s.legend.minLabel, s.legend.maxLabel]).toEqual([`#${ids[0]}`, `#${ids.at(-1)}`]);
  expect(s.legend.swatches.reduce((n, w) => n + w.cells, 0)).toBe(s.legend.cells);
}

/** The table: open up to 8 layers, one row per layer with the counted figures, numbers and text. */
function expectLoad(s: Shown, want: Expected): void {
  expect(s.load.open).toBe(want.layers.length <= 8);
  expect(s.load.summary).toContain(`${want.tokens} tokens × top-${want.k} = ${want.tokens * want.k} routings a layer`);
  expect(s.load.rows.map((r) => r.layer)).toEqual(want.layers.map((_, l) => l));
  s.load.rows.forEach((r, l) => {
    const w = want.layers[l]!;
    expect({ used: r.used, busiest: r.busiest, count: r.count, routings: r.routings }, `${s.key} layer ${l}`).toEqual({
      used: w.used,
      busiest: w.busiest,
      count: w.count,
      routings: w.routings,
    });
    expect(r.share).toBeCloseTo(w.share, 12);
    expect(r.maxOverMean).toBeCloseTo(w.maxOverMean, 12);
    expect(r.cv).toBeCloseTo(w.cv, 12);
    expect(r.cells).toEqual([
      String(l),
      String(w.used),
      `#${w.busiest}`,
      percent(w.share),
      w.maxOverMean.toFixed(2),
      w.cv.toFixed(2),
    ]);
  });
}

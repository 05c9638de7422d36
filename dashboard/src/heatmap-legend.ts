// The heatmap's colour key. The heatmap's colours are categorical (a hue per expert id, not a
// scale of counts), so the key is one swatch per expert drawn, in id order between the lowest
// and the highest id; each swatch says how many of the drawn cells it colours.

import { h, percent } from "./dom.js";
import { expertColour } from "./expert-colour.js";
import "./styles/routing.css";

/** `cells`: drawn cells per top-1 expert; `total`: all drawn cells. */
export function heatmapLegend(cells: ReadonlyMap<number, number>, total: number): HTMLElement {
  const ids = [...cells.keys()].sort((a, b) => a - b);
  const min = ids[0] ?? 0;
  const max = ids.at(-1) ?? 0;
  const swatches = ids.map((id) => {
    const n = cells.get(id)!;
    const [r, g, b] = expertColour(id);
    return h("span.legend-swatch", {
      style: `background: rgb(${r} ${g} ${b})`,
      "data-expert": id,
      "data-cells": n,
      title: `expert ${id}: ${n} of ${total} cells (${percent(n / total)})`,
    });
  });
  return h(
    "div.heatmap-legend",
    {
      "data-min": min,
      "data-max": max,
      "data-experts": ids.length,
      "data-cells": total,
      role: "group",
      "aria-label": `colour key: one colour per top-1 expert, ${ids.length} experts from ${min} to ${max}`,
    },
    h("span.legend-title", null, "top-1 expert"),
    h(
      "span.legend-scale",
      { style: `--n: ${ids.length}` },
      h("span.legend-end.legend-min", { title: "lowest expert id drawn" }, `#${min}`),
      h("span.legend-swatches", null, swatches),
      h("span.legend-end.legend-max", { title: "highest expert id drawn" }, `#${max}`),
    ),
  );
}

// A node's per-layer expert load (expert-load.ts) as a small table beside its heatmap: per MoE
// layer, the experts used, the busiest one and its share of the layer's routings (with a bar on
// a 0–100% scale), max/mean load and the coefficient of variation. Open at once for a few
// layers; a deep model's table starts folded, its summary line naming the most uneven layer.

import type { NdArray } from "../../src/protocol/index.js";
import { h, percent } from "./dom.js";
import { expertLoad, type LayerLoad } from "./expert-load.js";
import "./styles/routing.css";

const OPEN_UP_TO = 8; // layers shown without a click

// a node's array only changes by being replaced (a repair re-encodes it): keyed by identity, a
// redraw (a resize, a new turn elsewhere) does not count again
const loads = new WeakMap<NdArray, LayerLoad[]>();
function loadOf(a: NdArray): LayerLoad[] {
  let l = loads.get(a);
  if (!l) loads.set(a, (l = expertLoad(a)));
  return l;
}

export function expertLoadTable(a: NdArray): HTMLElement | null {
  const layers = loadOf(a);
  const first = layers[0];
  if (!first) return null;
  const [tokens = 0, , k = 1] = a.shape;
  const worst = layers.reduce((w, l) => (l.maxOverMean > w.maxOverMean ? l : w), first);
  return h(
    "details.expert-load",
    { open: layers.length <= OPEN_UP_TO, "data-layers": layers.length },
    h(
      "summary",
      null,
      h("strong", null, "Expert load per layer"),
      ` · ${tokens} tokens × top-${k} = ${first.routings} routings a layer · most uneven: layer ${worst.layer}, max/mean ${worst.maxOverMean.toFixed(2)}`,
    ),
    h("div.load-scroll", null, h("table.load-table", null, tableHead(), h("tbody", null, layers.map(layerRow)))),
    h(
      "p.load-note",
      null,
      "Each token's top-k choices all count. Mean and CV are over the experts a layer used: the model's expert count is not sent.",
    ),
  );
}

function tableHead(): HTMLElement {
  const col = (text: string, title?: string) => h("th", { scope: "col", title }, text);
  return h(
    "thead",
    null,
    h(
      "tr",
      null,
      col("layer"),
      col("used", "experts that got at least one of the layer's routings"),
      col("busiest", "the expert with the most routings"),
      col("share", "the busiest expert's share of the layer's routings"),
      col("max/mean", "the busiest expert's load over the mean load of the used experts (1 = even)"),
      col("CV", "coefficient of variation of the used experts' loads (0 = even)"),
    ),
  );
}

function layerRow(l: LayerLoad): HTMLElement {
  return h(
    "tr",
    {
      "data-layer": l.layer,
      "data-used": l.used,
      "data-busiest": l.busiest,
      "data-count": l.busiestCount,
      "data-routings": l.routings,
      "data-share": l.share,
      "data-max-over-mean": l.maxOverMean,
      "data-cv": l.cv,
    },
    h("td", null, String(l.layer)),
    h("td", null, String(l.used)),
    h("td", { title: `${l.busiestCount} of ${l.routings} routings` }, `#${l.busiest}`),
    h(
      "td.load-share",
      null,
      h("span.load-bar", { "aria-hidden": "true" }, h("span", { style: `width: ${(l.share * 100).toFixed(1)}%` })),
      percent(l.share),
    ),
    h("td", null, l.maxOverMean.toFixed(2)),
    h("td", null, l.cv.toFixed(2)),
  );
}

// The routing heatmap of one MoE node: tokens (x) × layers (y), each cell coloured by the
// token's top-1 expert at that layer (hue from the expert id), with its colour key below. Rows
// repaired by `routing_repairs` (a token whose routing was rewritten by the next prefill) are
// marked with a red tick above their column and a red outline.

import type { NdArray } from "../../src/protocol/index.js";
import { h } from "./dom.js";
import { expertColour } from "./expert-colour.js";
import { heatmapLegend } from "./heatmap-legend.js";
import { topExpert } from "./model.js";

const MARK = 7; // px above the cells for repaired-row marks

/** How the cells map onto the canvas: a long sequence is sampled, one pixel column per few tokens. */
interface Layout {
  tokens: number;
  layers: number;
  cols: number;
  cw: number;
  ch: number;
  width: number;
}

function layout(a: NdArray, maxWidth: number): Layout {
  const [tokens = 0, layers = 0] = a.shape;
  const limit = Math.max(120, Math.floor(maxWidth));
  const cols = Math.min(tokens, limit); // pixel columns of the cell image
  const cw = tokens <= limit ? Math.max(1, Math.min(16, Math.floor(limit / Math.max(1, tokens)))) : 1;
  const ch = layers <= 8 ? 14 : layers <= 24 ? 6 : 3;
  return { tokens, layers, cols, cw, ch, width: cols * cw };
}

/**
 * A canvas for `a` with `repaired` token rows marked, at most `maxWidth` px wide, so the whole
 * node, and every repaired row, fits; its colour key and caption below.
 */
export function heatmap(a: NdArray, repaired: readonly number[], maxWidth = 640): HTMLElement {
  const box = layout(a, maxWidth);
  const { tokens, layers } = box;
  const canvas = h("canvas.heatmap", {
    width: box.width,
    height: layers * box.ch + MARK,
    "data-tokens": tokens,
    "data-layers": layers,
    "data-repaired": repaired.join(","),
    role: "img",
    "aria-label": `routing heatmap: ${tokens} tokens × ${layers} layers, colour = top-1 expert${repaired.length ? `; repaired rows ${repaired.join(", ")}` : ""}`,
  });
  const ctx = canvas.getContext("2d");
  let drawn = new Map<number, number>();
  if (ctx && tokens > 0 && layers > 0) {
    drawn = drawCells(ctx, a, box);
    drawRepairs(ctx, repaired, box);
  }
  const sampled = box.cols < tokens ? ` · 1 px ≈ ${(tokens / box.cols).toFixed(1)} tokens` : "";
  return h(
    "figure.heatmap-figure",
    null,
    h("div.heatmap-scroll", null, canvas),
    drawn.size ? heatmapLegend(drawn, box.cols * layers) : null,
    h(
      "figcaption",
      null,
      `${tokens} tokens (→) × ${layers} layers (↓) · ${a.dtype} top-${a.shape[2] ?? 1} · colour = top-1 expert, ${drawn.size} distinct${sampled}`,
      repaired.length
        ? h(
            "span.repaired-note",
            null,
            ` · ▼ repaired row${repaired.length > 1 ? "s" : ""} ${repaired.map((t) => `#${t}`).join(", ")}`,
          )
        : null,
    ),
  );
}

/** Paint one pixel per drawn cell, scaled up without smoothing; returns drawn cells per top-1 expert. */
function drawCells(
  ctx: CanvasRenderingContext2D,
  a: NdArray,
  { tokens, layers, cols, width, ch }: Layout,
): Map<number, number> {
  const cells = new Map<number, number>();
  const img = new ImageData(cols, layers);
  for (let c = 0; c < cols; c++) {
    const t = cols === tokens ? c : Math.floor((c * tokens) / cols);
    for (let l = 0; l < layers; l++) {
      const e = topExpert(a, t, l);
      cells.set(e, (cells.get(e) ?? 0) + 1);
      const [r, g, b] = expertColour(e);
      const at = (l * cols + c) * 4;
      img.data[at] = r;
      img.data[at + 1] = g;
      img.data[at + 2] = b;
      img.data[at + 3] = 255;
    }
  }
  const small = document.createElement("canvas");
  small.width = cols;
  small.height = layers;
  small.getContext("2d")!.putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(small, 0, MARK, width, layers * ch);
  return cells;
}

/** A red tick above each repaired row's column and a red outline around it. */
function drawRepairs(
  ctx: CanvasRenderingContext2D,
  repaired: readonly number[],
  { tokens, layers, cw, ch, width }: Layout,
): void {
  for (const t of repaired) {
    if (t < 0 || t >= tokens) continue;
    const w = Math.max(cw, 3);
    // centre of the row's column, kept far enough from the edges for the mark to show whole
    const mid = Math.min(
      width - Math.max(4, w / 2 + 1),
      Math.max(Math.max(4, w / 2 + 1), ((t + 0.5) * width) / tokens),
    );
    ctx.fillStyle = "#dc2626";
    ctx.beginPath();
    ctx.moveTo(mid - 4, 0);
    ctx.lineTo(mid + 4, 0);
    ctx.lineTo(mid, MARK - 1);
    ctx.closePath();
    ctx.fill();
    ctx.strokeStyle = "#dc2626";
    ctx.lineWidth = 2;
    ctx.strokeRect(mid - w / 2, MARK + 1, w, layers * ch - 2);
  }
}

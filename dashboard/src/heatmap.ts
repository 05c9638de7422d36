// The routing heatmap of one MoE node: tokens (x) × layers (y), each cell coloured by the
// token's top-1 expert at that layer (hue from the expert id). Rows repaired by
// `routing_repairs` (a token whose routing was rewritten by the next prefill) are marked with a
// red tick above their column and a red outline.

import type { NdArray } from "../../src/assembly/ndarray.js";
import { h } from "./dom.js";
import { topExpert } from "./model.js";

const MARK = 7; // px above the cells for repaired-row marks

export function expertColour(id: number): [number, number, number] {
  // golden-angle hues: neighbouring ids get distant colours
  const hue = (id * 137.508) % 360;
  return hsl(hue, 0.62, 0.52 + ((id >> 3) % 3) * 0.08);
}

function hsl(h: number, s: number, l: number): [number, number, number] {
  const k = (n: number) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  const f = (n: number) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return [Math.round(f(0) * 255), Math.round(f(8) * 255), Math.round(f(4) * 255)];
}

/**
 * A canvas for `a` with `repaired` token rows marked, at most `maxWidth` px wide: a long sequence
 * is sampled (one pixel column per few tokens) so the whole node, and every repaired row, fits.
 */
export function heatmap(a: NdArray, repaired: readonly number[], maxWidth = 640): HTMLElement {
  const [tokens = 0, layers = 0] = a.shape;
  const limit = Math.max(120, Math.floor(maxWidth));
  const cols = Math.min(tokens, limit); // pixel columns of the cell image
  const cw = tokens <= limit ? Math.max(1, Math.min(16, Math.floor(limit / Math.max(1, tokens)))) : 1;
  const ch = layers <= 8 ? 14 : layers <= 24 ? 6 : 3;
  const width = cols * cw;
  const canvas = h("canvas.heatmap", {
    width,
    height: layers * ch + MARK,
    "data-tokens": tokens,
    "data-layers": layers,
    "data-repaired": repaired.join(","),
    role: "img",
    "aria-label": `routing heatmap: ${tokens} tokens × ${layers} layers, colour = top-1 expert${repaired.length ? `; repaired rows ${repaired.join(", ")}` : ""}`,
  });
  const ctx = canvas.getContext("2d");
  const experts = new Set<number>();
  if (ctx && tokens > 0 && layers > 0) {
    // one pixel per cell (or per sampled column), then scaled up without smoothing
    const img = new ImageData(cols, layers);
    for (let c = 0; c < cols; c++) {
      const t = cols === tokens ? c : Math.floor((c * tokens) / cols);
      for (let l = 0; l < layers; l++) {
        const e = topExpert(a, t, l);
        experts.add(e);
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
    for (const t of repaired) {
      if (t < 0 || t >= tokens) continue;
      const w = Math.max(cw, 3);
      // centre of the row's column, kept far enough from the edges for the mark to show whole
      const mid = Math.min(width - Math.max(4, w / 2 + 1), Math.max(Math.max(4, w / 2 + 1), ((t + 0.5) * width) / tokens));
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
  const sampled = cols < tokens ? ` · 1 px ≈ ${(tokens / cols).toFixed(1)} tokens` : "";
  return h(
    "figure.heatmap-figure",
    null,
    h("div.heatmap-scroll", null, canvas),
    h(
      "figcaption",
      null,
      `${tokens} tokens (→) × ${layers} layers (↓) · ${a.dtype} top-${a.shape[2] ?? 1} · colour = top-1 expert, ${experts.size} distinct${sampled}`,
      repaired.length ? h("span.repaired-note", null, ` · ▼ repaired row${repaired.length > 1 ? "s" : ""} ${repaired.map((t) => `#${t}`).join(", ")}`) : null,
    ),
  );
}

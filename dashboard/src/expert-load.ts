// How one node's routed tokens spread over the experts, layer by layer: a pure function of its
// `routed_experts` array (shape [tokens, layers, top_k], the top-k expert ids each token was
// routed to at each layer). Every one of a token's k choices counts as one routing, so a layer
// has tokens × k routings. The model's expert count is not on the wire, so the mean and the
// spread are taken over the experts a layer actually used: an idle expert is not seen at all.

import type { NdArray } from "../../src/protocol/index.js";

export interface LayerLoad {
  layer: number;
  /** tokens × top_k: every choice of every token. */
  routings: number;
  /** Experts that got at least one routing. */
  used: number;
  /** The expert with the most routings (the lowest id on a tie). */
  busiest: number;
  busiestCount: number;
  /** busiestCount / routings. */
  share: number;
  /** busiestCount over the mean load of the used experts (1 = perfectly even). */
  maxOverMean: number;
  /** Coefficient of variation (population σ / mean) of the used experts' loads (0 = even). */
  cv: number;
}

/** One entry per layer; none when the array has no tokens. */
export function expertLoad(a: NdArray): LayerLoad[] {
  const [tokens = 0, layers = 0, k = 1] = a.shape;
  if (tokens === 0) return [];
  const counts = Array.from({ length: layers }, () => new Map<number, number>());
  const read = elementReader(a.dtype);
  const rowElems = layers * k;
  // rows 0 .. n-2 are in `body`, row n-1 in `last` (a repair swaps only that one)
  const rows: Array<[Uint8Array, number]> = [];
  for (let t = 0; t < tokens - 1; t++) rows.push([a.body, t * rowElems]);
  rows.push([a.last, 0]);
  for (const [buf, start] of rows) {
    for (let l = 0; l < layers; l++) {
      const m = counts[l]!;
      for (let j = 0; j < k; j++) {
        const e = read(buf, start + l * k + j);
        if (e !== null) m.set(e, (m.get(e) ?? 0) + 1);
      }
    }
  }
  return counts.map((m, layer) => layerLoad(layer, m));
}

function layerLoad(layer: number, counts: Map<number, number>): LayerLoad {
  let routings = 0;
  let busiest = -1;
  let busiestCount = 0;
  for (const [e, c] of counts) {
    routings += c;
    if (c > busiestCount || (c === busiestCount && e < busiest)) [busiest, busiestCount] = [e, c];
  }
  const used = counts.size;
  if (used === 0) return { layer, routings: 0, used: 0, busiest: -1, busiestCount: 0, share: 0, maxOverMean: 0, cv: 0 };
  const mean = routings / used;
  let squares = 0;
  for (const c of counts.values()) squares += (c - mean) ** 2;
  return {
    layer,
    routings,
    used,
    busiest,
    busiestCount,
    share: busiestCount / routings,
    maxOverMean: busiestCount / mean,
    cv: Math.sqrt(squares / used) / mean,
  };
}

/** Element `i` of a little-endian buffer of `dtype`, or null past its end (a short buffer). */
function elementReader(dtype: string): (buf: Uint8Array, i: number) => number | null {
  const size = dtype.endsWith("16") ? 2 : dtype.endsWith("32") ? 4 : dtype.endsWith("64") ? 8 : 1;
  return (buf, i) => {
    const at = i * size;
    if (at + size > buf.length) return null;
    if (size === 1) return buf[at]!;
    if (size === 2) return buf[at]! | (buf[at + 1]! << 8);
    const view = new DataView(buf.buffer, buf.byteOffset + at, size);
    return size === 4 ? view.getUint32(0, true) : Number(view.getBigUint64(0, true));
  };
}

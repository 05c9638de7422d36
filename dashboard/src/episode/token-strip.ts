// One node's tokens coloured by the chosen trainer signal (token-signals.ts), drawn under its
// message: every recorded token id in order, the sampled ones (mask true) painted with their
// value and a tooltip (`#position id=… adv=…`), the prompt-side ones faint; then the node's
// summary (mean and max of the signal there, or how many were masked). A sampled node that
// recorded no tokens says so; one the signal does not reach says "not covered". With the run's
// tokenizer (decoder.ts) each token shows its text piece, the signal painted behind it, and its
// id in the tooltip; without one, its id.
import type { StreamValue } from "../../../src/protocol/index.js";
import { h } from "../dom.js";
import type { NodeTokens } from "./node-tokens.js";
import { nodeSummary, type Scales, SIGNAL_LABELS, type Signal, tokenColour, tokenTip } from "./token-signals.js";

/** Tokens drawn per node at most (the rest are counted). */
const MAX_TOKENS = 2000;

export interface StripInput {
  signal: Signal;
  node: NodeTokens;
  /** The node's values of the signal, one per sampled token (undefined: not covered). */
  values: StreamValue[] | undefined;
  /** The node's trainer logprobs (for the mismatch's tooltip). */
  trainer: StreamValue[] | undefined;
  scales: Scales;
  /** The message says it was sampled by the policy. */
  sampledMessage: boolean;
  /** Each id's text piece (the run's tokenizer); null: the ids are shown. */
  pieces: ((ids: readonly number[]) => string[]) | null;
}

/** A piece as drawn: whitespace kept visible (a newline as ↵ and a break), an empty piece as a thin mark. */
function pieceText(piece: string): string {
  return piece === "" ? "\u200b" : piece.replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
}

/** The strip for one node, or null when there is nothing to draw there (a prompt node). */
export function tokenStrip(x: StripInput): HTMLElement | null {
  const { node, signal } = x;
  if (node.token_ids.length === 0) {
    return x.sampledMessage
      ? h("div.tok-strip.tok-none", { "data-overlay": "none" }, h("span.chip.tok-chip", null, "no tokens to overlay"))
      : null;
  }
  if (node.sampled === 0) return null;
  if (!x.values) {
    return h(
      "div.tok-strip.tok-none",
      { "data-overlay": "not-covered" },
      h("span.chip.tok-chip", { title: `${SIGNAL_LABELS[signal]} does not reach this node's tokens` }, "not covered"),
    );
  }
  const spans: HTMLElement[] = [];
  let k = 0;
  const shown = Math.min(node.token_ids.length, MAX_TOKENS);
  const pieces = x.pieces ? x.pieces(node.token_ids.slice(0, shown)) : null;
  const label = (p: number) => (pieces ? pieceText(pieces[p]!) : String(node.token_ids[p]!));
  for (let p = 0; p < shown; p++) {
    const id = node.token_ids[p]!;
    const piece = pieces ? ` ${JSON.stringify(pieces[p])}` : "";
    if (!node.mask[p]) {
      spans.push(h("span.tok.ctx", { title: `#${p} id=${id}${piece} (not sampled)` }, label(p)));
      continue;
    }
    const v = x.values[k] ?? null;
    const colour = tokenColour(signal, v, x.scales);
    spans.push(
      h(
        "span.tok.s",
        {
          "data-v": v === null ? "" : String(v),
          "data-k": k,
          style: colour ? `background:${colour}` : undefined,
          title: `#${p} id=${id}${piece} ${tokenTip(signal, v, x.trainer?.[k], node.logprobs[k])}`,
        },
        label(p),
      ),
    );
    k++;
  }
  const sum = nodeSummary(signal, x.values);
  return h(
    "div.tok-strip",
    { "data-overlay": signal, "data-count": sum.count, "data-mean": sum.mean ?? "", "data-max": sum.max ?? "" },
    h(
      "div.tok-summary",
      null,
      h("span.chip.tok-chip", { title: `${SIGNAL_LABELS[signal]} on this node's sampled tokens` }, sum.text),
    ),
    h(
      pieces ? "div.toks.decoded" : "div.toks",
      null,
      spans,
      node.token_ids.length > shown
        ? h("span.muted.small", null, ` … ${node.token_ids.length - shown} more tokens`)
        : null,
    ),
  );
}

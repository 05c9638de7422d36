// One node's tokens coloured by the chosen trainer signal (token-signals.ts), drawn under its
// message: every recorded token id in order, the sampled ones (mask true) painted with their
// value and a tooltip (`#position id=… adv=…`), the prompt-side ones faint; then the node's
// summary (mean and max of the signal there, or how many were masked). A sampled node that
// recorded no tokens says so; one the signal does not reach says "not covered".
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
  for (let p = 0; p < shown; p++) {
    const id = node.token_ids[p]!;
    if (!node.mask[p]) {
      spans.push(h("span.tok.ctx", { title: `#${p} id=${id} (not sampled)` }, String(id)));
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
          title: `#${p} id=${id} ${tokenTip(signal, v, x.trainer?.[k], node.logprobs[k])}`,
        },
        String(id),
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
      "div.toks",
      null,
      spans,
      node.token_ids.length > shown
        ? h("span.muted.small", null, ` … ${node.token_ids.length - shown} more tokens`)
        : null,
    ),
  );
}

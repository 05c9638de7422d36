// One turn (a committed node) of a trace: its role, index and model call, its semantic links,
// its message, and, with routing open, the node's heatmap and per-layer expert load.
import type { TraceState } from "../../../src/protocol/index.js";
import { duration, h } from "../dom.js";
import { expertLoadTable } from "../expert-load-table.js";
import { heatmap } from "../heatmap.js";
import type { CallView, NodeView } from "../model.js";
import { messageBody } from "./message.js";
import { linkButton, traceName } from "./semantic-links.js";
import { tokenStrip } from "./token-strip.js";
import type { TraceContext } from "./trace-context.js";

/** `repaired`: the node's repaired token rows when its routing is shown, else null. */
export function turn(
  t: TraceState,
  v: NodeView,
  call: CallView | null,
  orchestrator: boolean,
  ctx: TraceContext,
  repaired: number[] | null,
): HTMLElement {
  const m = v.message;
  return h(
    `li.turn.role-${cssSafe(m.role)}` as "li",
    { "data-node": v.index, "data-role": m.role },
    turnHead(v, call),
    turnLinks(t, v, orchestrator, ctx),
    messageBody(m, false),
    overlayOf(t, v, ctx),
    repaired !== null && v.routed ? [heatmap(v.routed, repaired, ctx.mapWidth(t)), expertLoadTable(v.routed)] : null,
  );
}

function turnHead(v: NodeView, call: CallView | null): HTMLElement {
  const m = v.message;
  return h(
    "div.turn-head",
    null,
    h("span.role", null, m.role),
    m.name ? h("span.tool-name", null, m.name) : null,
    h("span.node-idx", { title: "node index" }, `#${v.index}`),
    v.sampled ? h("span.chip.sampled", { title: "sampled by the policy" }, "sampled") : null,
    h("span.spacer"),
    call
      ? h(
          "span.call-info",
          { title: "model call" },
          [
            call.model,
            call.finishReason,
            call.promptTokens !== null ? `${call.promptTokens}→${call.completionTokens ?? "?"} tok` : null,
            call.seconds !== null ? duration(call.seconds) : null,
          ]
            .filter(Boolean)
            .join(" · "),
        )
      : v.tokens
        ? h("span.call-info", null, `${v.tokens} tok`)
        : null,
  );
}

/** The node's semantic links; a sub-agent's `subagent*` links point into the orchestrator. */
function turnLinks(t: TraceState, v: NodeView, orchestrator: boolean, ctx: TraceContext): HTMLElement | null {
  if (!v.links.length) return null;
  return h(
    "div.turn-links",
    null,
    v.links.map((l) => {
      const cross = !orchestrator && l.type.startsWith("subagent");
      const target = cross ? ctx.first : t;
      return linkButton(
        target,
        l.node,
        `${l.type} ← ${cross ? `${traceName(ctx.first)} ` : ""}#${l.node}`,
        ctx.jump,
        `semantic link: ${l.type}`,
      );
    }),
  );
}

/** The node's tokens under the chosen signal (token-strip.ts), when one is chosen. */
function overlayOf(t: TraceState, v: NodeView, ctx: TraceContext): HTMLElement | null {
  const o = ctx.overlay;
  const signals = o?.traces.get(t.id);
  const node = signals?.nodes[v.index];
  if (!o || !signals || !node) return null;
  return tokenStrip({
    signal: o.signal,
    node,
    values: signals.values.get(v.index)?.[o.signal],
    trainer: signals.trainer.get(v.index),
    scales: o.scales,
    sampledMessage: v.sampled,
    pieces: o.pieces,
  });
}

function cssSafe(s: string): string {
  return s.replace(/[^a-z0-9_-]/gi, "_");
}

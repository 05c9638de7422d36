// One trace's column, redrawn on every frame but rebuilt only where it changed: its head, its
// errors (when their count moves), its turns (each keyed by what it shows) and the pending
// preview of messages in flight (when the preview or the run's end changes).
import type { TraceState } from "../../../src/protocol/index.js";
import { append, clear, h } from "../dom.js";
import { callView, isObject, json, nodeView, pendingMessages } from "../model.js";
import { messageBody } from "./message.js";
import { emptyReason } from "./token-signals.js";
import type { TraceContext } from "./trace-context.js";
import { traceHead } from "./trace-head.js";
import { turn } from "./turn.js";

export interface TraceDom {
  trace: TraceState;
  el: HTMLElement;
  head: HTMLElement;
  turns: HTMLOListElement;
  /** One per node: its element and the key of what it shows. */
  nodes: Array<{ el: HTMLElement; key: string }>;
  pending: HTMLElement;
  pendingSpan: Uint8Array | null;
  pendingEnded: boolean;
  errors: HTMLElement;
  errorCount: number;
  /** Why the chosen token signal paints nothing on this trace (hidden when it paints something). */
  note: HTMLElement;
}

export function newTraceDom(t: TraceState): TraceDom {
  const head = h("header.trace-head");
  const turns = h("ol.turns");
  const pending = h("div.pending", { hidden: true });
  const errors = h("div.trace-errors", { hidden: true });
  const note = h("p.signal-note", { hidden: true, role: "note" });
  const el = h("section.trace", { "data-trace": t.id }, head, errors, note, turns, pending);
  return {
    trace: t,
    el,
    head,
    turns,
    nodes: [],
    pending,
    pendingSpan: null,
    pendingEnded: false,
    errors,
    errorCount: -1,
    note,
  };
}

export function renderTrace(d: TraceDom, index: number, ctx: TraceContext): void {
  clear(d.head);
  append(d.head, traceHead(d.trace, index === 0, ctx));
  renderErrors(d, ctx);
  renderNote(d, ctx);
  renderTurns(d, index === 0, ctx);
  renderPending(d, ctx.ended);
}

function renderErrors(d: TraceDom, ctx: TraceContext): void {
  const count = d.trace.items.errors.count;
  if (d.errorCount === count) return;
  d.errorCount = count;
  clear(d.errors);
  d.errors.hidden = count === 0;
  for (const span of ctx.asm.items(d.trace, "errors")) {
    const v = json(span);
    const o = isObject(v) ? v : {};
    d.errors.append(
      h(
        "div.error-item",
        null,
        h("strong", null, typeof o.type === "string" ? o.type : "error"),
        " ",
        typeof o.message === "string" ? o.message : JSON.stringify(v),
      ),
    );
  }
}

/** The line saying why the chosen signal paints nothing here (prime-rl's wording). */
function renderNote(d: TraceDom, ctx: TraceContext): void {
  const o = ctx.overlay;
  const signals = o?.traces.get(d.trace.id);
  const why = o && signals ? emptyReason(o.signal, signals, o.scales, o.kind) : null;
  d.note.hidden = why === null;
  d.note.dataset.reason = why?.title ?? "";
  d.note.replaceChildren(...(why ? [h("strong", null, why.title), `: ${why.detail}`] : []));
}

/** Only turns whose key changed are rebuilt: the node, its call, its heatmap's inputs and its token overlay. */
function renderTurns(d: TraceDom, orchestrator: boolean, ctx: TraceContext): void {
  const t = d.trace;
  const callsByNode = new Map<number, Uint8Array>();
  for (const span of ctx.asm.items(t, "calls")) callsByNode.set(callView(span).node, span);
  for (let i = 0; i < t.nodes.length; i++) {
    const view = nodeView(ctx.asm.node(t, i), i);
    const call = callsByNode.get(i) ?? null;
    const rep = ctx.repairedRows(t.id, i);
    const showMap = ctx.routing && view.routed !== null;
    const key = `${idOf(view)}:${idOf(call)}:${showMap ? `${idOf(view.routed)}:${rep.join(",")}:${ctx.mapWidth(t)}` : "-"}:${orchestrator}:${ctx.overlay?.key ?? "-"}`;
    const have = d.nodes[i];
    if (have && have.key === key) continue;
    const el = turn(t, view, call ? callView(call) : null, orchestrator, ctx, showMap ? rep : null);
    if (have) {
      have.el.replaceWith(el);
      d.nodes[i] = { el, key };
    } else {
      d.turns.append(el);
      d.nodes.push({ el, key });
    }
  }
  while (d.nodes.length > t.nodes.length) d.nodes.pop()!.el.remove();
}

function renderPending(d: TraceDom, ended: boolean): void {
  const t = d.trace;
  if (d.pendingSpan === t.pending && d.pendingEnded === ended) return;
  d.pendingSpan = t.pending;
  d.pendingEnded = ended;
  const msgs = pendingMessages(t);
  clear(d.pending);
  d.pending.hidden = msgs.length === 0;
  d.pending.dataset.count = String(msgs.length);
  if (!msgs.length) return;
  d.pending.classList.toggle("ended", ended);
  d.pending.append(
    h(
      "div.pending-head",
      null,
      ended ? null : h("span.pulse", { "aria-hidden": "true" }),
      ended ? "last preview · never committed" : "in flight · not committed yet",
    ),
  );
  for (const m of msgs) d.pending.append(messageBody(m, true));
}

// identity numbers for turn keys: a node view, call span or routing array is replaced, never
// changed in place, so a new object means a new look
const ids = new WeakMap<object, number>();
let nextId = 1;
function idOf(o: object | null): number {
  if (o === null) return 0;
  let i = ids.get(o);
  if (i === undefined) ids.set(o, (i = nextId++));
  return i;
}

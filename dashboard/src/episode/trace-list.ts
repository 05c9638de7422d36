// The traces side by side, in arrival order (orchestrator first, sub-agents after): one column
// per trace, kept across frames while the assembly keeps the same trace object, dropped when the
// trace goes (a discard).
import type { TraceState } from "../../../src/protocol/index.js";
import { h } from "../dom.js";
import { jumpWithin } from "./semantic-links.js";
import type { TraceContext } from "./trace-context.js";
import { newTraceDom, renderTrace, type TraceDom } from "./trace-view.js";

export interface TraceList {
  el: HTMLElement;
  /** Draw `traces`; `base` is the drawing context less what the list itself knows. */
  update(traces: TraceState[], base: Omit<TraceContext, "first" | "mapWidth" | "jump">): void;
  /** Forget every column: the next update draws all from scratch (a new assembly). */
  reset(): void;
}

export function traceList(): TraceList {
  const el = h("div.traces", { id: "traces" });
  const doms = new Map<string, TraceDom>();
  const jump = jumpWithin(el);
  /** Room for a heatmap in the trace's column (the column's width less the turn's padding). */
  const mapWidth = (t: TraceState): number => {
    const col = doms.get(t.id)?.turns.clientWidth || el.clientWidth || 640;
    return Math.floor((col - 50) / 20) * 20; // in steps, so a small resize redraws nothing
  };
  return {
    el,
    update(traces, base) {
      const first = traces[0];
      if (first) {
        const ctx: TraceContext = { ...base, first, mapWidth, jump };
        traces.forEach((t, i) => {
          renderTrace(placed(t, i), i, ctx);
        });
      }
      const seen = new Set(traces.map((t) => t.id));
      for (const [id, d] of doms) {
        if (seen.has(id)) continue;
        d.el.remove();
        doms.delete(id);
      }
    },
    reset() {
      for (const d of doms.values()) d.el.remove();
      doms.clear();
    },
  };

  /** The column of `t`, new when the assembly holds a new trace object, at position `i`. */
  function placed(t: TraceState, i: number): TraceDom {
    let d = doms.get(t.id);
    if (!d || d.trace !== t) {
      d?.el.remove();
      d = newTraceDom(t);
      doms.set(t.id, d);
    }
    if (el.children[i] !== d.el) el.insertBefore(d.el, el.children[i] ?? null);
    return d;
  }
}

// What drawing one trace needs from the page, in one place so the trace's parts (its head, its
// turns) take it without importing the page or each other.
import type { EpisodeAssembly } from "../../../src/assembly/episode-assembly.js";
import type { TraceState } from "../../../src/assembly/trace.js";

export interface TraceContext {
  asm: EpisodeAssembly;
  /** The orchestrator (the first trace): sub-agents' links point into it. */
  first: TraceState;
  /** The run finished or failed: nothing in flight will commit any more. */
  ended: boolean;
  /** The routing heatmaps are open. */
  routing: boolean;
  /** Token rows of a node that routing repairs rewrote. */
  repairedRows(trace: string, node: number): number[];
  /** Room for a heatmap in a trace's column, in px. */
  mapWidth(trace: TraceState): number;
  /** Scroll to the turn a link button names. */
  jump: EventListener;
}

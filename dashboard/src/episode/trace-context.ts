// What drawing one trace needs from the page, in one place so the trace's parts (its head, its
// turns) take it without importing the page or each other.
import type { EpisodeAssembly, TraceState } from "../../../src/protocol/index.js";
import type { Scales, Signal, TraceSignals } from "./token-signals.js";

/** The chosen token signal, and what each trace carries (token-signals.ts). */
export interface Overlay {
  signal: Signal;
  /** Changes whenever what the overlays show changes (the signal, the annotations, the scale). */
  key: string;
  traces: ReadonlyMap<string, TraceSignals>;
  scales: Scales;
  /** The identity's kind (eval episodes carry no trainer streams). */
  kind: string | null;
  /** Each id's text piece, from the run's tokenizer (decoder.ts); null: none (ids are shown). */
  pieces: ((ids: readonly number[]) => string[]) | null;
}

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
  /** The token overlay (null: no signal chosen). */
  overlay: Overlay | null;
}

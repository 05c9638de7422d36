// The episode page's token overlays, put together: the trainer's annotations (what the watch read,
// re-checked while the ended episode is open: annotations-source.ts), each trace's signals folded
// from them (token-signals.ts; re-folded only when the trace grew or the annotations changed),
// the episode's scales, the picker and its legend (signal-bar.ts), and, per frame, the overlay the
// trace columns draw (trace-context.ts `Overlay`).

import type { AnnotationsJson } from "../../../clients/typescript/watch.js";
import type { EpisodeAssembly, TraceState } from "../../../src/protocol/index.js";
import { AnnotationsSource } from "./annotations-source.js";
import { RunDecoder } from "./decoder.js";
import { traceTokens } from "./node-tokens.js";
import { signalBar } from "./signal-bar.js";
import { episodeScales, type TraceSignals, traceSignals } from "./token-signals.js";
import type { Overlay } from "./trace-context.js";

export interface Overlays {
  /** The picker, its legend and the annotations' state line. */
  bar: HTMLElement;
  /** Annotations the watch read. */
  offer(a: AnnotationsJson): void;
  /** The episode ended: look for annotations now (and every so often while the tab is open). */
  ended(): void;
  /** This frame's overlay (null: no signal chosen), and the bar brought up to date. */
  update(asm: EpisodeAssembly, traces: TraceState[], kind: string | null, ended: boolean): Overlay | null;
  close(): void;
}

export function overlays(id: string, run: string, isEnded: () => boolean, changed: () => void): Overlays {
  const source = new AnnotationsSource(id, isEnded, changed);
  const bar = signalBar(changed);
  // the run's tokenizer: asked the first time a signal is shown (decoder.ts)
  const decoder = new RunDecoder(run, changed);
  const decoded = document.createElement("span");
  decoded.className = "chip tok-decoded";
  decoded.hidden = true;
  bar.el.append(decoded);
  const cache = new Map<string, { trace: TraceState; nodes: number; version: number; signals: TraceSignals }>();

  function signalsOf(asm: EpisodeAssembly, t: TraceState, a: AnnotationsJson | null): TraceSignals {
    const version = a?.version ?? 0;
    const hit = cache.get(t.id);
    if (hit && hit.trace === t && hit.nodes === t.nodes.length && hit.version === version) return hit.signals;
    const record = a?.traces.find((r) => r.trace_id === t.id) ?? null;
    const signals = traceSignals(t.id, traceTokens(asm, t), record);
    cache.set(t.id, { trace: t, nodes: t.nodes.length, version, signals });
    return signals;
  }

  return {
    bar: bar.el,
    offer: (a) => source.offer(a),
    ended: () => void source.check(),
    update(asm, traces, kind, ended) {
      const a = source.current;
      const all = traces.map((t) => signalsOf(asm, t, a));
      for (const k of cache.keys()) if (!traces.some((t) => t.id === k)) cache.delete(k);
      const scales = episodeScales(all);
      bar.update(all, scales, kind, a, ended);
      bar.el.hidden = traces.length === 0;
      const signal = bar.signal();
      decoded.hidden = signal === null;
      if (signal === null) return null;
      const d = decoder.get();
      decoded.dataset.state = d.kind;
      decoded.textContent =
        d.kind === "ready"
          ? "decoded with the run's tokenizer"
          : d.kind === "loading"
            ? "loading the run's tokenizer…"
            : "token ids";
      decoded.title = d.kind === "none" ? d.why : d.kind === "ready" ? "hover a token for its id and value" : "";
      return {
        signal,
        key: `${signal}:${a?.version ?? 0}:${scales.maxAbsAdv}:${scales.maxEntropy}:${scales.maxKl}:${kind}:${d.kind}`,
        traces: new Map(all.map((s) => [s.trace, s])),
        scales,
        kind,
        pieces: d.kind === "ready" ? d.pieces : null,
      };
    },
    close: () => source.close(),
  };
}

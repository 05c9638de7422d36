// The live assembly as ordinary upstream deltas: one `open`-bearing delta per trace, in arrival
// order. Any reference `EpisodeAssembly` that applies them holds exactly this state (nodes carry
// their current links and routing; `pending` is sent explicitly, even when `[]`).

import type { EpisodeAssembly } from "./episode-assembly.js";
import { LIST_FIELDS } from "./fields.js";
import type { TraceState } from "./trace.js";
import { ChunkWriter, encodeStr } from "../wire/writer.js";

const KEYS = Object.fromEntries(["trace", "open", "set", "pending", ...LIST_FIELDS].map((k) => [k, encodeStr(k)]));

export function snapshotDeltas(asm: EpisodeAssembly): Uint8Array[] {
  return [...asm.traces.values()].map(traceSnapshot);
}

export function traceSnapshot(t: TraceState): Uint8Array {
  const open = t.entries("open");
  const set = t.entries("set");
  const lists = LIST_FIELDS.filter((f) => t.count(f) > 0);
  const w = new ChunkWriter();
  w.mapHeader(3 + lists.length + (set.length ? 1 : 0));
  w.raw(KEYS.trace!);
  w.str(t.id);
  w.raw(KEYS.open!);
  w.mapHeader(open.length);
  for (const e of open) {
    w.raw(e.key);
    w.raw(e.value);
  }
  for (const f of lists) {
    w.raw(KEYS[f]!);
    t.writeList(w, f);
  }
  if (set.length) {
    w.raw(KEYS.set!);
    w.mapHeader(set.length);
    for (const e of set) {
      w.raw(e.key);
      w.raw(e.value);
    }
  }
  w.raw(KEYS.pending!);
  w.raw(t.pending);
  return w.bytes();
}

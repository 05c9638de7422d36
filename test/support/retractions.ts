// Issue 11's three ways a lost ack used to leave the relay off the worker, rebuilt from the public
// golden cases as the worker would have sent them: each scenario is the frames in send order, the
// ones whose ack is lost, and the reference (the assembly fed only the acknowledged frames).
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { decodeLossless, encodeLossless, LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";

export interface Scenario {
  name: string;
  frames: Uint8Array[];
  /** Indices into `frames` whose ack is lost. */
  lost: number[];
  reply: Uint8Array;
  /** The reference's live traces after every frame, and its finished episode. */
  traces: Uint8Array;
  episode: Uint8Array;
}

const map = (b: Uint8Array) => decodeLossless(b) as LMap;
const set = (m: LMap, key: string, v: LValue) => {
  const e = m.entries.find(([k]) => k === key);
  if (e) e[1] = v;
  else m.entries.push([key, v]);
};

function reference(name: string, frames: Uint8Array[], lost: number[], reply: Uint8Array): Scenario {
  const asm = new EpisodeAssembly();
  frames.forEach((f, i) => {
    if (!lost.includes(i)) asm.apply(f);
  });
  return { name, frames, lost, reply, traces: asm.tracesBytes(), episode: asm.finishReply(reply) };
}

/**
 * discard_retry: attempt A's open (frame 0) reaches the relay but its ack is lost; the worker
 * abandons A for a retry (B, frames 5-8) and, its cursor never having had A, sends no discard.
 */
export function orphanAttempt(c: GoldenCase): Scenario {
  return reference("orphan attempt", [c.frames[0]!, ...c.frames.slice(5)], [0], c.reply);
}

/**
 * routing_repair_widen: frame 2 sends node 3 as uint16 (and widens node 1) and its ack is lost;
 * frame 3's repair then makes the worker's node 3 uint8 again, so its re-diff (frame 2's content
 * and frame 3's) re-sends node 3 whole, as uint8.
 */
export function narrowerResend(c: GoldenCase): Scenario {
  const f2 = map(c.frames[2]!);
  const f3 = map(c.frames[3]!);
  const nodes = f2.get("nodes") as LMap[];
  const node3 = nodes[1]!;
  const routed = node3.get("routed_experts") as LMap;
  const repair = (f3.get("routing_repairs") as LMap).get(3) as LMap;
  // the worker's node 3: its rows as uint8, the last one the repaired row
  const shape = routed.get("shape") as number[];
  const data16 = routed.get("data") as Uint8Array;
  const cells = data16.length / 2;
  const rowCells = cells / shape[0]!;
  const data8 = new Uint8Array(cells);
  for (let i = 0; i < cells - rowCells; i++) {
    if (data16[i * 2 + 1] !== 0) throw new Error("narrowerResend: node 3's rows before the last need uint16");
    data8[i] = data16[i * 2]!;
  }
  data8.set(repair.get("data") as Uint8Array, cells - rowCells);
  const narrowed = new LMap([
    ["__nd__", true],
    ["dtype", "uint8"],
    ["shape", shape],
    ["data", data8],
  ]);
  set(node3, "routed_experts", narrowed);
  const rediff = f2;
  set(rediff, "nodes", nodes);
  return reference(
    "narrower re-send",
    [c.frames[0]!, c.frames[1]!, c.frames[2]!, encodeLossless(rediff), ...c.frames.slice(4)],
    [2],
    c.reply,
  );
}

/**
 * multi_trace_links: sub-agent X's open (frame 3) is sent but its ack is lost; the orchestrator's
 * frame and sub-agent Y's open go next; X's re-diff (frames 3 and 6 in one: its open, its nodes
 * with frame 6's link folded in, its calls and fields) comes after: the reference sees X after Y.
 */
export function lateOpen(c: GoldenCase): Scenario {
  const f3 = map(c.frames[3]!);
  const f6 = map(c.frames[6]!);
  const nodes = [...(f3.get("nodes") as LMap[]), ...(f6.get("nodes") as LMap[])];
  for (const [index, items] of (f6.get("links") as LMap).entries) {
    const n = nodes[index as number]!;
    set(n, "semantic_parents", [...((n.get("semantic_parents") as LValue[] | null) ?? []), ...(items as LValue[])]);
  }
  const entries: Array<[LValue, LValue]> = [
    ["trace", f3.get("trace")!],
    ["open", f3.get("open")!],
    ["nodes", nodes],
  ];
  const calls = [
    ...((f3.get("calls") as LValue[] | undefined) ?? []),
    ...((f6.get("calls") as LValue[] | undefined) ?? []),
  ];
  if (calls.length) entries.push(["calls", calls]);
  const fields = new LMap([...((f3.get("set") as LMap | undefined)?.entries ?? [])]);
  for (const [k, v] of (f6.get("set") as LMap | undefined)?.entries ?? []) set(fields, k as string, v);
  if (fields.entries.length) entries.push(["set", fields]);
  const pending = f6.get("pending") ?? f3.get("pending");
  if (pending !== undefined) entries.push(["pending", pending]);
  const rediff = encodeLossless(new LMap(entries));
  const frames = [...c.frames.slice(0, 6), rediff, ...c.frames.slice(7)];
  return reference("late open", frames, [3], c.reply);
}

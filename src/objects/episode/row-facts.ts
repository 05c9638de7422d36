// The progress facts of an episode's row (src/protocol/registry/entry.ts ProgressFacts, computed as prime-rl's live
// table computes them: src/protocol/registry/progress-facts.ts), from what the object holds: the assembly's index
// in memory (fields, per node its parent and role), and from storage only what is new since the
// last row: the calls not yet summed for their cost, the latest assistant node's words. What was
// read is kept per trace and per node object, which the assembly replaces when they change (a
// retraction or a wake gives new ones), so a kept value is never stale. Once the run ended the
// facts are kept with the episode (`Meta.progress`): the archive takes the bodies away.

import type { EpisodeAssembly } from "../../protocol/assembly/episode-assembly.js";
import { type NodeInfo, type NodeState, nodeHead } from "../../protocol/assembly/node.js";
import type { TraceState } from "../../protocol/assembly/trace.js";
import type { DispatchFacts } from "../../protocol/envelope/dispatch.js";
import type { ProgressFacts } from "../../protocol/registry/entry.js";
import {
  branchCount,
  callCost,
  messageWords,
  stageOf,
  timingStart,
  turnCount,
} from "../../protocol/registry/progress-facts.js";
import { episodeTruncated, lastSuccessfulFinish, stopTruncates } from "../../protocol/registry/truncation.js";
import { equalBytes } from "../../protocol/wire/bytes.js";
import { type Json, toJson } from "../../protocol/wire/json-view.js";
import { decodeLossless } from "../../protocol/wire/lossless.js";
import { encodeStr } from "../../protocol/wire/writer.js";
import type { Meta } from "./record-store.js";
import type { SqlStore } from "./sql-store.js";

/** Calls read from storage per batch when summing their cost. */
const CALLS_PER_READ = 256;
/** Assistant nodes whose body one row may read looking for words (the newest usually has some). */
const WORD_READS = 8;

const KEY_MESSAGE = encodeStr("message");

export class RowFacts {
  /**
   * Per trace: calls read so far, their cost (null: none gave one) and the last successful one's finish reason
   * (truncation.ts).
   */
  private readonly calls = new WeakMap<TraceState, { counted: number; cost: number | null; last: string | null }>();
  /** Per node version: its message's words (null: none). */
  private readonly words = new WeakMap<NodeInfo, string | null>();
  /** Per node version stored by an older release: its parent and role, read from its body. */
  private readonly heads = new WeakMap<NodeInfo, { parent: number | null; role: string | null }>();

  constructor(private readonly store: SqlStore) {}

  /** Whether bodies may be read (not once archived: they are gone). */
  private bodies = true;

  /** The facts as of `now` (ms): read from the traces while the bodies are there, else as kept. */
  facts(
    m: Meta,
    asm: EpisodeAssembly,
    dispatch: DispatchFacts,
    scalar: (t: TraceState, name: string) => Json | undefined,
    now: number,
  ): ProgressFacts {
    if (m.archived !== null && m.progress) {
      const { turns: _, is_truncated: __, ...kept } = m.progress;
      return { ...kept, annotations: m.annotations };
    }
    // archived by a release that kept no facts: what the index in memory says, without the bodies
    this.bodies = m.archived === null;
    const traces = [...asm.traces.values()];
    const first = traces[0];
    const started = dispatch.started ?? (first ? timingStart(scalar(first, "timing")) : null);
    const until = m.status === "live" ? now : m.updated;
    let branches = 0;
    let input = 0;
    let output = 0;
    let cost: number | null = null;
    for (const t of traces) {
      branches += branchCount(t.nodes.map((n, i) => this.head(t, i, n).parent));
      input += count(scalar(t, "num_input_tokens"));
      output += count(scalar(t, "num_output_tokens"));
      const c = this.callsRead(t).cost;
      if (c !== null) cost = (cost ?? 0) + c;
    }
    return {
      stage: first ? stageOf(scalar(first, "timing"), first.items.errors.count) : "pending",
      started,
      elapsed: started === null ? null : Math.max(0, until / 1000 - started),
      branches,
      input_tokens: input,
      output_tokens: output,
      cost,
      last: this.lastWords(traces),
      annotations: m.annotations,
    };
  }

  /**
   * The episode's turns (assistant nodes, all traces); null when a node's role cannot be known (stored by an older
   * release, and its body archived).
   */
  turns(m: Meta, asm: EpisodeAssembly): number | null {
    // archived: as counted when the run ended, if this release kept them
    if (m.archived !== null && typeof m.progress?.turns === "number") return m.progress.turns;
    this.bodies = m.archived === null;
    const roles: Array<string | null | undefined> = [];
    for (const t of asm.traces.values()) {
      for (let i = 0; i < t.nodes.length; i++) roles.push(this.roleOf(t, i, t.nodes[i]!));
    }
    return turnCount(roles);
  }

  /**
   * Whether the episode is truncated by the trainer's definition (truncation.ts: any trace's stop condition, or its
   * last successful call's finish reason); null when that cannot be known (archived by a release that kept none: its
   * calls are gone, and no stop condition says so).
   */
  truncated(m: Meta, asm: EpisodeAssembly, scalar: (t: TraceState, name: string) => Json | undefined): boolean | null {
    const traces = [...asm.traces.values()];
    if (m.archived !== null) {
      if (typeof m.progress?.is_truncated === "boolean") return m.progress.is_truncated;
      return traces.some((t) => stopTruncates(scalar(t, "stop_condition"))) ? true : null;
    }
    this.bodies = true;
    return episodeTruncated(
      traces.map((t) => ({ stop: scalar(t, "stop_condition"), lastFinish: this.callsRead(t).last })),
    );
  }

  /** A node's role (undefined: unknown, its body gone). */
  private roleOf(t: TraceState, index: number, n: NodeInfo): string | null | undefined {
    if (n.role !== undefined) return n.role;
    if (!this.heads.has(n) && !this.bodies) return undefined;
    return this.head(t, index, n).role;
  }

  /** A node's parent and role: from its NodeInfo, or (stored by an older release) read once from its body. */
  private head(t: TraceState, index: number, n: NodeInfo): { parent: number | null; role: string | null } {
    if (n.parent !== undefined && n.role !== undefined) return { parent: n.parent, role: n.role };
    let h = this.heads.get(n);
    if (!h) {
      if (!this.bodies) return { parent: null, role: null };
      this.heads.set(n, (h = nodeHead(this.store.node(t, index))));
    }
    return h;
  }

  /** What the calls say so far (their cost, the last successful one's finish): as kept, plus the calls written since. */
  private callsRead(t: TraceState): { cost: number | null; last: string | null } {
    const total = t.items.calls.count;
    let kept = this.calls.get(t);
    if (!kept) this.calls.set(t, (kept = { counted: 0, cost: null, last: null }));
    while (this.bodies && kept.counted < total) {
      const to = Math.min(total, kept.counted + CALLS_PER_READ);
      const read = [...this.store.items(t.tnum, "calls", kept.counted, to)].map(decoded);
      for (const call of read) {
        const c = callCost(call);
        if (c !== null) kept.cost = (kept.cost ?? 0) + c;
      }
      kept.last = lastSuccessfulFinish(read, kept.last);
      kept.counted = to;
    }
    return kept;
  }

  /**
   * The latest assistant words of the episode: per trace, its newest assistant node with words
   * (reading at most WORD_READS bodies), and of those the one written last.
   */
  private lastWords(traces: TraceState[]): string | null {
    let best: { ver: number; words: string } | null = null;
    for (const t of traces) {
      let reads = 0;
      for (let i = t.nodes.length - 1; i >= 0 && reads < WORD_READS; i--) {
        const n = t.nodes[i]!;
        if (this.head(t, i, n).role !== "assistant") continue;
        let w = this.words.get(n);
        if (w === undefined) {
          if (!this.bodies) break;
          reads++;
          this.words.set(n, (w = messageWords(messageOf(this.store.node(t, i)))));
        }
        if (w === null) continue;
        if (!best || n.ver >= best.ver) best = { ver: n.ver, words: w };
        break;
      }
    }
    return best?.words ?? null;
  }
}

function messageOf(node: NodeState): Json | undefined {
  const i = node.keys.findIndex((k) => equalBytes(k, KEY_MESSAGE));
  return i < 0 ? undefined : decoded(node.values[i]!);
}

function decoded(bytes: Uint8Array): Json {
  try {
    return toJson(decodeLossless(bytes));
  } catch {
    return null;
  }
}

function count(v: Json | undefined): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

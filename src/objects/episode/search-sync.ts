// The episode's text for its run's search (src/protocol/search/segments.ts): with each row it sends, the
// segments of the nodes its run's index does not have yet, read once from storage as they come.
// What the index holds is kept here per trace (`search_sync`: nodes sent, characters spent), and
// moves only when the index took the batch; a retraction takes it back to before the first node it
// may have changed, so those are sent again (the index replaces a trace's segments from there on).
// An episode indexes at most EPISODE_CHARS characters: past that, its text is not searchable.

import type { EpisodeAssembly } from "../../protocol/assembly/episode-assembly.js";
import type { NodeState } from "../../protocol/assembly/node.js";
import {
  EPISODE_CHARS,
  nodeSegments,
  type Segment,
  taskSegment,
  withinBudget,
} from "../../protocol/search/segments.js";
import { equalBytes } from "../../protocol/wire/bytes.js";
import { type Json, toJson } from "../../protocol/wire/json-view.js";
import { decodeLossless } from "../../protocol/wire/lossless.js";
import { encodeStr } from "../../protocol/wire/writer.js";
import type { SearchBatch } from "../registry/search-store.js";
import type { SqlStore } from "./sql-store.js";

const KEY_MESSAGE = encodeStr("message");
/** Nodes read at once for their text. */
const NODES_PER_READ = 16;
/** Node bytes a text batch reads between two pauses. */
const SLICE_BYTES = 4 * 1024 * 1024;

/** A batch on its way, and what the index holds once it took it. */
export interface Pending {
  batch: SearchBatch;
  next: Map<number, Sent>;
  generation: number;
}

/** What the index holds of one trace. */
interface Sent {
  trace: string;
  /** Nodes whose segments were sent (the task's counts as sent once `nodes` ≥ 0 and `task` is set). */
  nodes: number;
  task: boolean;
  chars: number;
}

export class SearchSync {
  private cache: Map<number, Sent> | null = null;
  /** Bumped by every retraction: a batch made before one must not move what the index is said to hold. */
  private generation = 0;

  constructor(
    private readonly sql: SqlStorage,
    private readonly store: SqlStore,
  ) {}

  /**
   * What to send with the row: the segments of the nodes after what the index holds (and the task,
   * once), within the episode's budget; null when the index holds everything already. Read in slices of about
   * SLICE_BYTES of nodes with `pause()` between them, where a producer's turn gets in: a routing-heavy episode's 30 s
   * of nodes read at once held its turns 0.3-1.2 s. What a slice reads is as of then (a retraction meanwhile: `sent`
   * ignores the batch, and the next one sends again from there).
   */
  async batch(
    asm: EpisodeAssembly,
    scalarOf: (tnum: number, name: string) => Json | undefined,
    pause: () => Promise<void>,
  ): Promise<Pending | null> {
    const generation = this.generation;
    const sent = this.all();
    const traces = [...asm.traces.values()];
    const next = new Map<number, Sent>();
    // characters spent, over the traces still held (a trace resent from an earlier node keeps its count: the budget is
    // about)
    let used = traces.reduce((n, t) => n + (sent.get(t.tnum)?.chars ?? 0), 0);
    const segments: Segment[] = [];
    const from: Record<string, number> = {};
    let changed = traces.length !== sent.size || traces.some((t) => !sent.has(t.tnum));
    let read = 0;
    for (const [i, t] of traces.entries()) {
      const end = t.nodes.length; // what this batch says it sent (nodes appended meanwhile go with the next)
      const held = sent.get(t.tnum) ?? { trace: t.id, nodes: 0, task: false, chars: 0 };
      const wantsTask = i === 0 && !held.task;
      // the task comes first; a trace that becomes the first one later is sent again whole
      const start = wantsTask ? 0 : Math.min(held.nodes, end);
      if (start === end && start === held.nodes && !wantsTask) {
        next.set(t.tnum, held);
        continue;
      }
      const fresh: Segment[] = [];
      if (wantsTask) {
        const task = taskSegment(t.id, scalarOf(t.tnum, "task"));
        if (task) fresh.push(task);
      }
      // a few nodes per read: the 3 nodes of a 600 KB routing frame read it once, not 3 times
      for (let k = start; k < end && used + charsOf(fresh) < EPISODE_CHARS; ) {
        if (read >= SLICE_BYTES) {
          await pause();
          read = 0;
          if (t.nodes.length < end) break; // rewound meanwhile: this batch is ignored (`generation`)
        }
        const nodes = this.store.nodeRange(t, k, Math.min(end, k + NODES_PER_READ));
        if (nodes.length === 0) break;
        for (const node of nodes) {
          if (used + charsOf(fresh) >= EPISODE_CHARS) break;
          read += node.span.length;
          fresh.push(...nodeSegments(t.id, k++, messageOf(node)));
        }
      }
      const { kept, used: after } = withinBudget(fresh, used);
      from[t.id] = wantsTask ? -1 : start;
      segments.push(...kept);
      changed = true;
      next.set(t.tnum, {
        trace: t.id,
        nodes: end,
        task: held.task || i === 0,
        chars: held.chars + (after - used),
      });
      used = after;
    }
    if (!changed) return null;
    return { batch: { traces: traces.map((t) => t.id), from, segments }, next, generation };
  }

  /** The index took a batch: it holds what the batch says (unless a retraction came since: then it sends again). */
  sent(p: Pending): void {
    if (p.generation === this.generation) this.save(p.next);
  }

  /** Only the traces whose entry moved are written, in place (a turn moves one: one row written, not all of them twice). */
  private save(next: Map<number, Sent>): void {
    const held = this.all();
    for (const tnum of held.keys()) if (!next.has(tnum)) this.sql.exec("DELETE FROM search_sync WHERE tnum = ?", tnum);
    for (const [tnum, s] of next) {
      const h = held.get(tnum);
      if (h && h.trace === s.trace && h.nodes === s.nodes && h.task === s.task && h.chars === s.chars) continue;
      this.sql.exec(
        `INSERT INTO search_sync (tnum, trace, nodes, task, chars) VALUES (?, ?, ?, ?, ?) ON CONFLICT (tnum)
         DO UPDATE SET trace = excluded.trace, nodes = excluded.nodes, task = excluded.task, chars = excluded.chars`,
        tnum,
        s.trace,
        s.nodes,
        s.task ? 1 : 0,
        s.chars,
      );
    }
    this.cache = next;
  }

  /**
   * A retraction rewound the episode to `base`: nodes written after it may differ now, so each
   * trace's sent count falls back to its first such node (the index replaces from there).
   */
  rewound(asm: EpisodeAssembly, base: number): void {
    const sent = new Map(this.all()); // a copy: save() writes what differs from the held one
    let moved = false;
    for (const t of asm.traces.values()) {
      const s = sent.get(t.tnum);
      if (!s) continue;
      const first = t.nodes.findIndex((n) => n.ver > base);
      const keep = Math.min(s.nodes, first < 0 ? t.nodes.length : first);
      if (keep !== s.nodes) {
        sent.set(t.tnum, { ...s, nodes: keep });
        moved = true;
      }
    }
    this.generation++;
    if (moved) this.save(sent);
  }

  /** The episode is gone (its storage erased). */
  forget(): void {
    this.cache = null;
    this.generation++;
  }

  private all(): Map<number, Sent> {
    if (this.cache) return this.cache;
    const m = new Map<number, Sent>();
    const exists =
      this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_sync'").toArray().length > 0;
    if (exists) {
      for (const r of this.sql.exec<{ tnum: number; trace: string; nodes: number; task: number; chars: number }>(
        "SELECT * FROM search_sync",
      )) {
        m.set(r.tnum, { trace: r.trace, nodes: r.nodes, task: r.task === 1, chars: r.chars });
      }
    }
    return (this.cache = m);
  }
}

function messageOf(node: NodeState): Json | undefined {
  const i = node.keys.findIndex((k) => equalBytes(k, KEY_MESSAGE));
  if (i < 0) return undefined;
  try {
    return toJson(decodeLossless(node.values[i]!));
  } catch {
    return undefined;
  }
}

function charsOf(segments: readonly Segment[]): number {
  return segments.reduce((n, s) => n + s.body.length, 0);
}

// Checkpoints of the assembled state (sql-store.ts). The log (record-store.ts) is the durable record
// of every acknowledged frame, and the bodies and node_meta rows of an appended node or item are
// derivable from it: an append is kept here, in memory, as where its bytes are in its frame, and
// written to the state's tables only at a checkpoint. The store's tables then hold every frame's
// effects up to `meta.checkpoint` (schema version 10) and none after; a woken object reads them and
// replays the frames after it (state.ts). Everything else the store writes (a new trace, a changed
// node, fields, the pending preview, a discard, a retraction's rewind) writes the appends first
// and makes a checkpoint of the frame it belongs to: only appends wait.
//
// A checkpoint is due after CHECKPOINT_FRAMES frames or CHECKPOINT_BYTES bytes of log since the
// last one (what a wake replays at most), or when HELD_BYTES of bodies are held in memory (a body
// that is not a slice of its frame: a node rewritten as the reference stores it).

import type { NodeInfo } from "../../protocol/assembly/node.js";
import type { TraceState } from "../../protocol/assembly/trace.js";
import { PART_BYTES } from "../../protocol/episode/parts.js";
import { concatChunks } from "../../protocol/wire/writer.js";

/** Frames logged since the last checkpoint after which the next one is due. */
export const CHECKPOINT_FRAMES = 256;
/**
 * Bytes of log since the last checkpoint after which the next one is due. It bounds the turn that
 * writes the checkpoint (64 MiB of routing bodies took one ack 2.6 s on a loaded machine) and what
 * a wake reads back. A checkpoint's bodies are a run per list, a row per MiB (bodies.ts): the cost bench's
 * compressed episode writes 0.55 bodies rows a turn (1.75 as a row and a key per body, schema 11).
 */
export const CHECKPOINT_BYTES = 16 * 1024 * 1024;
/** Bytes of bodies held in memory (not slices of their frames) after which a checkpoint is due. */
export const HELD_BYTES = 8 * 1024 * 1024;

/** The log parts one pass read last (`Appends.body`): a frame's bodies follow each other, read once for all. */
interface LastRead {
  key: string;
  bytes: Uint8Array | null;
}

/** One appended node or item not written yet. */
interface Appended {
  ver: number;
  /** A node's NodeInfo (its node_meta row); null for an item. */
  info: NodeInfo | null;
  /** Its bytes: a view of its frame until the frame is logged, then null, or its own copy when not a slice of it. */
  bytes: Uint8Array | null;
  /** Where its bytes start in frame `ver` (when `bytes` is null). */
  at: number;
  length: number;
  /** `bytes` is a copy held in memory (counted in `held`). */
  own: boolean;
}

/** The appends since the last checkpoint, per list (`tnum`, kind), each contiguous up to the list's end. */
export class Appends {
  private readonly lists = new Map<string, { tnum: number; kind: number; from: number; items: Appended[] }>();
  /** Traces whose list sizes (`traces.lists`) changed since. */
  private readonly sized = new Map<number, TraceState>();
  /** Frames and log bytes since the last checkpoint, and bytes held in memory. */
  frames = 0;
  bytes = 0;
  held = 0;

  constructor(private readonly sql: SqlStorage) {}

  get empty(): boolean {
    return this.lists.size === 0 && this.sized.size === 0;
  }

  /** A checkpoint is due (see the header). */
  get due(): boolean {
    return this.frames >= CHECKPOINT_FRAMES || this.bytes >= CHECKPOINT_BYTES || this.held >= HELD_BYTES;
  }

  clear(): void {
    this.lists.clear();
    this.sized.clear();
    this.frames = this.bytes = this.held = 0;
  }

  private list(tnum: number, kind: number, from: number) {
    const key = `${tnum}:${kind}`;
    let l = this.lists.get(key);
    if (!l) this.lists.set(key, (l = { tnum, kind, from, items: [] }));
    return l;
  }

  /** A body appended at `idx` (the list's end) by frame `ver`. */
  add(tnum: number, kind: number, idx: number, ver: number, bytes: Uint8Array, info: NodeInfo | null): void {
    const l = this.list(tnum, kind, idx);
    l.items.length = idx - l.from; // an append is at the end (the assembly's undo may have cut it)
    l.items.push({ ver, info, bytes, at: 0, length: bytes.length, own: false });
  }

  /** Items of trace `t` appended: its list sizes are written with them. */
  sizes(t: TraceState): void {
    this.sized.set(t.tnum, t);
  }

  /** Undo of appends (a refused batch): bodies from `from` on are gone. */
  cut(tnum: number, kind: number, from: number): void {
    const key = `${tnum}:${kind}`;
    const l = this.lists.get(key);
    if (!l) return;
    for (const a of l.items.splice(Math.max(0, from - l.from))) if (a.own) this.held -= a.length;
    if (l.items.length === 0) this.lists.delete(key);
  }

  /**
   * Frame `seq` is logged as `frame`: its appends that are slices of it are read back from the log
   * from now on, the others keep a copy of their own.
   */
  logged(seq: number, frame: Uint8Array): void {
    this.frames++;
    this.bytes += frame.length;
    for (const l of this.lists.values())
      for (let i = l.items.length - 1; i >= 0; i--) {
        const a = l.items[i]!;
        if (a.ver < seq) break;
        if (a.ver !== seq || a.bytes === null) continue;
        const b = a.bytes;
        const at = b.byteOffset - frame.byteOffset;
        if (b.buffer === frame.buffer && at >= 0 && at + b.length <= frame.length) {
          a.at = at;
          a.bytes = null;
        } else {
          // a node rewritten (its own bytes), or a view of something else: kept, and no more than it
          a.bytes = b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b : b.slice();
          a.own = true;
          this.held += b.length;
        }
      }
  }

  /** The first index kept here of a list (appends hold every index from it on), or null. */
  first(tnum: number, kind: number): number | null {
    const l = this.lists.get(`${tnum}:${kind}`);
    return l ? l.from : null;
  }

  /** Bodies [from, to) of a list, of those kept here (indexes below `first` are the tables'), each frame read once. */
  read(tnum: number, kind: number, from: number, to: number): Uint8Array[] {
    const l = this.lists.get(`${tnum}:${kind}`);
    if (!l) return [];
    const last: LastRead = { key: "", bytes: null };
    return l.items.slice(Math.max(0, from - l.from), Math.max(0, to - l.from)).map((a) => this.body(a, last));
  }

  /** One kept body, or null. */
  one(tnum: number, kind: number, idx: number): Uint8Array | null {
    const l = this.lists.get(`${tnum}:${kind}`);
    const a = l?.items[idx - l.from];
    return a ? this.body(a) : null;
  }

  /** A kept body; `read`: the parts read last in this pass (a frame's bodies come one after the other). */
  private body(a: Appended, read?: LastRead): Uint8Array {
    if (a.bytes) return a.bytes;
    if (a.length === 0) return new Uint8Array(0);
    const key = a.ver * 65536;
    const first = Math.floor(a.at / PART_BYTES);
    const last = Math.floor((a.at + a.length - 1) / PART_BYTES);
    const same = read?.key === `${key + first}:${key + last}` ? read.bytes : null;
    const bytes =
      same ??
      concatChunks(
        this.sql
          .exec<{ data: ArrayBuffer }>(
            "SELECT data FROM frames WHERE k BETWEEN ? AND ? ORDER BY k",
            key + first,
            key + last,
          )
          .toArray()
          .map((p) => new Uint8Array(p.data)),
      );
    if (read && !same) [read.key, read.bytes] = [`${key + first}:${key + last}`, bytes];
    const at = a.at - first * PART_BYTES;
    if (bytes.length < at + a.length) throw new Error(`frame ${a.ver} of the log is shorter than a body it holds`);
    return bytes.subarray(at, at + a.length);
  }

  /**
   * Everything kept here, for the writer: per list its appended bodies (with `withBodies`; consecutive from `from`:
   * one run, bodies.ts), per trace the NodeInfos of its appended nodes (one pack, node-packs.ts); then the traces
   * whose list sizes changed. Cleared after.
   */
  drain(
    withBodies: boolean,
    bodies: (
      tnum: number,
      kind: number,
      from: number,
      entries: Array<{ ver: number; length: number }>,
      read: (k: number) => Uint8Array,
    ) => void,
    metas: (tnum: number, from: number, infos: NodeInfo[]) => void,
    sizes: (t: TraceState) => void,
  ): void {
    const read: LastRead = { key: "", bytes: null };
    for (const l of this.lists.values()) {
      const infos = l.items.flatMap((a) => (a.info ? [a.info] : []));
      if (infos.length) metas(l.tnum, l.from, infos);
      if (withBodies && l.items.length)
        bodies(
          l.tnum,
          l.kind,
          l.from,
          l.items.map((a) => ({ ver: a.ver, length: a.length })),
          (k) => this.body(l.items[k]!, read),
        );
    }
    for (const t of this.sized.values()) sizes(t);
    this.clear();
  }
}

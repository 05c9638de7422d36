// The episode's assembled state in the Durable Object's SQLite: the Bodies the relay's
// assembly writes through (src/protocol/assembly/bodies.ts), so the object keeps only the index in memory
// (read back by load-index.ts).
//
// Every row carries `ver`, the seq of the frame that wrote it (the store's `version` while the
// frame is applied):
// - `traces`: one row per trace incarnation (tnum): id, arrival order, list sizes, the seq that
//   opened it, and the seq that discarded it while something still needed it (`dropped`).
// - `fields`: its open and set fields and unknown lists (key order by `pos`), values as received, in parts.
// - `pending`: its pending preview, in parts.
// - `node_meta` (and `node_packs`: a checkpoint's appended nodes, node-packs.ts): per node the NodeInfo (bytes, parents, routing dtype/shape, whether a routing
//   repair rewrote its last row: the one record of that, kept through the archive; its parent
//   index and message role).
// - `body_runs` and `body_parts`: node and item bytes (kind 0 is nodes, 1..6 the item lists), a list's bodies
//   written at once as one run of parts (bodies.ts).
// The current value of anything is its newest version. A write that supersedes a version deletes
// it, unless something holds the state from before (a reader's pin, a retraction's floor:
// holds.ts): then `stale` lists it until nothing does. `rewind(R)` deletes every version written
// after R: what they superseded is current again. The tables are declared in schema.ts.
// The relay's store writes appended nodes and items at checkpoints (checkpoint.ts): until then they
// are read from the log, through `Appends`.

import type { Bodies, BodyReader } from "../../protocol/assembly/bodies.js";
import { ITEM_FIELDS, type ItemField } from "../../protocol/assembly/fields.js";
import { encodeNode, type NodeInfo, type NodeState, readNode } from "../../protocol/assembly/node.js";
import type { ListSize, TraceState } from "../../protocol/assembly/trace.js";
import { Holds, type Pin } from "../../protocol/episode/holds.js";
import { buffer, eachPart } from "../../protocol/episode/parts.js";
import { Reader } from "../../protocol/wire/reader.js";
import {
  deleteTraceBodies,
  dropNodeBody,
  itemBodies,
  itemSizes,
  KIND,
  NODES,
  nodeBodies,
  nodeBody,
  rewindBodies,
  writeBody,
  writeRun,
} from "./bodies.js";
import { Appends } from "./checkpoint.js";
import { emptyTable } from "./layout.js";
import { loadIndex } from "./load-index.js";
import { dropPacked, rewindPacks, writePacks } from "./node-packs.js";

/**
 * Where the checkpoint is kept (record-store.ts: meta's column, or the turn of the frame that made it, written with
 * the frame's transaction).
 */
export interface CheckpointKeeper {
  checkpoint(): number | null;
  setCheckpoint(seq: number | null): void;
}

export class SqlStore implements Bodies {
  private readonly holds = new Holds(() => this.collect());
  private ver = 0;
  /** Appends not written yet (checkpoint.ts); null: every write goes to the tables at once. */
  private readonly appends: Appends | null;
  /** This frame wrote to the tables (and made a checkpoint of itself): all of it is written at once. */
  private through = false;
  /** A checkpoint was written since `begin` (a rollback then leaves memory ahead of the tables). */
  checkpointed = false;
  /** Whether `stale` may have rows (false once a collect left it empty, until the next insert). */
  private maybeStale = true;
  /** Arrival order of the next new trace. */
  private nextOrd = 1;
  /** Whether the tables exist (a watcher may pin an episode nobody has written yet). */
  private tables = false;

  /**
   * With a keeper of the checkpoint (the episode's record), appends wait for a checkpoint; without, every write goes
   * to the tables at once (a migration's rebuild).
   */
  constructor(
    private readonly sql: SqlStorage,
    private readonly keeper: CheckpointKeeper | null = null,
  ) {
    this.appends = keeper ? new Appends(sql) : null;
  }

  /** The seq of the frame being applied: every row written gets it. */
  get version(): number {
    return this.ver;
  }

  set version(seq: number) {
    if (seq !== this.ver) this.through = false;
    this.ver = seq;
  }

  // ---- checkpoints (checkpoint.ts) ----

  /** The checkpoint: the tables hold every frame's effects up to it and none after (null: all of them). */
  checkpointSeq(): number | null {
    return this.keeper?.checkpoint() ?? null;
  }

  private saveCheckpoint(seq: number | null): void {
    if (!this.keeper || this.keeper.checkpoint() === seq) return;
    this.keeper.setCheckpoint(seq);
    this.checkpointed = true;
  }

  /** A transaction begins (see `checkpointed`). */
  begin(): void {
    this.checkpointed = false;
  }

  /** Memory went back to storage (a rollback, a delete): the appends are read again from the log (`replayFrom`). */
  forgetAppends(): void {
    this.appends?.clear();
    this.through = false;
  }

  /** The seq after which a woken object replays the log, or null when it need not. */
  replayFrom(): number | null {
    return this.appends ? this.checkpointSeq() : null;
  }

  /** Frame `seq` was logged as `frame` (or replayed from the log): appends of it are read from there. */
  logged(seq: number, frame: Uint8Array): void {
    const from = this.replayFrom();
    // a frame the tables hold (written through) is no part of the next checkpoint's interval
    if (from !== null && seq > from) this.appends!.logged(seq, frame);
  }

  /** Whether a checkpoint is due (checkpoint.ts). */
  get checkpointDue(): boolean {
    return this.appends?.due === true;
  }

  /** Write every append, and the checkpoint: the tables hold the state as of this frame. */
  checkpoint(): void {
    if (!this.appends) return;
    this.appends.drain(
      true,
      (tnum, kind, from, entries, read) => writeRun(this.sql, tnum, kind, from, entries, read),
      (tnum, from, infos) => writePacks(this.sql, tnum, from, infos),
      (t) => this.sql.exec("UPDATE traces SET lists = ? WHERE tnum = ?", listsJson(t), t.tnum),
    );
    this.saveCheckpoint(this.ver);
    this.through = true;
  }

  /** Before a write that is not an append: the appends first, and this frame is written through. */
  private writeThrough(): void {
    if (this.appends && !this.through) this.checkpoint();
  }

  /** Whether an append waits for a checkpoint; the first since none was kept marks where the log is replayed from. */
  private defer(): boolean {
    if (!this.appends || this.through) return false;
    if (this.checkpointSeq() === null) this.saveCheckpoint(this.ver - 1);
    return true;
  }
  private hasTables(): boolean {
    this.tables ||=
      this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stale'").toArray().length > 0;
    return this.tables;
  }

  // ---- the index, as stored ----

  /**
   * The stored traces in arrival order (the index the object keeps in memory), and the lowest trace number not used
   * yet.
   */
  load(): { traces: TraceState[]; nextTnum: number } {
    const { traces, nextTnum, nextOrd } = loadIndex(this.sql);
    this.nextOrd = nextOrd;
    return { traces, nextTnum };
  }

  // ---- holds: readers and retraction ----

  /** Hold the state as of `asOf` for a reader (versions and discarded traces it may read stay). */
  pin(asOf: number): Pin {
    return this.holds.pin(asOf);
  }

  /** Hold the state as of each of these seqs for a retraction (EpisodeState sets them from its ledger). */
  setFloors(seqs: number[]): void {
    this.holds.setFloors(seqs);
  }

  /** Also hold the state as of `seq` (the seq before a frame being applied, which may yet be retracted). */
  addFloor(seq: number): void {
    this.holds.addFloor(seq);
  }

  /** The oldest held seq, or null when nothing holds an older state; the log after a checkpoint is held too. */
  oldestHold(): number | null {
    const held = this.holds.oldestHold();
    const from = this.replayFrom();
    return from === null ? held : Math.min(held ?? from, from);
  }

  /** Delete the kept versions and dropped traces nothing holds any more. */
  collect(): void {
    // runs after every commit: nothing to do unless something was kept; rows still held (the
    // `needed` test of holds.ts, in SQL) stay in SQLite, unread
    if (!this.maybeStale || !this.hasTables()) return;
    const holds = JSON.stringify(this.holds.seqs());
    // `stale` has no key of its own: each entry goes by its rowid (a match on its columns scanned the table per entry)
    const rows = this.sql
      .exec<{ r: number; what: string; tnum: number; idx: number; name: string; ver: number }>(
        "SELECT rowid AS r, what, tnum, idx, name, ver FROM stale WHERE NOT EXISTS (SELECT 1 FROM json_each(?) AS h WHERE h.value >= stale.ver AND h.value < stale.until)",
        holds,
      )
      .toArray();
    for (const s of rows) {
      if (s.what === "trace") this.deleteTrace(s.tnum);
      else this.deleteVersion(s.what, s.tnum, s.idx, s.name, s.ver);
      this.sql.exec("DELETE FROM stale WHERE rowid = ?", s.r);
    }
    this.maybeStale = this.sql.exec("SELECT 1 FROM stale LIMIT 1").toArray().length > 0;
  }

  /** Readers holding a state now (GETs and catch-ups streaming from SQLite). */
  readers(): number {
    return this.holds.readers();
  }

  /**
   * The episode is archived (src/objects/episode/archive.ts): its node and item bodies, previews and old
   * versions leave SQLite. The index rows stay (traces, scalar fields, node sizes and shapes), so
   * the object still knows the episode; what reads bodies reads the archive from now on.
   */
  dropBodies(): void {
    if (!this.hasTables()) return;
    // the appends' node metadata (packed) and list sizes stay, as the tables' do; their bodies went with the archive
    this.appends?.drain(
      false,
      () => {},
      (tnum, from, infos) => writePacks(this.sql, tnum, from, infos),
      (t) => this.sql.exec("UPDATE traces SET lists = ? WHERE tnum = ?", listsJson(t), t.tnum),
    );
    if (this.appends) this.saveCheckpoint(null);
    for (const table of ["body_parts", "body_runs", "pending", "stale"] as const) emptyTable(this.sql, table);
    this.sql.exec(
      "DELETE FROM node_meta WHERE (tnum, idx, ver) NOT IN (SELECT tnum, idx, MAX(ver) FROM node_meta GROUP BY tnum, idx)",
    );
    this.maybeStale = false;
  }

  /** After a restart no reader is left: what was kept only for readers can go. */
  afterRestart(): void {
    this.holds.dropReaders();
    this.collect();
  }

  /**
   * Rewind to the state as of `seq`: every version written after it goes, what those superseded
   * is current again, traces opened after it go and traces discarded after it come back. Readers
   * holding a later state are told (`Pin.valid`). The caller reads the index back (`load`).
   */
  rewind(seq: number): void {
    this.writeThrough();
    this.holds.rewound(seq);
    for (const { tnum } of this.sql.exec<{ tnum: number }>("SELECT tnum FROM traces WHERE created > ?", seq).toArray())
      this.deleteTrace(tnum);
    for (const table of ["node_meta", "fields", "pending"]) this.sql.exec(`DELETE FROM ${table} WHERE ver > ?`, seq);
    rewindBodies(this.sql, seq);
    rewindPacks(this.sql, seq);
    this.sql.exec("UPDATE traces SET dropped = NULL WHERE dropped > ?", seq);
    this.sql.exec("DELETE FROM stale WHERE until > ?", seq);
    // list sizes, from the items that are left
    const sizes = itemSizes(this.sql);
    for (const { tnum } of this.sql.exec<{ tnum: number }>("SELECT tnum FROM traces").toArray()) {
      const s = sizes.get(tnum);
      const lists = Object.fromEntries(
        ITEM_FIELDS.map((f): [string, ListSize] => [f, s?.get(KIND[f]) ?? { count: 0, bytes: 0 }]),
      );
      this.sql.exec("UPDATE traces SET lists = ? WHERE tnum = ?", JSON.stringify(lists), tnum);
    }
    // the tables hold the state as of `seq`: the frames kept after it are replayed from there
    if (this.appends) this.saveCheckpoint(seq);
  }

  /** Bodies as of `asOf` (a held seq), for the writers. */
  reader(asOf: number): BodyReader {
    return {
      nodes: (tnum, from, to) => this.nodesAsOf(tnum, from, to, asOf),
      items: (tnum, field, from, to) => this.items(tnum, field, from, to),
    };
  }

  // ---- Bodies: reads ----

  node(t: TraceState, index: number): NodeState {
    return parsedNode(
      this.appends?.one(t.tnum, NODES, index) ?? nodeBody(this.sql, t.tnum, index, t.nodes[index]!.ver),
      index,
    );
  }

  /** Current nodes [from, to), parsed: a frame's nodes (or a run's) are read once for all of them, not once each. */
  nodeRange(t: TraceState, from: number, to: number): NodeState[] {
    return this.nodes(t.tnum, from, to).map((data = new Uint8Array(0), i) => parsedNode(data, from + i));
  }

  /** Current nodes [from, to): the newest version of each. */
  nodes(tnum: number, from: number, to: number): Uint8Array[] {
    return this.nodesAsOf(tnum, from, to, Number.MAX_SAFE_INTEGER);
  }

  /**
   * Nodes [from, to) as of `asOf`: the tables' below the first append kept in memory, the appends' from it (an
   * append is a node's only version: anything that rewrites a node writes the appends first).
   */
  private nodesAsOf(tnum: number, from: number, to: number, asOf: number): Uint8Array[] {
    const first = this.appends?.first(tnum, NODES) ?? to;
    const out = first > from ? nodeBodies(this.sql, tnum, from, Math.min(to, first), asOf) : [];
    if (first < to) {
      const at = Math.max(from, first);
      this.appends!.read(tnum, NODES, at, to).forEach((b, k) => {
        out[at - from + k] = b;
      });
    }
    return out;
  }

  items(tnum: number, field: ItemField, from: number, to: number): Uint8Array[] {
    const first = this.appends?.first(tnum, KIND[field]) ?? to;
    const out = first > from ? itemBodies(this.sql, tnum, field, from, Math.min(to, first)) : [];
    if (first < to) out.push(...this.appends!.read(tnum, KIND[field], Math.max(from, first), to));
    return out;
  }

  // ---- Bodies: the assembly's commit steps ----

  opened(t: TraceState): void {
    this.writeThrough();
    this.sql.exec(
      "INSERT INTO traces (tnum, id, ord, lists, created, dropped) VALUES (?, ?, ?, ?, ?, NULL)",
      t.tnum,
      t.id,
      this.nextOrd++,
      listsJson(t),
      this.version,
    );
    this.fieldsSet(
      t,
      [...t.fields.keys()].filter((k) => t.fields.get(k)!.from === "open"),
    );
    this.pendingSet(t);
  }

  dropped(t: TraceState): void {
    this.writeThrough();
    const created =
      this.sql.exec<{ c: number }>("SELECT created AS c FROM traces WHERE tnum = ?", t.tnum).toArray()[0]?.c ?? 0;
    if (this.holds.needed(created, this.version)) {
      // something holds a state with this trace in it: keep it, out of the index, until then
      this.sql.exec("UPDATE traces SET dropped = ? WHERE tnum = ?", this.version, t.tnum);
      this.sql.exec("INSERT INTO stale VALUES ('trace', ?, -1, '', ?, ?)", t.tnum, created, this.version);
      this.maybeStale = true;
    } else this.deleteTrace(t.tnum);
  }

  restored(): void {
    // only in a refused batch, whose transaction rolls the drop back
  }

  private deleteTrace(tnum: number): void {
    for (const table of ["traces", "fields", "pending", "node_meta", "node_packs", "stale"])
      this.sql.exec(`DELETE FROM ${table} WHERE tnum = ?`, tnum);
    deleteTraceBodies(this.sql, tnum);
  }

  private deleteVersion(what: string, tnum: number, idx: number, name: string, ver: number): void {
    if (what === "node") {
      dropNodeBody(this.sql, tnum, idx, ver);
      this.sql.exec("DELETE FROM node_meta WHERE tnum = ? AND idx = ? AND ver = ?", tnum, idx, ver);
      dropPacked(this.sql, tnum, idx, ver);
    } else if (what === "field")
      this.sql.exec("DELETE FROM fields WHERE tnum = ? AND name = ? AND ver = ?", tnum, name, ver);
    else if (what === "pending") this.sql.exec("DELETE FROM pending WHERE tnum = ? AND ver = ?", tnum, ver);
  }

  /** A new version of something whose current version is `old`: keep the old one if it is needed, else delete it. */
  private supersede(what: string, tnum: number, idx: number, name: string, old: number | undefined): void {
    if (old === undefined) return;
    if (old === this.version) return this.deleteVersion(what, tnum, idx, name, old); // rewritten within the frame
    if (this.holds.needed(old, this.version)) {
      this.sql.exec("INSERT INTO stale VALUES (?, ?, ?, ?, ?, ?)", what, tnum, idx, name, old, this.version);
      this.maybeStale = true;
    } else this.deleteVersion(what, tnum, idx, name, old);
  }

  nodesAdded(t: TraceState, from: number, nodes: NodeState[]): void {
    const defer = this.defer();
    const bodies = nodes.map((node) => encodeNode(node));
    nodes.forEach((_, k) => {
      const idx = from + k;
      const info = t.nodes[idx]!;
      if (defer) this.appends!.add(t.tnum, NODES, idx, info.ver, bodies[k]!, info);
      else this.writeMeta(t.tnum, idx, info);
    });
    if (!defer)
      writeRun(
        this.sql,
        t.tnum,
        NODES,
        from,
        nodes.map((_, k) => ({ ver: t.nodes[from + k]!.ver, length: bodies[k]!.length })),
        (k) => bodies[k]!,
      );
  }

  nodesRemoved(t: TraceState, from: number): void {
    // only in a refused batch: the transaction rolls the rows back, and the appends go here
    this.appends?.cut(t.tnum, NODES, from);
  }

  nodeChanged(t: TraceState, index: number, node: NodeState, before: NodeInfo): void {
    this.writeThrough();
    const info = t.nodes[index]!;
    this.supersede("node", t.tnum, index, "", before.ver);
    this.writeMeta(t.tnum, index, info);
    writeBody(this.sql, t.tnum, NODES, index, info.ver, encodeNode(node));
  }

  nodeRestored(): void {
    // only in a refused batch: the transaction rolls the rows back
  }

  itemsAdded(t: TraceState, field: ItemField, from: number, items: Uint8Array[]): void {
    if (this.defer()) {
      items.forEach((item, k) => {
        this.appends!.add(t.tnum, KIND[field], from + k, this.version, item, null);
      });
      this.appends!.sizes(t);
      return;
    }
    writeRun(
      this.sql,
      t.tnum,
      KIND[field],
      from,
      items.map((i) => ({ ver: this.version, length: i.length })),
      (k) => items[k]!,
    );
    this.sql.exec("UPDATE traces SET lists = ? WHERE tnum = ?", listsJson(t), t.tnum);
  }

  itemsRemoved(t: TraceState, field: ItemField, from: number): void {
    // only in a refused batch: the transaction rolls the rows back, and the appends go here
    this.appends?.cut(t.tnum, KIND[field], from);
  }

  fieldsSet(t: TraceState, keys: string[]): void {
    if (keys.length === 0) return;
    this.writeThrough();
    const order = [...t.fields.keys()];
    for (const name of keys) {
      const slot = t.fields.get(name);
      const old = this.sql
        .exec<{ v: number | null }>("SELECT MAX(ver) AS v FROM fields WHERE tnum = ? AND name = ?", t.tnum, name)
        .one().v;
      this.supersede("field", t.tnum, -1, name, old ?? undefined);
      if (!slot || (slot.from !== "open" && slot.from !== "set" && slot.from !== "extra")) continue;
      const pos = order.indexOf(name);
      const src = SRC[slot.from];
      eachPart(slot.value, (part, data) => {
        this.sql.exec(
          "INSERT INTO fields (tnum, name, ver, part, pos, src, key, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
          t.tnum,
          name,
          this.version,
          part,
          pos,
          src,
          buffer(slot.key),
          data,
        );
      });
    }
  }

  pendingSet(t: TraceState): void {
    this.writeThrough();
    const old = this.sql.exec<{ v: number | null }>("SELECT MAX(ver) AS v FROM pending WHERE tnum = ?", t.tnum).one().v;
    this.supersede("pending", t.tnum, -1, "", old ?? undefined);
    eachPart(t.pending, (part, data) =>
      this.sql.exec(
        "INSERT INTO pending (tnum, ver, part, data) VALUES (?, ?, ?, ?)",
        t.tnum,
        this.version,
        part,
        data,
      ),
    );
  }

  private writeMeta(tnum: number, idx: number, info: NodeInfo): void {
    this.sql.exec(
      "INSERT OR REPLACE INTO node_meta (tnum, idx, ver, bytes, parents, dtype, shape, repaired, parent, role) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      tnum,
      idx,
      info.ver,
      info.bytes,
      info.parents,
      info.routed?.dtype ?? null,
      info.routed ? JSON.stringify(info.routed.shape) : null,
      info.repaired ? 1 : 0,
      // NULL is what rows of older releases hold ("not known"): a root is -1, no role ""
      info.parent === undefined ? null : (info.parent ?? -1),
      info.role === undefined ? null : (info.role ?? ""),
    );
  }
}

/** `fields.src`: 0 a header field (`open`), 1 a scalar (`set`), 2 a list the relay does not know (its whole array). */
const SRC = { open: 0, set: 1, extra: 2 } as const;

function listsJson(t: TraceState): string {
  return JSON.stringify(t.items);
}

/** A stored node body parsed (stored bodies were validated when they arrived). */
function parsedNode(data: Uint8Array, index: number): NodeState {
  return readNode(new Reader(data, 0, data.length, true), `nodes[${index}]`);
}

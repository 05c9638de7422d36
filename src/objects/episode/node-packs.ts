// Node metadata written at a checkpoint (EPISODE_SCHEMA 11): the NodeInfos of a trace's nodes appended since the last
// checkpoint (checkpoint.ts), consecutive from `idx`, in one row of `node_packs`, where node_meta wrote a row per
// node (one row written per turn: the cost bench's compressed episode wrote 200). node_meta keeps every other write
// (a node changed or written through, and all rows older releases wrote); a node's info is its newest version in
// either (load-index.ts), node_meta's at an equal version. An entry goes (null) when its version is superseded and
// not held (sql-store.ts `deleteVersion`), and a rewind takes the entries after it out; a pack left with none goes.
// A pack is a rowid table row with no other index: one row written per pack.

import type { NodeInfo } from "../../protocol/assembly/node.js";

/** Nodes per pack at most (~80 bytes of JSON each: a pack stays far below SQLite's 2 MB a row). */
export const PACK_NODES = 4096;

/** One node's info as node_meta's columns hold it: ver, bytes, parents, dtype, shape, repaired, parent, role. */
type Packed = [number, number, number, string | null, number[] | null, 0 | 1, number | null, string | null];

function pack(info: NodeInfo): Packed {
  return [
    info.ver,
    info.bytes,
    info.parents,
    info.routed?.dtype ?? null,
    info.routed ? [...info.routed.shape] : null,
    info.repaired ? 1 : 0,
    // as node_meta: NULL is "not known" (older releases), a root -1, no role ""
    info.parent === undefined ? null : (info.parent ?? -1),
    info.role === undefined ? null : (info.role ?? ""),
  ];
}

function unpack(p: Packed): NodeInfo {
  const [ver, bytes, parents, dtype, shape, repaired, parent, role] = p;
  return {
    bytes,
    parents,
    routed: dtype === null ? null : { dtype, shape: shape ?? [] },
    ver,
    repaired: repaired === 1,
    parent: parent === null ? undefined : parent < 0 ? null : parent,
    role: role === null ? undefined : role === "" ? null : role,
  };
}

function hasPacks(sql: SqlStorage): boolean {
  return sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'node_packs'").toArray().length > 0;
}

/** The infos of trace `tnum`'s nodes `from`, `from + 1`, … (a checkpoint's appends), in packs of PACK_NODES. */
export function writePacks(sql: SqlStorage, tnum: number, from: number, infos: readonly NodeInfo[]): void {
  for (let at = 0; at < infos.length; at += PACK_NODES) {
    const chunk = infos.slice(at, at + PACK_NODES);
    sql.exec(
      "INSERT INTO node_packs (tnum, idx, top, infos) VALUES (?, ?, ?, ?)",
      tnum,
      from + at,
      Math.max(...chunk.map((i) => i.ver)),
      JSON.stringify(chunk.map(pack)),
    );
  }
}

/** Every packed entry, in no particular order (load-index.ts keeps each node's newest). */
export function* packedInfos(sql: SqlStorage): Generator<{ tnum: number; idx: number; info: NodeInfo }> {
  if (!hasPacks(sql)) return;
  for (const r of sql.exec<{ tnum: number; idx: number; infos: string }>("SELECT tnum, idx, infos FROM node_packs")) {
    const entries = JSON.parse(r.infos) as Array<Packed | null>;
    for (let k = 0; k < entries.length; k++) {
      const e = entries[k];
      if (e) yield { tnum: r.tnum, idx: r.idx + k, info: unpack(e) };
    }
  }
}

/** Rewrite (or delete, when none is left) the pack `rowid` with `entries`. */
function save(sql: SqlStorage, rowid: number, entries: Array<Packed | null>): void {
  const left = entries.filter((e): e is Packed => e !== null);
  if (left.length === 0) sql.exec("DELETE FROM node_packs WHERE rowid = ?", rowid);
  else
    sql.exec(
      "UPDATE node_packs SET infos = ?, top = ? WHERE rowid = ?",
      JSON.stringify(entries),
      Math.max(...left.map((e) => e[0])),
      rowid,
    );
}

/** Node `idx` of trace `tnum` at version `ver` goes from its pack (superseded, nothing holds it). */
export function dropPacked(sql: SqlStorage, tnum: number, idx: number, ver: number): void {
  if (!hasPacks(sql)) return;
  for (const r of sql
    .exec<{ rowid: number; idx: number; infos: string }>(
      "SELECT rowid, idx, infos FROM node_packs WHERE tnum = ? AND idx <= ?",
      tnum,
      idx,
    )
    .toArray()) {
    const entries = JSON.parse(r.infos) as Array<Packed | null>;
    if (entries[idx - r.idx]?.[0] !== ver) continue;
    entries[idx - r.idx] = null;
    save(sql, r.rowid, entries);
  }
}

/** A rewind to `seq`: entries written after it go. */
export function rewindPacks(sql: SqlStorage, seq: number): void {
  if (!hasPacks(sql)) return;
  for (const r of sql
    .exec<{ rowid: number; infos: string }>("SELECT rowid, infos FROM node_packs WHERE top > ?", seq)
    .toArray()) {
    const entries = (JSON.parse(r.infos) as Array<Packed | null>).map((e) => (e && e[0] > seq ? null : e));
    save(sql, r.rowid, entries);
  }
}

/** The table's layout (layout.ts LATEST and migration 11). */
export const NODE_PACKS_TABLE =
  "CREATE TABLE node_packs (tnum INTEGER NOT NULL, idx INTEGER NOT NULL, top INTEGER NOT NULL, infos TEXT NOT NULL)";

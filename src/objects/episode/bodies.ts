// The `bodies` table of the assembled state (sql-store.ts): what kind of body a row holds, and
// bodies read back, reassembled from their parts (parts.ts).

import { ITEM_FIELDS, type ItemField } from "../../protocol/assembly/fields.js";
import { concatChunks } from "../../protocol/wire/writer.js";

/** The kind of a node's body. */
export const NODES = 0;
/** The kind of an item list's bodies (1..6). */
export const KIND: Record<ItemField, number> = Object.fromEntries(ITEM_FIELDS.map((f, i) => [f, i + 1])) as Record<
  ItemField,
  number
>;

/** The body of node `idx` of trace `tnum` at version `ver`. */
export function nodeBody(sql: SqlStorage, tnum: number, idx: number, ver: number): Uint8Array {
  const parts = sql
    .exec<{ data: ArrayBuffer }>(
      "SELECT data FROM bodies WHERE tnum = ? AND kind = 0 AND idx = ? AND ver = ? ORDER BY part",
      tnum,
      idx,
      ver,
    )
    .toArray();
  return concatChunks(parts.map((p) => new Uint8Array(p.data)));
}

/** Nodes [from, to) of trace `tnum` as of `asOf`: the newest version of each written by then. */
export function nodeBodies(sql: SqlStorage, tnum: number, from: number, to: number, asOf: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  let idx = -1;
  let parts: Uint8Array[] = [];
  const flush = () => {
    if (idx >= 0) out[idx - from] = concatChunks(parts);
  };
  // only the newest version's rows come back (older versions' bodies are never read into memory)
  for (const r of sql.exec<{ idx: number; data: ArrayBuffer }>(
    `SELECT b.idx, b.data FROM bodies b WHERE b.tnum = ?1 AND b.kind = 0 AND b.idx >= ?2 AND b.idx < ?3
       AND b.ver = (SELECT max(v.ver) FROM bodies v WHERE v.tnum = ?1 AND v.kind = 0 AND v.idx = b.idx AND v.ver <= ?4)
     ORDER BY b.idx, b.part`,
    tnum,
    from,
    to,
    asOf,
  )) {
    if (r.idx !== idx) {
      flush();
      idx = r.idx;
      parts = [];
    }
    parts.push(new Uint8Array(r.data));
  }
  flush();
  return out;
}

/** Items [from, to) of one list of trace `tnum` (items are never rewritten: one version each). */
export function itemBodies(sql: SqlStorage, tnum: number, field: ItemField, from: number, to: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  let idx = -1;
  let parts: Uint8Array[] = [];
  for (const r of sql.exec<{ idx: number; data: ArrayBuffer }>(
    "SELECT idx, data FROM bodies WHERE tnum = ? AND kind = ? AND idx >= ? AND idx < ? ORDER BY idx, part",
    tnum,
    KIND[field],
    from,
    to,
  )) {
    if (r.idx !== idx && idx >= 0) out.push(concatChunks(parts));
    if (r.idx !== idx) parts = [];
    idx = r.idx;
    parts.push(new Uint8Array(r.data));
  }
  if (idx >= 0) out.push(concatChunks(parts));
  return out;
}

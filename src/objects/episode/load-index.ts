// The index the object keeps in memory, read back from the state tables (src/objects/episode/sql-store.ts):
// the current traces in arrival order, each with its fields (the newest version of each, in key
// order), its pending preview, its list sizes and per node its NodeInfo. A woken object reads it
// once; a retraction reads it again after rewinding the store.

import type { Entry } from "../../protocol/assembly/delta.js";
import { ITEM_FIELDS, type ItemField } from "../../protocol/assembly/fields.js";
import { type ListSize, TraceState } from "../../protocol/assembly/trace.js";
import { decodeStrSpan } from "../../protocol/wire/utf8.js";
import { concatChunks } from "../../protocol/wire/writer.js";
import { packedInfos } from "./node-packs.js";

type Row = Record<string, SqlStorageValue>;

interface LoadedIndex {
  /** The current traces in arrival order. */
  traces: TraceState[];
  /** The lowest trace number not used yet. */
  nextTnum: number;
  /** The arrival order of the next new trace. */
  nextOrd: number;
}

export function loadIndex(sql: SqlStorage): LoadedIndex {
  const traces = new Map<number, TraceState>();
  const rows = sql.exec<Row>("SELECT tnum, id, lists FROM traces WHERE dropped IS NULL ORDER BY ord").toArray();
  const fields = newestFields(sql);
  const pending = pendingParts(sql);
  for (const r of rows) {
    const tnum = r.tnum as number;
    const entries = (src: number) => (fields.get(tnum) ?? []).filter((f) => f.src === src).map((f) => f.entry);
    const t = new TraceState(r.id as string, tnum, entries(0));
    t.restoreExtra(entries(2));
    t.set(entries(1));
    t.pending = concatChunks(pending.get(tnum)?.parts ?? []);
    const lists = JSON.parse(r.lists as string) as Record<ItemField, ListSize>;
    for (const f of ITEM_FIELDS) if (lists[f]) t.items[f] = lists[f];
    traces.set(tnum, t);
  }
  addNodes(sql, traces);
  const max = sql
    .exec<{ t: number | null; o: number | null }>("SELECT MAX(tnum) AS t, MAX(ord) AS o FROM traces")
    .one();
  return { traces: [...traces.values()], nextTnum: (max.t ?? 0) + 1, nextOrd: (max.o ?? 0) + 1 };
}

/** Per trace its fields' newest versions in key order, reassembled from their parts (`src` 0: opened, 1: set, 2: an unknown list). */
function newestFields(sql: SqlStorage): Map<number, Array<{ src: number; entry: Entry }>> {
  let cur: {
    tnum: number;
    name: string;
    ver: number;
    pos: number;
    src: number;
    key: Uint8Array;
    parts: Uint8Array[];
  } | null = null;
  const newest = new Map<string, { pos: number; src: number; entry: Entry; tnum: number }>();
  const flush = () => {
    if (!cur) return;
    newest.set(`${cur.tnum}\n${cur.name}`, {
      tnum: cur.tnum,
      pos: cur.pos,
      src: cur.src,
      entry: { key: decodeStrSpan(cur.key), keySpan: cur.key, value: concatChunks(cur.parts) },
    });
  };
  for (const f of sql.exec<Row>(
    "SELECT tnum, name, ver, pos, src, key, value FROM fields ORDER BY tnum, name, ver, part",
  )) {
    if (!cur || cur.tnum !== f.tnum || cur.name !== f.name || cur.ver !== f.ver) {
      flush();
      cur = {
        tnum: f.tnum as number,
        name: f.name as string,
        ver: f.ver as number,
        pos: f.pos as number,
        src: f.src as number,
        key: bytes(f.key),
        parts: [],
      };
    }
    cur.parts.push(bytes(f.value));
  }
  flush();
  const fields = new Map<number, Array<{ src: number; entry: Entry }>>();
  for (const f of [...newest.values()].sort((a, b) => a.tnum - b.tnum || a.pos - b.pos)) {
    const list = fields.get(f.tnum) ?? [];
    list.push({ src: f.src, entry: f.entry });
    fields.set(f.tnum, list);
  }
  return fields;
}

/** Per trace the parts of its pending preview's newest version. */
function pendingParts(sql: SqlStorage): Map<number, { ver: number; parts: Uint8Array[] }> {
  const pending = new Map<number, { ver: number; parts: Uint8Array[] }>();
  for (const p of sql.exec<Row>("SELECT tnum, ver, data FROM pending ORDER BY tnum, ver, part")) {
    const have = pending.get(p.tnum as number);
    if (!have || have.ver !== p.ver) pending.set(p.tnum as number, { ver: p.ver as number, parts: [bytes(p.data)] });
    else have.parts.push(bytes(p.data));
  }
  return pending;
}

/** Each node's NodeInfo (its newest version, node_meta's at an equal one: node-packs.ts) into its trace. */
function addNodes(sql: SqlStorage, traces: Map<number, TraceState>): void {
  for (const p of packedInfos(sql)) {
    const t = traces.get(p.tnum);
    const have = t?.nodes[p.idx];
    if (t && (!have || have.ver < p.info.ver)) t.nodes[p.idx] = p.info;
  }
  for (const n of sql.exec<Row>(
    "SELECT tnum, idx, ver, bytes, parents, dtype, shape, repaired, parent, role FROM node_meta ORDER BY tnum, idx, ver",
  )) {
    const t = traces.get(n.tnum as number);
    if (!t) continue;
    const have = t.nodes[n.idx as number];
    if (have && have.ver > (n.ver as number)) continue;
    t.nodes[n.idx as number] = {
      bytes: n.bytes as number,
      parents: n.parents as number,
      routed: n.dtype === null ? null : { dtype: n.dtype as string, shape: JSON.parse(n.shape as string) as number[] },
      ver: n.ver as number,
      repaired: n.repaired === 1,
      // NULL: stored by an older release, not known here (src/objects/episode/row-facts.ts reads its body)
      parent: n.parent === null ? undefined : (n.parent as number) < 0 ? null : (n.parent as number),
      role: n.role === null ? undefined : n.role === "" ? null : (n.role as string),
    };
  }
}

function bytes(v: SqlStorageValue): Uint8Array {
  return new Uint8Array(v as ArrayBuffer);
}

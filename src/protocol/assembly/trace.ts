// One assembled trace as the assembly's index holds it: an ordered map of fields shaped like the
// reference's raw trace dict (`{**open, <list fields>: [], pending: []}`, then `set` keys in
// arrival order), with scalar values and `pending` kept as received spans, and per list what
// applying a delta and sizing the episode need: per node its NodeInfo, per item list a count and
// a byte total. The node and item bytes themselves are in its Bodies (src/protocol/assembly/bodies.ts).

import { Reader } from "../wire/reader.js";
import { ChunkWriter, EMPTY_ARRAY, encodeStr } from "../wire/writer.js";
import type { Entry } from "./delta.js";
import { ITEM_FIELDS, type ItemField, LIST_FIELDS, type ListField } from "./fields.js";
import type { NodeInfo } from "./node.js";

/** Where a field's value lives: its own span, a list, or the pending preview. */
export type Slot =
  | { readonly key: Uint8Array; readonly from: "open" | "set"; readonly value: Uint8Array }
  | { readonly key: Uint8Array; readonly from: "list"; readonly list: ListField }
  /** A list the relay does not know (a newer reference's list key), its items so far as one array. */
  | { readonly key: Uint8Array; readonly from: "extra"; readonly value: Uint8Array }
  | { readonly key: Uint8Array; readonly from: "pending" };

const LIST_KEYS = Object.fromEntries(LIST_FIELDS.map((f) => [f, encodeStr(f)])) as Record<ListField, Uint8Array>;
const PENDING_KEY = encodeStr("pending");

/** Count and total encoded bytes of one item list. */
export interface ListSize {
  count: number;
  bytes: number;
}

export class TraceState {
  /** Slots in key order. A slot object is never changed in place (a `set` puts a new one). */
  readonly fields = new Map<string, Slot>();
  /** One entry per node; an entry is replaced, never changed, when its node is. */
  readonly nodes: NodeInfo[] = [];
  readonly items: Record<ItemField, ListSize> = Object.fromEntries(
    ITEM_FIELDS.map((f) => [f, { count: 0, bytes: 0 }]),
  ) as Record<ItemField, ListSize>;
  pending: Uint8Array = EMPTY_ARRAY;

  /**
   * @param id the trace id
   * @param tnum the Bodies' number for this incarnation of the trace (a trace discarded and
   *   opened again is a new incarnation)
   */
  constructor(
    readonly id: string,
    readonly tnum: number,
    open: Entry[],
  ) {
    for (const e of open) this.fields.set(e.key, { key: e.keySpan, from: "open", value: e.value });
    for (const f of LIST_FIELDS) this.fields.set(f, { key: LIST_KEYS[f], from: "list", list: f });
    this.fields.set("pending", { key: PENDING_KEY, from: "pending" });
  }

  count(field: ListField): number {
    return field === "nodes" ? this.nodes.length : this.items[field].count;
  }

  /**
   * `trace.update(set)`: a known key keeps its position (and stays an `open` key if it was one), a new one goes last.
   */
  set(entries: Entry[]): void {
    for (const e of entries) {
      const slot = this.fields.get(e.key);
      const from = slot?.from === "open" ? "open" : "set";
      this.fields.set(e.key, { key: slot?.key ?? e.keySpan, from, value: e.value });
    }
  }

  /**
   * Append an unknown list's items (`e.value`, an array) as a newer reference would: to the list of
   * that name, which sits after the known lists (where the reference's `open` would have made it),
   * new ones in arrival order. False, and nothing changed, when the trace holds that name as a
   * header or scalar field (then it is no list; only the frame keeps it).
   */
  extend(e: Entry): boolean {
    const slot = this.fields.get(e.key);
    if (slot && slot.from !== "extra") return false;
    const value = slot ? joinArrays(slot.value, e.value) : e.value;
    if (slot) this.fields.set(e.key, { key: slot.key, from: "extra", value });
    else this.insertBeforePending({ key: e.keySpan, from: "extra", value }, e.key);
    return true;
  }

  /** The unknown lists read back from storage (in key order): each goes where `extend` put it. */
  restoreExtra(entries: Entry[]): void {
    for (const e of entries) this.insertBeforePending({ key: e.keySpan, from: "extra", value: e.value }, e.key);
  }

  private insertBeforePending(slot: Slot, name: string): void {
    const after = [...this.fields].slice([...this.fields.keys()].indexOf("pending"));
    for (const [k] of after) this.fields.delete(k);
    this.fields.set(name, slot);
    for (const [k, v] of after) this.fields.set(k, v);
  }

  /** Header entries (`open`) and scalar entries (`set`) as they stand now, in order. */
  entries(from: "open" | "set"): Array<{ key: Uint8Array; value: Uint8Array }> {
    const out: Array<{ key: Uint8Array; value: Uint8Array }> = [];
    for (const slot of this.fields.values()) if (slot.from === from) out.push({ key: slot.key, value: slot.value });
    return out;
  }
}

/** Two msgpack arrays as one: the first's items, then the second's. */
export function joinArrays(a: Uint8Array, b: Uint8Array): Uint8Array {
  const ra = new Reader(a, 0, a.length, true);
  const na = ra.arrayHeader();
  const rb = new Reader(b, 0, b.length, true);
  const nb = rb.arrayHeader();
  const w = new ChunkWriter();
  w.arrayHeader(na + nb);
  w.raw(a.subarray(ra.pos));
  w.raw(b.subarray(rb.pos));
  return w.bytes();
}

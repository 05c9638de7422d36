// One assembled trace as the assembly's index holds it: an ordered map of fields shaped like the
// reference's raw trace dict (`{**open, <list fields>: [], pending: []}`, then `set` keys in
// arrival order), with scalar values and `pending` kept as received spans, and per list what
// applying a delta and sizing the episode need: per node its NodeInfo, per item list a count and
// a byte total. The node and item bytes themselves live in the store (src/protocol/assembly/store.ts).

import type { Entry } from "./delta.js";
import { ITEM_FIELDS, LIST_FIELDS, type ItemField, type ListField } from "./fields.js";
import type { NodeInfo } from "./node.js";
import { EMPTY_ARRAY, encodeStr } from "../wire/writer.js";

/** Where a field's value lives: its own span, a list, or the pending preview. */
export type Slot =
  | { readonly key: Uint8Array; readonly from: "open" | "set"; readonly value: Uint8Array }
  | { readonly key: Uint8Array; readonly from: "list"; readonly list: ListField }
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
   * @param tnum the store's number for this incarnation of the trace (a trace discarded and
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

  /** Header entries (`open`) and scalar entries (`set`) as they stand now, in order. */
  entries(from: "open" | "set"): Array<{ key: Uint8Array; value: Uint8Array }> {
    const out: Array<{ key: Uint8Array; value: Uint8Array }> = [];
    for (const slot of this.fields.values()) if (slot.from === from) out.push({ key: slot.key, value: slot.value });
    return out;
  }
}

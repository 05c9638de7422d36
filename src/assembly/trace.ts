// One assembled trace: an ordered map of fields, shaped like the reference's raw trace dict
// (`{**open, <list fields>: [], pending: []}`, then `set` keys in arrival order), with list
// items and scalar values kept as received spans.

import type { Entry } from "./delta.js";
import { LIST_FIELDS, type ListField } from "./fields.js";
import { writeNode, type NodeState } from "./node.js";
import { ChunkWriter, EMPTY_ARRAY, encodeStr } from "../wire/writer.js";

/** Where a field's value lives: its own span, a list of items, or the pending preview. */
type Slot = { key: Uint8Array; from: "open" | "set"; value: Uint8Array } | { key: Uint8Array; from: "list"; list: ListField } | { key: Uint8Array; from: "pending" };

const LIST_KEYS = Object.fromEntries(LIST_FIELDS.map((f) => [f, encodeStr(f)])) as Record<ListField, Uint8Array>;
const PENDING_KEY = encodeStr("pending");

export class TraceState {
  readonly id: string;
  readonly fields = new Map<string, Slot>();
  readonly nodes: NodeState[] = [];
  readonly items: Record<Exclude<ListField, "nodes">, Uint8Array[]> = {
    calls: [], payload: [], errors: [], extra_usage: [], request_rewrites: [], response_rewrites: [],
  };
  pending: Uint8Array = EMPTY_ARRAY;

  constructor(id: string, open: Entry[]) {
    this.id = id;
    for (const e of open) this.fields.set(e.key, { key: e.keySpan, from: "open", value: e.value });
    for (const f of LIST_FIELDS) this.fields.set(f, { key: LIST_KEYS[f], from: "list", list: f });
    this.fields.set("pending", { key: PENDING_KEY, from: "pending" });
  }

  count(field: ListField): number {
    return field === "nodes" ? this.nodes.length : this.items[field].length;
  }

  /** `trace.update(set)`: a known key keeps its position, a new one goes last. */
  set(entries: Entry[]): void {
    for (const e of entries) {
      const slot = this.fields.get(e.key);
      const from = slot?.from === "open" ? "open" : "set";
      this.fields.set(e.key, { key: slot?.key ?? e.keySpan, from, value: e.value });
    }
  }

  /** Write the trace map; the checkpoint form keeps `pending`, the finished form drops it. */
  write(w: ChunkWriter, withPending: boolean): void {
    w.mapHeader(this.fields.size - (withPending ? 0 : 1));
    for (const slot of this.fields.values()) {
      if (slot.from === "pending") {
        if (!withPending) continue;
        w.raw(slot.key);
        w.raw(this.pending);
        continue;
      }
      w.raw(slot.key);
      if (slot.from === "list") this.writeList(w, slot.list);
      else w.raw(slot.value);
    }
  }

  writeList(w: ChunkWriter, field: ListField): void {
    if (field === "nodes") {
      w.arrayHeader(this.nodes.length);
      for (const node of this.nodes) writeNode(w, node);
    } else {
      const items = this.items[field];
      w.arrayHeader(items.length);
      for (const item of items) w.raw(item);
    }
  }

  /** Header entries (`open`) and scalar entries (`set`) as they stand now, in order. */
  entries(from: "open" | "set"): Array<{ key: Uint8Array; value: Uint8Array }> {
    const out: Array<{ key: Uint8Array; value: Uint8Array }> = [];
    for (const slot of this.fields.values()) if (slot.from === from) out.push({ key: slot.key, value: slot.value });
    return out;
  }
}

// The producer side of the envelope: track what the relay has acknowledged, per trace, and
// wrap each outgoing delta with it. This is the worker's `TraceCursor` seen from the sink:
// it advances only on an ack, so after a lost ack the next (re-diffed) delta goes out with
// the same `acked` view and the relay trims what it already holds.

import { parseDelta } from "../assembly/delta";
import { LIST_FIELDS, type ListField } from "../assembly/fields";
import type { Envelope, ProducerAck } from "./envelope";

interface TraceAck {
  open: boolean;
  counts: Record<ListField, number>;
  /** Acknowledged semantic_parents per node. */
  links: number[];
}

export class ProducerCursor {
  private readonly traces = new Map<string, TraceAck>();
  seq = 0;

  constructor(readonly producer = "") {}

  /** Wrap `delta` (upstream msgpack bytes) with the next seq and the acked view of its trace. */
  envelope(delta: Uint8Array): Envelope {
    const d = parseDelta(delta);
    const t = this.traces.get(d.trace);
    const acked: ProducerAck = { open: t?.open ?? false, counts: {}, links: new Map() };
    if (t) {
      for (const f of LIST_FIELDS) if (t.counts[f]) acked.counts[f] = t.counts[f];
      for (const { index } of d.links ?? []) acked.links.set(index, t.links[index] ?? 0);
    }
    return { producer: this.producer, seq: ++this.seq, acked, delta };
  }

  /** Record that the relay acknowledged `delta`. */
  acknowledge(delta: Uint8Array): void {
    const d = parseDelta(delta);
    if (d.discard) {
      this.traces.delete(d.trace);
      return;
    }
    let t = this.traces.get(d.trace);
    if (!t) {
      t = { open: false, counts: Object.fromEntries(LIST_FIELDS.map((f) => [f, 0])) as Record<ListField, number>, links: [] };
      this.traces.set(d.trace, t);
    }
    if (d.open) t.open = true;
    for (const { index, items } of d.links ?? []) t.links[index] = (t.links[index] ?? 0) + items.length;
    for (const node of d.nodes ?? []) t.links.push(node.parents.length);
    t.counts.nodes += d.nodes?.length ?? 0;
    for (const f of LIST_FIELDS) if (f !== "nodes") t.counts[f] += d.lists[f]?.length ?? 0;
  }
}

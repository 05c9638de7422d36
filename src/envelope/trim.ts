// Exactly-once: trim a re-diffed delta to what the assembly does not hold yet.
//
// After a lost ack the worker's cursor stays put and its next delta repeats everything since
// that cursor (`open`, list items, links). The envelope says where the cursor stood (`acked`);
// the assembly knows what it holds. Items between the two were already applied and are
// dropped (after checking they are the same bytes). A re-sent node may have changed in the
// two ways a node can change after it was committed (more links, a repaired final row): those
// become `links` / `routing_repairs` entries, so the trimmed delta is still a plain upstream
// delta that any reference `EpisodeAssembly` holding the same state can apply.
// `routing_repairs`, `set` and `pending` are idempotent and pass through.

import type { EpisodeAssembly } from "../assembly/episode-assembly.js";
import { DeltaError } from "../assembly/errors.js";
import { LIST_FIELDS, type ItemField, type ListField } from "../assembly/fields.js";
import { writeNdArray, type NdArray } from "../assembly/ndarray.js";
import { resentNodeExtras } from "../assembly/node.js";
import { equalBytes } from "../wire/bytes.js";
import type { Entry, ParsedDelta } from "../assembly/delta.js";
import type { ProducerAck } from "./envelope.js";
import { ChunkWriter, encodeStr } from "../wire/writer.js";

const KEY = Object.fromEntries(["links", "routing_repairs"].map((k) => [k, encodeStr(k)]));

/** The trimmed delta's bytes, or null when nothing needed trimming (apply the delta as is). */
export function trimDelta(asm: EpisodeAssembly, d: ParsedDelta, acked: ProducerAck): Uint8Array | null {
  if (d.discard) return null;
  const held = asm.traces.get(d.trace);
  const conflict = (field: string, msg: string) => new DeltaError("producer_conflict", field, msg);
  if (!held) {
    if (acked.open) throw conflict("acked.open", `the producer had trace ${JSON.stringify(d.trace)} acknowledged, but the relay does not hold it`);
    for (const f of LIST_FIELDS) {
      if ((acked.counts[f] ?? 0) > 0) throw conflict(`acked.${f}`, `the producer had ${acked.counts[f]} ${f} acknowledged on a trace the relay does not hold`);
    }
    return null;
  }

  let changed = false;
  const dropOpen = d.open !== undefined && !acked.open;
  if (dropOpen) changed = true;

  // List fields: skip the items the relay already holds past the acked count.
  const skip: Partial<Record<ListField, number>> = {};
  const extraLinks: Array<{ index: number; items: Uint8Array[] }> = [];
  const extraRows: Array<{ index: number; row: NdArray }> = [];
  for (const f of LIST_FIELDS) {
    const items: unknown[] | undefined = f === "nodes" ? d.nodes : d.lists[f];
    if (!items) continue;
    const base = acked.counts[f] ?? 0;
    const have = held.count(f);
    if (base > have) throw conflict(`acked.${f}`, `the producer had ${base} ${f} acknowledged, the relay holds ${have}`);
    const dup = have - base;
    if (dup === 0) continue;
    if (dup > items.length) throw conflict(f, `the relay holds ${dup} ${f} past the acknowledged count, the delta re-sends ${items.length}`);
    for (let k = 0; k < dup; k++) {
      const at = base + k;
      if (f === "nodes") {
        const extras = resentNodeExtras(asm.node(held, at), d.nodes![k]!, `nodes[${k}]`);
        if (extras.links.length) extraLinks.push({ index: at, items: extras.links });
        if (extras.row) extraRows.push({ index: at, row: extras.row });
      } else if (!equalBytes(asm.store.items(held.tnum, f as ItemField, at, at + 1)[0]!, items[k] as Uint8Array)) {
        throw conflict(`${f}[${k}]`, `re-sent item differs from the held ${f}[${at}]`);
      }
    }
    skip[f] = dup;
    changed = true;
  }

  // Links on held nodes: skip the ones past the acked count that the relay already holds.
  const links: Array<{ index: number; items: Uint8Array[] }> = [];
  for (const { index, items } of d.links ?? []) {
    const info = held.nodes[index];
    if (!info) {
      links.push({ index, items }); // out of range: apply will refuse it with the precise error
      continue;
    }
    const base = acked.links.get(index);
    if (base === undefined) throw conflict(`acked.links[${index}]`, "missing: every node in `links` needs its acknowledged link count");
    const have = info.parents;
    const dup = have - base;
    if (dup < 0) throw conflict(`acked.links[${index}]`, `the producer had ${base} links acknowledged, the relay holds ${have}`);
    if (dup > items.length) throw conflict(`links[${index}]`, `the relay holds ${dup} links past the acknowledged count, the delta re-sends ${items.length}`);
    const parents = dup > 0 ? asm.node(held, index).parents : [];
    for (let k = 0; k < dup; k++) {
      if (!equalBytes(parents[base + k]!, items[k]!)) throw conflict(`links[${index}][${k}]`, "re-sent link differs from the held one");
    }
    if (dup > 0) changed = true;
    if (dup < items.length) links.push({ index, items: items.slice(dup) });
  }
  if (!changed) return null;
  links.push(...extraLinks);

  // Re-encode in the upstream key order, with the trimmed values.
  const out: Array<{ key: Uint8Array; write: (w: ChunkWriter) => void }> = [];
  const raw = (e: Entry) => out.push({ key: e.keySpan, write: (w) => w.raw(e.value) });
  const byKey = new Map(d.entries.map((e) => [e.key, e]));
  const take = (k: string) => {
    const e = byKey.get(k);
    byKey.delete(k);
    return e;
  };
  raw(take("trace")!);
  const open = take("open");
  if (open && !dropOpen) raw(open);
  take("links");
  if (links.length) {
    out.push({
      key: KEY.links!,
      write: (w) => {
        w.mapHeader(links.length);
        for (const l of links) {
          w.int(l.index);
          w.arrayHeader(l.items.length);
          for (const i of l.items) w.raw(i);
        }
      },
    });
  }
  const repairs = take("routing_repairs");
  if (repairs || extraRows.length) {
    const given = d.repairs ?? [];
    out.push({
      key: KEY.routing_repairs!,
      write: (w) => {
        w.mapHeader(given.length + extraRows.length);
        for (const r of given) {
          w.int(r.index);
          w.raw(r.span);
        }
        for (const r of extraRows) {
          w.int(r.index);
          writeNdArray(w, r.row);
        }
      },
    });
  }
  for (const f of LIST_FIELDS) {
    const e = take(f);
    if (!e) continue;
    const n = skip[f] ?? 0;
    if (n === 0) {
      raw(e);
      continue;
    }
    const items: Uint8Array[] = f === "nodes" ? d.nodes!.map((x) => x.span) : d.lists[f]!;
    out.push({
      key: e.keySpan,
      write: (w) => {
        w.arrayHeader(items.length - n);
        for (let i = n; i < items.length; i++) w.raw(items[i]!);
      },
    });
  }
  for (const e of byKey.values()) raw(e); // set, pending, and keys the relay does not know
  const w = new ChunkWriter();
  w.mapHeader(out.length);
  for (const o of out) {
    w.raw(o.key);
    o.write(w);
  }
  return w.bytes();
}

// What a turn writes besides its frames (record-store.ts): the meta fields every message changes, kept on
// its last frame's row (`frames.turn`, episode schema 10) rather than in the meta row, and the
// producers' ledger as meta and the turns keep it (JSON).

import type { ProducerLedger, Unconfirmed } from "../../protocol/envelope/ledger.js";

/** What a message changes in meta at every turn, kept on its last frame (`frames.turn`, JSON). */
export interface Turn {
  seq: number;
  bytes: number;
  traces: number;
  nodes: number;
  calls: number;
  updated: number;
  /** The ledger as meta's `producers` column keeps it. */
  producers: string;
  /** The assembled state's checkpoint (meta.checkpoint) as of this turn. */
  checkpoint?: number | null;
}

/** Meta's fields a `Turn` carries: the others changing means the meta row is written. */
const TURN_FIELDS: ReadonlySet<string> = new Set<keyof Turn>(["seq", "bytes", "traces", "nodes", "calls", "updated"]);

/** Whether two metas (record-store.ts's `Meta`; generic so this module imports nothing back) differ only in the fields a turn carries. */
export function sameButTurn<M extends object>(a: M, b: M): boolean {
  for (const k of Object.keys(a) as Array<keyof M>) {
    if (TURN_FIELDS.has(k as string)) continue;
    const x = a[k];
    const y = b[k];
    if (x === y) continue;
    if (x instanceof Uint8Array && y instanceof Uint8Array) {
      if (x.length !== y.length || x.some((v, i) => v !== y[i])) return false;
    } else if (JSON.stringify(x) !== JSON.stringify(y)) return false;
  }
  return true;
}

/** The ledger as meta keeps it: `{name: {last, unconfirmed}}` (the table before version 9 had these columns). */
export function ledgerJson(ledger: ProducerLedger): string {
  return JSON.stringify(
    Object.fromEntries([...ledger].map(([name, p]) => [name, { last: p.last, unconfirmed: p.unconfirmed }])),
  );
}

export function ledgerOf(json: string | null): ProducerLedger {
  const out: ProducerLedger = new Map();
  if (json === null) return out;
  for (const [name, p] of Object.entries(
    JSON.parse(json) as Record<string, { last: number; unconfirmed: Unconfirmed[] }>,
  ))
    out.set(name, { last: p.last, unconfirmed: p.unconfirmed });
  return out;
}

// The producer ledger (src/protocol/envelope/ledger.ts) on its own: test/node/envelope.test.ts checks the
// resulting episode states through MemoryEpisode; here each function's decision is checked
// directly, including the parts that test does not reach (retractable, confirmAll, copyLedger).
import { describe, expect, it } from "vitest";
import type { Envelope } from "../../src/protocol/envelope/envelope.js";
import {
  confirmAll,
  copyLedger,
  decide,
  type ProducerLedger,
  type ProducerState,
  record,
  retractable,
} from "../../src/protocol/envelope/ledger.js";

const DELTA = Uint8Array.of(0x80);
const env = (producer: string, seq: number, cursor: number | null): Envelope => ({
  producer,
  seq,
  cursor,
  delta: DELTA,
});
const ledgerOf = (entries: Record<string, ProducerState>): ProducerLedger => new Map(Object.entries(entries));

/** w1 applied pseq 3 (as episode seq 10) and pseq 5 (as 12) after its cursor; w2 has pseq 7 (as 11). */
const sample = () =>
  ledgerOf({
    w1: {
      last: 5,
      unconfirmed: [
        { pseq: 3, seq: 10 },
        { pseq: 5, seq: 12 },
      ],
    },
    w2: { last: 7, unconfirmed: [{ pseq: 7, seq: 11 }] },
  });

describe("decide", () => {
  it.each<[string, Envelope, ReturnType<typeof decide>]>([
    ["a new producer, no cursor", env("new", 1, null), { duplicate: false, retract: [] }],
    ["a new producer, with a cursor", env("new", 4, 2), { duplicate: false, retract: [] }],
    ["seq equal to the last applied", env("w1", 5, 4), { duplicate: true }],
    ["seq below the last applied", env("w1", 2, null), { duplicate: true }],
    ["seq 0 (a bare delta in a batch) is never a duplicate", env("w1", 0, 0), { duplicate: false, retract: [] }],
    ["negative seq is treated as bare", env("w1", -1, 0), { duplicate: false, retract: [] }],
    ["no cursor: nothing retracted", env("w1", 6, null), { duplicate: false, retract: [] }],
    ["cursor at the newest applied: nothing retracted", env("w1", 6, 5), { duplicate: false, retract: [] }],
    ["cursor between: the frames above it", env("w1", 6, 4), { duplicate: false, retract: [{ pseq: 5, seq: 12 }] }],
    ["cursor at the older one: only the newer", env("w1", 6, 3), { duplicate: false, retract: [{ pseq: 5, seq: 12 }] }],
    [
      "cursor below both: both, oldest first",
      env("w1", 9, 2),
      {
        duplicate: false,
        retract: [
          { pseq: 3, seq: 10 },
          { pseq: 5, seq: 12 },
        ],
      },
    ],
    [
      "cursor 0: everything unconfirmed of that producer only",
      env("w2", 8, 0),
      { duplicate: false, retract: [{ pseq: 7, seq: 11 }] },
    ],
  ])("%s", (_label, e, expected) => {
    const ledger = sample();
    const before = JSON.stringify([...ledger]);
    expect(decide(ledger, e)).toStrictEqual(expected);
    expect(JSON.stringify([...ledger])).toBe(before); // deciding changes nothing
  });
});

describe("record", () => {
  it("an envelope with a cursor: last moves up and only this frame stays unconfirmed", () => {
    const ledger = sample();
    record(ledger, env("w1", 6, 4), 13);
    expect(ledger.get("w1")).toStrictEqual({ last: 6, unconfirmed: [{ pseq: 6, seq: 13 }] });
    expect(ledger.get("w2")).toStrictEqual({ last: 7, unconfirmed: [{ pseq: 7, seq: 11 }] });
  });

  it("an envelope without a cursor: last moves up, the unconfirmed frames stay", () => {
    const ledger = sample();
    record(ledger, env("w1", 8, null), 14);
    expect(ledger.get("w1")).toStrictEqual({
      last: 8,
      unconfirmed: [
        { pseq: 3, seq: 10 },
        { pseq: 5, seq: 12 },
      ],
    });
  });

  it("a new producer gets an entry", () => {
    const ledger: ProducerLedger = new Map();
    record(ledger, env("p", 1, 0), 1);
    record(ledger, env("q", 4, null), 2);
    expect([...ledger]).toStrictEqual([
      ["p", { last: 1, unconfirmed: [{ pseq: 1, seq: 1 }] }],
      ["q", { last: 4, unconfirmed: [] }],
    ]);
  });

  it("a bare delta (seq 0) is not recorded", () => {
    const ledger = sample();
    const before = JSON.stringify([...ledger]);
    record(ledger, env("w1", 0, 0), 20);
    record(ledger, env("fresh", 0, null), 21);
    expect(JSON.stringify([...ledger])).toBe(before);
  });
});

describe("retractable, confirmAll, copyLedger", () => {
  it("retractable lists every producer's unconfirmed episode seqs", () => {
    expect(retractable(sample()).sort((a, b) => a - b)).toStrictEqual([10, 11, 12]);
    expect(retractable(new Map())).toStrictEqual([]);
  });

  it("confirmAll empties every unconfirmed list and keeps each producer's last", () => {
    const ledger = sample();
    confirmAll(ledger);
    expect([...ledger]).toStrictEqual([
      ["w1", { last: 5, unconfirmed: [] }],
      ["w2", { last: 7, unconfirmed: [] }],
    ]);
    expect(retractable(ledger)).toStrictEqual([]);
    expect(decide(ledger, env("w1", 6, 0))).toStrictEqual({ duplicate: false, retract: [] });
    expect(decide(ledger, env("w1", 5, 0))).toStrictEqual({ duplicate: true });
  });

  it("copyLedger is deep: changing the copy leaves the original as it was", () => {
    const original = sample();
    const copy = copyLedger(original);
    expect(copy).toStrictEqual(original);
    record(copy, env("w1", 6, 4), 13);
    copy.get("w2")!.unconfirmed.push({ pseq: 8, seq: 15 });
    copy.get("w2")!.last = 99;
    record(copy, env("w3", 1, 0), 16);
    confirmAll(copy);
    expect(original).toStrictEqual(sample());
  });
});

describe("a producer's sends, step by step", () => {
  it("a lost ack is retracted by the next re-diff; an acknowledged one is confirmed", () => {
    const ledger: ProducerLedger = new Map();
    let seq = 0;
    const apply = (e: Envelope) => {
      const d = decide(ledger, e);
      if (!d.duplicate) record(ledger, e, ++seq);
      return d;
    };
    expect(apply(env("w", 1, 0))).toStrictEqual({ duplicate: false, retract: [] }); // episode seq 1, acked
    expect(apply(env("w", 2, 1))).toStrictEqual({ duplicate: false, retract: [] }); // episode seq 2, ack lost
    expect(retractable(ledger)).toStrictEqual([2]);
    // the worker re-diffs against its cursor (still 1): frame 2 is taken back
    expect(apply(env("w", 3, 1))).toStrictEqual({ duplicate: false, retract: [{ pseq: 2, seq: 2 }] }); // episode seq 3, acked
    expect(retractable(ledger)).toStrictEqual([3]);
    // a resend of 3 is a duplicate; the next send (cursor 3) confirms it
    expect(apply(env("w", 3, 1))).toStrictEqual({ duplicate: true });
    expect(apply(env("w", 4, 3))).toStrictEqual({ duplicate: false, retract: [] });
    expect(ledger.get("w")).toStrictEqual({ last: 4, unconfirmed: [{ pseq: 4, seq: 4 }] });
  });
});

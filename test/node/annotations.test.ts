// The trainer's annotations (src/protocol/annotations/): prime-rl's records checked and merged per trace
// (info deeply, branch entries in order), and folded onto the nodes exactly as prime-rl's
// `fold_trace_updates` folds its updates: on prime-rl's own fixture (its orchestrator's and
// trainer's records for one trace) and on the cases its fold rules single out.
import { describe, expect, it } from "vitest";
import { branchPaths, type FoldNode, foldOntoNodes, mismatchKl } from "../../src/protocol/annotations/fold.js";
import {
  decodeTraceAnnotations,
  encodeTraceAnnotations,
  MAX_INFO_KEYS,
  mergeRecord,
  parseAnnotationRecords,
  type TraceAnnotations,
} from "../../src/protocol/annotations/records.js";
import { DeltaError } from "../../src/protocol/assembly/errors.js";
import { type Json, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless, encodeLossless, fromJson, LMap, type LValue } from "../../src/protocol/wire/lossless.js";

const TRACE = "5f0c2d6e9a8b4c1d8e7f6a5b4c3d2e1f";
const nulls = (n: number) => new Array<null>(n).fill(null);

/** prime-rl's fixture trace: a user prompt of 12 tokens, then an assistant node of 5 whose last 2 are sampled (one branch, 17 tokens). */
const NODES: FoldNode[] = [
  {
    parent: null,
    token_ids: [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198],
    mask: new Array(12).fill(false),
  },
  { parent: 0, token_ids: [151644, 77091, 198, 19, 151645], mask: [false, false, false, true, true] },
];
/** Its orchestrator's record (stamp_batch at ship step 4): advantages full length, 0.0 off the sampled tokens. */
const ORCH = {
  version: 1,
  trace_id: TRACE,
  info: { effective: true, ship: { step: 4, time: 1764644020.5 }, advantage: 0.5 },
  branches: [{ index: 0, advantages: [...new Array(15).fill(0), 0.5, 0.5] }],
};
/** Its trainer's record (AnnotationWriter): info {}, values at the loss mask only, position 0 null. */
const TRAINER = {
  version: 1,
  trace_id: TRACE,
  info: {},
  branches: [
    {
      index: 0,
      trainer_logprobs: [...nulls(15), -0.1101, -0.0019],
      entropies: [...nulls(15), 0.4123, 0.0157],
      is_masked: [...nulls(15), false, false],
    },
  ],
};

function merged(...records: object[]): TraceAnnotations {
  let held: TraceAnnotations | null = null;
  for (const r of records) for (const rec of parseAnnotationRecords(fromJson(r))) held = mergeRecord(held, rec);
  return held!;
}

/** The merged record as the API's JSON view shows it (what a reader folds). */
function asJson(t: TraceAnnotations): { info: Json; branches: Array<{ index: number } & Record<string, unknown>> } {
  return toJson(decodeLossless(encodeTraceAnnotations(t))) as never;
}

const fold = (nodes: FoldNode[], t: TraceAnnotations) =>
  Object.fromEntries([...foldOntoNodes(nodes, asJson(t))].map(([i, m]) => [i, Object.fromEntries(m)]));

describe("records", () => {
  it("prime-rl's fixture: info merged deeply, entries kept in order; the fold gives what prime-rl's does", () => {
    const t = merged(ORCH, TRAINER);
    const json = asJson(t);
    expect(json.info).toEqual({ effective: true, ship: { step: 4, time: 1764644020.5 }, advantage: 0.5 });
    expect(json.branches.map((b) => Object.keys(b))).toEqual([
      ["index", "advantages"],
      ["index", "trainer_logprobs", "entropies", "is_masked"],
    ]);
    // prime-rl's expected fold (its fixture notes): node 0 nothing (no sampled token), node 1 every stream
    expect(fold(NODES, t)).toEqual({
      1: {
        advantages: [0.5, 0.5],
        trainer_logprobs: [-0.1101, -0.0019],
        entropies: [0.4123, 0.0157],
        is_masked: [false, false],
      },
    });
    const kl = mismatchKl([-0.1101, -0.0019], [-0.1053, -0.0021]);
    expect(kl[0]).toBeCloseTo(1.15016e-5, 9);
    expect(kl[1]).toBeCloseTo(2.0001e-8, 12);
  });

  it("a later entry that covers a node only in part leaves it the earlier values (a position-wise merge would not)", () => {
    const partial = { ...TRAINER, branches: [{ index: 0, trainer_logprobs: [...nulls(15), -0.9, null] }] };
    expect(fold(NODES, merged(TRAINER, partial))[1]!.trainer_logprobs).toEqual([-0.1101, -0.0019]);
    // a full later one overwrites
    const full = { ...TRAINER, branches: [{ index: 0, trainer_logprobs: [...nulls(15), -0.9, -0.8] }] };
    expect(fold(NODES, merged(TRAINER, full))[1]!.trainer_logprobs).toEqual([-0.9, -0.8]);
    // partial streams keep their nulls unless all are null
    const masked = {
      ...TRAINER,
      branches: [{ index: 0, is_masked: [...nulls(15), true, null], mismatch_kl: [...nulls(16), 0.25] }],
    };
    expect(fold(NODES, merged(masked))[1]).toEqual({ is_masked: [true, null], mismatch_kl: [null, 0.25] });
    expect(fold(NODES, merged({ ...TRAINER, branches: [{ index: 0, is_masked: nulls(17) }] }))).toEqual({});
  });

  it("a truncated stream stops at the first node it does not cover; an unknown branch folds nothing", () => {
    expect(fold(NODES, merged({ ...ORCH, branches: [{ index: 0, advantages: new Array(14).fill(1) }] }))).toEqual({});
    expect(fold(NODES, merged({ ...ORCH, branches: [{ index: 3, advantages: new Array(17).fill(1) }] }))).toEqual({});
  });

  it("two branches: the i-th leaf in ascending index; a shared sampled node null in the later branch keeps the first's", () => {
    // 0 (prompt) → 1 (sampled, shared) → 2 (user) → {3, 4} (sampled leaves)
    const nodes: FoldNode[] = [
      { parent: null, token_ids: [1, 2], mask: [false, false] },
      { parent: 0, token_ids: [3, 4], mask: [true, true] },
      { parent: 1, token_ids: [5], mask: [false] },
      { parent: 2, token_ids: [6, 7], mask: [true, true] },
      { parent: 2, token_ids: [8], mask: [true] },
    ];
    expect(branchPaths(nodes)).toEqual([
      [0, 1, 2, 3],
      [0, 1, 2, 4],
    ]);
    const t = merged({
      version: 1,
      trace_id: TRACE,
      info: {},
      branches: [
        { index: 0, trainer_logprobs: [null, null, -0.1, -0.2, null, -0.3, -0.4] },
        // the shared node 1 was trained in branch 0: null here
        { index: 1, trainer_logprobs: [null, null, null, null, null, -0.5] },
      ],
    });
    expect(fold(nodes, t)).toEqual({
      1: { trainer_logprobs: [-0.1, -0.2] },
      3: { trainer_logprobs: [-0.3, -0.4] },
      4: { trainer_logprobs: [-0.5] },
    });
  });

  it("round-trips through its msgpack (floats as float64, flags and nulls kept)", () => {
    const t = merged(ORCH, TRAINER);
    const bytes = encodeTraceAnnotations(t);
    expect(Buffer.compare(encodeTraceAnnotations(decodeTraceAnnotations(bytes)), bytes)).toBe(0);
    // 0 given as an int (JSON) is a float64 like every other value
    expect(bytes.includes(0xcb)).toBe(true);
  });

  it("refuses what is not a record, naming the field", () => {
    const refused = (v: unknown) => {
      try {
        parseAnnotationRecords(fromJson(v));
      } catch (e) {
        expect(e).toBeInstanceOf(DeltaError);
        return (e as DeltaError).field;
      }
      throw new Error("not refused");
    };
    expect(refused("x")).toBe("annotations");
    expect(refused([])).toBe("annotations");
    expect(refused({ version: 2, trace_id: TRACE })).toBe("annotations.version");
    expect(refused({ trace_id: "" })).toBe("annotations.trace_id");
    expect(refused({ trace_id: TRACE, info: [1] })).toBe("annotations.info");
    expect(refused({ trace_id: TRACE, branches: {} })).toBe("annotations.branches");
    expect(refused({ trace_id: TRACE, branches: [{ advantages: [1] }] })).toBe("annotations.branches[0].index");
    expect(refused({ trace_id: TRACE, branches: [{ index: -1 }] })).toBe("annotations.branches[0].index");
    expect(refused({ trace_id: TRACE, branches: [{ index: 0, entropies: "high" }] })).toBe(
      "annotations.branches[0].entropies",
    );
    expect(refused([{ trace_id: TRACE }, { trace_id: TRACE, branches: [{ index: 0, entropies: [1, "x"] }] }])).toBe(
      "annotations[1].branches[0].entropies[1]",
    );
  });
});

describe("info merges (issue 39): linear, capped before merging, never merged again on read", () => {
  /** prime-rl's `_deep_merge` as written before, key by key with a scan (the oracle; small inputs only). */
  function reference(a: LMap, b: LMap): LMap {
    const entries: Array<[LValue, LValue]> = a.entries.map(([k, v]) => [k, v]);
    for (const [k, v] of b.entries) {
      const at = entries.findIndex(([ek]) => ek === k);
      if (at < 0) entries.push([k, v]);
      else {
        const old = entries[at]![1];
        entries[at] = [k, old instanceof LMap && v instanceof LMap ? reference(old, v) : v];
      }
    }
    return new LMap(entries);
  }
  /** A small random info: few key names (so they collide), int keys too, maps nested and repeated. */
  function randomInfo(next: () => number, depth: number): LMap {
    const entries: Array<[LValue, LValue]> = [];
    const n = Math.floor(next() * 6);
    for (let i = 0; i < n; i++) {
      const k: LValue = next() < 0.2 ? Math.floor(next() * 3) : `k${Math.floor(next() * 4)}`;
      entries.push([k, depth > 0 && next() < 0.4 ? randomInfo(next, depth - 1) : Math.floor(next() * 100)]);
    }
    return new LMap(entries);
  }
  const record = (info: LMap) =>
    parseAnnotationRecords(
      new LMap([
        ["trace_id", TRACE],
        ["info", info],
      ]),
    )[0]!;

  it("merges exactly as prime-rl's key-by-key merge on 500 random pairs (duplicate keys, int keys, nested maps)", () => {
    let seed = 39;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let i = 0; i < 500; i++) {
      const a = randomInfo(next, 3);
      const b = randomInfo(next, 3);
      const held = mergeRecord(null, record(a));
      const got = mergeRecord(held, record(b)).info;
      const want = b.entries.length === 0 ? held.info : reference(reference(new LMap(), a), b);
      expect(encodeLossless(got)).toEqual(encodeLossless(want));
    }
  });

  it(`an info of more than ${MAX_INFO_KEYS} keys (at any level) is refused before any merge, naming the cap`, () => {
    const flat = Object.fromEntries(Array.from({ length: 40_000 }, (_, i) => [`k${i}`, i]));
    expect(() => parseAnnotationRecords(fromJson({ trace_id: TRACE, info: flat }))).toThrow(
      `annotations.info: holds more than ${MAX_INFO_KEYS} keys`,
    );
    // nested keys count: 2 maps of 5,000 under 1 key is 10,002
    const nested = {
      a: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i])),
      b: [Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i]))],
    };
    expect(() => parseAnnotationRecords(fromJson({ trace_id: TRACE, info: nested }))).toThrow(/more than 10000 keys/);
    const atCap = Object.fromEntries(Array.from({ length: MAX_INFO_KEYS }, (_, i) => [`k${i}`, i]));
    expect(
      mergeRecord(null, parseAnnotationRecords(fromJson({ trace_id: TRACE, info: atCap }))[0]!).info.entries,
    ).toHaveLength(MAX_INFO_KEYS);
  });

  it("a record that would take the merged info past the cap is refused; one that only overwrites keys is merged", () => {
    const half = (from: number) =>
      Object.fromEntries(Array.from({ length: MAX_INFO_KEYS / 2 + 1 }, (_, i) => [`k${from + i}`, i]));
    const held = merged({ trace_id: TRACE, info: half(0) });
    const more = parseAnnotationRecords(fromJson({ trace_id: TRACE, info: half(MAX_INFO_KEYS) }))[0]!;
    expect(() => mergeRecord(held, more)).toThrow(/merged info would hold 10002 keys, over the limit of 10000/);
    const again = parseAnnotationRecords(fromJson({ trace_id: TRACE, info: half(0) }))[0]!;
    expect(mergeRecord(held, again).info.entries).toHaveLength(MAX_INFO_KEYS / 2 + 1);
  });

  it("a stored record is read as stored: not merged again (a duplicate key written by hand stays two entries)", () => {
    // the relay never stores a duplicate top-level key; one here shows the read does no merge
    const stored = encodeLossless(
      new LMap([
        ["version", 1],
        ["trace_id", TRACE],
        [
          "info",
          new LMap([
            ["a", 1],
            ["a", 2],
          ]),
        ],
        ["branches", []],
      ]),
    );
    const t = decodeTraceAnnotations(stored);
    expect(t.info.entries).toEqual([
      ["a", 1],
      ["a", 2],
    ]);
    expect(Buffer.compare(encodeTraceAnnotations(t), stored)).toBe(0);
  });
});

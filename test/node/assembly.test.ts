// Reference semantics beyond the golden vectors: refusal of malformed deltas (state unchanged),
// dtype promotion, value preservation, non-mutation of inputs.
import { describe, expect, it } from "vitest";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { DeltaError } from "../../src/protocol/assembly/errors.js";
import { ndValues, parseNdArray, promote, repairLastRow } from "../../src/protocol/assembly/ndarray.js";
import { decodeLossless, F64, firstDifference, LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { delta, enc, f, intKeyed, m, nd, node, openDelta, TRACE } from "../support/deltas.js";

function withTwoNodes(): EpisodeAssembly {
  const asm = new EpisodeAssembly();
  asm.apply(openDelta());
  asm.apply(delta({ nodes: [node(0), node(1, { routed_experts: nd("uint8", [3, 2, 1], [1, 2, 3, 4, 5, 6]) })] }));
  return asm;
}

function refused(asm: EpisodeAssembly, frame: Uint8Array, code: string, field: RegExp | string): void {
  const before = asm.tracesBytes();
  let err: unknown;
  try {
    asm.apply(frame);
  } catch (e) {
    err = e;
  }
  expect(err, "the delta must be refused").toBeInstanceOf(DeltaError);
  expect((err as DeltaError).code).toBe(code);
  if (typeof field === "string") expect((err as DeltaError).field).toBe(field);
  else expect((err as DeltaError).field).toMatch(field);
  expect(Buffer.compare(asm.tracesBytes(), before), "state unchanged").toBe(0);
}

/** Replace the first occurrence of `find` in `bytes`. */
function patch(bytes: Uint8Array, find: Uint8Array, replace: Uint8Array): Uint8Array {
  const at = Buffer.from(bytes).indexOf(Buffer.from(find));
  expect(at).toBeGreaterThanOrEqual(0);
  const out = bytes.slice();
  out.set(replace, at);
  return out;
}

describe("malformed deltas are refused and leave the assembly unchanged", () => {
  const valid = delta({ nodes: [node(2)] });
  const cases: Array<[string, () => Uint8Array, string, RegExp | string]> = [
    ["not a map", () => enc([1, 2]), "wrong_type", "delta"],
    ["garbage bytes", () => Uint8Array.of(0xc1, 0x00), "malformed", "delta"],
    ["truncated", () => valid.subarray(0, valid.length - 5), "malformed", /nodes/],
    ["trailing bytes", () => Uint8Array.of(...valid, 0x01), "malformed", "delta"],
    ["empty", () => new Uint8Array(0), "malformed", "delta"],
    ["no trace", () => enc(m({ nodes: [] })), "wrong_type", "trace"],
    ["trace not a str", () => enc(m({ trace: 7 })), "wrong_type", "trace"],
    [
      "non-str delta key",
      () =>
        enc(
          new LMap([
            ["trace", TRACE],
            [1, 2],
          ]),
        ),
      "wrong_type",
      "delta key 1",
    ],
    ["nodes not an array", () => delta({ nodes: m({}) }), "wrong_type", "nodes"],
    ["node not a map", () => delta({ nodes: [1] }), "wrong_type", "nodes[0]"],
    ["calls not an array", () => delta({ calls: "x" }), "wrong_type", "calls"],
    ["set not a map", () => delta({ set: [] }), "wrong_type", "set"],
    ["set replacing a list field", () => delta({ set: m({ nodes: [] }) }), "wrong_type", "set.nodes"],
    ["pending not an array", () => delta({ pending: m({}) }), "wrong_type", "pending"],
    ["discard not a bool", () => delta({ discard: 1 }), "wrong_type", "discard"],
    ["links not keyed by index", () => delta({ links: m({ x: [] }) }), "wrong_type", /^links key/],
    ["links value not an array", () => delta({ links: intKeyed([[0, m({})]]) }), "wrong_type", "links[0]"],
    ["unknown trace without open", () => delta({ nodes: [node(0)] }, "nobody"), "unknown_trace", "trace"],
    [
      "link on a node that does not exist",
      () => delta({ links: intKeyed([[2, [m({ node: 0, type: "reply" })]]]) }),
      "index_out_of_range",
      "links[2]",
    ],
    ["negative link index", () => delta({ links: intKeyed([[-1, []]]) }), "index_out_of_range", "links[-1]"],
    [
      "repair on a node that does not exist",
      () => delta({ routing_repairs: intKeyed([[5, nd("uint8", [1, 2, 1], [1, 2])]]) }),
      "index_out_of_range",
      "routing_repairs[5]",
    ],
    [
      "repair on a node without routing",
      () => delta({ routing_repairs: intKeyed([[0, nd("uint8", [1, 2, 1], [1, 2])]]) }),
      "no_routing",
      "routing_repairs[0]",
    ],
    [
      "repair row of another shape",
      () => delta({ routing_repairs: intKeyed([[1, nd("uint8", [1, 3, 1], [1, 2, 3])]]) }),
      "bad_ndarray",
      "routing_repairs[1]",
    ],
    [
      "repair with two rows",
      () => delta({ routing_repairs: intKeyed([[1, nd("uint8", [2, 2, 1], [1, 2, 3, 4])]]) }),
      "bad_ndarray",
      "routing_repairs[1]",
    ],
    [
      "unknown dtype",
      () => delta({ routing_repairs: intKeyed([[1, nd("float16", [1, 2, 1], [1, 2])]]) }),
      "bad_ndarray",
      "routing_repairs[1].dtype",
    ],
    [
      "data length not matching shape",
      () =>
        delta({
          routing_repairs: intKeyed([
            [1, m({ __nd__: true, dtype: "uint8", shape: [1, 2, 1], data: Uint8Array.of(1, 2, 3) })],
          ]),
        }),
      "bad_ndarray",
      "routing_repairs[1].data",
    ],
    [
      "node routing with data not matching shape",
      () =>
        delta({
          nodes: [
            node(2, { routed_experts: m({ __nd__: true, dtype: "uint8", shape: [2, 2, 1], data: Uint8Array.of(1) }) }),
          ],
        }),
      "bad_ndarray",
      "nodes[0].routed_experts.data",
    ],
    [
      "invalid UTF-8",
      () => patch(delta({ set: m({ info: "ab" }) }), Uint8Array.of(0xa2, 0x61, 0x62), Uint8Array.of(0xa2, 0xff, 0xfe)),
      "malformed",
      "set",
    ],
    [
      "UTF-16 surrogate encoded in UTF-8",
      () =>
        patch(
          delta({ set: m({ info: "abc" }) }),
          Uint8Array.of(0xa3, 0x61, 0x62, 0x63),
          Uint8Array.of(0xa3, 0xed, 0xa0, 0x80),
        ),
      "malformed",
      "set",
    ],
    [
      "absurd nesting",
      () => {
        let v: LValue = 1;
        for (let i = 0; i < 1000; i++) v = [v];
        return delta({ set: m({ info: v }) });
      },
      "malformed",
      "set",
    ],
    [
      "float32",
      () =>
        patch(
          delta({ set: m({ info: f(1.5) }) }),
          Uint8Array.of(0xcb, 0x3f, 0xf8),
          Uint8Array.of(0xca, 0x3f, 0xc0, 0, 0, 0, 0, 0, 0),
        ),
      "malformed",
      "set",
    ],
    [
      "ext type",
      () =>
        patch(
          delta({ set: m({ info: 1 }) }),
          Uint8Array.of(0xa4, ...Buffer.from("info"), 0x01),
          Uint8Array.of(0xa4, ...Buffer.from("info"), 0xd4),
        ),
      "malformed",
      "set",
    ],
    [
      "non-minimal int",
      () =>
        patch(
          delta({ set: m({ info: 2 }) }),
          Uint8Array.of(0xa4, ...Buffer.from("info"), 0x02),
          Uint8Array.of(0xa4, ...Buffer.from("info"), 0xcc),
        ),
      "malformed",
      "set",
    ],
    [
      "duplicate delta key",
      () =>
        enc(
          new LMap([
            ["trace", TRACE],
            ["nodes", []],
            ["nodes", []],
          ]),
        ),
      "malformed",
      "nodes",
    ],
  ];
  for (const [name, make, code, field] of cases) {
    it(name, () => refused(withTwoNodes(), make(), code, field));
  }

  it("a valid delta with the same shape is accepted (the refusals are specific)", () => {
    const asm = withTwoNodes();
    asm.apply(
      delta({
        links: intKeyed([[1, [m({ node: 0, type: "reply" })]]]),
        routing_repairs: intKeyed([[1, nd("uint8", [1, 2, 1], [9, 9])]]),
        nodes: [node(2)],
      }),
    );
    expect(asm.traces.get(TRACE)!.nodes.length).toBe(3);
  });

  it("a failing repair in a delta that also has valid links and nodes changes nothing", () => {
    const asm = withTwoNodes();
    refused(
      asm,
      delta({
        links: intKeyed([[0, [m({ node: 1, type: "reply" })]]]),
        routing_repairs: intKeyed([
          [1, nd("uint8", [1, 2, 1], [7, 7])],
          [0, nd("uint8", [1, 2, 1], [7, 7])],
        ]),
        nodes: [node(2)],
        set: m({ ok: true }),
      }),
      "no_routing",
      "routing_repairs[0]",
    );
  });
});

describe("routing repairs and dtype promotion", () => {
  it("promotes like numpy", () => {
    const table: Array<[string, string, string | undefined]> = [
      ["uint8", "uint8", "uint8"],
      ["uint8", "uint16", "uint16"],
      ["uint16", "uint8", "uint16"],
      ["uint8", "uint32", "uint32"],
      ["uint16", "uint64", "uint64"],
      ["int8", "int16", "int16"],
      ["uint8", "int8", "int16"],
      ["int8", "uint8", "int16"],
      ["uint16", "int8", "int32"],
      ["uint8", "int16", "int16"],
      ["uint32", "int32", "int64"],
      ["uint16", "int64", "int64"],
      ["uint64", "int8", undefined],
      ["int64", "uint64", undefined],
    ];
    for (const [a, b, want] of table) expect(promote(a as never, b as never), `${a}+${b}`).toBe(want);
  });

  const arr = (dtype: string, shape: number[], values: number[]) => parseNdArray(enc(nd(dtype, shape, values)), "x");

  it("uint8 array + uint16 row widens the whole array, values kept", () => {
    const out = repairLastRow(arr("uint8", [3, 2, 1], [1, 2, 3, 4, 5, 6]), arr("uint16", [1, 2, 1], [300, 7]), "x");
    expect(out.dtype).toBe("uint16");
    expect(out.shape).toEqual([3, 2, 1]);
    expect(ndValues(out)).toEqual([1, 2, 3, 4, 300, 7]);
  });

  it("uint16 array + uint8 row stays uint16", () => {
    const out = repairLastRow(arr("uint16", [2, 2, 1], [1000, 2, 3, 4]), arr("uint8", [1, 2, 1], [9, 8]), "x");
    expect(out.dtype).toBe("uint16");
    expect(ndValues(out)).toEqual([1000, 2, 9, 8]);
  });

  it("a single-row array is replaced by the row; an empty array gains it", () => {
    expect(ndValues(repairLastRow(arr("uint8", [1, 2, 1], [1, 2]), arr("uint8", [1, 2, 1], [5, 6]), "x"))).toEqual([
      5, 6,
    ]);
    const grown = repairLastRow(arr("uint8", [0, 2, 1], []), arr("uint8", [1, 2, 1], [5, 6]), "x");
    expect(grown.shape).toEqual([1, 2, 1]);
  });

  it("the repaired node is re-encoded as a fresh ndarray map in place, inputs untouched", () => {
    const asm = withTwoNodes();
    const repair = delta({ routing_repairs: intKeyed([[1, nd("uint16", [1, 2, 1], [256, 511])]]) });
    const copy = repair.slice();
    asm.apply(repair);
    expect(Buffer.compare(copy, repair)).toBe(0);
    const traces = decodeLossless(asm.tracesBytes()) as LMap[];
    const n1 = (traces[0]!.get("nodes") as LValue[])[1] as LMap;
    expect(n1.keys().at(-1)).toBe("routed_experts");
    const want = nd("uint16", [3, 2, 1], [1, 2, 3, 4, 256, 511]);
    expect(firstDifference(want, n1.get("routed_experts")!)).toBeUndefined();
  });
});

describe("values survive the assembly exactly", () => {
  const info = m({
    float_one: f(1.0),
    int_one: 1,
    neg_zero: f(-0),
    nan: f(NaN),
    inf: f(Infinity),
    ninf: f(-Infinity),
    tiny: f(5e-324),
    huge: f(1.7976931348623157e308),
    u64: 2n ** 64n - 1n,
    i64: -(2n ** 63n),
    past53: 2n ** 53n + 1n,
    bytes: Uint8Array.of(0, 1, 2),
    empty_bytes: new Uint8Array(0),
    text: "NUL\u0000 🧑‍🚀 \u202e",
    nil: null,
  });
  const mm = m({ "151655": 1, "151652": 2, "2": 3 });

  it("int vs float, uint64, -0.0, NaN, bin vs str, unsorted numeric-like keys", () => {
    const asm = new EpisodeAssembly();
    asm.apply(openDelta(TRACE, { set: m({ info, mm_token_type_id_map: mm, metrics: m({ n: 3 }) }) }));
    asm.apply(delta({ set: m({ metrics: m({ n: f(3.0) }) }) }));
    const t = (decodeLossless(asm.tracesBytes()) as LMap[])[0]!;
    expect(firstDifference(info, t.get("info")!)).toBeUndefined();
    expect(firstDifference(mm, t.get("mm_token_type_id_map")!)).toBeUndefined();
    expect(firstDifference(m({ n: f(3.0) }), t.get("metrics")!)).toBeUndefined();
    expect(firstDifference(m({ n: 3 }), t.get("metrics")!)).toBeDefined();
    // key order: header, lists, pending, then scalars in first-arrival order
    expect(t.keys()).toEqual([
      "version",
      "id",
      "verifiers",
      "task",
      "nodes",
      "calls",
      "payload",
      "errors",
      "extra_usage",
      "request_rewrites",
      "response_rewrites",
      "pending",
      "info",
      "mm_token_type_id_map",
      "metrics",
    ]);
  });

  it("nil semantic_parents becomes [] in place; a missing one is appended last", () => {
    const asm = new EpisodeAssembly();
    asm.apply(openDelta());
    const a = node(0, { semantic_parents: null });
    const b = new LMap(node(1).entries.filter(([k]) => k !== "semantic_parents"));
    asm.apply(delta({ nodes: [a, b] }));
    const nodes = (decodeLossless(asm.tracesBytes()) as LMap[])[0]!.get("nodes") as LMap[];
    expect(nodes[0]!.keys()[1]).toBe("semantic_parents");
    expect(nodes[0]!.get("semantic_parents")).toEqual([]);
    expect(nodes[1]!.keys().at(-1)).toBe("semantic_parents");
  });

  it("pending: nodes clear it, an explicit [] replaces it, absent leaves it", () => {
    const asm = new EpisodeAssembly();
    asm.apply(openDelta());
    const pending = () => (decodeLossless(asm.tracesBytes()) as LMap[])[0]!.get("pending") as LValue[];
    asm.apply(delta({ pending: [m({ role: "tool", content: "42" })] }));
    expect(pending().length).toBe(1);
    asm.apply(delta({ set: m({ ok: true }) }));
    expect(pending().length).toBe(1);
    asm.apply(delta({ nodes: [node(0)] }));
    expect(pending()).toEqual([]);
    asm.apply(delta({ nodes: [node(1)], pending: [m({ role: "user", content: "x" })] }));
    expect(pending().length).toBe(1);
    asm.apply(delta({ pending: [] }));
    expect(pending()).toEqual([]);
  });

  it("discard drops a trace; discarding an unknown trace is a no-op", () => {
    const asm = withTwoNodes();
    asm.apply(delta({ discard: true }, "unknown"));
    expect(asm.traces.size).toBe(1);
    asm.apply(delta({ discard: true }));
    expect(asm.tracesBytes()).toEqual(Uint8Array.of(0x90));
  });

  it("F64 wraps floats so 1.0 is not 1", () => {
    expect(firstDifference(new F64(1), 1)).toBeDefined();
  });
});

describe("snapshot deltas", async () => {
  const { snapshotDeltas, DELTA_BYTES } = await import("../../src/protocol/assembly/snapshot.js");
  const { goldenCasePaths, loadCase } = await import("../../tools/conformance/cases.js");
  for (const path of goldenCasePaths()) {
    const c = loadCase(path);
    if (c.ack_lost.length) continue;
    it(`${c.name}: after every frame, a fresh assembly fed the snapshot holds the same bytes (whole and split small)`, () => {
      const asm = new EpisodeAssembly();
      for (const frame of c.frames) {
        asm.apply(frame);
        for (const budget of [DELTA_BYTES, 4096, 1]) {
          const copy = new EpisodeAssembly();
          const deltas = [...snapshotDeltas(asm.bodies, asm.views(), budget)];
          for (const d of deltas) copy.apply(d);
          expect(Buffer.compare(copy.tracesBytes(), asm.tracesBytes()), `budget ${budget}`).toBe(0);
          // at least one delta per trace; more when the budget splits a trace's lists
          expect(deltas.length).toBeGreaterThanOrEqual(asm.traces.size);
        }
      }
    });
  }

  it("plannedBytes (a catch-up message ends before a delta that would not fit): bodies of whole nodes never exceed it", async () => {
    const { buildDelta, plannedBytes, snapshotPlan } = await import("../../src/protocol/assembly/snapshot.js");
    let nodeOnly = 0;
    for (const path of goldenCasePaths()) {
      const c = loadCase(path);
      if (c.ack_lost.length) continue;
      const asm = new EpisodeAssembly();
      for (const frame of c.frames) {
        asm.apply(frame);
        const views = asm.views();
        for (const budget of [DELTA_BYTES, 4096]) {
          for (const p of snapshotPlan(views, budget)) {
            const built = buildDelta(asm.bodies, views, p).length;
            const planned = plannedBytes(views, p);
            if (!p.ranges.every((r) => r.field === "nodes")) continue; // items are planned by their average size
            nodeOnly++;
            expect(planned, `${c.name}: ${JSON.stringify(p)}`).toBeGreaterThanOrEqual(built);
            expect(planned - built, `${c.name}: headers are bounded, not guessed large`).toBeLessThanOrEqual(1024);
          }
        }
      }
    }
    expect(nodeOnly).toBeGreaterThan(10);
  });

  it("large_routing: a trace's nodes are split over deltas of at most the budget (a single larger node alone)", () => {
    const c = loadCase(goldenCasePaths().find((p) => p.endsWith("large_routing.msgpack"))!);
    const asm = new EpisodeAssembly();
    for (const frame of c.frames) asm.apply(frame);
    const budget = 1 << 20;
    const deltas = [...snapshotDeltas(asm.bodies, asm.views(), budget)];
    const biggest = Math.max(...[...asm.traces.values()].flatMap((t) => t.nodes.map((n) => n.bytes)));
    expect(deltas.length).toBeGreaterThan(asm.traces.size);
    for (const d of deltas) expect(d.length).toBeLessThanOrEqual(Math.max(budget, biggest) + 64 * 1024);
  });
});

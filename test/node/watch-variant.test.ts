// Watcher variants (src/protocol/watch/variant.ts): query parsing, grouping keys, and the per-variant
// delta (trace filter, routing stripped). Stripped golden frames are checked against bytes built
// independently through the lossless value model: only `routing_repairs` and the nodes'
// `routed_experts` may differ from the frame, everything else stays byte for byte.
import { describe, expect, it } from "vitest";
import { parseDelta } from "../../src/protocol/assembly/delta.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import {
  deltaForVariant,
  isFull,
  parseVariant,
  stripRouting,
  type Variant,
  variantKey,
} from "../../src/protocol/watch/variant.js";
import { decodeLossless, encodeLossless, LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";
import { delta, f, intKeyed, m, nd, node } from "../support/deltas.js";

const cases = goldenCasePaths().map(loadCase);
const byName = (name: string) => cases.find((c) => c.name === name)!;
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** What `?routing=0` must send for `frame`: no routing_repairs entry, every node's routed_experts nil. */
function expectedWithoutRouting(frame: Uint8Array): Uint8Array {
  const d = decodeLossless(frame) as LMap;
  const entries = d.entries
    .filter(([k]) => k !== "routing_repairs")
    .map(([k, v]): [LValue, LValue] => {
      if (k !== "nodes") return [k, v];
      const nodes = (v as LMap[]).map(
        (n) => new LMap(n.entries.map(([nk, nv]): [LValue, LValue] => [nk, nk === "routed_experts" ? null : nv])),
      );
      return [k, nodes];
    });
  return encodeLossless(new LMap(entries));
}

/** Set every `routed_experts` in a decoded value to nil. */
function nilRouting(v: LValue): LValue {
  if (Array.isArray(v)) return v.map(nilRouting);
  if (v instanceof LMap)
    return new LMap(v.entries.map(([k, x]): [LValue, LValue] => [k, k === "routed_experts" ? null : nilRouting(x)]));
  return v;
}

const hasRouting = (frame: Uint8Array) => {
  const d = parseDelta(frame);
  return d.repairs !== undefined || (d.nodes ?? []).some((n) => n.routed !== null);
};

describe("parseVariant", () => {
  it.each<[string, Variant]>([
    ["", { routing: true, traces: null }],
    ["routing=0", { routing: false, traces: null }],
    ["routing=false", { routing: false, traces: null }],
    ["routing=1", { routing: true, traces: null }],
    ["routing=true", { routing: true, traces: null }],
    ["routing=", { routing: true, traces: null }],
    ["routing=no", { routing: true, traces: null }],
    ["routing=FALSE", { routing: true, traces: null }],
    ["traces=a", { routing: true, traces: ["a"] }],
    ["traces=b,a", { routing: true, traces: ["a", "b"] }],
    ["traces=b,a,b,a", { routing: true, traces: ["a", "b"] }],
    ["traces=%20b%20,%20,a%20", { routing: true, traces: ["a", "b"] }],
    ["traces=", { routing: true, traces: null }],
    ["traces=,,%20,", { routing: true, traces: null }],
    ["traces=a&traces=b", { routing: true, traces: ["a"] }],
    ["routing=0&traces=t2,t1", { routing: false, traces: ["t1", "t2"] }],
    ["other=1&routing=0", { routing: false, traces: null }],
  ])("?%s", (query, expected) => {
    expect(parseVariant(new URLSearchParams(query))).toStrictEqual(expected);
  });
});

describe("variantKey and isFull", () => {
  it.each<[Variant, string, boolean]>([
    [{ routing: true, traces: null }, "r1", true],
    [{ routing: false, traces: null }, "r0", false],
    [{ routing: true, traces: ["a"] }, "r1:a", false],
    [{ routing: false, traces: ["a", "b"] }, "r0:a,b", false],
  ])("%o → %s (full: %s)", (v, key, full) => {
    expect(variantKey(v)).toBe(key);
    expect(isFull(v)).toBe(full);
  });

  it("queries asking for the same thing share a key; different ones do not", () => {
    const key = (q: string) => variantKey(parseVariant(new URLSearchParams(q)));
    expect(key("traces=b,a")).toBe(key("traces=a,b,a"));
    expect(key("routing=0&traces=x")).toBe(key("traces=x&routing=false"));
    expect(key("")).toBe(key("routing=1&traces="));
    const distinct = ["", "routing=0", "traces=a", "traces=a,b", "routing=0&traces=a", "traces=ab", "traces=b"].map(
      key,
    );
    expect(new Set(distinct).size).toBe(distinct.length);
  });
});

describe("deltaForVariant", () => {
  const withRouting = delta({ nodes: [node(0, { routed_experts: nd("uint8", [2, 2, 1], [1, 2, 3, 4]) })] }, "t1");

  it("a full variant gets the very same bytes (no copy)", () => {
    expect(deltaForVariant(withRouting, "t1", { routing: true, traces: null })).toBe(withRouting);
  });

  it("a trace filter drops other traces' deltas and keeps listed ones untouched", () => {
    expect(deltaForVariant(withRouting, "t1", { routing: true, traces: ["t2"] })).toBeNull();
    expect(deltaForVariant(withRouting, "t1", { routing: false, traces: ["t0", "t2"] })).toBeNull();
    expect(deltaForVariant(withRouting, "t1", { routing: true, traces: ["t0", "t1"] })).toBe(withRouting);
    // an id is matched whole, not as a prefix
    expect(deltaForVariant(withRouting, "t1", { routing: true, traces: ["t"] })).toBeNull();
  });

  it("routing off strips the routing of a listed (or unfiltered) trace", () => {
    const expected = hex(expectedWithoutRouting(withRouting));
    expect(hex(deltaForVariant(withRouting, "t1", { routing: false, traces: null })!)).toBe(expected);
    expect(hex(deltaForVariant(withRouting, "t1", { routing: false, traces: ["t1"] })!)).toBe(expected);
    expect(expected).not.toBe(hex(withRouting));
  });
});

describe("stripRouting on hand-made deltas", () => {
  it("unknown keys, set and float values keep their place and bytes around the removed entry", () => {
    const d = delta({
      x_before: f(1),
      routing_repairs: intKeyed([[0, nd("uint8", [1, 2, 1], [9, 9])]]),
      nodes: [node(0, { routed_experts: nd("uint16", [1, 2, 1], [300, 301]) }), node(1)],
      set: m({ rewards: m({ r: f(0.5) }) }),
      x_after: [1, "two", null],
    });
    const out = stripRouting(d);
    expect(hex(out)).toBe(hex(expectedWithoutRouting(d)));
    const keys = (decodeLossless(out) as LMap).keys();
    expect(keys).toStrictEqual(["trace", "x_before", "nodes", "set", "x_after"]);
    // the node without routing is passed through as received
    const n1 = encodeLossless(node(1));
    expect(Buffer.from(out).includes(Buffer.from(n1))).toBe(true);
  });

  it("a delta of only routing repairs becomes just its trace", () => {
    const d = delta({ routing_repairs: intKeyed([[3, nd("uint8", [1, 2, 1], [1, 2])]]) }, "tr");
    expect(hex(stripRouting(d))).toBe(hex(encodeLossless(m({ trace: "tr" }))));
  });

  it("a delta without routing is returned as is (same object)", () => {
    for (const d of [
      delta({ nodes: [node(0), node(1)] }),
      delta({ set: m({ is_completed: true }) }),
      delta({ nodes: [] }),
    ]) {
      expect(stripRouting(d)).toBe(d);
    }
  });

  it("an empty routing_repairs map is still removed", () => {
    const d = delta({ routing_repairs: intKeyed([]), set: m({ a: 1 }) });
    expect(hex(stripRouting(d))).toBe(hex(encodeLossless(m({ trace: "t-1", set: m({ a: 1 }) }))));
  });

  // the ?routing=0 variant differs from the frame in routing only, not in the assembly's
  // normalized form (a missing or nil `semantic_parents` stays as it came)
  it.each([
    ["missing", (n: LMap) => new LMap(n.entries.filter(([k]) => k !== "semantic_parents"))],
    [
      "nil",
      (n: LMap) => new LMap(n.entries.map(([k, v]): [LValue, LValue] => [k, k === "semantic_parents" ? null : v])),
    ],
  ])("a routed node with semantic_parents %s keeps it that way", (_label, edit) => {
    const d = delta({ nodes: [edit(node(1, { routed_experts: nd("uint8", [2, 2, 1], [1, 2, 3, 4]) }))] });
    expect(hex(stripRouting(d))).toBe(hex(expectedWithoutRouting(d)));
  });
});

describe("stripRouting on the golden frames", () => {
  for (const c of cases) {
    it(`${c.name}: every frame loses exactly its routing, nothing else`, () => {
      let changed = 0;
      c.frames.forEach((frame, i) => {
        const copy = frame.slice();
        const out = stripRouting(frame);
        expect(Buffer.compare(copy, frame)).toBe(0); // the input is never modified
        if (!hasRouting(frame)) {
          expect(out, `frame ${i}`).toBe(frame);
          return;
        }
        changed++;
        expect([i, hex(out)]).toStrictEqual([i, hex(expectedWithoutRouting(frame))]);
        expect(out.length).toBeLessThan(frame.length);
        // the result is a valid delta of the same trace, with no routing left (so stripping again is a no-op)
        const d = parseDelta(out);
        expect(d.trace).toBe(parseDelta(frame).trace);
        expect(d.repairs).toBeUndefined();
        expect((d.nodes ?? []).every((n) => n.routed === null)).toBe(true);
        expect(stripRouting(out)).toBe(out);
      });
      if (["large_routing", "routing_repair_u8", "routing_repair_widen", "failed_sends", "ack_lost"].includes(c.name)) {
        expect(changed).toBeGreaterThan(0);
      }
    });
  }

  for (const c of cases.filter((x) => x.ack_lost.length === 0)) {
    it(`${c.name}: the routing-off assembly equals the full one with routed_experts nil`, () => {
      const full = new EpisodeAssembly();
      const lean = new EpisodeAssembly();
      for (const frame of c.frames) {
        const trace = parseDelta(frame).trace;
        full.apply(frame);
        lean.apply(deltaForVariant(frame, trace, { routing: false, traces: null })!);
      }
      expect(hex(lean.tracesBytes())).toBe(hex(encodeLossless(nilRouting(decodeLossless(full.tracesBytes())))));
    });
  }

  it("multi_trace_links: a one-trace variant's assembly is that trace of the full assembly", () => {
    const c = byName("multi_trace_links");
    const full = new EpisodeAssembly();
    for (const frame of c.frames) full.apply(frame);
    const all = decodeLossless(full.tracesBytes()) as LMap[];
    expect(all.length).toBe(3);
    for (const t of all) {
      const id = t.get("id") as string;
      const one = new EpisodeAssembly();
      let kept = 0;
      for (const frame of c.frames) {
        const out = deltaForVariant(frame, parseDelta(frame).trace, { routing: true, traces: [id] });
        if (out) {
          one.apply(out);
          kept++;
        }
      }
      expect(kept).toBeGreaterThan(0);
      expect(kept).toBeLessThan(c.frames.length);
      expect(hex(one.tracesBytes())).toBe(hex(encodeLossless([t])));
    }
  });

  it("large_routing: the stripped frames are much smaller", () => {
    const c = byName("large_routing");
    const before = c.frames.reduce((n, x) => n + x.length, 0);
    const after = c.frames.reduce((n, x) => n + stripRouting(x).length, 0);
    expect(after * 10).toBeLessThan(before);
  });
});

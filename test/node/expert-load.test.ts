// The episode page's per-layer expert-load figures (dashboard/src/expert-load.ts) on hand-made
// routing arrays whose figures are worked out by hand in the comments.
import { describe, expect, it } from "vitest";
import { expertLoad } from "../../dashboard/src/expert-load.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { parseNdArray } from "../../src/protocol/assembly/ndarray.js";
import { delta, enc, intKeyed, nd, node, openDelta, TRACE } from "../support/deltas.js";

describe("expertLoad", () => {
  it("counts every top-k choice per layer: busiest expert, share, experts used, max/mean and CV", () => {
    // 3 tokens × 2 layers × top-2, uint8; per token: [layer 0 choices], [layer 1 choices]
    //   token 0: [1, 2] [0, 3]
    //   token 1: [1, 3] [0, 3]
    //   token 2: [1, 2] [0, 3]
    const a = parseNdArray(enc(nd("uint8", [3, 2, 2], [1, 2, 0, 3, 1, 3, 0, 3, 1, 2, 0, 3])), "routed_experts");
    const [l0, l1] = expertLoad(a);
    // layer 0: expert 1 ×3, 2 ×2, 3 ×1 → 6 routings over 3 experts, mean 2;
    // busiest 1 with 3/6 = 0.5; max/mean 3/2 = 1.5; σ² = (1² + 0² + 1²)/3 = 2/3, CV = √(2/3)/2
    expect(l0).toMatchObject({
      layer: 0,
      routings: 6,
      used: 3,
      busiest: 1,
      busiestCount: 3,
      share: 0.5,
      maxOverMean: 1.5,
    });
    expect(l0!.cv).toBeCloseTo(Math.sqrt(2 / 3) / 2, 12); // 0.408248…
    // layer 1: experts 0 and 3 ×3 each → even: the tie goes to the lower id, max/mean 1, CV 0
    expect(l1).toEqual({
      layer: 1,
      routings: 6,
      used: 2,
      busiest: 0,
      busiestCount: 3,
      share: 0.5,
      maxOverMean: 1,
      cv: 0,
    });
  });

  it("reads uint16 ids above 255 and the last row apart from the others", () => {
    // 2 tokens × 1 layer × top-2: [300, 7], [300, 256] → 300 ×2, 7 ×1, 256 ×1; mean 4/3;
    // max/mean 2/(4/3) = 1.5; σ² = ((2/3)² + 2·(1/3)²)/3 = 2/9, CV = (√2/3)/(4/3) = √2/4
    const a = parseNdArray(enc(nd("uint16", [2, 1, 2], [300, 7, 300, 256])), "routed_experts");
    expect(a.last.length).toBe(4); // the last row is its own view, as the assembly keeps it
    const [l0] = expertLoad(a);
    expect(l0).toMatchObject({ routings: 4, used: 3, busiest: 300, busiestCount: 2, share: 0.5, maxOverMean: 1.5 });
    expect(l0!.cv).toBeCloseTo(Math.SQRT2 / 4, 12);
  });

  it("follows a widening routing repair of the node's last row", () => {
    const asm = new EpisodeAssembly();
    asm.apply(openDelta());
    // node 1 routed [9, 7], [9, 5] (uint8): 9 ×2 is the busiest
    asm.apply(delta({ nodes: [node(0), node(1, { routed_experts: nd("uint8", [2, 1, 2], [9, 7, 9, 5]) })] }));
    const t = asm.traces.get(TRACE)!;
    expect(expertLoad(asm.node(t, 1).routed!)[0]).toMatchObject({ routings: 4, used: 3, busiest: 9, busiestCount: 2 });
    // the repair rewrites the last row as [7, 256] (uint16, so the array widens): [9, 7], [7, 256]
    // → 7 ×2, 9 ×1, 256 ×1: expert 7 is now the busiest, 256 is read whole
    asm.apply(delta({ routing_repairs: intKeyed([[1, nd("uint16", [1, 1, 2], [7, 256])]]) }));
    const routed = asm.node(t, 1).routed!;
    expect(routed.dtype).toBe("uint16");
    const [l0] = expertLoad(routed);
    expect(l0).toMatchObject({ routings: 4, used: 3, busiest: 7, busiestCount: 2, share: 0.5, maxOverMean: 1.5 });
    expect(l0!.cv).toBeCloseTo(Math.SQRT2 / 4, 12);
  });

  it("gives no layers for an array without tokens", () => {
    expect(expertLoad(parseNdArray(enc(nd("uint8", [0, 4, 2], [])), "routed_experts"))).toEqual([]);
  });
});

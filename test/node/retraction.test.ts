// Issue 11's scenarios (test/support/retractions.ts) through the relay's ingest rules on an
// episode in memory: each ends byte-equal to the reference over the acknowledged frames.
import { describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { MemoryEpisode } from "../../src/protocol/envelope/memory-episode.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeLossless, type LMap } from "../../src/protocol/wire/lossless.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { lateOpen, narrowerResend, orphanAttempt, type Scenario } from "../support/retractions.js";

function run(s: Scenario): MemoryEpisode {
  const ep = new MemoryEpisode();
  const producer = new ProducerCursor("worker");
  s.frames.forEach((f, i) => {
    ep.ingest(encodeEnvelope(producer.envelope(f)));
    if (!s.lost.includes(i)) producer.acknowledge();
  });
  return ep;
}

const same = (a: Uint8Array, b: Uint8Array) => Buffer.compare(a, b) === 0;
const traceIds = (b: Uint8Array) => (decodeLossless(b) as LMap[]).map((t) => t.get("id"));

describe("retraction by cursor position (in memory)", () => {
  const scenarios = [
    orphanAttempt(loadCase(fixturePath("discard_retry"))),
    narrowerResend(loadCase(fixturePath("routing_repair_widen"))),
    lateOpen(loadCase(fixturePath("multi_trace_links"))),
  ];
  for (const s of scenarios) {
    it(`${s.name}: the reference over the acknowledged frames, live and finished`, () => {
      const ep = run(s);
      expect(same(ep.asm.tracesBytes(), s.traces)).toBe(true);
      expect(same(ep.asm.finishReply(s.reply), s.episode)).toBe(true);
    });
  }

  it("the scenarios are not vacuous: applying every frame as sent differs from the reference", () => {
    for (const s of scenarios) {
      const ep = new MemoryEpisode();
      s.frames.forEach((f, i) => {
        ep.ingest(encodeEnvelope({ producer: "p", seq: i + 1, cursor: null, delta: f }));
      });
      expect(same(ep.asm.tracesBytes(), s.traces), s.name).toBe(false);
    }
  });

  it("orphan attempt: only the retry's trace is left; narrower re-send: node 3 is uint8; late open: the order of the reference", () => {
    const [orphan, narrower, late] = scenarios.map(run);
    expect(orphan!.asm.traces.size).toBe(1);
    const nodes = (decodeLossless(narrower!.asm.tracesBytes()) as LMap[])[0]!.get("nodes") as LMap[];
    expect((nodes[3]!.get("routed_experts") as LMap).get("dtype")).toBe("uint8");
    expect(traceIds(late!.asm.tracesBytes())).toEqual(traceIds(scenarios[2]!.traces));
    const c = loadCase(fixturePath("multi_trace_links"));
    // arrival order differs from the golden case's, where the sub-agent's open was acknowledged
    expect(traceIds(late!.asm.tracesBytes())).not.toEqual(traceIds(c.checkpoints.at(-1)!.traces));
  });
});

// Exactly-once ingest by cursor position (src/protocol/envelope/ledger.ts), on an episode in memory: each
// case ends equal to a reference assembly fed only the frames the producer had acknowledged.
import { describe, expect, it } from "vitest";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { DeltaError } from "../../src/protocol/assembly/errors.js";
import { type Envelope, encodeEnvelope, parseIngestMessage } from "../../src/protocol/envelope/envelope.js";
import { MemoryEpisode } from "../../src/protocol/envelope/memory-episode.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeLossless, type LMap } from "../../src/protocol/wire/lossless.js";
import { delta, enc, intKeyed, m, nd, node, openDelta } from "../support/deltas.js";

/** A worker: sends through a cursor, some sends' acks lost. */
function worker(name = "w1") {
  const ep = new MemoryEpisode();
  const producer = new ProducerCursor(name);
  return {
    ep,
    producer,
    /** Send `d`; its ack arrives unless `lost`. */
    send(d: Uint8Array, lost = false) {
      const r = ep.ingest(encodeEnvelope(producer.envelope(d)));
      if (!lost) producer.acknowledge();
      return r;
    },
  };
}

function reference(...deltas: Uint8Array[]): Uint8Array {
  const asm = new EpisodeAssembly();
  for (const d of deltas) asm.apply(d);
  return asm.tracesBytes();
}

const same = (a: Uint8Array, b: Uint8Array) => Buffer.compare(a, b) === 0;
const traces = (asm: EpisodeAssembly) => decodeLossless(asm.tracesBytes()) as LMap[];

describe("producer envelopes: exactly once by cursor position", () => {
  it("a resent envelope (same seq) is acknowledged and not applied again", () => {
    const { ep, producer } = worker();
    ep.ingest(encodeEnvelope(producer.envelope(openDelta())));
    producer.acknowledge();
    const env = encodeEnvelope(producer.envelope(delta({ nodes: [node(0)] })));
    const first = ep.ingest(env);
    const before = ep.asm.tracesBytes();
    const again = ep.ingest(env);
    expect(first.applied.length).toBe(1);
    expect(again.applied.length).toBe(0);
    expect(again.duplicates).toBe(1);
    expect(again.producers.get("w1")).toBe(2);
    expect(same(ep.asm.tracesBytes(), before)).toBe(true);
  });

  it("a lost ack: the re-diff (cursor before the lost frame) retracts it, and the state is the reference's", () => {
    const w = worker();
    const open = openDelta();
    w.send(open);
    const lost = delta({
      nodes: [node(0), node(1, { routed_experts: nd("uint8", [2, 2, 1], [1, 2, 3, 4]) })],
      calls: [m({ node: 1 })],
    });
    w.send(lost, true);
    // the worker re-diffs against its cursor: the same nodes again (node 1 repaired, one more link), plus more
    const rediff = delta({
      nodes: [
        node(0),
        node(1, {
          routed_experts: nd("uint16", [2, 2, 1], [1, 2, 300, 4]),
          semantic_parents: [m({ node: 0, type: "reply" })],
        }),
        node(2),
      ],
      calls: [m({ node: 1 }), m({ node: 2 })],
    });
    const r = w.send(rediff);
    expect(r.retracted).toEqual([2]);
    expect(r.applied).toEqual([rediff]); // applied as sent: the delta the worker diffed
    expect(same(w.ep.asm.tracesBytes(), reference(open, rediff))).toBe(true);
    expect(
      w.ep.frames.map((f) => f.seq),
      "the retracted frame left the log",
    ).toEqual([1, 3]);
  });

  it("an orphan attempt (its open's ack lost, then abandoned) leaves no trace", () => {
    const w = worker();
    const main = openDelta();
    w.send(main);
    w.send(openDelta("attempt-c"), true); // a retry attempt opens; the ack is lost; the worker abandons it
    const next = delta({ nodes: [node(0)] }); // the worker never had C: it sends no discard
    const r = w.send(next);
    expect(r.retracted).toEqual([2]);
    expect([...w.ep.asm.traces.keys()]).toEqual(["t-1"]);
    expect(same(w.ep.asm.tracesBytes(), reference(main, next))).toBe(true);
  });

  it("a node re-sent narrower after a lost ack is taken as sent (uint8 stays uint8)", () => {
    const w = worker();
    const open = openDelta();
    w.send(open);
    w.send(delta({ nodes: [node(0, { routed_experts: nd("uint8", [2, 1, 1], [1, 2]) })] }));
    // a repair widening node 0 to uint16, whose ack is lost
    w.send(delta({ routing_repairs: intKeyed([[0, nd("uint16", [1, 1, 1], [300])]]) }), true);
    // the worker's node 0 is uint8 again: its re-diff carries another uint8 repair
    const rediff = delta({ routing_repairs: intKeyed([[0, nd("uint8", [1, 1, 1], [7])]]) });
    w.send(rediff);
    const n0 = (traces(w.ep.asm)[0]!.get("nodes") as LMap[])[0]!.get("routed_experts") as LMap;
    expect(n0.get("dtype")).toBe("uint8");
    expect(
      same(
        w.ep.asm.tracesBytes(),
        reference(open, delta({ nodes: [node(0, { routed_experts: nd("uint8", [2, 1, 1], [1, 2]) })] }), rediff),
      ),
    ).toBe(true);
  });

  it("an open whose ack was lost takes its place in arrival order where the reference first sees it", () => {
    const a = worker("a");
    const b = new ProducerCursor("b");
    a.send(openDelta("main"));
    a.send(openDelta("sub-1"), true); // lost
    const bOpen = openDelta("sub-2"); // another producer's trace opens in between
    a.ep.ingest(encodeEnvelope(b.envelope(bOpen)));
    b.acknowledge();
    a.send(openDelta("sub-1")); // the re-diff opens sub-1 again
    expect([...a.ep.asm.traces.keys()]).toEqual(["main", "sub-2", "sub-1"]);
    expect(same(a.ep.asm.tracesBytes(), reference(openDelta("main"), bOpen, openDelta("sub-1")))).toBe(true);
  });

  it("two producers: retracting one's frame keeps the other's frames after it", () => {
    const a = worker("a");
    const b = new ProducerCursor("b");
    const aOpen = openDelta("ta");
    const bOpen = openDelta("tb");
    a.send(aOpen);
    a.ep.ingest(encodeEnvelope(b.envelope(bOpen)));
    b.acknowledge();
    a.send(delta({ nodes: [node(0)] }, "ta"), true); // a's ack lost
    const bNodes = delta({ nodes: [node(0), node(1)] }, "tb");
    a.ep.ingest(encodeEnvelope(b.envelope(bNodes)));
    b.acknowledge();
    const aRediff = delta({ nodes: [node(0), node(1)] }, "ta");
    expect(a.send(aRediff).retracted).toEqual([3]);
    expect(same(a.ep.asm.tracesBytes(), reference(aOpen, bOpen, bNodes, aRediff))).toBe(true);
  });

  it("a lost ack on a producer's last frame is kept: nothing re-diffs it", () => {
    const w = worker();
    const open = openDelta();
    w.send(open);
    const last = delta({ nodes: [node(0)] });
    w.send(last, true);
    expect(same(w.ep.asm.tracesBytes(), reference(open, last))).toBe(true);
  });

  it("envelopes without a cursor are de-duplicated by seq only", () => {
    const ep = new MemoryEpisode();
    const env = (seq: number, d: Uint8Array): Uint8Array =>
      encodeEnvelope({ producer: "p", seq, cursor: null, delta: d });
    ep.ingest(env(1, openDelta()));
    ep.ingest(env(2, delta({ nodes: [node(0)] })));
    expect(ep.ingest(env(2, delta({ nodes: [node(0)] }))).duplicates).toBe(1);
    const r = ep.ingest(env(3, delta({ nodes: [node(1)] })));
    expect(r.retracted).toEqual([]);
    expect(ep.asm.count("t-1", "nodes")).toBe(2);
  });

  it("a cursor at or above its envelope's seq is refused", () => {
    const bad: Envelope = { producer: "p", seq: 2, cursor: 2, delta: openDelta() };
    expect(() => parseIngestMessage(encodeEnvelope(bad))).toThrow(/cursor/);
  });

  it("a batch is all or nothing: a bad envelope rolls back the ones before it", () => {
    const { ep, producer } = worker();
    ep.ingest(encodeEnvelope(producer.envelope(openDelta())));
    producer.acknowledge();
    const before = ep.asm.tracesBytes();
    const good = producer.envelope(delta({ nodes: [node(0)], set: m({ ok: true, fresh: 1 }) }));
    producer.acknowledge();
    const discard = producer.envelope(delta({ discard: true }, "t-1"));
    producer.acknowledge();
    const bad = producer.envelope(delta({ links: intKeyed([[9, []]]) }));
    const batch = enc(
      [encodeEnvelope(good), encodeEnvelope(discard), encodeEnvelope(bad)].map((b) => decodeLossless(b)),
    );
    let err: unknown;
    try {
      ep.ingest(batch);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DeltaError);
    // the discard before it took the trace away, so the third names an unknown trace
    expect((err as DeltaError).field).toBe("batch[2].trace");
    expect((err as DeltaError).code).toBe("unknown_trace");
    expect(same(ep.asm.tracesBytes(), before)).toBe(true);
    expect(ep.ledger.get("w1")?.last).toBe(1);
    // the same batch without the bad one applies both, in order
    const ok = ep.ingest(enc([encodeEnvelope(good), encodeEnvelope(discard)].map((b) => decodeLossless(b))));
    expect(ok.applied.length).toBe(2);
    expect(ep.asm.traces.size).toBe(0);
  });
});

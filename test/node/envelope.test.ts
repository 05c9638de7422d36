// Exactly-once ingest through producer envelopes.
import { describe, expect, it } from "vitest";
import { EpisodeAssembly } from "../../src/assembly/episode-assembly.js";
import { DeltaError } from "../../src/assembly/errors.js";
import { encodeEnvelope, type Envelope } from "../../src/envelope/envelope.js";
import { ingest, type ProducerLedger } from "../../src/envelope/ingest.js";
import { ProducerCursor } from "../../src/envelope/producer.js";
import { decodeLossless, type LMap, type LValue } from "../../src/wire/lossless.js";
import { enc, delta, intKeyed, m, nd, node, openDelta } from "../support/deltas.js";

function setup() {
  return { asm: new EpisodeAssembly(), ledger: new Map() as ProducerLedger, producer: new ProducerCursor("w1") };
}
const nodesOf = (asm: EpisodeAssembly) => ((decodeLossless(asm.tracesBytes()) as LMap[])[0]!.get("nodes") as LMap[]);

describe("producer envelopes", () => {
  it("a resent envelope (same seq) is acknowledged and not applied again", () => {
    const { asm, ledger, producer } = setup();
    ingest(asm, ledger, encodeEnvelope(producer.envelope(openDelta())));
    const env = encodeEnvelope(producer.envelope(delta({ nodes: [node(0)] })));
    const first = ingest(asm, ledger, env);
    const before = asm.tracesBytes();
    const again = ingest(asm, ledger, env);
    expect(first.applied.length).toBe(1);
    expect(again.applied.length).toBe(0);
    expect(again.duplicates).toBe(1);
    expect(again.producers.get("w1")).toBe(2);
    expect(Buffer.compare(asm.tracesBytes(), before)).toBe(0);
  });

  it("a re-diff after a lost ack is trimmed to what is new, and the trimmed delta is a plain delta", () => {
    const { asm, ledger, producer } = setup();
    const open = openDelta();
    ingest(asm, ledger, encodeEnvelope(producer.envelope(open)));
    producer.acknowledge(open);
    const routed = nd("uint8", [2, 2, 1], [1, 2, 3, 4]);
    const lost = delta({ nodes: [node(0), node(1, { routed_experts: routed })], calls: [m({ node: 1 })] });
    ingest(asm, ledger, encodeEnvelope(producer.envelope(lost))); // ack lost: producer not told
    // The worker re-diffs: same nodes again (node 1's last row repaired, one more link), plus new ones.
    const resent = delta({
      nodes: [
        node(0),
        node(1, { routed_experts: nd("uint16", [2, 2, 1], [1, 2, 300, 4]), semantic_parents: [m({ node: 0, type: "reply" })] }),
        node(2),
      ],
      calls: [m({ node: 1 }), m({ node: 2 })],
    });
    const out = ingest(asm, ledger, encodeEnvelope(producer.envelope(resent)));
    const trimmed = decodeLossless(out.applied[0]!) as LMap;
    expect(trimmed.keys()).toEqual(["trace", "links", "routing_repairs", "nodes", "calls"]);
    expect((trimmed.get("nodes") as LValue[]).length).toBe(1);
    expect((trimmed.get("calls") as LValue[]).length).toBe(1);

    // The relay's state equals a reference that never saw the lost frame.
    const clean = new EpisodeAssembly();
    clean.apply(open);
    clean.apply(resent);
    expect(Buffer.compare(asm.tracesBytes(), clean.tracesBytes())).toBe(0);
    expect(nodesOf(asm).length).toBe(3);

    // And a watcher that applied the lost frame plus the trimmed delta gets there too.
    const watcher = new EpisodeAssembly();
    watcher.apply(open);
    watcher.apply(lost);
    watcher.apply(out.applied[0]!);
    expect(Buffer.compare(watcher.tracesBytes(), clean.tracesBytes())).toBe(0);
  });

  it("links re-sent after a lost ack are applied once", () => {
    const { asm, ledger, producer } = setup();
    for (const d of [openDelta(), delta({ nodes: [node(0), node(1)] })]) {
      ingest(asm, ledger, encodeEnvelope(producer.envelope(d)));
      producer.acknowledge(d);
    }
    const link = m({ node: 1, type: "reply" });
    ingest(asm, ledger, encodeEnvelope(producer.envelope(delta({ links: intKeyed([[0, [link]]]) }))));
    ingest(asm, ledger, encodeEnvelope(producer.envelope(delta({ links: intKeyed([[0, [link, m({ node: 1, type: "again" })]]]) }))));
    expect((nodesOf(asm)[0]!.get("semantic_parents") as LValue[]).length).toBe(2);
  });

  it("contradicting acked counts are refused as producer conflicts, state unchanged", () => {
    const { asm, ledger } = setup();
    ingest(asm, ledger, openDelta());
    const before = asm.tracesBytes();
    const env: Envelope = { producer: "w", seq: 1, acked: { open: true, counts: { nodes: 5 }, links: new Map() }, delta: delta({ nodes: [node(0)] }) };
    expect(() => ingest(asm, ledger, encodeEnvelope(env))).toThrow(DeltaError);
    const changed: Envelope = { producer: "w", seq: 2, acked: { open: true, counts: {}, links: new Map() }, delta: delta({ nodes: [node(0)] }) };
    ingest(asm, ledger, encodeEnvelope(changed));
    const differs: Envelope = { producer: "w", seq: 3, acked: { open: true, counts: {}, links: new Map() }, delta: delta({ nodes: [node(7)] }) };
    const mid = asm.tracesBytes();
    expect(() => ingest(asm, ledger, encodeEnvelope(differs))).toThrow(/re-sent node differs/);
    expect(Buffer.compare(asm.tracesBytes(), mid)).toBe(0);
    expect(Buffer.compare(before, mid)).not.toBe(0);
  });

  it("a batch is all or nothing: a bad envelope rolls back the ones before it", () => {
    const { asm, ledger, producer } = setup();
    ingest(asm, ledger, encodeEnvelope(producer.envelope(openDelta())));
    const before = asm.tracesBytes();
    const good = producer.envelope(delta({ nodes: [node(0)], set: m({ ok: true, fresh: 1 }) }));
    const discard = producer.envelope(delta({ discard: true }, "t-1"));
    const bad = producer.envelope(delta({ links: intKeyed([[9, []]]) }));
    const batch = enc([encodeEnvelope(good), encodeEnvelope(discard), encodeEnvelope(bad)].map((b) => decodeLossless(b)));
    let err: unknown;
    try {
      ingest(asm, ledger, batch);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DeltaError);
    // the discard before it took the trace away, so the third names an unknown trace
    expect((err as DeltaError).field).toBe("batch[2].trace");
    expect((err as DeltaError).code).toBe("unknown_trace");
    expect(Buffer.compare(asm.tracesBytes(), before)).toBe(0);
    expect(ledger.get("w1")).toBe(1);
    // the same batch without the bad one applies both, in order
    const ok = ingest(asm, ledger, enc([encodeEnvelope(good), encodeEnvelope(discard)].map((b) => decodeLossless(b))));
    expect(ok.applied.length).toBe(2);
    expect(asm.traces.size).toBe(0);
  });

  it("after a failed send, set fields and pending the failed delta carried are re-asserted at their acked values", () => {
    const { asm, ledger, producer } = setup();
    const open = openDelta(undefined, { set: m({ ok: false, is_completed: false }) });
    ingest(asm, ledger, encodeEnvelope(producer.envelope(open)));
    producer.acknowledge(open);
    // reaches the relay, but the ack is lost
    const lost = delta({ set: m({ ok: true }), pending: [m({ role: "tool", content: "x" })] });
    ingest(asm, ledger, encodeEnvelope(producer.envelope(lost)));
    producer.fail(lost);
    // meanwhile the worker's value went back: its re-diff carries neither `ok` nor `pending`
    const next = delta({ set: m({ is_completed: true }) });
    const env = producer.envelope(next);
    ingest(asm, ledger, encodeEnvelope(env));
    producer.acknowledge(env.delta);
    const t = (decodeLossless(asm.tracesBytes()) as LMap[])[0]!;
    expect(t.get("ok")).toBe(false);
    expect(t.get("is_completed")).toBe(true);
    expect(t.get("pending")).toEqual([]);
    // once acknowledged, nothing more is re-asserted
    const later = delta({ set: m({ ok: true }) });
    expect(Buffer.compare(producer.envelope(later).delta, later)).toBe(0);
  });
});

// The trainer's dispatch identity (src/protocol/envelope/dispatch.ts): its checks, its sameness, and every
// golden case byte-exact with one attached (on the envelope, or as prime-rl's live files carry it:
// the opening frame's top-level `dispatch` key, taken off before the assembly sees it).
import { describe, expect, it } from "vitest";
import { parseDelta } from "../../src/protocol/assembly/delta.js";
import { DeltaError } from "../../src/protocol/assembly/errors.js";
import {
  attachDispatch,
  checkDispatch,
  dispatchFacts,
  dispatchFromJson,
  dispatchJson,
  MAX_DISPATCH_BYTES,
  sameDispatch,
} from "../../src/protocol/envelope/dispatch.js";
import { encodeEnvelope, parseIngestMessage } from "../../src/protocol/envelope/envelope.js";
import { MemoryEpisode } from "../../src/protocol/envelope/memory-episode.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { RelayError } from "../../src/protocol/http/errors.js";
import { LMap } from "../../src/protocol/wire/lossless.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";
import { runCaseLocally } from "../../tools/conformance/local.js";
import { delta, enc, f, m, node, openDelta } from "../support/deltas.js";
import { PRIME_DISPATCH } from "../support/prime-rl.js";

const identity = dispatchFromJson(PRIME_DISPATCH);

function refusal(fn: () => unknown): DeltaError | RelayError {
  try {
    fn();
  } catch (e) {
    if (e instanceof DeltaError || e instanceof RelayError) return e;
    throw e;
  }
  throw new Error("not refused");
}

describe("the dispatch identity", () => {
  it("reads prime-rl's shape: JSON in, msgpack kept, the same JSON out; the keys the relay reads", () => {
    expect(dispatchJson(identity)).toEqual(PRIME_DISPATCH);
    expect(Object.keys(dispatchJson(identity))).toEqual(Object.keys(PRIME_DISPATCH));
    expect(dispatchFacts(dispatchJson(identity))).toEqual({
      id: PRIME_DISPATCH.id,
      kind: "train",
      env: "gsm8k",
      group: PRIME_DISPATCH.group,
      task: "idx=0",
      policy_version: 2,
      step: 3,
      started: 1764644000.25,
    });
    // every key optional, others kept as given
    const odd = dispatchFromJson({ step: 0, extra: { nested: [1, "x"] } });
    expect(dispatchJson(odd)).toEqual({ step: 0, extra: { nested: [1, "x"] } });
    expect(dispatchFacts(dispatchJson(odd))).toMatchObject({ id: null, kind: null, step: 0, started: null });
    expect(dispatchFacts(dispatchJson(dispatchFromJson({})))).toMatchObject({ step: null });
  });

  it("refuses what is not one, naming the key", () => {
    expect(refusal(() => checkDispatch(enc([1, 2]))).field).toBe("dispatch");
    expect(refusal(() => dispatchFromJson([1])).field).toBe("dispatch");
    expect(refusal(() => dispatchFromJson({ step: -1 })).field).toBe("dispatch.step");
    expect(refusal(() => dispatchFromJson({ step: 1.5 })).field).toBe("dispatch.step");
    expect(refusal(() => dispatchFromJson({ policy_version: "2" })).field).toBe("dispatch.policy_version");
    expect(refusal(() => dispatchFromJson({ kind: 3 })).field).toBe("dispatch.kind");
    expect(refusal(() => dispatchFromJson({ group: "g".repeat(257) })).field).toBe("dispatch.group");
    expect(refusal(() => checkDispatch(enc(m({ started: "yesterday" })))).field).toBe("dispatch.started");
    const big = refusal(() => dispatchFromJson({ note: "x".repeat(MAX_DISPATCH_BYTES) }));
    expect(big.message).toMatch(/at most 4096 bytes/);
    // nulls are "not known"
    expect(dispatchFacts(dispatchJson(dispatchFromJson({ step: null, kind: null })))).toMatchObject({
      step: null,
      kind: null,
    });
  });

  it("is the same value whatever the key order or number form; another value is not", () => {
    const reordered = dispatchFromJson({
      started: 1764644000.25,
      step: 3,
      policy_version: 2,
      task: "idx=0",
      group: PRIME_DISPATCH.group,
      env: "gsm8k",
      kind: "train",
      id: PRIME_DISPATCH.id,
    });
    expect(sameDispatch(identity, reordered)).toBe(true);
    expect(sameDispatch(dispatchFromJson({ step: 3 }), enc(m({ step: f(3) })))).toBe(true);
    expect(sameDispatch(identity, dispatchFromJson({ ...PRIME_DISPATCH, step: 4 }))).toBe(false);
    expect(sameDispatch(identity, dispatchFromJson({ ...PRIME_DISPATCH, extra: 1 }))).toBe(false);
  });

  it("rides in an envelope (and back), or as a delta's last key", () => {
    const e = parseIngestMessage(
      encodeEnvelope({ producer: "p", seq: 1, cursor: 0, delta: openDelta(), dispatch: identity }),
    );
    expect(e.kind).toBe("envelopes");
    if (e.kind !== "envelopes") return;
    expect(Buffer.compare(e.envelopes[0]!.dispatch!, identity)).toBe(0);
    const bad = refusal(() =>
      parseIngestMessage(encodeEnvelope({ producer: "p", seq: 1, cursor: 0, delta: openDelta(), dispatch: enc("x") })),
    );
    expect(bad.field).toBe("envelope.dispatch");
    const withKey = attachDispatch(openDelta(), identity);
    const parsed = parseDelta(withKey);
    expect(Buffer.compare(parsed.dispatch!, identity)).toBe(0);
    expect(parsed.entries.at(-1)!.key).toBe("dispatch");
  });

  it("is set once: the same again changes nothing, another refuses the whole message", () => {
    const ep = new MemoryEpisode();
    const producer = new ProducerCursor("w");
    ep.ingest(encodeEnvelope({ ...producer.envelope(openDelta()), dispatch: identity }));
    producer.acknowledge();
    ep.ingest(encodeEnvelope({ ...producer.envelope(delta({ nodes: [node(0)] })), dispatch: identity }));
    producer.acknowledge();
    const before = ep.asm.tracesBytes();
    const seq = ep.seq;
    const other = dispatchFromJson({ ...PRIME_DISPATCH, group: "another" });
    const e = refusal(() =>
      ep.ingest(encodeEnvelope({ ...producer.envelope(delta({ nodes: [node(1)] })), dispatch: other })),
    );
    expect(e).toBeInstanceOf(RelayError);
    expect((e as RelayError).code).toBe("dispatch_conflict");
    expect((e as RelayError).status).toBe(409);
    expect(e.message).toContain("another");
    expect(Buffer.compare(ep.asm.tracesBytes(), before)).toBe(0);
    expect(ep.seq).toBe(seq);
    expect(sameDispatch(ep.dispatch!, identity)).toBe(true);
    // a bare delta's key conflicts the same way
    expect(refusal(() => ep.ingest(attachDispatch(delta({ nodes: [node(1)] }), other))).message).toMatch(/set once/);
    expect(Buffer.compare(ep.asm.tracesBytes(), before)).toBe(0);
  });

  it("a batch refused after its first envelope set the identity leaves none set (the whole message refused)", () => {
    const ep = new MemoryEpisode();
    const producer = new ProducerCursor("w");
    const first = encodeEnvelope({ ...producer.envelope(openDelta()), dispatch: identity });
    const bad = encodeEnvelope(producer.envelope(delta({ links: new LMap([[0, [m({ node: 9, type: "x" })]]]) })));
    const batch = new Uint8Array([0x92, ...first, ...bad]);
    expect(refusal(() => ep.ingest(batch))).toBeInstanceOf(DeltaError);
    expect(ep.dispatch).toBeNull();
    expect(ep.seq).toBe(0);
    expect(ep.asm.traces.size).toBe(0);
  });

  const cases = goldenCasePaths().map(loadCase);
  for (const c of cases) {
    for (const via of ["envelope", "delta"] as const) {
      it(`${c.name}: byte-exact with an identity on ${via === "envelope" ? "every envelope" : "its opening frames"}`, () => {
        expect(runCaseLocally(c, { identity, via })).toBeUndefined();
      });
    }
  }

  it("a bare delta with the key: applied without it, the identity kept", () => {
    const c = cases.find((x) => x.name === "chat_basic")!;
    const ep = new MemoryEpisode();
    for (const frame of c.frames) ep.ingest(parseDelta(frame).open ? attachDispatch(frame, identity) : frame);
    expect(sameDispatch(ep.dispatch!, identity)).toBe(true);
    for (const [i, kept] of ep.frames.entries()) expect(Buffer.compare(kept.delta, c.frames[i]!), `frame ${i}`).toBe(0);
    expect(Buffer.compare(ep.asm.finishReply(c.reply), c.episode!)).toBe(0);
  });
});

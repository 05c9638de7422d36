// Committing one producer message (src/objects/episode/commit.ts) over a real SqlStorage: the first one
// creates the episode; applied frames get the next seqs and are logged and counted; a duplicate is
// acknowledged and changes nothing; a refusal leaves storage as it was, and memory too (the index
// kept when the refused delta undid itself, read back from storage otherwise); a retraction
// rewinds the state and the log.
import { describe, expect, it } from "vitest";
import { commitIngest } from "../../src/objects/episode/commit.js";
import { EpisodeState } from "../../src/objects/episode/state.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { DeltaError } from "../../src/protocol/assembly/errors.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { RelayError } from "../../src/protocol/http/errors.js";
import { delta, intKeyed, m, node, openDelta } from "../support/deltas.js";
import { equal, withFreshStorage } from "./support.js";

const ID = "commit-test";
const NO_LIMIT = Number.MAX_SAFE_INTEGER;

/** The relay's live traces as the episode holds them. */
const live = (state: EpisodeState) => state.memory().asm.tracesBytes();
const logged = (state: EpisodeState) => [...state.record.frames()].map((f) => f.seq);

function refusal(fn: () => unknown): Error {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error("not refused");
}

describe("commitIngest", () => {
  it("the first message creates the episode; its frame gets seq 1, is logged and counted; the ack says so", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const p = new ProducerCursor("p");
      const frame = openDelta();
      const c = commitIngest(state, encodeEnvelope(p.envelope(frame)), ID, NO_LIMIT, 1000);
      expect(c.created).toBe(true);
      expect(c.rewound).toBe(false);
      expect(c.ack).toEqual({ ok: true, seq: 1, applied: 1, duplicates: 0, producers: { p: 1 } });
      expect(c.frames.map((f) => [f.seq, f.trace, equal(f.delta, frame)])).toEqual([[1, "t-1", true]]);
      expect(c.meta).toMatchObject({
        id: ID,
        status: "live",
        seq: 1,
        bytes: frame.length,
        traces: 1,
        nodes: 0,
        calls: 0,
        created: 1000,
        updated: 1000,
      });
      expect(state.record.meta()).toEqual(c.meta);
      expect(logged(state)).toEqual([1]);
      expect(state.record.producers().get("p")).toEqual({ last: 1, unconfirmed: [{ pseq: 1, seq: 1 }] });

      p.acknowledge();
      const next = commitIngest(
        state,
        encodeEnvelope(p.envelope(delta({ nodes: [node(0), node(1)] }))),
        ID,
        NO_LIMIT,
        2000,
      );
      expect(next.created).toBe(false);
      expect(next.meta).toMatchObject({ seq: 2, nodes: 2, created: 1000, updated: 2000 });
      expect(logged(state)).toEqual([1, 2]);
    });
  });

  it("a duplicate (its ack was lost) is acknowledged, applies and logs nothing", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const envelope = encodeEnvelope(new ProducerCursor("p").envelope(openDelta()));
      commitIngest(state, envelope, ID, NO_LIMIT, 0);
      const again = commitIngest(state, envelope, ID, NO_LIMIT, 5);
      expect(again.ack).toEqual({ ok: true, seq: 1, applied: 0, duplicates: 1, producers: { p: 1 } });
      expect(again.frames).toEqual([]);
      expect(logged(state)).toEqual([1]);
    });
  });

  it("a refused delta rolls everything back; the index in memory was left as it was and is kept", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      commitIngest(state, openDelta(), ID, NO_LIMIT, 0);
      const index = state.memory();
      const before = { meta: state.record.meta(), traces: live(state) };
      const e = refusal(() => commitIngest(state, delta({ nodes: [node(0)] }, "t-unknown"), ID, NO_LIMIT, 9));
      expect(e).toBeInstanceOf(DeltaError);
      expect((e as DeltaError).code).toBe("unknown_trace");
      expect(state.memory()).toBe(index);
      expect(state.record.meta()).toEqual(before.meta);
      expect(logged(state)).toEqual([1]);
      expect(equal(live(state), before.traces)).toBe(true);
    });
  });

  it("over the episode's size limit: refused (episode_too_large), nothing kept, the index read back; a first message creates nothing", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const open = openDelta();
      const tooBig = refusal(() => commitIngest(state, open, ID, open.length - 1, 0));
      expect(tooBig).toBeInstanceOf(RelayError);
      expect((tooBig as RelayError).code).toBe("episode_too_large");
      expect(state.meta()).toBeNull();
      expect(state.record.exists()).toBe(false);

      commitIngest(state, open, ID, open.length + 10, 0);
      const index = state.memory();
      const before = live(state);
      const more = refusal(() => commitIngest(state, delta({ nodes: [node(0)] }), ID, open.length + 10, 1));
      expect((more as RelayError).code).toBe("episode_too_large");
      expect(state.memory()).not.toBe(index); // it had applied the delta: read back from storage
      expect(equal(live(state), before)).toBe(true);
      expect(state.record.meta()!.seq).toBe(1);
    });
  });

  it("a finished episode takes no more deltas", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, NO_LIMIT, 0);
      state.record.saveMeta({ ...c.meta, status: "finished" });
      const e = refusal(() => commitIngest(state, delta({ nodes: [node(0)] }), ID, NO_LIMIT, 1));
      expect((e as RelayError).code).toBe("episode_finished");
    });
  });

  it("a retraction: the frames the cursor never confirmed leave the state and the log; the rewind is recorded", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const p = new ProducerCursor("p");
      const frames = [openDelta(), delta({ nodes: [node(0), node(1)] }), delta({ nodes: [node(0)] })];
      commitIngest(state, encodeEnvelope(p.envelope(frames[0]!)), ID, NO_LIMIT, 0);
      p.acknowledge();
      commitIngest(state, encodeEnvelope(p.envelope(frames[1]!)), ID, NO_LIMIT, 0); // its ack is lost
      const c = commitIngest(state, encodeEnvelope(p.envelope(frames[2]!)), ID, NO_LIMIT, 0);
      expect(c.rewound).toBe(true);
      expect(c.frames.map((f) => f.seq)).toEqual([3]);
      expect(c.meta).toMatchObject({ seq: 3, nodes: 1, bytes: frames[0]!.length + frames[2]!.length });
      expect(logged(state)).toEqual([1, 3]);
      expect(state.record.rewindCount()).toBe(1);
      expect(state.record.rewoundPast(2)).toBe(true);
      const reference = new EpisodeAssembly();
      for (const f of [frames[0]!, frames[2]!]) reference.apply(f);
      expect(equal(live(state), reference.tracesBytes())).toBe(true);
      expect(equal(reloadedTraces(storage), reference.tracesBytes()), "as stored").toBe(true);
    });
  });

  /** Producer a's frame 2 (nodes) lost its ack; b's frame 3 links node 1, which only that frame holds; a's next envelope retracts it. */
  function conflicting(state: EpisodeState): {
    before: { meta: ReturnType<EpisodeState["meta"]>; traces: Uint8Array; log: number[] };
    retraction: Uint8Array;
  } {
    const a = new ProducerCursor("a");
    const b = new ProducerCursor("b");
    commitIngest(state, encodeEnvelope(a.envelope(openDelta())), ID, NO_LIMIT, 0);
    a.acknowledge();
    commitIngest(state, encodeEnvelope(a.envelope(delta({ nodes: [node(0), node(1)] }))), ID, NO_LIMIT, 0); // its ack is lost
    commitIngest(
      state,
      encodeEnvelope(b.envelope(delta({ links: intKeyed([[1, [m({ node: 0, type: "reply" })]]]) }))),
      ID,
      NO_LIMIT,
      0,
    );
    return {
      before: { meta: state.record.meta(), traces: live(state), log: logged(state) },
      retraction: encodeEnvelope(a.envelope(delta({ nodes: [node(0)] }))),
    };
  }

  it("a retraction that leaves another producer's frame inapplicable is refused (producer_conflict); storage as before", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const { before, retraction } = conflicting(state);
      const e = refusal(() => commitIngest(state, retraction, ID, NO_LIMIT, 0));
      expect((e as DeltaError).code).toBe("producer_conflict");
      expect(state.record.meta()).toEqual(before.meta);
      expect(logged(state)).toEqual(before.log);
      expect(state.record.rewindCount()).toBe(0);
      expect(equal(reloadedTraces(storage), before.traces), "as stored").toBe(true);
    });
  });

  // The retraction had already rebuilt the index in memory when the re-applied frame failed: the
  // refusal must not keep that half-rewound index (commit.ts marks the rewind before retracting).
  it("...and memory as before: the index the retraction had rebuilt is read back from storage", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const { before, retraction } = conflicting(state);
      refusal(() => commitIngest(state, retraction, ID, NO_LIMIT, 0));
      expect(equal(live(state), before.traces)).toBe(true);
    });
  });
});

/** The live traces as a new EpisodeState reads them from storage. */
function reloadedTraces(storage: DurableObjectStorage): Uint8Array {
  return new EpisodeState(storage).memory().asm.tracesBytes();
}

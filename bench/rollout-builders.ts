// What the benches that write synthetic rollouts (search, flags) build them from: a deterministic
// generator, ordered msgpack maps, and a chat node as verifiers' DeltaStreamer sends it.
import { LMap, type LValue } from "../src/protocol/index.js";

/** An ordered msgpack map (key order kept on the wire). */
export const m = (o: Record<string, LValue>) => new LMap(Object.entries(o));

/** A deterministic generator. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Node `k` of a linear chat (its parent the one before), carrying `message`; no tokens, no routing. */
export function chatNode(k: number, message: LMap): LMap {
  return m({
    parent: k === 0 ? null : k - 1,
    semantic_parents: [],
    message,
    sampled: false,
    timestamp: null,
    token_ids: [],
    mask: [],
    logprobs: [],
    routed_experts: null,
  });
}

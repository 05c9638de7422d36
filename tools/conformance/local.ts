// Run one golden case through the project's own assembly, the way the relay does: each frame
// wrapped in a producer envelope (the cursor is the last frame acknowledged, i.e. not in
// `ack_lost`), checkpoints and the finished episode compared byte for byte. A retraction is done
// the simple way: the assembly is rebuilt from the frames kept. With `dispatch`, a trainer's identity
// rides along as prime-rl's would (src/protocol/envelope/dispatch.ts): on every envelope, or as the
// top-level `dispatch` key of each frame that opens a trace; the bytes must not change.
import {
  attachDispatch,
  dispatchFromJson,
  encodeEnvelope,
  FinishError,
  MemoryEpisode,
  ProducerCursor,
  parseDelta,
  sameDispatch,
} from "../../src/protocol/index.js";
import type { GoldenCase } from "./cases.js";
import { compareBytes } from "./compare.js";

/** The identity conformance sends with `--dispatch` (prime-rl's `dispatch_info` shape). */
export const CONFORMANCE_DISPATCH: Uint8Array = dispatchFromJson({
  id: "c0f0c0f0c0f0c0f0c0f0c0f0c0f0c0f0",
  kind: "train",
  env: "conformance",
  group: "00000000-0000-4000-8000-000000000000",
  task: "idx=0",
  policy_version: 1,
  step: 2,
  started: 1764644000.25,
});

/** How a trainer's identity rides with a case's frames: the envelope's field, or the opening frames' own key. */
export interface WithDispatch {
  identity: Uint8Array;
  via: "envelope" | "delta";
}

/** A frame as sent with `d`: with the identity as its last key when it opens a trace and `d` says so. */
export function frameWithDispatch(frame: Uint8Array, d: WithDispatch | undefined): Uint8Array {
  return d?.via === "delta" && parseDelta(frame, true).open !== undefined ? attachDispatch(frame, d.identity) : frame;
}

/** Undefined when the case passes, else the first difference as one line. */
export function runCaseLocally(c: GoldenCase, dispatch?: WithDispatch): string | undefined {
  const episode = new MemoryEpisode();
  const asm = episode.asm;
  const producer = new ProducerCursor("conformance");
  const lost = new Set(c.ack_lost);
  let k = 0;
  for (let i = 0; i < c.frames.length; i++) {
    const frame = frameWithDispatch(c.frames[i]!, dispatch);
    const env = producer.envelope(frame);
    try {
      episode.ingest(encodeEnvelope(dispatch?.via === "envelope" ? { ...env, dispatch: dispatch.identity } : env));
    } catch (e) {
      return `frames[${i}]: refused: ${(e as Error).message}`;
    }
    if (!lost.has(i)) producer.acknowledge(); // a lost ack: the cursor stays where it was
    const cp = c.checkpoints[k];
    if (cp && cp.after === i + 1) {
      k++;
      const diff = compareBytes(cp.traces, asm.tracesBytes(), `checkpoint after ${cp.after}`);
      if (diff) return diff;
    }
  }
  if (k !== c.checkpoints.length) return `checkpoints: ${c.checkpoints.length - k} never reached`;
  if (dispatch && !(episode.dispatch && sameDispatch(episode.dispatch, dispatch.identity)))
    return "dispatch: the identity did not arrive";
  // the frames kept (and fanned out) are the upstream ones: the identity taken off
  for (const f of episode.frames)
    if (parseDelta(f.delta, true).dispatch !== undefined) return `frame ${f.seq}: still carries its dispatch key`;
  return checkFinish(c, () => asm.finishReply(c.reply));
}

export function checkFinish(c: GoldenCase, finish: () => Uint8Array): string | undefined {
  let episode: Uint8Array;
  try {
    episode = finish();
  } catch (e) {
    if (e instanceof FinishError && c.finish_error !== null) {
      return e.message === c.finish_error
        ? undefined
        : `finish_error: expected ${JSON.stringify(c.finish_error)} got ${JSON.stringify(e.message)}`;
    }
    return `episode: finish failed: ${(e as Error).message}`;
  }
  if (c.finish_error !== null) return `finish_error: expected ${JSON.stringify(c.finish_error)} got an episode`;
  return compareBytes(c.episode!, episode, "episode");
}

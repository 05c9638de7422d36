// Run one golden case through the project's own assembly, the way the relay does: each frame
// wrapped in a producer envelope (the cursor is the last frame acknowledged, i.e. not in
// `ack_lost`), checkpoints and the finished episode compared byte for byte. A retraction is done
// the simple way: the assembly is rebuilt from the frames kept.
import { FinishError } from "../../src/assembly/errors.js";
import { encodeEnvelope } from "../../src/envelope/envelope.js";
import { MemoryEpisode } from "../../src/envelope/memory-episode.js";
import { ProducerCursor } from "../../src/envelope/producer.js";
import { compareBytes } from "./compare.js";
import type { GoldenCase } from "./cases.js";

/** Undefined when the case passes, else the first difference as one line. */
export function runCaseLocally(c: GoldenCase): string | undefined {
  const episode = new MemoryEpisode();
  const asm = episode.asm;
  const producer = new ProducerCursor("conformance");
  const lost = new Set(c.ack_lost);
  let k = 0;
  for (let i = 0; i < c.frames.length; i++) {
    const frame = c.frames[i]!;
    try {
      episode.ingest(encodeEnvelope(producer.envelope(frame)));
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
  return checkFinish(c, () => asm.finishReply(c.reply));
}

export function checkFinish(c: GoldenCase, finish: () => Uint8Array): string | undefined {
  let episode: Uint8Array;
  try {
    episode = finish();
  } catch (e) {
    if (e instanceof FinishError && c.finish_error !== null) {
      return e.message === c.finish_error ? undefined : `finish_error: expected ${JSON.stringify(c.finish_error)} got ${JSON.stringify(e.message)}`;
    }
    return `episode: finish failed: ${(e as Error).message}`;
  }
  if (c.finish_error !== null) return `finish_error: expected ${JSON.stringify(c.finish_error)} got an episode`;
  return compareBytes(c.episode!, episode, "episode");
}

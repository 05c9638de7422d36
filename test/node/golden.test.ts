// The golden vectors (test/fixtures/golden, produced by the Python reference) through the assembly.
import { describe, expect, it } from "vitest";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";
import { compareBytes } from "../../tools/conformance/compare.js";
import { checkFinish, runCaseLocally } from "../../tools/conformance/local.js";

const cases = goldenCasePaths().map(loadCase);

describe("golden cases", () => {
  it("finds the golden vectors", () => {
    expect(cases.length).toBeGreaterThanOrEqual(12);
  });

  for (const c of cases) {
    it(`${c.name}: through producer envelopes, every checkpoint and the episode match`, () => {
      expect(runCaseLocally(c)).toBeUndefined();
    });

    if (c.ack_lost.length === 0) {
      it(`${c.name}: bare frames applied in order match every checkpoint and the episode`, () => {
        const asm = new EpisodeAssembly();
        let k = 0;
        c.frames.forEach((frame, i) => {
          const copy = frame.slice();
          asm.apply(frame);
          expect(Buffer.compare(copy, frame)).toBe(0); // applying never mutates its input
          if (c.checkpoints[k]?.after === i + 1) {
            expect(compareBytes(c.checkpoints[k]!.traces, asm.tracesBytes(), `checkpoint ${k}`)).toBeUndefined();
            k++;
          }
        });
        expect(k).toBe(c.checkpoints.length);
        expect(checkFinish(c, () => asm.finishReply(c.reply))).toBeUndefined();
      });
    }
  }

  it("ack_lost: applying every frame blindly duplicates content (the case is not vacuous)", () => {
    const c = cases.find((x) => x.name === "ack_lost")!;
    const asm = new EpisodeAssembly();
    for (const frame of c.frames) asm.apply(frame);
    const last = c.checkpoints.at(-1)!;
    expect(compareBytes(last.traces, asm.tracesBytes(), "blind")).toMatch(/^blind /);
  });

  it("a flipped byte in the expected episode is reported with its decoded path", () => {
    const c = { ...cases.find((x) => x.name === "chat_basic")! };
    const episode = c.episode!.slice();
    episode[episode.length - 2] ^= 0x01;
    c.episode = episode;
    expect(runCaseLocally(c)).toMatch(/^episode \$\.traces\[0\]/);
  });
});

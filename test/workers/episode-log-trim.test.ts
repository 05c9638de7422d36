// Keeping the log short (src/objects/episode/log-trim.ts): `trimPoint` (the frame rule, the byte rule,
// readers' holds) and `LogTrim` over a real SqlStorage (the byte rule every BYTE_CHECK_FRAMES
// frames; the log's new start saved in the meta row; nothing a reader holds goes).
import { describe, expect, it } from "vitest";
import { BYTE_CHECK_FRAMES, LogTrim, trimPoint } from "../../src/objects/episode/log-trim.js";
import type { Meta } from "../../src/objects/episode/record-store.js";
import { EpisodeState } from "../../src/objects/episode/state.js";
import { limitsFrom } from "../../src/protocol/limits/limits.js";
import { withFreshStorage } from "./support.js";

/** Sizes newest first, for frames `from`..`to` of `bytes` each. */
function sizes(from: number, to: number, bytes: number): Array<{ seq: number; bytes: number }> {
  const out = [];
  for (let seq = to; seq >= from; seq--) out.push({ seq, bytes });
  return out;
}

describe("trimPoint", () => {
  it("the frame rule: all but the last keepFrames go; nothing while there are fewer, or when the log starts there already", () => {
    expect(trimPoint({ seq: 20, base: 0 }, 6, Infinity, null, null)).toBe(14);
    expect(trimPoint({ seq: 6, base: 0 }, 6, Infinity, null, null)).toBeNull();
    expect(trimPoint({ seq: 3, base: 0 }, 6, Infinity, null, null)).toBeNull();
    expect(trimPoint({ seq: 20, base: 14 }, 6, Infinity, null, null)).toBeNull();
    expect(trimPoint({ seq: 20, base: 0 }, 0, Infinity, null, null)).toBe(20);
  });

  it("the byte rule (when sizes are given): frames up to the one that passes keepBytes go, counting from the newest", () => {
    // 10 bytes each: the newest two fit in 25, the third passes it
    expect(trimPoint({ seq: 20, base: 0 }, 100, 25, sizes(1, 20, 10), null)).toBe(18);
    // the stricter rule wins
    expect(trimPoint({ seq: 20, base: 0 }, 1, 25, sizes(1, 20, 10), null)).toBe(19);
    expect(trimPoint({ seq: 20, base: 0 }, 100, 1000, sizes(1, 20, 10), null)).toBeNull();
  });

  it("the default bounds keep a long routing-heavy episode's whole log (each trimmed frame is a row written), and still bound it", () => {
    const { logKeepFrames, logKeepBytes } = limitsFrom({});
    // the cost bench's turn: 1500 x 50 x 8 routing bytes and a little text, one frame each
    const turn = 1500 * 50 * 8 + 4096;
    expect(trimPoint({ seq: 200, base: 0 }, logKeepFrames, logKeepBytes, sizes(1, 200, turn), null)).toBeNull();
    // past the byte bound the oldest frames go, as before
    const cut = trimPoint({ seq: 600, base: 0 }, logKeepFrames, logKeepBytes, sizes(1, 600, turn), null);
    expect(cut).not.toBeNull();
    expect((600 - cut!) * turn).toBeLessThanOrEqual(logKeepBytes);
    expect((600 - cut! + 1) * turn).toBeGreaterThan(logKeepBytes);
  });

  it("a reader's hold: nothing after the oldest held seq goes", () => {
    expect(trimPoint({ seq: 20, base: 0 }, 6, Infinity, null, 9)).toBe(9);
    expect(trimPoint({ seq: 20, base: 0 }, 6, Infinity, null, 17)).toBe(14);
    expect(trimPoint({ seq: 20, base: 9 }, 6, Infinity, null, 9)).toBeNull();
  });
});

describe("LogTrim", () => {
  /** An episode at seq `n` with `n` frames of `bytes` each logged. */
  function logged(state: EpisodeState, n: number, bytes: number): Meta {
    state.record.create("trim-test", 0);
    for (let seq = 1; seq <= n; seq++) state.record.appendFrame(seq, new Uint8Array(bytes));
    const m = { ...state.record.meta()!, seq: n, bytes: n * bytes };
    state.record.saveMeta(m);
    return m;
  }
  const log = (state: EpisodeState) => [...state.record.frames()].map((f) => f.seq);

  it("after a commit past keepFrames the log's start moves up, in the log and in the meta row", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const m = logged(state, 10, 1);
      new LogTrim(state, 6, Infinity).afterIngest(m, 1);
      expect(log(state)).toEqual([5, 6, 7, 8, 9, 10]);
      expect(state.record.meta()!.base).toBe(4);
    });
  });

  it("within keepFrames nothing is read or trimmed", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const m = logged(state, 6, 1);
      new LogTrim(state, 6, 0).afterIngest(m, 1); // the byte rule would trim, but does not run yet
      expect(log(state)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(state.record.meta()!.base).toBe(0);
    });
  });

  it(`the byte rule runs once ${BYTE_CHECK_FRAMES} frames were logged since it last ran`, async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const m = logged(state, 6, 10);
      const trim = new LogTrim(state, 6, 25);
      trim.afterIngest(m, BYTE_CHECK_FRAMES - 1);
      expect(log(state)).toHaveLength(6);
      trim.afterIngest(m, 1);
      expect(log(state)).toEqual([5, 6]);
      expect(state.record.meta()!.base).toBe(4);
    });
  });

  it("a reader holding an older state keeps the frames after it", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const m = logged(state, 10, 1);
      const pin = state.store.pin(2);
      new LogTrim(state, 6, Infinity).afterIngest(m, 1);
      expect(log(state)).toEqual([3, 4, 5, 6, 7, 8, 9, 10]);
      pin.release();
    });
  });
});

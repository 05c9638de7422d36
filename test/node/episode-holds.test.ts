// Who holds an older state of the episode (src/protocol/episode/holds.ts): readers' pins and retraction's
// floors, the oldest of them, whether a version is still needed, and what a rewind or a restart
// does to the readers.
import { describe, expect, it } from "vitest";
import { Holds } from "../../src/protocol/episode/holds.js";

describe("Holds", () => {
  it("nothing held: no oldest hold, nothing needed", () => {
    const h = new Holds(() => {});
    expect(h.oldestHold()).toBeNull();
    expect(h.needed(0, Number.MAX_SAFE_INTEGER)).toBe(false);
    expect(h.seqs()).toEqual([]);
    expect(h.readers()).toBe(0);
  });

  it("a pin holds its seq until released (once: a second release does nothing); each release is reported", () => {
    let released = 0;
    const h = new Holds(() => released++);
    const a = h.pin(4);
    const b = h.pin(7);
    expect([a.asOf, b.asOf, h.readers(), h.oldestHold()]).toEqual([4, 7, 2, 4]);
    a.release();
    a.release();
    expect([released, h.readers(), h.oldestHold()]).toEqual([1, 1, 7]);
    b.release();
    expect([released, h.readers(), h.oldestHold()]).toEqual([2, 0, null]);
  });

  it("floors: setFloors replaces them, addFloor adds one; pins and floors together", () => {
    const h = new Holds(() => {});
    h.setFloors([9, 5]);
    h.addFloor(6);
    expect(h.oldestHold()).toBe(5);
    const p = h.pin(3);
    expect(h.oldestHold()).toBe(3);
    expect(h.seqs().sort((x, y) => x - y)).toEqual([3, 5, 6, 9]);
    p.release();
    h.setFloors([]);
    expect(h.oldestHold()).toBeNull();
  });

  it("needed(from, until): some hold sees the version current from `from` until (not including) `until`", () => {
    const h = new Holds(() => {});
    h.setFloors([5]);
    expect([h.needed(5, 6), h.needed(3, 5), h.needed(6, 9), h.needed(0, 100)]).toEqual([true, false, false, true]);
    h.setFloors([]);
    h.pin(8);
    expect([h.needed(8, 9), h.needed(2, 8), h.needed(9, 12)]).toEqual([true, false, false]);
  });

  it("a rewind to a seq tells the readers of a later state that what they read is gone; a restart forgets every reader", () => {
    const h = new Holds(() => {});
    const early = h.pin(3);
    const at = h.pin(5);
    const late = h.pin(8);
    h.rewound(5);
    expect([early.valid, at.valid, late.valid]).toEqual([true, true, false]);
    h.setFloors([2]);
    h.dropReaders();
    expect([h.readers(), h.oldestHold()]).toEqual([0, 2]);
  });
});

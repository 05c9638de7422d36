import { describe, expect, it } from "vitest";
import {
  ASK_AGAIN_MS,
  acquire,
  LEASE_MS,
  MAX_PAUSE_MS,
  MemoryLeaseStore,
  nextExpiry,
  pauseHolder,
  promote,
  release,
} from "../../src/protocol/archive/leases.js";

const T = 1_800_000_000_000;

describe("archive leases", () => {
  it("one slot: the first asker holds it; the next waits in line and is handed the slot when it is released", () => {
    const s = new MemoryLeaseStore();
    expect(acquire(s, "a", T, 1)).toEqual({ grant: { granted: true, until: T + LEASE_MS }, woken: [] });
    const b = acquire(s, "b", T + 10, 1);
    expect(b.grant).toEqual({ granted: false, retryAt: T + 10 + ASK_AGAIN_MS, ahead: 0 });
    // the release leases the slot to b and says to wake it: b does not poll
    expect(release(s, "a", T + 20, 1)).toEqual(["b"]);
    expect(s.leases()).toEqual([{ holder: "b", until: T + 20 + LEASE_MS }]);
    expect(s.waiting()).toEqual([]);
    // b, woken, asks: it holds the slot already (renewed)
    expect(acquire(s, "b", T + 30, 1).grant).toEqual({ granted: true, until: T + 30 + LEASE_MS });
  });

  it("a holder asking again renews its lease (a long step), never takes a second slot", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "a", T, 1);
    expect(acquire(s, "a", T + 20_000, 1).grant).toEqual({ granted: true, until: T + 20_000 + LEASE_MS });
    expect(s.leases()).toHaveLength(1);
    expect(acquire(s, "b", T + 40_000, 1).grant.granted, "renewed: still held past the first expiry").toBe(false);
  });

  it("a crashed holder's lease expires: the gate's look at the expiry hands its slot to the next waiter", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "crashed", T, 1);
    expect(acquire(s, "b", T + 1, 1).grant.granted).toBe(false);
    expect(nextExpiry(s)).toBe(T + LEASE_MS);
    expect(promote(s, T + LEASE_MS - 1, 1), "not yet").toEqual([]);
    expect(promote(s, T + LEASE_MS, 1)).toEqual(["b"]);
    expect(s.leases().map((l) => l.holder)).toEqual(["b"]);
  });

  it("waiters are served in the order they first asked; asking again keeps a waiter's place", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "holder", T, 1);
    for (const [i, h] of ["w1", "w2", "w3"].entries()) acquire(s, h, T + 1 + i, 1);
    // w3 asks again (its own alarm, a lost wake): still behind w1 and w2
    expect(acquire(s, "w3", T + 50, 1).grant).toMatchObject({ granted: false, ahead: 2 });
    expect(acquire(s, "w1", T + 51, 1).grant).toMatchObject({ granted: false, ahead: 0 });
    expect(release(s, "holder", T + 100, 1)).toEqual(["w1"]);
    expect(release(s, "w1", T + 200, 1)).toEqual(["w2"]);
    expect(release(s, "w2", T + 300, 1)).toEqual(["w3"]);
    expect(release(s, "w3", T + 400, 1)).toEqual([]);
    expect(s.leases()).toEqual([]);
  });

  it("a newcomer never jumps the line, even at the moment a slot frees", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "a", T, 1);
    acquire(s, "b", T + 1, 1);
    // a's lease has expired, c asks before the gate looked: b gets the slot, c waits behind nobody but b's lease
    const c = acquire(s, "c", T + LEASE_MS + 5, 1);
    expect(c.woken).toEqual(["b"]);
    expect(c.grant.granted).toBe(false);
  });

  it("a waiter woken for a step it no longer needs gives the slot back: the next is woken", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "a", T, 1);
    acquire(s, "gone", T + 1, 1);
    acquire(s, "b", T + 2, 1);
    expect(release(s, "a", T + 3, 1)).toEqual(["gone"]);
    expect(release(s, "gone", T + 4, 1)).toEqual(["b"]);
  });

  it("N slots: N holders at once, the rest in line; 0: unlimited, nobody waits", () => {
    const s = new MemoryLeaseStore();
    expect(["a", "b", "c", "d"].map((h, i) => acquire(s, h, T + i, 3).grant.granted)).toEqual([
      true,
      true,
      true,
      false,
    ]);
    expect(release(s, "b", T + 10, 3)).toEqual(["d"]);
    const u = new MemoryLeaseStore();
    for (let i = 0; i < 100; i++) expect(acquire(u, `e${i}`, T, 0).grant.granted).toBe(true);
    expect(u.waiting()).toEqual([]);
  });

  it("a line of thousands: each ask reads only the leases and the head of the line", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "holder", T, 1);
    for (let i = 0; i < 5000; i++) acquire(s, `w${String(i).padStart(5, "0")}`, T + 1 + i, 1);
    let reads = 0;
    const firstWaiters = s.firstWaiters.bind(s);
    s.firstWaiters = (n: number) => {
      reads += n;
      return firstWaiters(n);
    };
    expect(release(s, "holder", T + 10_000, 1)).toEqual(["w00000"]);
    expect(reads, "one waiter read to hand one slot on").toBe(1);
  });

  it("a slot rests after a step as long as the step took (at most MAX_PAUSE_MS): archive work takes at most about half the thread", () => {
    const s = new MemoryLeaseStore();
    acquire(s, "a", T, 1);
    acquire(s, "b", T + 1, 1);
    // a's step took 800 ms: nobody is woken now; the slot rests until T + 800 + 800
    expect(release(s, "a", T + 800, 1, LEASE_MS, 800)).toEqual([]);
    expect(s.leases()).toEqual([{ holder: pauseHolder("a"), until: T + 1600 }]);
    expect(nextExpiry(s), "the gate looks again when the rest ends").toBe(T + 1600);
    expect(acquire(s, "c", T + 1000, 1).grant.granted, "no newcomer takes a resting slot").toBe(false);
    expect(promote(s, T + 1599, 1)).toEqual([]);
    expect(promote(s, T + 1600, 1)).toEqual(["b"]);
    // a long step rests MAX_PAUSE_MS at most; a holder without a lease (a waiter that left) rests nothing
    expect(release(s, "b", T + 20_000, 1, LEASE_MS, 60_000)).toEqual([]);
    expect(s.leases()).toEqual([{ holder: pauseHolder("b"), until: T + 20_000 + MAX_PAUSE_MS }]);
    expect(release(s, "c", T + 20_001, 1, LEASE_MS, 5_000), "c left the line: it rests nothing").toEqual([]);
    expect(s.leases().map((l) => l.holder)).toEqual([pauseHolder("b")]);
    expect(s.waiting()).toEqual([]);
  });
});

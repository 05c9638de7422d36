import { describe, expect, it } from "vitest";
import {
  acquire,
  EMPTY,
  LEASE_MS,
  type LeaseTable,
  release,
  WAIT_POLL_MS,
  WAITER_TTL_MS,
} from "../../src/protocol/archive/leases.js";

const T = 1_800_000_000_000;

function ask(table: LeaseTable, holder: string, now: number, slots: number) {
  return acquire(table, holder, now, slots);
}

describe("archive leases", () => {
  it("one slot: the first asker holds it, the next waits until it is released", () => {
    const a = ask(EMPTY, "a", T, 1);
    expect(a.grant).toEqual({ granted: true, until: T + LEASE_MS });
    const b = ask(a.table, "b", T + 10, 1);
    expect(b.grant.granted).toBe(false);
    if (!b.grant.granted) expect(b.grant.retryAt).toBe(T + 10 + WAIT_POLL_MS);
    const freed = release(b.table, "a", T + 20);
    expect(ask(freed, "b", T + 30, 1).grant.granted).toBe(true);
  });

  it("a holder asking again renews its lease (a long step), never takes a second slot", () => {
    let t = ask(EMPTY, "a", T, 1).table;
    const again = ask(t, "a", T + 20_000, 1);
    expect(again.grant).toEqual({ granted: true, until: T + 20_000 + LEASE_MS });
    t = again.table;
    expect(t.leases).toHaveLength(1);
    expect(ask(t, "b", T + 40_000, 1).grant.granted, "renewed: still held past the first expiry").toBe(false);
  });

  it("a crashed holder's lease expires: its slot goes to the next waiter", () => {
    const t = ask(EMPTY, "crashed", T, 1).table;
    const waiting = ask(t, "b", T + 1, 1);
    expect(waiting.grant.granted).toBe(false);
    expect(ask(waiting.table, "b", T + LEASE_MS, 1).grant.granted).toBe(true);
  });

  it("waiters are served in the order they first asked", () => {
    let t = ask(EMPTY, "holder", T, 1).table;
    for (const [i, h] of ["w1", "w2", "w3"].entries()) t = ask(t, h, T + 1 + i, 1).table;
    t = release(t, "holder", T + 100);
    // w3 asks first after the release: w1 and w2 are ahead of it
    const w3 = ask(t, "w3", T + 101, 1);
    expect(w3.grant).toMatchObject({ granted: false, ahead: 2 });
    const w1 = ask(w3.table, "w1", T + 102, 1);
    expect(w1.grant.granted).toBe(true);
  });

  it("a waiter that stopped asking is forgotten: it does not block the others", () => {
    let t = ask(EMPTY, "holder", T, 1).table;
    t = ask(t, "gone", T + 1, 1).table;
    t = ask(t, "b", T + 2, 1).table;
    t = release(t, "holder", T + 3);
    expect(ask(t, "b", T + 4, 1).grant.granted, "gone is still ahead").toBe(false);
    expect(ask(t, "b", T + 1 + WAITER_TTL_MS, 1).grant.granted).toBe(true);
  });

  it("N slots: N holders at once; 0: unlimited", () => {
    let t = EMPTY;
    const granted = ["a", "b", "c", "d"].map((h, i) => {
      const r = ask(t, h, T + i, 3);
      t = r.table;
      return r.grant.granted;
    });
    expect(granted).toEqual([true, true, true, false]);
    let u = EMPTY;
    for (let i = 0; i < 100; i++) {
      const r = ask(u, `e${i}`, T, 0);
      expect(r.grant.granted).toBe(true);
      u = r.table;
    }
  });

  it("retryAt is never later than the soonest lease expiry", () => {
    const t = acquire(EMPTY, "a", T, 1, 200).table;
    const b = ask(t, "b", T + 50, 1);
    expect(b.grant).toMatchObject({ granted: false, retryAt: T + 200 });
  });
});

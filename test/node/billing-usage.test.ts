// The usage record (src/protocol/billing/usage.ts) on its own: cursors counted fully though they grow after
// they were handed over (and let go past the ring), the duration model's union of intervals, the
// record found again on a wake, R2 counters.
import { describe, expect, it } from "vitest";
import {
  CURSOR_RING,
  IDLE_MS,
  MAX_RECORDS,
  meterFor,
  OTHER,
  sumUsage,
  UsageMeter,
  writtenTable,
} from "../../src/protocol/billing/usage.js";

/** A cursor whose counts grow as it is "iterated". */
class FakeCursor {
  rowsRead = 0;
  rowsWritten = 0;
}

describe("UsageMeter rows", () => {
  it("a streamed cursor is counted fully: counts read at eviction and at every snapshot", () => {
    const m = new UsageMeter("Episode", "id", 0);
    const streamed = new FakeCursor();
    m.cursor(streamed);
    streamed.rowsRead = 3;
    expect(m.snapshot(0, 0).rowsRead).toBe(3);
    streamed.rowsRead = 10; // pulled further after the snapshot
    for (let i = 0; i < CURSOR_RING - 1; i++) {
      const c = new FakeCursor();
      c.rowsWritten = 1;
      m.cursor(c);
    }
    streamed.rowsRead = 12;
    m.cursor(new FakeCursor()); // evicts the streamed one: its last counts are folded in
    streamed.rowsRead = 99; // no longer watched
    const u = m.snapshot(0, 0);
    expect(u.rowsRead).toBe(12);
    expect(u.rowsWritten).toBe(CURSOR_RING - 1);
  });

  it("a cursor whose counts cannot be read any more keeps what was counted", () => {
    const m = new UsageMeter("Episode", "id", 0);
    let dead = false;
    m.cursor({
      get rowsRead() {
        if (dead) throw new Error("gone");
        return 5;
      },
      rowsWritten: 0,
    });
    expect(m.snapshot(0, 0).rowsRead).toBe(5);
    dead = true;
    expect(m.snapshot(0, 0).rowsRead).toBe(5);
  });

  it("rows written are kept by table too: each cursor's under the table its statement writes, summing to the total", () => {
    expect(writtenTable("INSERT OR REPLACE INTO rows (id) VALUES (?)")).toBe("rows");
    expect(writtenTable("  insert into steps VALUES (1)")).toBe("steps");
    expect(writtenTable("UPDATE state SET v = ? WHERE k = ?")).toBe("state");
    expect(writtenTable("DELETE FROM segments WHERE id = ?")).toBe("segments");
    expect(writtenTable("REPLACE INTO groups VALUES (1)")).toBe("groups");
    expect(writtenTable("SELECT * FROM rows")).toBe(OTHER);
    expect(writtenTable("CREATE TABLE t (a)")).toBe(OTHER);
    const m = new UsageMeter("EpisodeIndex", "id", 0);
    const rows = new FakeCursor();
    m.cursor(rows, "rows");
    rows.rowsWritten = 5;
    expect(m.snapshot(0, 0).written).toStrictEqual({ rows: 5 });
    rows.rowsWritten = 7; // counted as it grows, under its table
    const steps = new FakeCursor();
    steps.rowsWritten = 2;
    m.cursor(steps, "steps");
    m.rows(0, 1, "alarm");
    m.rows(0, 3, "search (FTS5 shadow)");
    const u = m.snapshot(0, 0);
    expect(u.written).toStrictEqual({ rows: 7, steps: 2, alarm: 1, "search (FTS5 shadow)": 3 });
    expect(u.rowsWritten).toBe(13);
    expect(sumUsage([u, u]).written).toStrictEqual({ rows: 14, steps: 4, alarm: 2, "search (FTS5 shadow)": 6 });
  });

  it("setAlarm-like rows are added as they come", () => {
    const m = new UsageMeter("Episode", "id", 0);
    m.rows(0, 1);
    m.rows(2, 0);
    expect(m.snapshot(0, 0)).toMatchObject({ rowsRead: 2, rowsWritten: 1 });
  });
});

describe("UsageMeter duration (the model)", () => {
  it("the union of [start, end + IDLE_MS], and the busy lower bound", () => {
    const m = new UsageMeter("ViewerHub", "id", 0);
    m.begin(1000, "request");
    m.end(1100);
    m.begin(5000, "wsIn"); // within the first tail: one span
    m.end(5050);
    m.begin(100_000, "request"); // long after: a second span
    m.end(100_200);
    const u = m.snapshot(200_000, 0);
    expect(u.activeMs).toBe(5050 + IDLE_MS - 1000 + (100_200 + IDLE_MS - 100_000));
    expect(u.busyMs).toBe(100 + 50 + 200);
    expect(u).toMatchObject({ requests: 2, wsIn: 1 });
  });

  it("overlapping events count once; an event still running counts up to now", () => {
    const m = new UsageMeter("Episode", "id", 0);
    m.begin(0, "request");
    m.begin(10, "request");
    m.end(20);
    expect(m.snapshot(50, 0)).toMatchObject({ activeMs: 50, busyMs: 50 });
    m.end(60);
    expect(m.snapshot(70, 0)).toMatchObject({ activeMs: 60 + IDLE_MS, busyMs: 60 });
  });

  it("work outside events (a stream pull) keeps the object active; 'none' events count no request", () => {
    const m = new UsageMeter("Episode", "id", 0);
    m.begin(0, "none");
    m.end(0);
    m.touch(IDLE_MS + 5000); // after the first tail: a new span
    const u = m.snapshot(100_000, 0);
    expect(u.activeMs).toBe(2 * IDLE_MS);
    expect(u.requests + u.wsIn).toBe(0);
  });
});

describe("the records", () => {
  it("a wake finds the object's record again: counts go on, wakes counts constructions", () => {
    const id = `wake-${Math.random()}`;
    const first = meterFor("Episode", id, 1);
    first.begin(1, "request");
    first.end(1);
    const again = meterFor("Episode", id, 2);
    expect(again).toBe(first);
    expect(again.snapshot(3, 0)).toMatchObject({ wakes: 2, requests: 1, since: 1 });
    expect(meterFor("ViewerHub", id, 4)).not.toBe(first);
  });

  it("records go least recently used first: a busy object constructed before many others keeps its counts through a wake", () => {
    const tag = Math.random();
    const index = meterFor("EpisodeIndex", `busy-${tag}`, 1);
    index.rows(0, 7);
    const idle = meterFor("Episode", `idle-${tag}`, 1);
    idle.rows(0, 3);
    for (let i = 0; i < MAX_RECORDS; i++) {
      meterFor("Episode", `many-${tag}-${i}`, 2);
      if (i % 1000 === 0) {
        index.begin(2, "request");
        index.end(2);
      }
    }
    // the index was used all along: its record is found again; the idle episode's went (a wake starts from zero)
    expect(meterFor("EpisodeIndex", `busy-${tag}`, 3)).toBe(index);
    expect(index.snapshot(3, 0)).toMatchObject({ rowsWritten: 7, wakes: 2 });
    expect(meterFor("Episode", `idle-${tag}`, 3)).not.toBe(idle);
  });

  it("R2 counters: class A, class B, free deletes, bytes written and kept; sums", () => {
    const m = new UsageMeter("Episode", "id", 0);
    expect(m.snapshot(0, 0).r2.bytesStored).toBeUndefined();
    m.r2Put(100);
    m.r2Put(50, 100); // overwrote the first
    // a multipart upload of three parts, op by op: create, parts, complete (storing what they make up)
    m.r2MultipartOp();
    for (const part of [400, 400, 200]) m.r2MultipartOp(part);
    m.r2MultipartOp(0, 1000);
    m.r2Get();
    m.r2Head();
    m.r2List();
    m.r2Delete(50);
    const u = m.snapshot(0, 4096);
    expect(u.r2).toStrictEqual({
      classA: 1 + 1 + 1 + 4 + 1,
      classB: 2,
      deletes: 1,
      bytesWritten: 1150,
      bytesStored: 1000,
    });
    expect(sumUsage([u, u])).toMatchObject({ sqliteBytes: 8192, r2: { classA: 16, bytesStored: 2000 } });
  });
});

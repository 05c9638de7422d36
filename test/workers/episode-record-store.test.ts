// The episode's record in SQLite (src/objects/episode/record-store.ts): the meta row, the log of frames (in
// parts), rewinds, producers, the reply, the run index's row state and the tombstone, on a real
// SqlStorage. Nothing is created for an episode nobody wrote; what is kept in memory is read back
// after `forget`.
import { describe, expect, it } from "vitest";
import { type Meta, publicStatus, RecordStore } from "../../src/objects/episode/record-store.js";
import { EPISODE_SCHEMA } from "../../src/objects/episode/schema.js";
import { SchemaState, storedVersion } from "../../src/objects/storage/schema.js";
import { PART_BYTES } from "../../src/protocol/episode/parts.js";
import { equal, withFreshStorage } from "./support.js";

function recordOf(storage: DurableObjectStorage): RecordStore {
  return new RecordStore(storage.sql, new SchemaState(storage, EPISODE_SCHEMA));
}

function bytes(n: number, fill: number): Uint8Array {
  return new Uint8Array(n).fill(fill);
}

describe("RecordStore", () => {
  it("an episode nobody wrote: no meta, log, rewinds, producers, reply, index row or tombstone, and no table created", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      expect(r.exists()).toBe(false);
      expect(r.meta()).toBeNull();
      expect([...r.frames()]).toEqual([]);
      expect([...r.logSizes()]).toEqual([]);
      expect(r.rewindCount()).toBe(0);
      expect(r.rewoundPast(1)).toBe(false);
      expect(r.producers().size).toBe(0);
      expect(r.reply()).toBeNull();
      expect(r.indexState()).toEqual({ lastFlush: 0, due: 0, flushMs: 0, attempts: 0 });
      expect(r.tombstone()).toBeNull();
      expect(storedVersion(storage.sql)).toBeNull();
    });
  });

  it("create writes the tables and the meta row; saveMeta's row is what a new record reads from SQLite", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      const m = r.create("ep-1", 1000);
      expect(m).toEqual({
        id: "ep-1",
        status: "live",
        seq: 0,
        bytes: 0,
        traces: 0,
        nodes: 0,
        calls: 0,
        created: 1000,
        updated: 1000,
        error: null,
        base: 0,
        size: null,
        etag: null,
        refused: null,
        archived: null,
        dispatch: null,
        progress: null,
        annotations: 0,
        annotationBytes: 0,
        unknown: [],
      });
      expect(r.exists()).toBe(true);
      const saved: Meta = {
        ...m,
        status: "finished",
        seq: 7,
        bytes: 70,
        traces: 2,
        nodes: 5,
        calls: 3,
        updated: 2000,
        base: 4,
        size: 99,
        etag: "e",
        archived: 3000,
        dispatch: Uint8Array.of(0x81, 0xa4, 0x73, 0x74, 0x65, 0x70, 0x03),
        progress: {
          stage: "done",
          started: 1.5,
          elapsed: 2,
          branches: 1,
          input_tokens: 3,
          output_tokens: 4,
          cost: null,
          last: "ok",
        },
        annotations: 3,
        annotationBytes: 1200,
        unknown: ["future_list", "set.future_scalar"],
      };
      r.saveMeta(saved);
      expect(r.meta()).toEqual(saved);
      expect(recordOf(storage).meta()).toEqual(saved);
      // a copy each time: changing it changes nothing stored
      r.meta()!.seq = 100;
      expect(r.meta()!.seq).toBe(7);
    });
  });

  it("frames are logged in parts of PART_BYTES and read back whole, in seq order, within (after, upTo], about maxBytes at a time", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      r.create("ep-2", 0);
      const big = bytes(2 * PART_BYTES + 5, 7);
      const frames = [bytes(10, 1), big, bytes(0, 0), bytes(20, 3)];
      frames.forEach((f, i) => {
        r.appendFrame(i + 1, f);
      });
      const rows = storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM frames WHERE seq = 2").one().n;
      expect(rows).toBe(3);
      const all = [...r.frames()];
      expect(all.map((f) => f.seq)).toEqual([1, 2, 3, 4]);
      all.forEach((f, i) => {
        expect(equal(f.frame, frames[i]!), `frame ${f.seq}`).toBe(true);
      });
      expect([...r.frames(1, 3)].map((f) => f.seq)).toEqual([2, 3]);
      // maxBytes: it stops once the frames given reach it, with at least one
      expect([...r.frames(0, Number.MAX_SAFE_INTEGER, 5)].map((f) => f.seq)).toEqual([1]);
      expect([...r.frames(0, Number.MAX_SAFE_INTEGER, 11)].map((f) => f.seq)).toEqual([1, 2]);
      expect([...r.logSizes()]).toEqual([
        { seq: 4, bytes: 20 },
        { seq: 3, bytes: 0 },
        { seq: 2, bytes: big.length },
        { seq: 1, bytes: 10 },
      ]);
    });
  });

  it("logSizes reads the log newest first, a page of parts at a time, no further than its reader goes", async () => {
    await withFreshStorage((storage) => {
      // the cursors the record opens, to read what they read
      const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
      const sql = new Proxy(storage.sql, {
        get: (t, p) =>
          p === "exec"
            ? (q: string, ...b: unknown[]) => {
                const c = t.exec(q, ...b);
                cursors.push(c);
                return c;
              }
            : Reflect.get(t, p, t),
      });
      const r = new RecordStore(sql, new SchemaState(storage, EPISODE_SCHEMA));
      r.create("ep-sizes", 0);
      // 300 frames of two parts each (a part of PART_BYTES and a small one): 600 parts
      const frame = bytes(PART_BYTES + 3, 1);
      for (let seq = 1; seq <= 300; seq++) r.appendFrame(seq, frame);
      const all = [...r.logSizes()];
      expect(all).toHaveLength(300);
      expect(all[0]).toEqual({ seq: 300, bytes: frame.length });
      expect(all.at(-1)).toEqual({ seq: 1, bytes: frame.length });
      expect(all.every((f, i) => f.seq === 300 - i && f.bytes === frame.length)).toBe(true);
      // the byte rule stops after a few frames: the log's 600 parts are not all read (nor sorted: each once at most)
      cursors.length = 0;
      const newest = [];
      for (const f of r.logSizes()) {
        newest.push(f.seq);
        if (newest.length === 70) break;
      }
      expect(newest.at(-1)).toBe(231);
      const read = cursors.reduce((n, c) => n + c.rowsRead, 0);
      expect(read).toBeGreaterThanOrEqual(140);
      expect(read).toBeLessThan(300);
    });
  });

  it("trimLog drops the frames up to a seq; removeFrames drops some and answers their size", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      r.create("ep-3", 0);
      for (let seq = 1; seq <= 5; seq++) r.appendFrame(seq, bytes(seq, seq));
      r.trimLog(2);
      expect([...r.frames()].map((f) => f.seq)).toEqual([3, 4, 5]);
      expect(r.removeFrames([3, 5, 9])).toBe(3 + 5);
      expect([...r.frames()].map((f) => f.seq)).toEqual([4]);
    });
  });

  it("rewinds: counted, and whether a watcher that held a seq may have seen retracted frames", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      r.create("ep-4", 0);
      r.saveRewind(3, 6); // stood at 6, rewound to 3: frames 4..6 were taken back
      expect(r.rewindCount()).toBe(1);
      expect([2, 3, 4, 6, 7].map((seq) => r.rewoundPast(seq))).toEqual([false, false, true, true, false]);
      r.saveRewind(8, 9);
      expect(r.rewindCount()).toBe(2);
      expect(recordOf(storage).rewindCount()).toBe(2);
    });
  });

  it("producers: each one's last seq and unconfirmed frames, saved with the meta row and replaced by the next save", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      const m = r.create("ep-5", 0);
      r.saveMeta(
        m,
        new Map([
          ["a", { last: 2, unconfirmed: [{ pseq: 2, seq: 5 }] }],
          ["b", { last: 1, unconfirmed: [] }],
        ]),
      );
      const now = new Map([
        ["a", { last: 3, unconfirmed: [{ pseq: 3, seq: 6 }] }],
        ["b", { last: 1, unconfirmed: [] }],
      ]);
      r.saveMeta({ ...m, seq: 6 }, now);
      expect(r.producers()).toEqual(now);
      // a save of the meta row alone keeps the ledger; a new record reads both back
      r.saveMeta({ ...m, seq: 7 });
      expect(recordOf(storage).producers()).toEqual(now);
      expect(recordOf(storage).meta()!.seq).toBe(7);
      // one table fewer: the ledger has no rows of its own
      expect(storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'producers'").toArray()).toEqual([]);
    });
  });

  it("the reply is kept in parts, whole, and replaced by the next one", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      r.create("ep-6", 0);
      const first = bytes(PART_BYTES + 1, 9);
      r.saveReply(first);
      expect(equal(r.reply()!, first)).toBe(true);
      r.saveReply(bytes(3, 4));
      expect(equal(r.reply()!, bytes(3, 4))).toBe(true);
    });
  });

  it("the run index's row state: saved, kept, read back by a new record", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      r.create("ep-7", 0);
      expect(r.indexState()).toEqual({ lastFlush: 0, due: 0, flushMs: 0, attempts: 0 });
      const s = { lastFlush: 10, due: 20, flushMs: 30, attempts: 2 };
      r.saveIndexState(s);
      s.due = 99; // a copy was kept
      expect(r.indexState()).toEqual({ lastFlush: 10, due: 20, flushMs: 30, attempts: 2 });
      expect(recordOf(storage).indexState()).toEqual({ lastFlush: 10, due: 20, flushMs: 30, attempts: 2 });
    });
  });

  it("the tombstone: saved on an empty storage (creating the tables), replaced, cleared", async () => {
    await withFreshStorage((storage) => {
      const r = recordOf(storage);
      r.saveTombstone({ id: "gone", attempts: 1 });
      expect(r.tombstone()).toEqual({ id: "gone", attempts: 1 });
      expect(r.exists()).toBe(false); // a tombstone is no episode
      r.saveTombstone({ id: "gone", attempts: 2 });
      expect(r.tombstone()).toEqual({ id: "gone", attempts: 2 });
      r.saveTombstone(null);
      expect(r.tombstone()).toBeNull();
    });
  });

  it("forget: what is kept of the rows is read again (after deleteAll, after a rolled-back first write)", async () => {
    await withFreshStorage(async (storage) => {
      const r = recordOf(storage);
      expect(() =>
        storage.transactionSync(() => {
          r.create("ep-8", 0);
          throw new Error("refused");
        }),
      ).toThrow("refused");
      expect(r.meta()).not.toBeNull(); // kept in memory, though rolled back
      r.forget();
      expect(r.exists()).toBe(false);
      expect(r.meta()).toBeNull();
      r.create("ep-8", 0);
      r.saveIndexState({ lastFlush: 1, due: 2, flushMs: 3, attempts: 4 });
      r.saveRewind(0, 1);
      expect(r.rewindCount()).toBe(1);
      await storage.deleteAll();
      r.forget();
      expect(r.exists()).toBe(false);
      expect(r.meta()).toBeNull();
      expect(r.indexState()).toEqual({ lastFlush: 0, due: 0, flushMs: 0, attempts: 0 });
      expect(r.rewindCount()).toBe(0);
      r.create("ep-8", 5); // and the tables come back with the next write
      expect(r.meta()!.created).toBe(5);
    });
  });

  it("publicStatus: a live episode whose reply was refused shows finish_refused", () => {
    const m = (status: Meta["status"], refused: string | null) => ({ status, refused }) as Meta;
    expect(publicStatus(m("live", null))).toBe("live");
    expect(publicStatus(m("live", "counts differ"))).toBe("finish_refused");
    expect(publicStatus(m("finished", null))).toBe("finished");
    expect(publicStatus(m("failed", "x"))).toBe("failed");
  });
});

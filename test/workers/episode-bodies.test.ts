// The bodies' runs (src/objects/episode/bodies.ts, EPISODE_SCHEMA 12) on a real SqlStorage: a list's bodies written
// at once are one run row and a row per part, read back exact at any index and across parts; a replacement, a
// superseded version going, a rewind and a trace's deletion, each with the rows it writes as workerd counts them.
import { describe, expect, it } from "vitest";
import {
  deleteTraceBodies,
  dropNodeBody,
  itemBodies,
  itemSizes,
  KIND,
  NODES,
  nodeBodies,
  nodeBody,
  rewindBodies,
  writeBody,
  writeRun,
} from "../../src/objects/episode/bodies.js";
import { EPISODE_SCHEMA } from "../../src/objects/episode/schema.js";
import { SchemaState } from "../../src/objects/storage/schema.js";
import { PART_BYTES } from "../../src/protocol/episode/parts.js";
import { withFreshStorage } from "./support.js";

/** `n` bytes, each from `seed` and its position (bodies tell apart by content). */
function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (seed * 31 + i * 7) & 255;
  return out;
}

/** Rows written by `fn`'s statements by table, as workerd counts them (index entries included). */
function written(sql: SqlStorage, fn: (sql: SqlStorage) => void): Record<string, number> {
  const cursors: Array<[string, SqlStorageCursor<Record<string, SqlStorageValue>>]> = [];
  const counted = new Proxy(sql, {
    get: (t, p) =>
      p === "exec"
        ? (q: string, ...b: unknown[]) => {
            const c = t.exec(q, ...b);
            cursors.push([/(?:INTO|UPDATE|FROM)\s+(\w+)/i.exec(q)?.[1] ?? "", c]);
            return c;
          }
        : Reflect.get(t, p, t),
  });
  fn(counted);
  const out: Record<string, number> = {};
  for (const [table, c] of cursors) if (c.rowsWritten) out[table] = (out[table] ?? 0) + c.rowsWritten;
  return out;
}

const rowsOf = (sql: SqlStorage, t: string) => sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${t}`).one().n;

function tables(storage: DurableObjectStorage): SqlStorage {
  new SchemaState(storage, EPISODE_SCHEMA).ensure();
  return storage.sql;
}

describe("bodies in runs", () => {
  it("a checkpoint's 300 small bodies are one run and one part: two rows written, where a row and a key each wrote 600", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      const bodies = Array.from({ length: 300 }, (_, i) => bytes(100 + (i % 7) * 50, i));
      const w = written(sql, (q) =>
        writeRun(
          q,
          1,
          NODES,
          0,
          bodies.map((b, i) => ({ ver: 10 + i, length: b.length })),
          (k) => bodies[k]!,
        ),
      );
      expect(w).toEqual({ body_parts: 1, body_runs: 1 });
      // every body exact, one at a time and as a range, as of any seq (a body written at 10 + i is not there before)
      for (const i of [0, 1, 150, 299]) expect([...nodeBody(sql, 1, i, 10 + i)]).toEqual([...bodies[i]!]);
      expect(nodeBodies(sql, 1, 0, 300, Number.MAX_SAFE_INTEGER).map((b) => [...b])).toEqual(bodies.map((b) => [...b]));
      const asOf = nodeBodies(sql, 1, 0, 300, 10 + 99);
      expect(asOf.filter((b) => b !== undefined).length).toBe(100);
      expect(nodeBody(sql, 1, 5, 999).length).toBe(0); // no such version
    });
  });

  it("bodies across parts: a stream of 2.5 MiB is three parts, every body exact, an empty body too", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      const sizes = [PART_BYTES - 3, 0, 10, PART_BYTES + 5, PART_BYTES / 2];
      const bodies = sizes.map((n, i) => bytes(n, i + 1));
      const w = written(sql, (q) =>
        writeRun(
          q,
          2,
          KIND.calls,
          0,
          bodies.map((b) => ({ ver: 7, length: b.length })),
          (k) => bodies[k]!,
        ),
      );
      const total = sizes.reduce((a, b) => a + b, 0);
      expect(w).toEqual({ body_parts: Math.ceil(total / PART_BYTES), body_runs: 1 });
      const back = itemBodies(sql, 2, "calls", 0, 5);
      expect(back.map((b) => b.length)).toEqual(sizes);
      back.forEach((b, i) => {
        expect(
          b.every((x, j) => x === bodies[i]![j]),
          `body ${i}`,
        ).toBe(true);
      });
      expect(itemBodies(sql, 2, "calls", 3, 4)[0]!.length).toBe(PART_BYTES + 5);
      expect(itemSizes(sql).get(2)?.get(KIND.calls)).toEqual({ count: 5, bytes: total });
    });
  });

  it("a replacement is a run of its own (two rows); the superseded version going rewrites one small row; reads take the newest", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      const bodies = [bytes(40, 1), bytes(50, 2), bytes(60, 3)];
      writeRun(
        sql,
        1,
        NODES,
        0,
        bodies.map((b, i) => ({ ver: i + 1, length: b.length })),
        (k) => bodies[k]!,
      );
      const repaired = bytes(70, 9);
      expect(written(sql, (q) => writeBody(q, 1, NODES, 1, 8, repaired))).toEqual({ body_parts: 1, body_runs: 1 });
      // both versions kept (a reader may hold the state before 8)
      expect([...nodeBodies(sql, 1, 0, 3, 7)[1]!]).toEqual([...bodies[1]!]);
      expect([...nodeBodies(sql, 1, 0, 3, 8)[1]!]).toEqual([...repaired]);
      // nothing holds it any more: the old version goes, its run's row rewritten (one row written)
      expect(written(sql, (q) => dropNodeBody(q, 1, 1, 2))).toEqual({ body_runs: 1 });
      expect(nodeBody(sql, 1, 1, 2).length).toBe(0);
      expect(nodeBodies(sql, 1, 0, 3, Number.MAX_SAFE_INTEGER).map((b) => [...b])).toEqual([
        [...bodies[0]!],
        [...repaired],
        [...bodies[2]!],
      ]);
      // the replacement superseded in turn: a run of one goes with its part
      expect(written(sql, (q) => dropNodeBody(q, 1, 1, 8))).toEqual({ body_parts: 1, body_runs: 1 });
      expect(rowsOf(sql, "body_runs")).toBe(1);
    });
  });

  it("a rewind: entries written after it go, the run's tail parts with them; what they superseded is current again", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      const big = [bytes(PART_BYTES, 1), bytes(PART_BYTES, 2), bytes(100, 3)];
      writeRun(
        sql,
        1,
        NODES,
        0,
        big.map((b, i) => ({ ver: [1, 2, 5][i]!, length: b.length })),
        (k) => big[k]!,
      );
      writeBody(sql, 1, NODES, 0, 6, bytes(10, 4));
      expect(rowsOf(sql, "body_parts")).toBe(4);
      rewindBodies(sql, 2);
      // node 2 (written at 5) and the replacement of node 0 (at 6) are gone, and the parts past node 1's end
      expect(rowsOf(sql, "body_parts")).toBe(2);
      expect(rowsOf(sql, "body_runs")).toBe(1);
      const back = nodeBodies(sql, 1, 0, 3, Number.MAX_SAFE_INTEGER);
      expect(back.length).toBe(2);
      expect(back[0]!.every((x, j) => x === big[0]![j])).toBe(true);
      expect(back[1]!.every((x, j) => x === big[1]![j])).toBe(true);
      // appends after the rewind at the same index: a new run, read as current
      writeBody(sql, 1, NODES, 2, 3, bytes(5, 5));
      expect([...nodeBodies(sql, 1, 2, 3, Number.MAX_SAFE_INTEGER)[0]!]).toEqual([...bytes(5, 5)]);
    });
  });

  it("a trace's bodies go with it, every list's runs and parts; another trace's stay", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      for (const tnum of [1, 2])
        for (const kind of [NODES, KIND.calls]) writeBody(sql, tnum, kind, 0, 1, bytes(20, tnum + kind));
      deleteTraceBodies(sql, 1);
      expect(rowsOf(sql, "body_runs")).toBe(2);
      expect(rowsOf(sql, "body_parts")).toBe(2);
      expect([...nodeBody(sql, 2, 0, 1)]).toEqual([...bytes(20, 2)]);
    });
  });
});

/** Rows `fn`'s statements read (as workerd bills them) and runs they returned (each one's JSON parsed). */
function reads<T>(sql: SqlStorage, fn: (sql: SqlStorage) => T): { value: T; rowsRead: number; runs: number } {
  const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
  let runs = 0;
  const counted = new Proxy(sql, {
    get: (t, p) =>
      p === "exec"
        ? (q: string, ...b: unknown[]) => {
            const c = t.exec(q, ...b);
            cursors.push(c);
            if (!/FROM body_runs/.test(q)) return c;
            return new Proxy(c, {
              get: (ct, cp) => {
                if (cp !== "toArray") {
                  const v = Reflect.get(ct, cp, ct);
                  return typeof v === "function" ? v.bind(ct) : v;
                }
                return () => {
                  const rows = ct.toArray();
                  runs += rows.length;
                  return rows;
                };
              },
            });
          }
        : Reflect.get(t, p, t),
  });
  const value = fn(counted);
  return { value, rowsRead: cursors.reduce((n, c) => n + c.rowsRead, 0), runs };
}

/**
 * A trace of `n` nodes written by checkpoints of 8, then each node but a checkpoint's last rewritten after it (a
 * routing repair: a run of its own, the old version dead in its checkpoint's run), every 4th node twice with its
 * first rewrite still held: about `n * 1.1` runs. Returns each node's current version and bytes.
 */
function rewrittenTrace(sql: SqlStorage, tnum: number, n: number): Array<{ ver: number; bytes: Uint8Array }> {
  const current: Array<{ ver: number; bytes: Uint8Array }> = [];
  for (let from = 0; from < n; from += 8) {
    const bodies = Array.from({ length: Math.min(8, n - from) }, (_, k) => bytes(30 + k, from + k));
    writeRun(
      sql,
      tnum,
      NODES,
      from,
      bodies.map((b, k) => ({ ver: from + k + 1, length: b.length })),
      (k) => bodies[k]!,
    );
    bodies.forEach((b, k) => {
      current[from + k] = { ver: from + k + 1, bytes: b };
    });
  }
  let ver = n + 1;
  for (let i = 0; i < n; i++) {
    if (i % 8 === 7 || i === n - 1) continue;
    for (let times = i % 4 === 0 ? 2 : 1; times > 0; times--) {
      const b = bytes(40, 1000 + ver);
      writeBody(sql, tnum, NODES, i, ver, b);
      // superseded: the first rewrite of every 4th node stays (a reader holds it), the rest go
      if (!(i % 4 === 0 && times === 1)) dropNodeBody(sql, tnum, i, current[i]!.ver);
      current[i] = { ver: ver++, bytes: b };
    }
  }
  return current;
}

describe("reads of a list of many runs (EPISODE_SCHEMA 13: runs keyed by scale)", () => {
  it("one node's body, and a page of them, read a bounded number of rows and runs as the runs grow from 10 to 1,000", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      const seen: Array<Record<string, number>> = [];
      /** Runs of trace `tnum`'s nodes that hold an index in [from, to) (what a read must return, no more). */
      const overlapping = (tnum: number, from: number, to: number) =>
        sql
          .exec<{ n: number }>(
            "SELECT COUNT(*) AS n FROM body_runs WHERE tnum = ? AND kind = 0 AND idx < ? AND last >= ?",
            tnum,
            to,
            from,
          )
          .one().n;
      for (const [tnum, n] of [
        [1, 10],
        [2, 100],
        [3, 1000],
      ] as const) {
        const current = rewrittenTrace(sql, tnum, n);
        const runs = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM body_runs WHERE tnum = ?", tnum).one().n;
        const last = reads(sql, (q) => nodeBody(q, tnum, n - 1, current[n - 1]!.ver));
        const first = reads(sql, (q) => nodeBody(q, tnum, 0, current[0]!.ver));
        const mid = Math.floor(n / 2);
        const page = reads(sql, (q) => nodeBodies(q, tnum, mid, Math.min(n, mid + 8), Number.MAX_SAFE_INTEGER));
        expect([...last.value]).toEqual([...current[n - 1]!.bytes]);
        expect([...first.value]).toEqual([...current[0]!.bytes]);
        expect(page.value.map((b) => [...b])).toEqual(current.slice(mid, mid + 8).map((c) => [...c.bytes]));
        // the runs parsed are those holding the range: the body's own (and its older versions', held or dead)
        expect(last.runs, `${runs} runs`).toBe(overlapping(tnum, n - 1, n));
        expect(first.runs, `${runs} runs`).toBe(overlapping(tnum, 0, 1));
        expect(page.runs, `${runs} runs`).toBe(overlapping(tnum, mid, mid + 8));
        // rows read: those runs, their parts, and a few per scale of the list (12 read them all: 1,252 at 1,250 runs)
        expect(last.rowsRead, `${runs} runs`).toBeLessThanOrEqual(20);
        expect(first.rowsRead, `${runs} runs`).toBeLessThanOrEqual(20);
        expect(page.rowsRead, `${runs} runs`).toBeLessThanOrEqual(48);
        seen.push({
          runs,
          lastRead: last.rowsRead,
          lastRuns: last.runs,
          firstRead: first.rowsRead,
          firstRuns: first.runs,
          pageRead: page.rowsRead,
          pageRuns: page.runs,
        });
      }
      expect(seen.map((x) => x.runs)).toEqual([13, 125, 1250]);
      console.log("reads of one body / a page of 8, by runs in the list:", JSON.stringify(seen));
    });
  });

  it("runs of every scale overlapping, trimmed by rewinds, with dead and held versions: every read as a model says", async () => {
    await withFreshStorage((storage) => {
      const sql = tables(storage);
      // a seeded generator (Park-Miller, its high bits): the same operations every run
      let state = 7;
      const rand = (n: number) => {
        state = (state * 48271) % 2147483647;
        return Math.floor((state / 2147483647) * n);
      };
      /** Per index its versions (ascending) and their bytes, as a list of live entries. */
      const model: Array<Array<{ ver: number; bytes: Uint8Array }>> = [];
      const end = () => {
        let n = model.length;
        while (n > 0 && (model[n - 1]?.length ?? 0) === 0) n--;
        return n;
      };
      let seq = 0;
      const check = () => {
        const n = end();
        for (let k = 0; k < 6; k++) {
          const from = rand(n + 1);
          const to = from + rand(n - from + 2);
          const asOf = rand(seq + 2);
          const got = nodeBodies(sql, 9, from, to, asOf);
          for (let i = from; i < to; i++) {
            const want = (model[i] ?? []).filter((v) => v.ver <= asOf).at(-1);
            expect(got[i - from] && [...got[i - from]!], `node ${i} as of ${asOf}`).toEqual(want && [...want.bytes]);
          }
        }
        for (let i = 0; i < n; i++)
          for (const v of model[i] ?? [])
            expect([...nodeBody(sql, 9, i, v.ver)], `node ${i}@${v.ver}`).toEqual([...v.bytes]);
      };
      for (let op = 0; op < 300; op++) {
        const r = rand(10);
        const n = end();
        if (r < 4 || n === 0) {
          // a checkpoint's appends: 1 to 40 nodes at the list's end, one frame after another
          const count = 1 + rand(40);
          const bodies = Array.from({ length: count }, (_, k) => ({ ver: ++seq, bytes: bytes(rand(50), seq * 3 + k) }));
          model.length = n;
          writeRun(
            sql,
            9,
            NODES,
            n,
            bodies.map((b) => ({ ver: b.ver, length: b.bytes.length })),
            (k) => bodies[k]!.bytes,
          );
          bodies.forEach((b, k) => {
            model[n + k] = [b];
          });
        } else if (r < 8) {
          // a rewrite (a routing repair): a run of one; its old version held (a reader) or dropped
          const i = rand(n);
          if ((model[i]?.length ?? 0) === 0) continue;
          const b = { ver: ++seq, bytes: bytes(rand(30), seq) };
          writeBody(sql, 9, NODES, i, b.ver, b.bytes);
          if (rand(3) > 0) {
            const old = model[i]!.splice(model[i]!.length - 1, 1)[0]!;
            dropNodeBody(sql, 9, i, old.ver);
          }
          model[i]!.push(b);
        } else if (r === 8) {
          // a retraction's rewind: what was written after `to` goes, the seqs after it written again
          const to = Math.max(0, seq - rand(30));
          rewindBodies(sql, to);
          for (const vs of model) if (vs) vs.splice(0, vs.length, ...vs.filter((v) => v.ver <= to));
          seq = to;
        } else check();
      }
      check();
      const scales = sql
        .exec<{ s: number }>("SELECT DISTINCT scale AS s FROM body_runs WHERE tnum = 9 ORDER BY s")
        .toArray()
        .map((x) => x.s);
      expect(scales.length, "runs of several scales").toBeGreaterThanOrEqual(4);
    });
  });
});

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

// The assembled state in SQLite (src/objects/episode/sql-store.ts, with load-index.ts, bodies.ts and
// holds.ts) on a real SqlStorage: the index read back gives the reference's live traces; a
// superseded version goes at once unless a reader's pin or a retraction's floor holds the state
// before it; a rewind brings an older state back; archiving drops the bodies, not the index.
import { describe, expect, it } from "vitest";
import { emptyTable } from "../../src/objects/episode/layout.js";
import { EPISODE_SCHEMA } from "../../src/objects/episode/schema.js";
import { SqlStore } from "../../src/objects/episode/sql-store.js";
import { SchemaState } from "../../src/objects/storage/schema.js";
import { parseDelta } from "../../src/protocol/assembly/delta.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { delta, intKeyed, m, node, openDelta } from "../support/deltas.js";
import { equal, golden, goldenNames, withFreshStorage } from "./support.js";

/** An assembly writing through a SqlStore on `storage`, its tables created, as the episode object holds it. */
function sqlAssembly(storage: DurableObjectStorage): { store: SqlStore; asm: EpisodeAssembly } {
  new SchemaState(storage, EPISODE_SCHEMA).ensure();
  const store = new SqlStore(storage.sql);
  return { store, asm: new EpisodeAssembly(store) };
}

/** Apply `frames` as the frames after seq `after` (each row written gets its frame's seq). */
function applyFrom(asm: EpisodeAssembly, store: SqlStore, after: number, frames: Uint8Array[]): void {
  frames.forEach((f, i) => {
    asm.version = store.version = after + i + 1;
    asm.apply(f);
  });
}

/** The index read back from the tables by a new store, as a woken object reads it. */
function reloaded(storage: DurableObjectStorage): EpisodeAssembly {
  const store = new SqlStore(storage.sql);
  const { traces, nextTnum } = store.load();
  const asm = new EpisodeAssembly(store, traces);
  asm.reserveTnums(nextTnum);
  return asm;
}

/** The reference's live traces after `frames`, assembled in memory. */
function reference(frames: Uint8Array[]): Uint8Array {
  const asm = new EpisodeAssembly();
  for (const f of frames) asm.apply(f);
  return asm.tracesBytes();
}

function count(storage: DurableObjectStorage, query: string, ...bindings: SqlStorageValue[]): number {
  return storage.sql.exec<{ n: number }>(query, ...bindings).one().n;
}

const nodeVersions = (storage: DurableObjectStorage, idx: number) =>
  // live versions of node `idx` in the bodies' runs (bodies.ts: a gone entry's version is -1)
  count(
    storage,
    "SELECT COUNT(DISTINCT j.value) AS n FROM body_runs r, json_each(r.vers) j WHERE r.kind = 0 AND r.idx + j.key = ? AND j.value >= 0",
    idx,
  );
const staleRows = (storage: DurableObjectStorage) => count(storage, "SELECT COUNT(*) AS n FROM stale");

describe("SqlStore", () => {
  it("every golden case: the index read back from SQLite gives the reference's live traces at each checkpoint", async () => {
    for (const name of await goldenNames()) {
      const c = await golden(name);
      if (c.ack_lost.length) continue; // those checkpoints skip frames a retraction took back
      await withFreshStorage((storage) => {
        const { store, asm } = sqlAssembly(storage);
        for (let i = 0; i < c.frames.length; i++) {
          applyFrom(asm, store, i, [c.frames[i]!]);
          const cp = c.checkpoints.find((x) => x.after === i + 1);
          if (!cp) continue;
          expect(equal(asm.tracesBytes(), cp.traces), `${name} after ${i + 1}`).toBe(true);
          expect(equal(reloaded(storage).tracesBytes(), cp.traces), `${name} after ${i + 1}, read back`).toBe(true);
        }
      });
    }
  });

  it("a superseded node version goes at once; while a reader pins the state before it, it stays (stale) and the reader sees it", async () => {
    await withFreshStorage((storage) => {
      const { store, asm } = sqlAssembly(storage);
      applyFrom(asm, store, 0, [openDelta(), delta({ nodes: [node(0), node(1)] })]);
      const link = (index: number) => delta({ links: intKeyed([[index, [m({ node: 0, type: "reply" })]]]) });
      applyFrom(asm, store, 2, [link(0)]); // nobody holds seq 2: node 0's old version goes
      expect([nodeVersions(storage, 0), staleRows(storage)]).toEqual([1, 0]);

      const tnum = asm.traces.get("t-1")!.tnum;
      const asOf3 = store.nodes(tnum, 0, 2);
      const pin = store.pin(3);
      expect(store.readers()).toBe(1);
      applyFrom(asm, store, 3, [link(1)]);
      expect([nodeVersions(storage, 1), staleRows(storage)]).toEqual([2, 1]);
      const held = store.reader(3).nodes(tnum, 0, 2) as Uint8Array[];
      expect(held.map((b, i) => equal(b, asOf3[i]!))).toEqual([true, true]);
      expect(equal(store.nodes(tnum, 1, 2)[0]!, asOf3[1]!)).toBe(false);
      pin.release();
      pin.release(); // idempotent
      expect(store.readers()).toBe(0);
      expect([nodeVersions(storage, 1), staleRows(storage)]).toEqual([1, 0]);
    });
  });

  it("a woken object's turn that leaves the pending preview as it was writes no version of it (bytes compared)", async () => {
    await withFreshStorage((storage) => {
      const { store, asm } = sqlAssembly(storage);
      applyFrom(asm, store, 0, [openDelta(), delta({ nodes: [node(0)] })]);
      const previews = () => count(storage, "SELECT COUNT(*) AS n FROM pending");
      const before = previews();
      // read back as a woken object does: its preview is a new array of the same (empty) bytes
      const woken = reloaded(storage);
      const wokenStore = woken.bodies as SqlStore;
      wokenStore.setFloors([2]); // a retractable frame holds the state before it: a rewritten preview would stay stale
      applyFrom(woken, wokenStore, 2, [delta({ nodes: [node(1)] }), delta({ nodes: [node(2)] })]);
      expect([previews(), staleRows(storage)]).toEqual([before, 0]);
      // a preview that does change is written, the held one kept stale
      applyFrom(woken, wokenStore, 4, [delta({ pending: [m({ role: "assistant" })] })]);
      expect([previews(), staleRows(storage)]).toEqual([before + 1, 1]);
    });
  });

  it("floors hold the state before retractable frames: oldestHold, setFloors, addFloor, and collect once they go", async () => {
    await withFreshStorage((storage) => {
      const { store, asm } = sqlAssembly(storage);
      expect(store.oldestHold()).toBeNull();
      applyFrom(asm, store, 0, [openDelta(), delta({ nodes: [node(0)] })]);
      store.setFloors([2]);
      store.addFloor(5);
      expect(store.oldestHold()).toBe(2);
      const pin = store.pin(1);
      expect(store.oldestHold()).toBe(1);
      pin.release();
      applyFrom(asm, store, 2, [delta({ links: intKeyed([[0, [m({ node: 0, type: "reply" })]]]) })]);
      expect([nodeVersions(storage, 0), staleRows(storage)]).toEqual([2, 1]); // the floor at 2 needs the old one
      store.setFloors([]);
      expect(store.oldestHold()).toBeNull();
      store.collect();
      expect([nodeVersions(storage, 0), staleRows(storage)]).toEqual([1, 0]);
    });
  });

  it("after a restart no reader is left: what only readers held goes", async () => {
    await withFreshStorage((storage) => {
      const { store, asm } = sqlAssembly(storage);
      applyFrom(asm, store, 0, [openDelta(), delta({ nodes: [node(0)] })]);
      store.pin(2); // never released: its reader went with the restart
      applyFrom(asm, store, 2, [delta({ links: intKeyed([[0, [m({ node: 0, type: "reply" })]]]) })]);
      expect(staleRows(storage)).toBe(1);
      store.afterRestart();
      expect([store.readers(), staleRows(storage), nodeVersions(storage, 0)]).toEqual([0, 0, 1]);
    });
  });

  it("rewind: the state as of a held seq is current again (a discarded trace back, later ones gone); later pins are told", async () => {
    const c = await golden("discard_retry");
    const discard = c.frames.findIndex((f) => parseDelta(f).discard);
    expect(discard).toBeGreaterThan(0);
    await withFreshStorage((storage) => {
      const { store, asm } = sqlAssembly(storage);
      applyFrom(asm, store, 0, c.frames.slice(0, discard));
      store.setFloors([discard]); // a retraction may take the discard and what follows back
      applyFrom(asm, store, discard, c.frames.slice(discard));
      const early = store.pin(discard);
      const late = store.pin(c.frames.length);
      store.rewind(discard);
      expect([early.valid, late.valid]).toEqual([true, false]);
      expect(equal(reloaded(storage).tracesBytes(), reference(c.frames.slice(0, discard)))).toBe(true);
      early.release();
      late.release();
    });
  });

  it("dropBodies (archived): bodies, previews and old versions go; the index stays", async () => {
    const c = await golden("multi_trace_links");
    await withFreshStorage((storage) => {
      const { store, asm } = sqlAssembly(storage);
      store.setFloors(c.frames.map((_, i) => i + 1)); // every state held: old versions kept
      applyFrom(asm, store, 0, c.frames);
      expect(staleRows(storage)).toBeGreaterThan(0);
      const before = [...asm.traces.values()].map((t) => [t.id, t.nodes.map((n) => n.bytes)]);
      store.dropBodies();
      expect(
        ["body_parts", "body_runs", "pending", "stale"].map((t) => count(storage, `SELECT COUNT(*) AS n FROM ${t}`)),
      ).toEqual([0, 0, 0, 0]);
      expect(
        count(
          storage,
          "SELECT COUNT(*) AS n FROM (SELECT tnum, idx FROM node_meta GROUP BY tnum, idx HAVING COUNT(*) > 1)",
        ),
      ).toBe(0);
      const back = [...reloaded(storage).traces.values()].map((t) => [t.id, t.nodes.map((n) => n.bytes)]);
      expect(back).toEqual(before);
    });
  });

  it("emptyTable: every row goes for a few rows written (dropped, created again as laid out); refused the drop, deleted", async () => {
    await withFreshStorage((storage) => {
      new SchemaState(storage, EPISODE_SCHEMA).ensure();
      const sql = storage.sql;
      const shape = () => ({
        columns: sql.exec("SELECT * FROM pragma_table_xinfo('body_parts') ORDER BY cid").toArray(),
        indexes: sql.exec(`SELECT name, "unique" FROM pragma_index_list('body_parts')`).toArray(),
      });
      const laidOut = shape();
      const fill = (n: number) => {
        for (let i = 0; i < n; i++) sql.exec("INSERT INTO body_parts (data) VALUES (?)", new Uint8Array(64));
      };
      /** Rows written by `fn`'s statements, as workerd counts them. */
      const written = (fn: (sql: SqlStorage) => void) => {
        const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
        const counted = new Proxy(sql, {
          get: (t, p) =>
            p === "exec"
              ? (q: string, ...b: unknown[]) => {
                  const c = t.exec(q, ...b);
                  cursors.push(c);
                  return c;
                }
              : Reflect.get(t, p, t),
        });
        fn(counted);
        return cursors.reduce((n, c) => n + c.rowsWritten, 0);
      };
      const rows = () => sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM body_parts").one().n;
      fill(100);
      const dropped = written((q) => emptyTable(q, "body_parts"));
      expect(rows()).toBe(0);
      expect(shape()).toEqual(laidOut);
      expect(dropped).toBeLessThan(10); // a DELETE wrote 100
      // empty already: nothing is written
      expect(written((q) => emptyTable(q, "body_parts"))).toBe(0);
      // a statement still reading the database: SQLite refuses the drop, the rows are deleted
      fill(100);
      const reading = sql.exec("SELECT k FROM body_parts");
      reading.next();
      const deleted = written((q) => emptyTable(q, "body_parts"));
      reading.toArray();
      expect(rows()).toBe(0);
      expect(shape()).toEqual(laidOut);
      expect(deleted).toBe(100);
    });
  });
});

describe("a checkpoint's appended nodes' metadata in one row (node_packs, EPISODE_SCHEMA 11)", () => {
  it("one row for the appends; read back as the nodes were; a rewind into it leaves the nodes before", async () => {
    await withFreshStorage((storage) => {
      new SchemaState(storage, EPISODE_SCHEMA).ensure();
      let checkpoint: number | null = null;
      const store = new SqlStore(storage.sql, {
        checkpoint: () => checkpoint,
        setCheckpoint: (seq) => {
          checkpoint = seq;
        },
      });
      const asm = new EpisodeAssembly(store);
      const frames = [openDelta(), ...Array.from({ length: 6 }, (_, i) => delta({ nodes: [node(i)] }))];
      applyFrom(asm, store, 0, frames);
      // the open wrote through; the six appends wait in memory, then the checkpoint writes their metadata in one row
      expect(
        count(storage, "SELECT COUNT(*) AS n FROM node_meta") + count(storage, "SELECT COUNT(*) AS n FROM node_packs"),
      ).toBe(0);
      store.checkpoint();
      expect(count(storage, "SELECT COUNT(*) AS n FROM node_meta")).toBe(0);
      expect(count(storage, "SELECT COUNT(*) AS n FROM node_packs")).toBe(1);
      const infos = [...asm.traces.values()][0]!.nodes.map((n) => ({ ...n }));
      expect(infos.map((n) => n.ver)).toEqual([2, 3, 4, 5, 6, 7]);
      expect([...reloaded(storage).traces.values()][0]!.nodes).toEqual(infos);
      // a rewind to seq 4: the nodes frames 5 to 7 appended go from the pack, the ones before stay
      store.rewind(4);
      expect([...reloaded(storage).traces.values()][0]!.nodes).toEqual(infos.slice(0, 3));
      expect(count(storage, "SELECT json_array_length(infos) AS n FROM node_packs")).toBe(6);
      expect(
        count(storage, "SELECT COUNT(*) AS n FROM node_packs p, json_each(p.infos) j WHERE j.type != 'null'"),
      ).toBe(3);
      // a rewind before them all: the pack goes
      store.rewind(1);
      expect(count(storage, "SELECT COUNT(*) AS n FROM node_packs")).toBe(0);
      expect([...reloaded(storage).traces.values()][0]!.nodes).toEqual([]);
    });
  });
});

// A run index's store (src/objects/registry/index-store.ts) through its own methods, on the real SqlStorage
// of a fresh run index (the object opens its schema; the store is then driven directly, the object
// idle): rows read back as put; the kept counters equal a recount from the rows after replacements
// and deletes; a transaction that throws leaves the saved counters, read again after
// `forgetCached`; finished episodes keep the bulk-fetch order they finished in, within a scope;
// the run's directory line; the finished-only extremes read a few index entries, not the run.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { IndexStore } from "../../src/objects/registry/index-store.js";
import { INDEX_SCHEMA } from "../../src/objects/registry/schemas.js";
import { ROW_COLUMNS } from "../../src/objects/registry/sql-row.js";
import { SchemaState } from "../../src/objects/storage/schema.js";
import { writtenTable } from "../../src/protocol/billing/usage.js";
import { recount } from "../../src/protocol/registry/aggregates.js";
import type { IndexRow, IndexStatus, ProgressFacts } from "../../src/protocol/registry/entry.js";
import { positionText } from "../../src/protocol/registry/list-cursors.js";
import { NO_FILTER } from "../../src/protocol/registry/row-filter.js";
import type { ListQuery } from "../../src/protocol/registry/rows.js";
import { runIndexName } from "../../src/protocol/registry/run.js";
import { currentRow, weightOne } from "../support/index-rows.js";
import { freshId } from "./support.js";

function row(run: string, n: number, status: IndexStatus, updated: number, extra: Partial<IndexRow> = {}): IndexRow {
  const [id, task, group] = [`${run}:e${n}`, `task-${n % 3}`, `g${n % 3}`];
  return currentRow({
    id,
    run,
    status,
    updated,
    created: 100 + n,
    nodes: 2,
    calls: n,
    turns: n % 4,
    tokens: 10 * n,
    rewards: weightOne({ correct: (n % 5) / 4 }),
    task,
    group,
    ...extra,
  });
}

/** A live row's facts after `turns` output tokens. */
function liveFacts(turns: number, last: string | null = null): ProgressFacts {
  const facts = { started: 1, elapsed: turns, branches: 1, input_tokens: 1, output_tokens: turns, cost: null, last };
  return { ...facts, stage: "running", annotations: 0 };
}

/**
 * `fn` with a store over a fresh run index's storage (after one call to the object, so its schema
 * is open) and that storage; `run` is the run's name.
 */
async function withStore<R>(fn: (store: IndexStore, storage: DurableObjectStorage, run: string) => R): Promise<R> {
  const run = freshId("store");
  const index = env.EPISODE_INDEX.getByName(runIndexName(run));
  return runInDurableObject(index, (_o, state) => {
    // the tables as the object creates them with its first row
    state.storage.transactionSync(() => new SchemaState(state.storage, INDEX_SCHEMA).ensure());
    return fn(new IndexStore(state.storage.sql), state.storage, run);
  });
}

/** Write `next` over whatever row of its id the store holds, as the object does. */
function write(store: IndexStore, storage: DurableObjectStorage, next: IndexRow): void {
  storage.transactionSync(() => store.put(next, store.row(next.id)));
}

const query = (q: Partial<ListQuery>): ListQuery => ({
  status: null,
  filter: NO_FILTER,
  prefix: null,
  limit: 50,
  sort: "updated",
  after: null,
  ...q,
});

describe("rows and the counters", () => {
  it("a row reads back as put; the run's name and times come with the first row", async () => {
    await withStore((store, storage, run) => {
      expect(store.run).toBeNull();
      const r = row(run, 1, "live", 500);
      write(store, storage, r);
      expect(store.row(r.id)).toEqual(r);
      expect(store.row(`${run}:missing`)).toBeNull();
      expect(store.run).toBe(run);
      expect(store.runRow(run)).toMatchObject({
        run,
        created: 101,
        updated: 500,
        episodes: 1,
        live: 1,
        finished: 0,
        mean_rewards: {},
      });
    });
  });

  it("the run's time: the newest row's (read from the rows, not kept per update), or a later delete's", async () => {
    await withStore((store, storage, run) => {
      const a = row(run, 1, "live", 500);
      write(store, storage, a);
      write(store, storage, row(run, 2, "live", 700));
      expect(store.runRow(run).updated).toBe(700);
      write(store, storage, { ...a, updated: 900, seq: a.seq + 1 });
      expect(store.runRow(run).updated).toBe(900);
      expect(store.state("updated")).toBeNull();
      const before = Date.now();
      storage.transactionSync(() => store.delete(store.row(a.id)!));
      expect(store.runRow(run).updated).toBeGreaterThanOrEqual(before);
    });
  });

  it("after puts, replacements and deletes the counters equal a recount of the rows held", async () => {
    await withStore((store, storage, run) => {
      const held = new Map<string, IndexRow>();
      const statuses: IndexStatus[] = ["live", "finished", "failed", "finish_refused"];
      for (let step = 0; step < 60; step++) {
        const n = (step * 7) % 13;
        const r = row(run, n, statuses[(step * 3) % 4]!, 1000 + step, {
          tokens: step,
          rewards: { correct: { score: (step % 4) / 3, weight: 1 } },
        });
        if (step % 9 === 8 && held.has(r.id)) {
          storage.transactionSync(() => store.delete(held.get(r.id)!));
          held.delete(r.id);
        } else {
          write(store, storage, r);
          held.set(r.id, r);
        }
      }
      expect(store.loadCounters()).toEqual(recount(held.values()).counters);
      // the same once read back as saved
      store.forgetCached();
      expect(store.loadCounters()).toEqual(recount(held.values()).counters);
      const groups = store.groups.counts();
      expect(groups.groups).toBe(new Set([...held.values()].map((r) => r.group)).size);
    });
  });

  it("an update writes only what it changes, and the tables end as a store given only the final rows holds them", async () => {
    const run = freshId("store");
    const dispatch = (n: number) => ({ id: `d${n}`, kind: "train", env: "e", group: `g${n % 2}`, step: n % 2 });
    // the same rows put turn by turn (live, then finished, a task and group moved once) and put once as they end
    const turns = (n: number, t: number) =>
      row(run, n, t < 5 ? "live" : "finished", 1000 + 10 * t + n, {
        calls: t,
        tokens: 10 * t,
        seq: t,
        dispatch: dispatch(n),
        task: t < 2 ? `first-${n}` : `task-${n % 2}`,
        group: `g${n % 2}`,
        live: t < 5 ? liveFacts(t) : null,
        rewards: t < 5 ? null : weightOne({ correct: n / 4 }),
      });
    const tables = (storage: DurableObjectStorage) =>
      Object.fromEntries(
        ["groups", "tasks", "steps", "scores", "throughput", "reward_minutes", "group_minutes", "rows"].map((t) => [
          t,
          storage.sql
            .exec(`SELECT * FROM ${t} ORDER BY 1, 2`)
            .toArray()
            .map((r) => ({ ...r, finished_seq: undefined })),
        ]),
      );
    const written: Record<string, number> = {};
    const stepwise = await runInDurableObject(env.EPISODE_INDEX.getByName(runIndexName(run)), (_o, state) => {
      state.storage.transactionSync(() => new SchemaState(state.storage, INDEX_SCHEMA).ensure());
      // a store whose statements' rows written are kept by the table they write
      const counting = new Proxy(state.storage.sql, {
        get(target, prop) {
          if (prop !== "exec") return Reflect.get(target, prop, target);
          return (q: string, ...args: SqlStorageValue[]) => {
            const cursor = target.exec(q, ...args);
            const t = writtenTable(q);
            if (cursor.rowsWritten > 0) written[t] = (written[t] ?? 0) + cursor.rowsWritten;
            return cursor;
          };
        },
      });
      const store = new IndexStore(counting);
      for (let t = 0; t < 5; t++) for (let n = 0; n < 4; n++) write(store, state.storage, turns(n, t));
      // a turn that moves only the row's own columns: its changed columns and their index entries, the counters and
      // the run's time; no group, score, minute or step moves
      for (const k of Object.keys(written)) delete written[k];
      const live = turns(1, 4);
      write(store, state.storage, live);
      write(store, state.storage, {
        ...live,
        updated: live.updated + 100_000,
        seq: 99,
        live: liveFacts(4, "later words"),
      });
      const moved = { ...written };
      expect(Object.keys(moved).sort()).toEqual(["rows"]);
      // the row and its entry in rows_live: no other index holding `updated` holds a live row (INDEX_SCHEMA 15,
      // live-rows.ts; before it, by update, status, task, kind and step: six rows); the run's time is the newest row's,
      // read from them (no state row)
      expect(moved.rows).toBe(2);
      expect(store.runRow(run).updated).toBe(live.updated + 100_000);
      // calls and tokens came: the run's counters moved, but a live row's part is not saved (recounted on load): no
      // state row; its step's and task's sums moved (a row each)
      for (const k of Object.keys(written)) delete written[k];
      const counted = { ...live, updated: live.updated + 200_000, seq: 98, calls: 50, tokens: 500 };
      const before = store.loadCounters().tokens;
      write(store, state.storage, counted);
      expect(written).toStrictEqual({ rows: 2, steps: 1, tasks: 1 });
      expect(store.loadCounters().tokens).toBe(before + 500 - live.tokens);
      store.forgetCached();
      expect(store.loadCounters().tokens, "the live part recounted from the rows").toBe(before + 500 - live.tokens);
      write(store, state.storage, { ...live, updated: live.updated + 100_000, seq: 99 });
      for (const k of Object.keys(written)) delete written[k];
      // no index holds seq: the row itself
      for (const k of Object.keys(written)) delete written[k];
      write(store, state.storage, { ...live, updated: live.updated + 100_000, seq: 100 });
      expect(written).toStrictEqual({ rows: 1 });
      // the same row again: nothing at all
      for (const k of Object.keys(written)) delete written[k];
      write(store, state.storage, { ...live, updated: live.updated + 100_000, seq: 100 });
      expect(written).toStrictEqual({});
      for (let t = 5; t < 7; t++) for (let n = 0; n < 4; n++) write(store, state.storage, turns(n, t));
      return tables(state.storage);
    });
    const once = await withStore((store, storage) => {
      for (let n = 0; n < 4; n++) write(store, storage, { ...turns(n, 6), id: `${run}:e${n}`, run });
      return tables(storage);
    });
    expect(stepwise.rows.length).toBe(4);
    const named = (t: ReturnType<typeof tables>, other: string) =>
      JSON.parse(JSON.stringify(t).replaceAll(other, "RUN")) as ReturnType<typeof tables>;
    expect(named(stepwise, run)).toEqual(named(once, String((once.rows[0] as { id?: unknown }).id).split(":")[0]!));
  });

  it("a running episode's text waits in its row: an update that adds to it writes the row and its order entry only", async () => {
    await withStore((_store, storage, run) => {
      const written: Record<string, number> = {};
      const counting = new Proxy(storage.sql, {
        get(target, prop) {
          if (prop !== "exec") return Reflect.get(target, prop, target);
          return (q: string, ...args: SqlStorageValue[]) => {
            const cursor = target.exec(q, ...args);
            if (cursor.rowsWritten > 0) written[writtenTable(q)] = (written[writtenTable(q)] ?? 0) + cursor.rowsWritten;
            return cursor;
          };
        },
      });
      const counted = new IndexStore(counting);
      const batch = (node: number, body: string) => ({
        traces: ["t0"],
        from: { t0: node },
        segments: [{ trace: "t0", node, role: "assistant", tool: null, kind: "text" as const, body }],
      });
      const turn = (n: number) => row(run, 1, "live", 1000 + n, { seq: n, live: liveFacts(n) });
      const put = (n: number, body: string) =>
        storage.transactionSync(() => counted.put(turn(n), counted.row(turn(n).id), batch(n, body), 300_000));
      // the first text goes into the search at once (nothing of the episode is searchable yet)
      put(1, "first words");
      expect(counted.search.held(turn(1).id).segments).toBe(1);
      // the next waits in the row: the row, its rows_live entry and, as it begins to wait, its rows_text_waiting entry
      for (const k of Object.keys(written)) delete written[k];
      put(2, "second words");
      expect(written).toStrictEqual({ rows: 3 });
      // more text while it waits: the row and its order entry, nothing else (no row of its own)
      for (const k of Object.keys(written)) delete written[k];
      put(3, "third words");
      expect(written).toStrictEqual({ rows: 2 });
      expect(counted.search.held(turn(1).id).segments).toBe(1);
      // it ends: what waited goes in with the end's text
      storage.transactionSync(() =>
        counted.put({ ...turn(4), status: "finished", ended: 2000 }, counted.row(turn(4).id), batch(4, "last words")),
      );
      expect(counted.search.held(turn(1).id).segments).toBe(4);
      const left = storage.sql
        .exec<{ n: number }>("SELECT COUNT(*) AS n FROM rows WHERE text_since IS NOT NULL OR text_waiting IS NOT NULL")
        .one().n;
      expect(left).toBe(0);
    });
  });

  it("rows are listed with every column but the waiting text (ROW_COLUMNS)", async () => {
    const columns = await withStore((_store, storage) =>
      storage.sql
        .exec<{ name: string }>("SELECT name FROM pragma_table_info('rows') ORDER BY cid")
        .toArray()
        .map((c) => c.name),
    );
    expect(ROW_COLUMNS.split(", ").map((c) => c.replace(/^rows\./, ""))).toEqual(
      columns.filter((c) => c !== "text_since" && c !== "text_waiting"),
    );
  });

  it("a transaction that throws after a put leaves the saved counters; forgetCached drops the ones in memory", async () => {
    await withStore((store, storage, run) => {
      write(store, storage, row(run, 1, "live", 10));
      const saved = structuredClone(store.loadCounters());
      expect(() =>
        storage.transactionSync(() => {
          store.put(row(run, 2, "finished", 20), null);
          throw new Error("injected fault");
        }),
      ).toThrow("injected fault");
      expect(store.loadCounters(), "in memory: the rolled-back put").not.toEqual(saved);
      store.forgetCached();
      expect(store.loadCounters()).toEqual(saved);
      expect(store.row(`${run}:e2`)).toBeNull();
    });
  });

  it("state values: set, read, replaced", async () => {
    await withStore((store) => {
      expect(store.state("k")).toBeNull();
      store.setState("k", "1");
      store.setState("k", "2");
      expect(store.state("k")).toBe("2");
    });
  });
});

describe("pages and the bulk-fetch order", () => {
  it("query pages the rows by the list's cursor", async () => {
    await withStore((store, storage, run) => {
      for (let n = 0; n < 5; n++) write(store, storage, row(run, n, "live", 1000 + n));
      const first = store.query(query({ limit: 2 }), null);
      expect(first.rows.map((r) => r.id)).toEqual([`${run}:e4`, `${run}:e3`]);
      const rest = store.query(query({ limit: 10, after: first.next }), null);
      expect(rest.rows.map((r) => r.id)).toEqual([`${run}:e2`, `${run}:e1`, `${run}:e0`]);
      expect(rest.next).toBeNull();
      expect(first.next && positionText("episodes", first.next)).toBeTypeOf("string");
      expect(store.query(query({}), [`${run}:e1`]).rows.map((r) => r.id)).toEqual([`${run}:e1`]);
    });
  });

  it("finished episodes come in the order they finished here; a re-finish keeps its place; a narrow scope reads its own rows", async () => {
    await withStore((store, storage, run) => {
      // finished in the order 3, 0, 4, 1 (their clocks say otherwise)
      for (const [k, n] of [3, 0, 4, 1].entries()) write(store, storage, row(run, n, "finished", 5000 - k));
      write(store, storage, row(run, 2, "live", 9000));
      write(store, storage, row(run, 0, "finished", 9999, { tokens: 1 })); // finished again: same place
      const all = store.finished(0, 10, null);
      expect(all.items.map((x) => x.id)).toEqual([3, 0, 4, 1].map((n) => `${run}:e${n}`));
      expect(all.items.map((x) => x.seq)).toEqual([1, 2, 3, 4]);
      expect(all.next).toBeNull();
      expect(store.finished(2, 10, null).items.map((x) => x.id)).toEqual([`${run}:e4`, `${run}:e1`]);
      // a page of 2: the next starts after the second
      expect(store.finished(0, 2, null)).toEqual({
        items: [`${run}:e3`, `${run}:e0`].map((id, i) => ({ id, seq: i + 1 })),
        next: 2,
        unsent: 0,
      });
      // a scope covering one: its own row is read, the others are not (nor counted anywhere)
      expect(store.finished(0, 1, [`${run}:e1`])).toEqual({
        items: [{ id: `${run}:e1`, seq: 4 }],
        next: null,
        unsent: 0,
      });
      expect(store.finished(0, 1, [`${run}:e2`])).toEqual({ items: [], next: null, unsent: 1 });
      // live again: out of the order; finished once more: a new place at the end
      write(store, storage, row(run, 3, "live", 10_000));
      write(store, storage, row(run, 3, "finished", 10_001));
      expect(store.finished(0, 10, null).items.map((x) => x.id)).toEqual([0, 4, 1, 3].map((n) => `${run}:e${n}`));
    });
  });
});

describe("the finished-only extremes", () => {
  it("MIN and MAX per key are a few index entries with 300 scored rows", async () => {
    const read: Array<{ query: string; cursor: SqlStorageCursor<Record<string, SqlStorageValue>> }> = [];
    await withStore((_store, storage, run) => {
      // a store over the same storage whose every query is recorded with its cursor (rows read)
      const recording = new Proxy(storage.sql, {
        get(target, prop) {
          if (prop !== "exec") return Reflect.get(target, prop, target);
          return (q: string, ...args: SqlStorageValue[]) => {
            const cursor = target.exec(q, ...args);
            read.push({ query: q, cursor });
            return cursor;
          };
        },
      });
      const store = new IndexStore(recording);
      // the finished rows score within [0.25, 0.75]; failed ones hold the run's 0 and 1
      const score = (i: number) => (i % 3 === 0 ? i % 2 : 0.25 + (i % 50) / 98);
      for (let i = 0; i < 300; i++) {
        write(
          store,
          storage,
          row(run, i, i % 3 === 0 ? "failed" : "finished", 10 + i, {
            rewards: { correct: { score: score(i), weight: 1 } },
          }),
        );
      }
      read.length = 0;
      const a = store.aggregates(run, Date.now());
      expect([a.finished_rewards.correct!.min, a.finished_rewards.correct!.max]).toEqual([0.25, 0.75]);
      expect([a.rewards.correct!.min, a.rewards.correct!.max]).toEqual([0, 1]);
      // one MIN-and-MAX read per key and table: "correct", and "reward" (the total, kept beside the keys since issue 40)
      expect(Object.keys(a.rewards)).toEqual(["correct", "reward"]);
      const scores = read.filter((r) => r.query.includes("FROM scores"));
      expect(scores).toHaveLength(4);
      for (const r of scores) expect(r.cursor.rowsRead, r.query).toBeLessThan(10);
      const plan = storage.sql
        .exec("EXPLAIN QUERY PLAN SELECT MIN(score) FROM scores WHERE key = ? AND status = 'finished'", "correct")
        .toArray();
      expect(JSON.stringify(plan)).toContain("scores_finished_by_key");
    });
  });
});

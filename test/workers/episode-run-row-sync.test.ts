// The episode's row in its run's index (src/objects/episode/run-row-sync.ts): when the alarm must run
// (`alarmAt`), when a turn's update is due (`dueAfter`), the retry backoff (`retryDelay`), and
// `RunRowSync` over a real SqlStorage with a stand-in for the run's index: throttled updates,
// sends in order, a failed send that stays due, a delete's tombstone; and the row it sends.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { commitIngest } from "../../src/objects/episode/commit.js";
import { RowFacts } from "../../src/objects/episode/row-facts.js";
import {
  alarmAt,
  dueAfter,
  nextFlushSlot,
  RETRY_FIRST_MS,
  RETRY_MAX_MS,
  RunRowSync,
  retryDelay,
  rowFromMeta,
} from "../../src/objects/episode/run-row-sync.js";
import { EpisodeState } from "../../src/objects/episode/state.js";
import type { Usage } from "../../src/protocol/billing/usage.js";
import { parseRowFilter } from "../../src/protocol/registry/row-filter.js";
import type { IndexRow } from "../../src/protocol/registry/rows.js";
import { runIndexName } from "../../src/protocol/registry/run.js";
import { LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { delta, enc, f, m, openDelta } from "../support/deltas.js";
import { freshId, post, relay, withFreshStorage } from "./support.js";

describe("the alarm's deadlines and the update schedule", () => {
  it("alarmAt: the earlier of retention and a pending update (none pending: retention)", () => {
    expect(alarmAt(5000, { due: 0 })).toBe(5000);
    expect(alarmAt(5000, { due: 3000 })).toBe(3000);
    expect(alarmAt(5000, { due: 9000 })).toBe(5000);
  });

  it("dueAfter: now, unless the last update went out less than the interval ago (the longer of the default and the index's ask)", () => {
    const st = { lastFlush: 1000, due: 0, flushMs: 0, attempts: 0 };
    expect(dueAfter(st, 1200, 500)).toBe(1500);
    expect(dueAfter(st, 2000, 500)).toBe(2000);
    expect(dueAfter({ ...st, flushMs: 3000 }, 1200, 500)).toBe(4000);
    expect(dueAfter({ ...st, lastFlush: 0 }, 1200, 500)).toBe(1200);
  });

  it("nextFlushSlot: a whole interval after the send while a live episode took a turn within the last one; else none", () => {
    const st = { lastFlush: 10_000, due: 0, flushMs: 0, attempts: 0 };
    const live = { status: "live" as const, updated: 9_500 };
    expect(nextFlushSlot(live, st, 10_000, 1000)).toBe(11_000);
    // the index asked for a longer interval: the slot and the window both follow it
    expect(nextFlushSlot({ ...live, updated: 6_000 }, { ...st, flushMs: 5000 }, 10_000, 1000)).toBe(15_000);
    // no turn within the interval (the producer stopped): nothing more to send, no slot
    expect(nextFlushSlot({ ...live, updated: 9_000 }, st, 10_000, 1000)).toBe(0);
    expect(nextFlushSlot({ ...live, status: "finished" }, st, 10_000, 1000)).toBe(0);
    // the slot a turn's update is due at (dueAfter), the send's time plus the interval; none unless ahead
    expect(nextFlushSlot(live, st, 10_040, 1000)).toBe(dueAfter(st, 10_040, 1000));
    expect(nextFlushSlot(live, { ...st, lastFlush: 2_000 }, 10_000, 1000)).toBe(0);
  });

  it("retryDelay: from RETRY_FIRST_MS, doubling per failed attempt, up to RETRY_MAX_MS", () => {
    expect([0, 1, 2, 3].map(retryDelay)).toEqual([
      RETRY_FIRST_MS,
      RETRY_FIRST_MS,
      2 * RETRY_FIRST_MS,
      4 * RETRY_FIRST_MS,
    ]);
    expect(retryDelay(7)).toBe(Math.min(RETRY_MAX_MS, 64 * RETRY_FIRST_MS));
    expect(retryDelay(30)).toBe(RETRY_MAX_MS);
  });
});

/** A stand-in for the run indexes: what each was asked, in order; it fails while `down`. */
class FakeIndexes {
  readonly calls: Array<{ index: string; op: "upsert" | "remove"; id: string }> = [];
  down = false;
  flushMs = 7000;

  namespace(): Env["EPISODE_INDEX"] {
    const stub = (index: string) => ({
      upsert: async (row: IndexRow) => {
        this.calls.push({ index, op: "upsert", id: row.id });
        if (this.down) throw new Error("index down");
        return { flushMs: this.flushMs };
      },
      remove: async (id: string) => {
        this.calls.push({ index, op: "remove", id });
        if (this.down) throw new Error("index down");
      },
    });
    return { getByName: stub } as unknown as Env["EPISODE_INDEX"];
  }
}

const ID = "sync-run:ep-1";

describe("RunRowSync", () => {
  it("a turn schedules an update (dueAfter) and rearms the alarm; none more while one is pending", async () => {
    await withFreshStorage((storage, ctx) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, Number.MAX_SAFE_INTEGER, 0);
      const rearmed: number[] = [];
      const indexes = new FakeIndexes();
      const sync = new RunRowSync(ctx, indexes.namespace(), state, 1000, (due) => rearmed.push(due));
      state.record.saveIndexState({ lastFlush: 5000, due: 0, flushMs: 0, attempts: 0 });
      expect(sync.pending()).toBe(false);
      sync.changed(c.meta, 5200);
      expect(state.record.indexState().due).toBe(6000);
      expect(rearmed).toEqual([6000]);
      expect(sync.pending()).toBe(true);
      sync.changed(c.meta, 5300);
      expect(rearmed).toEqual([6000]);
      expect(indexes.calls).toEqual([]); // the alarm sends it
    });
  });

  it("a turn past the interval sends at once: no alarm, nothing written before the answer, nothing after an unchanged one", async () => {
    await withFreshStorage(async (storage, ctx) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, Number.MAX_SAFE_INTEGER, 0);
      const indexes = new FakeIndexes();
      const rearmed: number[] = [];
      const sync = new RunRowSync(ctx, indexes.namespace(), state, 1000, (due) => rearmed.push(due));
      state.record.saveIndexState({ lastFlush: 5000, due: 0, flushMs: 7000, attempts: 0 });
      const stored = () =>
        storage.sql.exec<{ last_flush: number; due: number }>("SELECT last_flush, due FROM index_sync").one();
      sync.changed(c.meta, 20_000);
      expect(sync.pending()).toBe(false);
      await sync.settled();
      expect(indexes.calls).toEqual([{ index: runIndexName("sync-run"), op: "upsert", id: ID }]);
      expect(rearmed).toEqual([]);
      // the interval held as the index answered it, and nothing pending: storage is not written for the throttle's clock
      expect(state.record.indexState()).toEqual({ lastFlush: 20_000, due: 0, flushMs: 7000, attempts: 0 });
      expect(stored()).toEqual({ last_flush: 5000, due: 0 });
      // a turn within the interval (of the clock in memory) is throttled: due in memory, the alarm set for it (storage
      // keeps the alarm, not a row per turn)
      sync.changed(c.meta, 21_000);
      expect(state.record.indexState().due).toBe(27_000);
      expect(stored()).toEqual({ last_flush: 5000, due: 0 });
      expect(rearmed).toEqual([27_000]);
      // an object started since (the alarm woke it, memory gone) knows of no due update: it sends a live episode's row
      const woken = new RunRowSync(ctx, indexes.namespace(), new EpisodeState(storage), 1000, (due) =>
        rearmed.push(due),
      );
      expect([woken.pending(), woken.pending(c.meta), woken.pending({ ...c.meta, status: "finished" })]).toEqual([
        false,
        true,
        false,
      ]);
      // the alarm's send
      await sync.send(c.meta, 27_000);
      expect(indexes.calls.length).toBe(2);
      expect(sync.pending(c.meta)).toBe(false);
      expect(state.record.indexState()).toEqual({ lastFlush: 27_000, due: 0, flushMs: 7000, attempts: 0 });
      expect(stored()).toEqual({ last_flush: 5000, due: 0 });
    });
  });

  it("without an index binding nothing is scheduled or sent", async () => {
    await withFreshStorage(async (storage, ctx) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, Number.MAX_SAFE_INTEGER, 0);
      const sync = new RunRowSync(ctx, undefined, state, 1000, () => expect.unreachable());
      sync.changed(c.meta, 10);
      await sync.send(c.meta, 10);
      await sync.removed(ID);
      expect(state.record.indexState()).toEqual({ lastFlush: 0, due: 0, flushMs: 0, attempts: 0 });
    });
  });

  it("send: the row goes to the run's index, one update after the other; the index's interval is kept", async () => {
    await withFreshStorage(async (storage, ctx) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, Number.MAX_SAFE_INTEGER, 0);
      const indexes = new FakeIndexes();
      const sync = new RunRowSync(ctx, indexes.namespace(), state, 1000, () => {});
      const first = sync.send(c.meta, 100);
      const second = sync.send(c.meta, 200);
      expect(indexes.calls).toEqual([]); // sent in the background, in order
      await second;
      await first;
      expect(indexes.calls).toEqual([
        { index: runIndexName("sync-run"), op: "upsert", id: ID },
        { index: runIndexName("sync-run"), op: "upsert", id: ID },
      ]);
      expect(state.record.indexState()).toEqual({ lastFlush: 200, due: 0, flushMs: 7000, attempts: 0 });
      await sync.settled();
    });
  });

  it("a failed send stays due: retried after retryDelay(attempts), the alarm rearmed; a success resets the attempts", async () => {
    await withFreshStorage(async (storage, ctx) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, Number.MAX_SAFE_INTEGER, 0);
      const indexes = new FakeIndexes();
      indexes.down = true;
      const rearmed: number[] = [];
      const sync = new RunRowSync(ctx, indexes.namespace(), state, 1000, (due) => rearmed.push(due));
      const log = console.warn;
      console.warn = () => {};
      try {
        const t0 = Date.now();
        await sync.send(c.meta, 100);
        const after1 = state.record.indexState();
        expect(after1.attempts).toBe(1);
        expect(after1.due).toBeGreaterThanOrEqual(t0 + retryDelay(1));
        expect(after1.due).toBeLessThanOrEqual(Date.now() + retryDelay(1));
        expect(rearmed).toEqual([after1.due]);
        expect(sync.pending()).toBe(true);
        await sync.send(c.meta, 200);
        const after2 = state.record.indexState();
        expect(after2.attempts).toBe(2);
        expect(after2.due).toBeGreaterThanOrEqual(t0 + retryDelay(2));
      } finally {
        console.warn = log;
      }
      indexes.down = false;
      await sync.send(c.meta, 300);
      expect(state.record.indexState()).toEqual({ lastFlush: 300, due: 0, flushMs: 7000, attempts: 0 });
    });
  });

  it("a delete whose removal fails leaves a tombstone and an alarm; the tombstone goes once a retry lands", async () => {
    await withFreshStorage(async (storage, ctx) => {
      const state = new EpisodeState(storage); // deleted: storage holds no episode
      const indexes = new FakeIndexes();
      indexes.down = true;
      const sync = new RunRowSync(ctx, indexes.namespace(), state, 1000, () => {});
      const log = console.warn;
      console.warn = () => {};
      try {
        const t0 = Date.now();
        await sync.removed(ID);
        expect(state.record.tombstone()).toEqual({ id: ID, attempts: 1 });
        expect(await storage.getAlarm()).toBeGreaterThanOrEqual(t0 + retryDelay(1));
        await sync.retryTombstone();
        expect(state.record.tombstone()).toEqual({ id: ID, attempts: 2 });
      } finally {
        console.warn = log;
      }
      indexes.down = false;
      await sync.retryTombstone();
      expect(state.record.tombstone()).toBeNull();
      expect(indexes.calls.map((c) => c.op)).toEqual(["remove", "remove", "remove"]);
      await storage.deleteAlarm(); // the object's own alarm is not part of this test
    });
  });
});

describe("a delete through the real objects", () => {
  const tables = (id: string) =>
    runInDurableObject(env.EPISODES.getByName(id), (_i, state) =>
      state.storage.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%'")
        .toArray()
        .map((r) => r.name),
    );
  /** The ids of the run's rows starting with `id` (none: the run has no row at all). */
  const rowQuery = {
    status: null,
    filter: parseRowFilter(new URLSearchParams()),
    prefix: "",
    limit: 5,
    sort: "updated" as const,
    after: null,
  };
  const rowIn = async (id: string) => {
    const q = { ...rowQuery, prefix: id };
    return ((await env.EPISODE_INDEX.getByName(runIndexName("erase-run")).list(q, null))?.episodes ?? []).map(
      (e) => e.id,
    );
  };

  it("the tombstone is written with the erase: a crash before the run's index hears leaves it, and the alarm drops the row", async () => {
    const id = `erase-run:${freshId("e")}`;
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    await expect.poll(() => rowIn(id)).toEqual([id]);
    // the delete, then a crash at once: the object is reset before it hears back from the run's index
    const stub = env.EPISODES.getByName(id);
    const crashed = runInDurableObject(stub, async (instance, ctx) => {
      expect(await instance.remove(id)).toMatchObject({ ok: true });
      await ctx.storage.sync(); // the erase is durable (as when the DELETE was answered)
      ctx.abort("crash right after the erase");
    });
    await expect(crashed).rejects.toThrow(/crash right after the erase/);
    expect((await relay(`${id}/status`)).status).toBe(404);
    const after = env.EPISODES.getByName(id); // a stub of the object as restarted
    expect(await runInDurableObject(after, (_i, state) => new EpisodeState(state.storage).record.tombstone())).toEqual({
      id,
      attempts: 0,
    });
    expect(await runInDurableObject(after, (_i, state) => state.storage.getAlarm())).not.toBeNull();
    // the alarm retries the tombstone: the row goes, then the episode's storage
    expect(await runDurableObjectAlarm(after)).toBe(true);
    await expect.poll(() => rowIn(id)).toEqual([]);
    await expect.poll(() => tables(id)).toEqual([]);
  });

  it("one alarm set per interval while turns arrive: a turn finds it armed for its update, the alarm that sent arms the next slot", async () => {
    const id = `slot-run:${freshId("s")}`;
    const stub = env.EPISODES.getByName(id);
    // nobody attends the run (no socket, no read yet: attention.ts): its index tells the idle interval
    const interval = Number(env.INDEX_IDLE_FLUSH_MS);
    const turn = async (k: number) => {
      const res = await post(`${id}/deltas`, delta({ set: m({ num_total_tokens: k }) }));
      expect(res.status, await res.clone().text()).toBe(200);
      await res.arrayBuffer();
    };
    const alarmsSet = async () => {
      const res = await relay(`${id}/usage`);
      return ((await res.json()) as { episode: Usage }).episode.written.alarm ?? 0;
    };
    // what the run's index last heard of the episode: its row's seq (the index's own requests, e.g. an alarm
    // telling the run directory, are no measure of what the episode sent)
    const sentSeq = async () => {
      const q = { ...rowQuery, prefix: id };
      const rows = (await env.EPISODE_INDEX.getByName(runIndexName("slot-run")).list(q, null))?.episodes ?? [];
      return rows[0]?.seq ?? null;
    };
    const armed = () => runInDurableObject(env.EPISODES.getByName(id), (_i, state) => state.storage.getAlarm());
    (await post(`${id}/deltas`, openDelta())).body?.cancel(); // created: its row goes at once, retention is armed
    const retention = await armed();
    await turn(1); // within the interval: due at its end, armed for it (retention comes later)
    const due = await armed();
    expect(due).not.toBeNull();
    expect(due!).toBeLessThan(retention!);
    const set = await alarmsSet();
    await turn(2); // one is pending already
    expect(await alarmsSet()).toBe(set);
    const t0 = Date.now();
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const t1 = Date.now();
    // sent; a turn came within the interval: armed once more, for the next slot, not back to retention
    const slot = (await armed())!;
    expect(slot).toBeGreaterThanOrEqual(t0 + interval);
    expect(slot).toBeLessThanOrEqual(t1 + interval);
    expect(await alarmsSet()).toBe(set + 1);
    // the next turn's update is due at that slot: the alarm armed serves it, nothing is set
    await turn(3);
    expect(await armed()).toBe(slot);
    expect(await alarmsSet()).toBe(set + 1);
    // an object started since (memory gone) reads what is armed before its first turn: an alarm armed sooner than
    // the turn's update is due (here set from outside, in the interval) serves it, nothing is set
    // Storage does not keep the throttle's clock (the last send's time): here it says the interval has passed, so the
    // turn would be sent at once, but the alarm armed within the interval sends it
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE index_sync SET last_flush = 0, flush_ms = 0");
    });
    const restarted = runInDurableObject(stub, (_i, state) => state.abort("restart"));
    await expect(restarted).rejects.toThrow(/restart/);
    const sooner = Date.now() + interval / 2;
    await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => state.storage.setAlarm(sooner));
    const afterRestart = await alarmsSet();
    const sent = await sentSeq();
    expect(sent).not.toBeNull();
    await turn(4);
    expect(await armed()).toBe(sooner);
    expect(await alarmsSet()).toBe(afterRestart);
    expect(await sentSeq()).toBe(sent);
    // the alarm sends it
    expect(await runDurableObjectAlarm(env.EPISODES.getByName(id))).toBe(true);
    await expect.poll(sentSeq).toBeGreaterThan(sent!);
  });

  it("once the run's index dropped the row, nothing of the episode is stored", async () => {
    const id = `erase-run:${freshId("f")}`;
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    await expect.poll(() => tables(id)).toEqual([]);
    expect(await rowIn(id)).toEqual([]);
    expect(await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => state.storage.getAlarm())).toBeNull();
  });
});

describe("rowFromMeta", () => {
  it("the counters from the meta row; tokens and rewards of every trace; rewards, task, stop condition and truncation of the first", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const rewards = m({ correct: m({ score: f(1), weight: 1 }) });
      const first = delta({
        open: m({ version: 1, id: "t-1", task: m({ key: "task-7" }) }),
        set: m({ rewards, num_total_tokens: 30, stop_condition: "answered", is_timeout: true }),
      });
      const second = delta({ open: m({ version: 1, id: "t-2" }), set: m({ num_total_tokens: 12 }) }, "t-2");
      commitIngest(state, first, ID, Number.MAX_SAFE_INTEGER, 10);
      const c = commitIngest(state, second, ID, Number.MAX_SAFE_INTEGER, 20);
      expect(rowFromMeta(c.meta, state)).toEqual({
        id: ID,
        run: "sync-run",
        status: "live",
        created: 10,
        updated: 20,
        ended: null,
        seq: 2,
        traces: 2,
        nodes: 0,
        calls: 0,
        // prime-rl's turns: assistant nodes (none yet)
        turns: 0,
        tokens: 42,
        rewards: { correct: { score: 1, weight: 1 } },
        // each trace's, in order (the second has none yet): what the episode's reward is counted from
        trace_rewards: [{ correct: { score: 1, weight: 1 } }, null],
        error: null,
        task: "task-7",
        group: "task-7", // live: the task key
        stop_condition: "answered",
        // the trainer's truncation (no limit stop, no call ended `length`) and the first trace's timeout, apart
        is_truncated: false,
        is_timeout: true,
        run_name: null,
        dispatch: null,
        // no timing, no nodes, no calls yet
        live: {
          stage: "pending",
          started: null,
          elapsed: null,
          branches: 0,
          input_tokens: 0,
          output_tokens: 0,
          cost: null,
          last: null,
          annotations: 0,
        },
      });
    });
  });

  it("truncation as the trainer counts it, from the calls as they arrive: the last successful call's `length`", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const call = (finish: string | null, error: LValue = null) => m({ node: 1, finish_reason: finish, error });
      const facts = new RowFacts(state.store);
      let c = commitIngest(
        state,
        delta({ open: m({ version: 1, id: "t-1" }), calls: [call("stop")], set: m({ stop_condition: null }) }),
        ID,
        Number.MAX_SAFE_INTEGER,
        10,
      );
      expect(rowFromMeta(c.meta, state, facts).is_truncated).toBe(false);
      // the next call ran out of tokens, and a failed call after it does not hide that
      c = commitIngest(
        state,
        delta({ calls: [call("length"), call(null, m({ type: "APIError" }))] }),
        ID,
        Number.MAX_SAFE_INTEGER,
        20,
      );
      expect(rowFromMeta(c.meta, state, facts).is_truncated).toBe(true);
      // read again from storage by a fresh reader (a woken object): the same
      expect(rowFromMeta(c.meta, state).is_truncated).toBe(true);
      // a successful call after it ended with `stop`: no longer truncated
      c = commitIngest(state, delta({ calls: [call("stop")] }), ID, Number.MAX_SAFE_INTEGER, 30);
      expect(rowFromMeta(c.meta, state, facts).is_truncated).toBe(false);
      // a second trace stopping at max_turns makes the episode truncated
      c = commitIngest(
        state,
        delta(
          { open: m({ version: 1, id: "t-2" }), set: m({ stop_condition: "max_turns", is_timeout: false }) },
          "t-2",
        ),
        ID,
        Number.MAX_SAFE_INTEGER,
        40,
      );
      expect(rowFromMeta(c.meta, state, facts)).toMatchObject({ is_truncated: true, is_timeout: false });
      // archived: the calls are gone; as kept when the run ended, else (an older release kept none) what a stop says
      const archived = { ...c.meta, status: "finished" as const, archived: 60 };
      const progress = rowFromMeta(c.meta, state, facts).live!;
      expect(rowFromMeta({ ...archived, progress: { ...progress, is_truncated: false } }, state).is_truncated).toBe(
        false,
      );
      expect(rowFromMeta({ ...archived, progress }, state).is_truncated).toBe(true);
    });
  });

  it("once the run ended: the reply head's group and run name", async () => {
    await withFreshStorage((storage) => {
      const state = new EpisodeState(storage);
      const c = commitIngest(state, openDelta(), ID, Number.MAX_SAFE_INTEGER, 10);
      const reply = enc(
        new LMap([
          ["success", true],
          ["error", null],
          ["head", m({ group: m({ id: "group-3" }), run: m({ name: "nightly" }) })],
          ["traces", [m({ id: "t-1", nodes: 0, calls: 0 })]],
        ]),
      );
      state.record.saveReply(reply);
      const ended = { ...c.meta, status: "finished" as const, updated: 50 };
      expect(rowFromMeta(ended, state)).toMatchObject({
        status: "finished",
        ended: 50,
        group: "group-3",
        run_name: "nightly",
      });
      expect(rowFromMeta({ ...ended, status: "failed", error: "boom" }, state)).toMatchObject({
        status: "failed",
        error: "boom",
      });
      expect(rowFromMeta({ ...c.meta, refused: "counts differ" }, state)).toMatchObject({
        status: "finish_refused",
        error: "counts differ",
        ended: null,
      });
    });
  });
});

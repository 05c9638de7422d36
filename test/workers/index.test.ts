// The run-sharded episode index through the real Worker and Durable Objects: rows follow their
// episode (first write, throttled turns flushed by the Episode's alarm, finish, refusal, failure,
// delete, expiry) in their run's index; the run's aggregates equal a recount of its rows after
// each; a failed update is re-sent until it lands; the run's index slows its episodes down when
// they are many; lists page per run and across runs; sockets push coalesced changes; tokens see
// only their scope. Each test uses its own run.
import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import {
  HISTOGRAM_BINS,
  minuteOf,
  type RunAggregates,
  recount,
  SCORE_UNIT,
} from "../../src/protocol/registry/aggregates.js";
import type { IndexEntry, IndexRow } from "../../src/protocol/registry/entry.js";
import { parseRunMessage, parseRunsMessage, type RunSummary } from "../../src/protocol/registry/index-protocol.js";
import { rowScores } from "../../src/protocol/registry/rewards.js";
import { runIndexName } from "../../src/protocol/registry/run.js";
import { F64 } from "../../src/protocol/wire/lossless.js";
import worker from "../../src/worker/index.js";
import { delta, m, openDelta } from "../support/deltas.js";
import { freshId, golden, inbox, openSocket, post, relay, setUpdated } from "./support.js";

interface Page {
  episodes: IndexEntry[];
  cursor: string | null;
}

const api = (path: string, init?: RequestInit) => exports.default.fetch(`http://relay.test/v1/${path}`, init);

async function getJson<T>(path: string): Promise<T> {
  const res = await api(path);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as T;
}

/** The run's rows (none: a run with no row answers 404 no run). */
async function runRows(run: string): Promise<IndexEntry[]> {
  const res = await api(`runs/${encodeURIComponent(run)}/episodes?limit=500`);
  if (res.status === 404) return [];
  expect(res.status, await res.clone().text()).toBe(200);
  return ((await res.json()) as Page).episodes;
}

async function row(id: string): Promise<IndexEntry | undefined> {
  return (await runRows(id.slice(0, id.lastIndexOf(":")))).find((e) => e.id === id);
}

async function aggregates(run: string): Promise<RunAggregates> {
  const v = await getJson<{ aggregates: RunAggregates }>(`runs/${encodeURIComponent(run)}`);
  return v.aggregates;
}

/** Poll `check` until it stops throwing (index updates travel in the background). */
async function eventually<T>(check: () => Promise<T>, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > end) throw e;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

const reply = (success: boolean, trace = "t-1", error = "failed") =>
  encodeReply(success ? { success, traces: [{ id: trace, nodes: 0, calls: 0 }] } : { success, error });

/** A reply that names 5 nodes for a trace with none: the finish is refused (finish_refused). */
const wrongCounts = encodeReply({ success: true, traces: [{ id: "t-1", nodes: 5, calls: 0 }] });

/** An open delta whose trace carries rewards and a token count. */
function scored(scores: Record<string, number>, tokens: number): Uint8Array {
  const rewards = m(
    Object.fromEntries(Object.entries(scores).map(([k, s]) => [k, m({ score: new F64(s), weight: 1 })])),
  );
  return openDelta("t-1", { set: m({ rewards, num_total_tokens: tokens }) });
}

/** The kept aggregates equal a recount from the listed rows: counts, means, histograms, extremes, throughput. */
async function expectExact(run: string): Promise<void> {
  const rows = await runRows(run);
  const agg = await aggregates(run);
  const asRows: IndexRow[] = rows.map((e) => ({
    ...e,
    created: Date.parse(e.created),
    updated: Date.parse(e.updated),
    ended: e.ended === null ? null : Date.parse(e.ended),
  }));
  const { counters, throughput } = recount(asRows);
  expect(agg.episodes).toBe(rows.length);
  expect(agg.counts).toEqual({
    live: counters.live,
    finished: counters.finished,
    failed: counters.failed,
    finish_refused: counters.finish_refused,
  });
  expect(agg.mean_turns).toBe(counters.turned ? counters.turns / counters.turned : null);
  expect(agg.mean_tokens).toBe(rows.length ? counters.tokens / rows.length : null);
  expect(Object.keys(agg.rewards).sort()).toEqual(Object.keys(counters.rewards).sort());
  for (const [key, r] of Object.entries(counters.rewards)) {
    const a = agg.rewards[key]!;
    expect(a.count).toBe(r.count);
    expect(a.mean).toBe((r.units * SCORE_UNIT) / r.count);
    expect(a.histogram.counts).toEqual(r.bins.slice(1, HISTOGRAM_BINS + 1));
    expect([a.histogram.below, a.histogram.above]).toEqual([r.bins[0], r.bins[HISTOGRAM_BINS + 1]]);
    // per key as kept: the episode's scores (rewards.ts; "reward" is the total)
    const scores = asRows.flatMap((x) => rowScores(x).flatMap(([k, v]) => (k === key ? [v] : [])));
    expect([a.min, a.max]).toEqual([Math.min(...scores), Math.max(...scores)]);
  }
  const now = minuteOf(Date.now());
  expect(agg.throughput.per_minute.at(-1)).toBe(throughput.get(now) ?? 0);
  expect(agg.throughput.per_minute.reduce((a, b) => a + b, 0)).toBe(
    [...throughput.entries()].filter(([k]) => k > now - 60).reduce((a, [, n]) => a + n, 0),
  );
}

describe("rows follow the episode into its run's index", () => {
  it("first write at once, turns after the throttled flush (the Episode's alarm), then the finish", async () => {
    const c = await golden("tool_calls_pending");
    const run = freshId("life");
    const id = `${run}:0`;
    const producer = new ProducerCursor("w");
    const send = async (i: number) => {
      const res = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(c.frames[i]!)));
      expect(res.status, await res.clone().text()).toBe(200);
      producer.acknowledge();
    };
    await send(0);
    const first = await eventually(async () => (await row(id)) ?? Promise.reject(new Error("no row yet")));
    expect(first).toMatchObject({
      id,
      run,
      status: "live",
      traces: 1,
      nodes: 0,
      calls: 0,
      rewards: {},
      error: null,
      seq: 1,
      ended: null,
    });

    await send(1);
    const stub = env.EPISODES.getByName(id);
    const alarm = await runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    // tests set INDEX_FLUSH_MS to half an hour: the flush waits for the alarm, which runs on demand here (its
    // first update may have come before the read above attended the run: then INDEX_IDLE_FLUSH_MS, attention.ts)
    expect(alarm).not.toBeNull();
    expect(alarm!).toBeLessThanOrEqual(Date.now() + Number(env.INDEX_IDLE_FLUSH_MS));
    expect((await row(id))!.nodes).toBe(0);
    for (let i = 2; i < c.frames.length; i++) await send(i);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const turned = await eventually(async () => {
      const r = (await row(id))!;
      expect(r.nodes).toBe(9);
      return r;
    });
    expect(turned).toMatchObject({
      status: "live",
      calls: 4,
      turns: 4,
      seq: c.frames.length,
      rewards: { correct: { score: 1, weight: 1 } },
      reward: 1,
    });
    expect((await post(`${id}/reply`, c.reply)).status).toBe(200);
    const done = await eventually(async () => {
      const r = (await row(id))!;
      expect(r.status).toBe("finished");
      return r;
    });
    expect(done.ended).toBe(done.updated);
    await expectExact(run);
  });

  it("aggregates stay exact through create, turn, refusal, finish, failure, delete and expiry", async () => {
    const run = freshId("agg");
    const specs: Array<[Record<string, number>, number]> = [
      [{ correct: 1, format: 0.5 }, 100],
      [{ correct: 0 }, 40],
      [{ correct: 0.75, format: 1 }, 7],
      [{ correct: 1 }, 0],
      [{ correct: -0.5 }, 3], // below the histogram
      [{ correct: 1.25 }, 9], // above it
      [{}, 11],
    ];
    const ids = specs.map((_, i) => `${run}:${i}`);
    for (const [i, [scores, tokens]] of specs.entries())
      expect((await post(`${ids[i]}/deltas`, scored(scores, tokens))).status).toBe(200);
    await eventually(async () => expect((await runRows(run)).length).toBe(specs.length));
    await expectExact(run);
    const agg = await aggregates(run);
    expect(agg.counts.live).toBe(7);
    expect(agg.rewards.correct!.count).toBe(6);
    expect(agg.rewards.correct!.histogram.below).toBe(1);
    expect(agg.rewards.correct!.histogram.above).toBe(1);
    expect(agg.mean_tokens).toBe((100 + 40 + 7 + 0 + 3 + 9 + 11) / 7);

    // a turn that changes rewards and tokens (flushed by the alarm)
    expect(
      (
        await post(
          `${ids[1]}/deltas`,
          delta({ set: m({ rewards: m({ correct: m({ score: new F64(0.25), weight: 1 }) }), num_total_tokens: 90 }) }),
        )
      ).status,
    ).toBe(200);
    expect(await runDurableObjectAlarm(env.EPISODES.getByName(ids[1]!))).toBe(true);
    await eventually(async () => expect((await row(ids[1]!))!.tokens).toBe(90));
    await expectExact(run);

    // a refused reply (counts disagree), finishes, a failure
    const refused = await post(`${ids[0]}/reply`, wrongCounts);
    expect(refused.status, await refused.clone().text()).toBe(409);
    expect((await post(`${ids[2]}/reply`, reply(true))).status).toBe(200);
    expect((await post(`${ids[3]}/reply`, reply(true))).status).toBe(200);
    expect((await post(`${ids[4]}/reply`, reply(false, "t-1", "boom"))).status).toBe(200);
    await eventually(async () =>
      expect((await aggregates(run)).counts).toEqual({ live: 3, finished: 2, failed: 1, finish_refused: 1 }),
    );
    await expectExact(run);
    const ended = await aggregates(run);
    expect(ended.throughput.per_minute.at(-1)).toBeGreaterThanOrEqual(3);

    // delete and expiry take rows back out
    expect((await relay(ids[2]!, { method: "DELETE" })).status).toBe(200);
    await eventually(async () => expect((await runRows(run)).map((r) => r.id)).not.toContain(ids[2]));
    await runInDurableObject(env.EPISODES.getByName(ids[5]!), (_i, state) => {
      setUpdated(state.storage.sql, 1); // a live episode: its last turn holds the time
    });
    await abortAllDurableObjects(); // the object keeps the row in memory: evicted, it reads it again
    expect(await runDurableObjectAlarm(env.EPISODES.getByName(ids[5]!))).toBe(true);
    await eventually(async () =>
      expect((await runRows(run)).map((r) => r.id).sort()).toEqual([ids[0], ids[1], ids[3], ids[4], ids[6]].sort()),
    );
    await expectExact(run);
    expect((await aggregates(run)).rewards.correct!.histogram.above).toBe(0);
  });
});

describe("updates are not lost", () => {
  it("an update that fails inside the index's transaction leaves its rows and aggregates as they were", async () => {
    const run = freshId("txn");
    const id = `${run}:0`;
    expect((await post(`${id}/deltas`, scored({ correct: 1 }, 10))).status).toBe(200);
    await eventually(async () => expect((await row(id))?.tokens).toBe(10));
    const before = await aggregates(run);
    const index = env.EPISODE_INDEX.getByName(runIndexName(run));
    const updated: IndexRow = {
      ...(await runInDurableObject(index, (_o, state) => {
        const r = state.storage.sql
          .exec<{ created: number; updated: number }>("SELECT created, updated FROM rows WHERE id = ?", id)
          .one();
        return { created: r.created, updated: r.updated };
      })),
      id,
      run,
      status: "finished",
      ended: Date.now(),
      seq: 99,
      traces: 1,
      nodes: 0,
      calls: 0,
      tokens: 500,
      rewards: { correct: { score: 0, weight: 1 } },
      error: null,
    };
    updated.updated += 1;
    // a finished row's part goes to the ended-per-minute table last: without it, the write throws
    // after the row and the counters (in memory) took the update, and all of it must be undone
    await hideTable(index, "throughput", true);
    // (a plain promise to expect: it inspects what it is given, and each property read of an RPC promise is a call of its own)
    await expect(index.upsert(updated).then((answer) => answer)).rejects.toThrow(/throughput/);
    await hideTable(index, "throughput", false);
    const after = await aggregates(run);
    expect([after.episodes, after.counts, after.mean_tokens, after.rewards]).toEqual([
      before.episodes,
      before.counts,
      before.mean_tokens,
      before.rewards,
    ]);
    expect((await row(id))!.tokens).toBe(10);
    await expectExact(run);
  });

  it("an update the run's index refused is re-sent by the episode's alarm until it lands", async () => {
    const run = freshId("retry");
    const id = `${run}:0`;
    const index = env.EPISODE_INDEX.getByName(runIndexName(run));
    // the run's index (its tables made by a first row) fails every update until its table is back (a fault injected in its storage)
    expect((await post(`${run}:seed/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect(await row(`${run}:seed`)).toBeDefined());
    await breakIndex(index, true);
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200); // the ack does not wait for the index
    const stub = env.EPISODES.getByName(id);
    const sync = async () =>
      runInDurableObject(stub, (_o, state) =>
        state.storage.sql.exec<{ due: number; attempts: number }>("SELECT due, attempts FROM index_sync").one(),
      );
    await eventually(async () => expect((await sync()).attempts).toBe(1));
    const s = await sync();
    expect(s.due).toBeGreaterThan(Date.now() - 1000); // retried soon, not at the next turn
    expect(await runInDurableObject(stub, (_o, state) => state.storage.getAlarm())).toBe(s.due);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // still failing: backs off
    await eventually(async () => expect((await sync()).attempts).toBe(2));
    await breakIndex(index, false);
    expect(await row(id)).toBeUndefined(); // nothing landed while it failed
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    await eventually(async () => expect(await row(id)).toMatchObject({ id, status: "live" }));
    expect((await sync()).attempts).toBe(0);
  });

  it("a delete whose removal failed leaves a tombstone the alarm retries", async () => {
    const run = freshId("tomb");
    const id = `${run}:0`;
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect(await row(id)).toBeDefined());
    const index = env.EPISODE_INDEX.getByName(runIndexName(run));
    await breakIndex(index, true);
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    const stub = env.EPISODES.getByName(id);
    await eventually(async () =>
      expect(
        await runInDurableObject(stub, (_o, state) =>
          state.storage.sql.exec<{ id: string }>("SELECT id FROM tombstone").toArray(),
        ),
      ).toEqual([{ id }]),
    );
    await breakIndex(index, false);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    await eventually(async () => expect(await row(id)).toBeUndefined());
    // the row gone, nothing of the episode is kept: not even the tombstone's table
    await eventually(async () =>
      expect(
        await runInDurableObject(stub, (_o, state) =>
          state.storage.sql.exec("SELECT name FROM sqlite_master WHERE name = 'tombstone'").toArray(),
        ),
      ).toEqual([]),
    );
  });

  it("backpressure: the run's index asks its episodes for a longer interval as they grow (INDEX_WRITES_PER_S)", async () => {
    const run = freshId("slow");
    const rate = Number(env.INDEX_WRITES_PER_S);
    for (let i = 0; i < 3; i++) expect((await post(`${run}:${i}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect((await runRows(run)).length).toBe(3));
    const stub = env.EPISODES.getByName(`${run}:2`);
    // its first update was answered when the run had 3 live episodes
    const flushMs = await eventually(async () => {
      const v = await runInDurableObject(
        stub,
        (_o, state) => state.storage.sql.exec<{ flush_ms: number }>("SELECT flush_ms FROM index_sync").one().flush_ms,
      );
      expect(v).toBe(Math.ceil((3 * 1000) / rate));
      return v;
    });
    expect(flushMs).toBeGreaterThan(Number(env.INDEX_FLUSH_MS)); // longer than the configured interval
    // a turn is due after that interval, not the configured one
    const before = Date.now();
    expect((await post(`${run}:2/deltas`, delta({ set: m({ ok: true }) }))).status).toBe(200);
    const alarm = await runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    expect(alarm!).toBeGreaterThanOrEqual(before + flushMs - 60_000);
  });
});

describe("lists", () => {
  it("a run's episodes page by an opaque cursor, filter by status, sort by updated or reward", async () => {
    const run = freshId("page");
    const scores = [0.5, 0.9, 0.1, 0.7, 0.3];
    for (const [i, s] of scores.entries()) {
      expect((await post(`${run}:${i}/deltas`, scored({ correct: s }, 1))).status).toBe(200);
      await new Promise((r) => setTimeout(r, 3)); // distinct `updated`
    }
    for (const i of [1, 3]) expect((await post(`${run}:${i}/reply`, reply(false, "t-1", "x"))).status).toBe(200);
    await eventually(async () => expect((await runRows(run)).filter((e) => e.status === "failed").length).toBe(2));
    const all = await runRows(run);
    for (let i = 1; i < all.length; i++) expect(all[i - 1]!.updated >= all[i]!.updated).toBe(true);
    const byReward = (await getJson<Page>(`runs/${run}/episodes?sort=reward`)).episodes.map((e) => e.reward);
    expect(byReward).toEqual([...scores].sort((a, b) => b - a));
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Page = await getJson<Page>(
        `runs/${run}/episodes?sort=reward&limit=2${cursor ? `&cursor=${cursor}` : ""}`,
      );
      seen.push(...page.episodes.map((e) => e.id));
      cursor = page.cursor;
    } while (cursor);
    expect(seen).toEqual([1, 3, 0, 4, 2].map((i) => `${run}:${i}`));
    expect((await getJson<Page>(`runs/${run}/episodes?status=failed`)).episodes.map((e) => e.id).sort()).toEqual([
      `${run}:1`,
      `${run}:3`,
    ]);
  });

  it("across runs: newest run first, each run's episodes newest first; paged; prefix narrows", async () => {
    const base = freshId("across");
    const runs = [`${base}-a`, `${base}-b`];
    for (const r of runs) {
      for (let i = 0; i < 3; i++) expect((await post(`${r}:${i}/deltas`, openDelta())).status).toBe(200);
      await new Promise((res) => setTimeout(res, 5));
    }
    await eventually(
      async () => expect((await getJson<Page>(`episodes?prefix=${base}&limit=500`)).episodes.length).toBe(6),
      8000,
    );
    const all = (await getJson<Page>(`episodes?prefix=${base}&limit=500`)).episodes.map((e) => e.id);
    expect(all.slice(0, 3).every((id) => id.startsWith(`${runs[1]}:`))).toBe(true);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Page = await getJson<Page>(
        `episodes?prefix=${base}&limit=4${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      );
      expect(page.episodes.length).toBeLessThanOrEqual(4);
      seen.push(...page.episodes.map((e) => e.id));
      cursor = page.cursor;
    } while (cursor);
    expect(seen).toEqual(all);
    expect((await getJson<Page>(`episodes?prefix=${runs[0]}:1`)).episodes.map((e) => e.id)).toEqual([`${runs[0]}:1`]);
    // the directory hears of a run's first row at once and of the rest within DIRECTORY_MS
    await eventually(async () => {
      const dir = await getJson<{ runs: RunSummary[] }>("runs?limit=500");
      expect(dir.runs.filter((r) => runs.includes(r.run)).map((r) => [r.run, r.episodes, r.live])).toEqual([
        [runs[1], 3, 3],
        [runs[0], 3, 3],
      ]);
    }, 8000);
  });

  it("bad parameters are 400; paths and methods", async () => {
    for (const [q, code] of [
      ["episodes?status=done", "bad_status"],
      ["episodes?limit=0", "bad_limit"],
      ["episodes?prefix=a/b", "bad_prefix"],
      ["episodes?cursor=%%%", "bad_cursor"],
      ["runs/x/episodes?sort=size", "bad_sort"],
      ["runs/x/finished?cursor=WzEsMl0", "bad_cursor"],
      ["runs/a%20b", "bad_run"],
    ] as const) {
      const res = await api(q);
      expect(res.status, q).toBe(400);
      expect(await res.json()).toMatchObject({ error: code });
    }
    expect((await api("episodes", { method: "POST" })).status).toBe(405);
    expect((await api("runs/x", { method: "DELETE" })).status).toBe(405);
    const oldIndexSocket = await api("episodes/watch");
    expect([oldIndexSocket.status, ((await oldIndexSocket.json()) as { error: string }).error]).toEqual([
      404,
      "not_found",
    ]);
    expect((await relay("watch/status")).status).toBe(400);
  });
});

describe("sockets", () => {
  it("a run socket: snapshot, then coalesced changes with the aggregates; ping is answered", async () => {
    const run = freshId("sock");
    expect((await post(`${run}:0/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect(await row(`${run}:0`)).toBeDefined());
    const ws = await openSocket(`../runs/${run}`);
    const box = inbox(ws);
    const snap = parseRunMessage((await box.next()) as string);
    expect(snap).toMatchObject({ type: "snapshot", run, truncated: false });
    if (snap.type !== "snapshot") throw new Error("expected a snapshot");
    expect(snap.episodes.map((e) => e.id)).toEqual([`${run}:0`]);
    expect(snap.aggregates!.counts.live).toBe(1);
    // ten episodes at once: one message (coalesced), not ten
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => post(`${run}:${i + 1}/deltas`, openDelta()).then((r) => r.body?.cancel())),
    );
    const seen = new Set<string>();
    let messages = 0;
    while (seen.size < 10) {
      const msg = parseRunMessage((await box.next()) as string);
      messages++;
      if (msg.type !== "changes") throw new Error("expected changes");
      for (const e of msg.upserts) seen.add(e.id);
    }
    expect(messages).toBeLessThanOrEqual(3);
    expect((await relay(`${run}:1`, { method: "DELETE" })).status).toBe(200);
    const del = parseRunMessage((await box.next()) as string);
    expect(del).toMatchObject({ type: "changes", deletes: [`${run}:1`] });
    if (del.type === "changes") expect(del.aggregates!.episodes).toBe(10);
    ws.send("ping");
    expect(await box.next()).toBe("pong");
    ws.close(1000, "done");
  });

  it("the runs socket lists runs, then pushes a run's changes", async () => {
    const run = freshId("dirsock");
    const ws = await openSocket("../runs");
    const box = inbox(ws);
    expect(parseRunsMessage((await box.next()) as string).type).toBe("runs");
    expect((await post(`${run}:0/deltas`, openDelta())).status).toBe(200);
    const change = await eventually(async () => {
      const msg = parseRunsMessage((await box.next()) as string);
      if (msg.type !== "run_changes" || !msg.upserts.some((r) => r.run === run)) throw new Error("not yet");
      return msg;
    }, 8000);
    expect(change.upserts.find((r) => r.run === run)).toMatchObject({ episodes: 1, live: 1 });
    ws.close(1000, "done");
  });
});

describe("bulk fetch of a run's finished episodes", () => {
  it("streams each finished episode's exact bytes with a cursor, and resumes after one", async () => {
    const run = freshId("bulk");
    const names = ["chat_basic", "multi_trace_links", "routing_repair_u8"];
    for (const name of names) {
      const c = await golden(name);
      for (const f of c.frames) (await post(`${run}:${name}/deltas`, f)).body?.cancel();
      expect((await post(`${run}:${name}/reply`, c.reply)).status).toBe(200);
    }
    expect((await post(`${run}:live/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect((await runRows(run)).filter((e) => e.status === "finished").length).toBe(3));
    const res = await api(`runs/${run}/finished`);
    expect(res.status).toBe(200);
    const { decodeMulti } = await import("@msgpack/msgpack");
    const body = new Uint8Array(await res.arrayBuffer());
    const items = [...decodeMulti(body)] as Array<{ id: string; cursor: string; episode: unknown }>;
    expect(items.map((x) => x.id)).toEqual(names.map((n) => `${run}:${n}`));
    // each episode's bytes sit in the stream exactly as GET answers them
    let at = 0;
    for (const item of items) {
      const want = new Uint8Array(await (await relay(item.id)).arrayBuffer());
      expect(want).toEqual(new Uint8Array((await golden(item.id.slice(run.length + 1))).episode!));
      const i = indexOf(body, want, at);
      expect(i).toBeGreaterThan(at);
      at = i + want.length;
    }
    const rest = [
      ...decodeMulti(
        new Uint8Array(await (await api(`runs/${run}/finished?cursor=${items[0]!.cursor}`)).arrayBuffer()),
      ),
    ] as typeof items;
    expect(rest.map((x) => x.id)).toEqual(items.slice(1).map((x) => x.id));
    const lines = (await (await api(`runs/${run}/finished`, { headers: { accept: "application/x-ndjson" } })).text())
      .trim()
      .split("\n");
    expect(lines.map((l) => (JSON.parse(l) as { id: string }).id)).toEqual(items.map((x) => x.id));
  });
});

describe("bulk fetch resumes without skipping", () => {
  it("an episode whose finish reached the index late (retried) comes after a cursor handed out before", async () => {
    const run = freshId("late");
    const [a, b] = [`${run}:a`, `${run}:b`];
    for (const id of [a, b]) expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect((await runRows(run)).length).toBe(2));
    const index = env.EPISODE_INDEX.getByName(runIndexName(run));
    await breakIndex(index, true);
    expect((await post(`${a}/reply`, reply(true))).status).toBe(200); // finishes first, its row update fails
    const stubA = env.EPISODES.getByName(a);
    await eventually(async () =>
      expect(
        await runInDurableObject(
          stubA,
          (_o, state) => state.storage.sql.exec<{ attempts: number }>("SELECT attempts FROM index_sync").one().attempts,
        ),
      ).toBe(1),
    );
    await breakIndex(index, false);
    expect((await post(`${b}/reply`, reply(true))).status).toBe(200);
    await eventually(async () => expect((await row(b))!.status).toBe("finished"));
    const { decodeMulti } = await import("@msgpack/msgpack");
    const first = [...decodeMulti(new Uint8Array(await (await api(`runs/${run}/finished`)).arrayBuffer()))] as Array<{
      id: string;
      cursor: string;
    }>;
    expect(first.map((x) => x.id)).toEqual([b]);
    expect(await runDurableObjectAlarm(stubA)).toBe(true); // the retry lands: a's row is finished now
    await eventually(async () => expect((await row(a))!.status).toBe("finished"));
    expect(Date.parse((await row(a))!.ended!)).toBeLessThan(Date.parse((await row(b))!.ended!));
    const rest = [
      ...decodeMulti(
        new Uint8Array(await (await api(`runs/${run}/finished?cursor=${first[0]!.cursor}`)).arrayBuffer()),
      ),
    ] as Array<{ id: string }>;
    expect(rest.map((x) => x.id)).toEqual([a]);
  });
});

describe("scope", () => {
  const SECRET = "index-test-secret-6d1f0c3b9a8e47f2b5c4d3e2f1a09b8c";
  const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
  const HOST = "https://relay.example.com";
  const token = (role: string, episodes: string[]) =>
    new SignJWT({ role, episodes })
      .setProtectedHeader({ alg: "HS256" })
      .setExpirationTime("1h")
      .sign(new TextEncoder().encode(SECRET));
  const call = (path: string, headers: Record<string, string> = {}) =>
    worker.fetch(new Request(`${HOST}${path}`, { headers }), AUTH_ENV);
  const ids = async (res: Response) => {
    expect(res.status, await res.clone().text()).toBe(200);
    return ((await res.json()) as Page).episodes.map((e) => e.id).sort();
  };

  it("lists are filtered to the token's episodes; aggregates need the whole run; none is 401", async () => {
    const run = freshId("scope");
    const [a1, a2, b1] = [`${run}-a:1`, `${run}-a:2`, `${run}-b:1`];
    for (const id of [a1, a2, b1]) expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect((await getJson<Page>(`episodes?prefix=${run}`)).episodes.length).toBe(3), 8000);
    const q = `/v1/episodes?prefix=${run}`;
    const bearer = async (role: string, patterns: string[]) => ({
      authorization: `Bearer ${await token(role, patterns)}`,
    });
    expect((await call(q)).status).toBe(401);
    expect(await ids(await call(q, await bearer("watcher", [`${run}-a:*`])))).toEqual([a1, a2]);
    expect(await ids(await call(q, await bearer("producer", [b1])))).toEqual([b1]);
    expect(await ids(await call(q, await bearer("watcher", [`${run}-a:2`, `${run}-b:*`])))).toEqual([a2, b1]);
    expect(await ids(await call(q, await bearer("admin", ["*"])))).toEqual([a1, a2, b1]);
    expect(await ids(await call(q, await bearer("watcher", [])))).toEqual([]);
    expect(await ids(await call(q, { ...(await bearer("watcher", [b1])), "x-episode-scope": '["*"]' }))).toEqual([b1]);
    expect(await ids(await call(`/v1/runs/${run}-a/episodes`, await bearer("watcher", [a2])))).toEqual([a2]);
    const partial = (await (await call(`/v1/runs/${run}-a`, await bearer("watcher", [a2]))).json()) as {
      covered: boolean;
      aggregates: unknown;
    };
    expect(partial).toEqual({ run: `${run}-a`, covered: false, aggregates: null });
    const whole = (await (await call(`/v1/runs/${run}-a`, await bearer("watcher", [`${run}-a:*`]))).json()) as {
      aggregates: RunAggregates;
    };
    expect(whole.aggregates.episodes).toBe(2);
    const listed = (await (await call("/v1/runs?limit=500", await bearer("watcher", [`${run}-a:*`]))).json()) as {
      runs: RunSummary[];
    };
    expect(listed.runs.map((r) => r.run)).toEqual([`${run}-a`]);
  });

  it("a run socket sees only its scope (token as a subprotocol entry, also when large)", async () => {
    const run = freshId("sscope");
    const mine = `${run}:mine-1`;
    const padding = Array.from({ length: 80 }, (_, i) => `${run}:pad-${i}-xxxxxxxxxxxxxxxxxxxx`);
    const t = await token("watcher", [...padding, `${run}:mine-*`]);
    const res = await worker.fetch(
      new Request(`${HOST}/v1/runs/${run}`, {
        headers: { upgrade: "websocket", "sec-websocket-protocol": `episode-relay, bearer.${t}` },
      }),
      AUTH_ENV,
    );
    expect(res.status).toBe(101);
    expect(res.headers.get("sec-websocket-protocol")).toBe("episode-relay");
    const ws = res.webSocket!;
    ws.accept();
    const box = inbox(ws);
    expect(parseRunMessage((await box.next()) as string)).toMatchObject({
      type: "snapshot",
      episodes: [],
      aggregates: null,
    });
    expect((await post(`${run}:theirs-1/deltas`, openDelta())).status).toBe(200);
    expect((await post(`${mine}/deltas`, openDelta())).status).toBe(200);
    const seen: string[] = [];
    const end = Date.now() + 1500;
    while (Date.now() < end) {
      const msg = await box.next(Math.max(1, end - Date.now())).catch(() => null);
      if (msg === null) break;
      const parsed = parseRunMessage(msg as string);
      if (parsed.type === "changes") {
        expect(parsed.aggregates).toBeNull();
        seen.push(...parsed.upserts.map((e) => e.id));
      }
    }
    expect(seen).toEqual([mine]);
    ws.close(1000, "done");
  });
});

/** Hide (or bring back) a run index's rows table: every update fails meanwhile, as an overloaded or broken index would. */
async function breakIndex(index: DurableObjectStub, broken: boolean): Promise<void> {
  await hideTable(index, "rows", broken);
}

/** Rename a run index's table out of the way (a fault in its storage), or back. */
async function hideTable(index: DurableObjectStub, table: string, hidden: boolean): Promise<void> {
  await runInDurableObject(index, (_o, state) => {
    state.storage.sql.exec(
      hidden ? `ALTER TABLE ${table} RENAME TO ${table}_hidden` : `ALTER TABLE ${table}_hidden RENAME TO ${table}`,
    );
  });
}

function indexOf(hay: Uint8Array, needle: Uint8Array, from: number): number {
  outer: for (let i = from; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

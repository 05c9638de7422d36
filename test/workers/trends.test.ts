// Finished-only reward statistics, the reward trend and the zero-variance trend in a run's index
// (aggregates.ts, reward-trend.ts, zero-variance-trend.ts, trend-store.ts), and the runs list's
// mean rewards (run-directory.ts): after creates, finishes, failures, refusals, re-finishes and
// deletes in a seeded shuffled order (and stale copies that must be ignored) each equals a recount
// from the rows, computed here from the rows alone; and storage at schema version 4 upgrades to
// the same numbers. (That the finished-only extremes read a few index entries, not the run:
// index-store.test.ts.)
import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { INDEX_SCHEMA } from "../../src/objects/registry/schemas.js";
import { latestVersion, storedVersion } from "../../src/objects/storage/schema.js";
import {
  binOf,
  HISTOGRAM_BINS,
  minuteOf,
  type RunAggregates,
  recount,
  SCORE_UNIT,
  THROUGHPUT_MINUTES,
  unitsOf,
} from "../../src/protocol/registry/aggregates.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import { groupSummary } from "../../src/protocol/registry/groups.js";
import type { RunSummary } from "../../src/protocol/registry/index-protocol.js";
import { rowScores } from "../../src/protocol/registry/rewards.js";
import type { ZeroVarianceTrend } from "../../src/protocol/registry/zero-variance-trend.js";
import { currentRow, weightOne } from "../support/index-rows.js";
import { freshId, relay } from "./support.js";

const STATUSES: IndexRow["status"][] = ["live", "finished", "failed", "finish_refused"];

/** A seeded generator, so a failure can be replayed. */
function rng(seed: number): () => number {
  return () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
}

function row(
  run: string,
  n: number,
  status: IndexRow["status"],
  scores: Record<string, number>,
  updated: number,
  ended: number | null,
): IndexRow {
  const [id, task, group] = [`${run}:e${n}`, `task-${n % 6}`, `g${n % 6}`];
  return currentRow({
    id,
    run,
    status,
    // created as first updated: the run's first row is run time 0 of its timeline
    created: updated,
    updated,
    ended,
    nodes: 3,
    calls: 2,
    tokens: 10,
    rewards: weightOne(scores),
    task,
    group,
  });
}

async function getJson<T>(path: string): Promise<T> {
  const res = await relay(path);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as T;
}

/** Per key, from the rows alone: count, mean (from integer units, as kept), min, max, histogram. */
function rewardStats(rows: IndexRow[]) {
  const out: Record<string, { count: number; units: number; min: number; max: number; bins: number[] }> = {};
  for (const r of rows) {
    for (const [k, s] of rowScores(r)) {
      const x = (out[k] ??= {
        count: 0,
        units: 0,
        min: s,
        max: s,
        bins: new Array<number>(HISTOGRAM_BINS + 2).fill(0),
      });
      x.count++;
      x.units += unitsOf(s);
      x.min = Math.min(x.min, s);
      x.max = Math.max(x.max, s);
      x.bins[binOf(s) + 1]!++;
    }
  }
  return Object.fromEntries(
    Object.entries(out).map(([k, x]) => [
      k,
      {
        count: x.count,
        mean: (x.units * SCORE_UNIT) / x.count,
        min: x.min,
        max: x.max,
        histogram: { counts: x.bins.slice(1, HISTOGRAM_BINS + 1), below: x.bins[0], above: x.bins[HISTOGRAM_BINS + 1] },
      },
    ]),
  );
}

/** The reward trend from the rows: finished ones ended in each minute of the window starting at `first`. */
function rewardTrend(rows: IndexRow[], first: number) {
  const keys: Record<string, { n: number[]; units: number[] }> = {};
  for (const r of rows) {
    if (r.status !== "finished" || r.ended === null) continue;
    const i = minuteOf(r.ended) - first;
    if (i < 0 || i >= THROUGHPUT_MINUTES) continue;
    for (const [k, s] of rowScores(r)) {
      keys[k] ??= {
        n: new Array<number>(THROUGHPUT_MINUTES).fill(0),
        units: new Array<number>(THROUGHPUT_MINUTES).fill(0),
      };
      keys[k].n[i]!++;
      keys[k].units[i]! += unitsOf(s);
    }
  }
  return Object.fromEntries(
    Object.entries(keys).map(([k, x]) => [
      k,
      { count: x.n, mean: x.n.map((n, i) => (n ? (x.units[i]! * SCORE_UNIT) / n : null)) },
    ]),
  );
}

/**
 * The run timeline from the rows: `first` the least creation of every row ever written (a delete leaves run time 0 where
 * it was), points of the fewest minutes that keep the run within 120 points, an end outside the run counted in the end
 * point nearest it.
 */
function timeline(rows: IndexRow[], first: number, now: number) {
  const from = minuteOf(first);
  const span = minuteOf(now) - from + 1;
  const width = [1, 2, 5, 10, 15, 30, 60].find((w) => Math.ceil(span / w) <= 120)!;
  const points = Math.ceil(span / width);
  const at = (ms: number) => Math.min(points - 1, Math.max(0, Math.floor((minuteOf(ms) - from) / width)));
  const ended = new Array<number>(points).fill(0);
  const keys: Record<string, { n: number[]; units: number[] }> = {};
  for (const r of rows) {
    if (r.ended === null || (r.status !== "finished" && r.status !== "failed")) continue;
    ended[at(r.ended)]!++;
    if (r.status !== "finished") continue;
    for (const [k, s] of rowScores(r)) {
      keys[k] ??= { n: new Array<number>(points).fill(0), units: new Array<number>(points).fill(0) };
      keys[k].n[at(r.ended)]!++;
      keys[k].units[at(r.ended)]! += unitsOf(s);
    }
  }
  const rewards = Object.fromEntries(
    Object.keys(keys)
      .sort()
      .map((k) => [
        k,
        {
          count: keys[k]!.n,
          mean: keys[k]!.n.map((n, i) => (n ? (keys[k]!.units[i]! * SCORE_UNIT) / n : null)),
        },
      ]),
  );
  return { start: new Date(from * 60_000).toISOString(), minutes: width, ended, rewards };
}

/** The zero-variance trend from the rows: each complete group at the minute of its latest end. */
function zeroTrend(rows: IndexRow[], first: number): Omit<ZeroVarianceTrend, "start"> {
  const groups = new Map<string, IndexRow[]>();
  for (const r of rows) groups.set(r.group!, [...(groups.get(r.group!) ?? []), r]);
  const done = [...groups].flatMap(([id, members]) => {
    const g = groupSummary(id, members);
    return g.complete
      ? [{ minute: minuteOf(Math.max(...members.map((m) => m.ended ?? m.updated))), zero: g.zeroVariance }]
      : [];
  });
  const minutes = Array.from({ length: THROUGHPUT_MINUTES }, (_, i) => first + i);
  const completed = minutes.map((m) => done.filter((d) => d.minute === m).length);
  const zero = minutes.map((m) => done.filter((d) => d.minute === m && d.zero).length);
  const upTo = (m: number) => done.filter((d) => d.minute <= m);
  return {
    completed,
    zero_variance: zero,
    share: completed.map((c, i) => (c ? zero[i]! / c : null)),
    cumulative_share: minutes.map((m) =>
      upTo(m).length ? upTo(m).filter((d) => d.zero).length / upTo(m).length : null,
    ),
  };
}

/** The kept numbers equal the recount from `rows`: finished-only and all rewards, both trends, the groups JSON's trend. */
async function expectExact(run: string, rows: IndexRow[], firstRow?: number): Promise<RunAggregates> {
  const before = Date.now();
  const a = (await getJson<{ aggregates: RunAggregates }>(`../runs/${run}`)).aggregates;
  if (firstRow !== undefined) {
    // the minute the index read its clock in: the recount as of either end of the request
    const asOf = [before, Date.now()].map((now) => timeline(rows, firstRow, now));
    expect(asOf, "timeline").toContainEqual(a.timeline);
  }
  const strip = (x: RunAggregates["rewards"]) =>
    Object.fromEntries(
      Object.entries(x).map(
        ([
          k,
          {
            histogram: { edges: _e, ...h },
            ...s
          },
        ]) => [k, { ...s, histogram: h }],
      ),
    );
  expect(strip(a.finished_rewards), "finished-only rewards").toEqual(
    rewardStats(rows.filter((r) => r.status === "finished")),
  );
  expect(strip(a.rewards), "all rewards").toEqual(rewardStats(rows));
  const first = minuteOf(Date.parse(a.reward_trend!.start));
  expect(first).toBe(minuteOf(Date.parse(a.throughput.start)));
  expect(a.reward_trend!.keys, "reward trend").toEqual(rewardTrend(rows, first));
  const zero = zeroTrend(rows, first);
  expect(a.groups!.trend, "zero-variance trend (aggregates)").toEqual({ start: a.reward_trend!.start, ...zero });
  const page = await getJson<{ zero_variance_trend: ZeroVarianceTrend }>(`../runs/${run}/groups?limit=1`);
  const pageFirst = minuteOf(Date.parse(page.zero_variance_trend.start));
  expect(page.zero_variance_trend, "zero-variance trend (groups)").toEqual({
    start: page.zero_variance_trend.start,
    ...zeroTrend(rows, pageFirst),
  });
  return a;
}

/** The run's line in GET /v1/runs once its index's alarm has sent it. */
async function listed(run: string): Promise<RunSummary> {
  await runDurableObjectAlarm(env.EPISODE_INDEX.getByName(`run:${run}`));
  const page = await getJson<{ runs: RunSummary[] }>(`../runs?prefix=${encodeURIComponent(run)}`);
  const r = page.runs.find((x) => x.run === run);
  if (!r) throw new Error(`run ${run} not listed: ${JSON.stringify(page)}`);
  return r;
}

function finishedMeans(rows: IndexRow[]): Record<string, number> {
  return Object.fromEntries(
    Object.entries(rewardStats(rows.filter((r) => r.status === "finished"))).map(([k, s]) => [k, s.mean]),
  );
}

describe("finished-only rewards and the trends equal a recount", () => {
  it("after creates, finishes, failures, refusals, re-finishes and deletes in a shuffled order", async () => {
    const run = freshId("trend");
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const rand = rng(2024);
    const now = Date.now();
    const rows = new Map<number, IndexRow>();
    let clock = now - 3 * 3600_000;
    const first = clock;
    let refinished = 0;
    let stale = 0;
    for (let step = 0; step < 160; step++) {
      const n = Math.floor(rand() * 24);
      const have = rows.get(n);
      const r = rand();
      if (have && r < 0.1) {
        expect((await index.remove(have.id)).applied).toBe(true);
        rows.delete(n);
      } else if (have && r < 0.15) {
        // a copy older than the held row arrives late: ignored
        expect((await index.upsert({ ...have, updated: have.updated - 1 })).applied).toBe(false);
        stale++;
      } else {
        // mostly ended, so groups complete (and reopen when a rollout goes live or is refused again)
        const p = rand();
        const status: IndexRow["status"] =
          p < 0.15 ? "live" : p < 0.7 ? "finished" : p < 0.9 ? "failed" : "finish_refused";
        if (status === "finished" && have?.status === "finished") refinished++;
        // minutes from 70 ago (before the window) to 2 ahead (a clock ahead of ours); few score values, so groups tie
        const ended =
          status === "finished" || status === "failed" ? now - (Math.floor(rand() * 73) - 2) * 60_000 : null;
        const scores: Record<string, number> = { correct: [0, 0.5, 1, 1][Math.floor(rand() * 4)]! };
        if (rand() < 0.4) scores.format = [0.25, 1.5][Math.floor(rand() * 2)]!;
        const next = row(run, n, status, scores, clock++, ended);
        expect((await index.upsert(next)).applied).toBe(true);
        rows.set(n, next);
      }
      if (step % 40 === 39) await expectExact(run, [...rows.values()], first);
    }
    expect(refinished).toBeGreaterThan(3);
    expect(stale).toBeGreaterThan(1);
    const a = await expectExact(run, [...rows.values()], first);
    // three hours in points of 2 minutes; ends 2 minutes ahead of the clock counted in the last point
    expect(a.timeline!.minutes).toBe(2);
    expect(a.timeline!.ended.reduce((x, y) => x + y, 0)).toBe(a.counts.finished + a.counts.failed);
    expect(a.timeline!.rewards.correct!.count.reduce((x, y) => x + y, 0)).toBe(a.finished_rewards.correct!.count);
    // the two views differ here (failed and refused rows carry scores too), and the trends hold something
    expect(a.finished_rewards.correct!.count).toBeLessThan(a.rewards.correct!.count);
    expect(a.reward_trend!.keys.correct!.count.reduce((x, y) => x + y, 0)).toBeGreaterThan(0);
    expect(a.groups!.trend!.completed.reduce((x, y) => x + y, 0)).toBeGreaterThan(0);

    // the runs list: the finished means, as the aggregates have them
    const line = await listed(run);
    expect(line.mean_rewards).toEqual(finishedMeans([...rows.values()]));
    expect(line.mean_rewards!.correct).toBe(a.finished_rewards.correct!.mean);
    // no finished episode left: no means
    for (const x of rows.values()) if (x.status === "finished") await index.remove(x.id);
    expect((await listed(run)).mean_rewards).toEqual({});
  });

  it("a group's completion moves minutes when a rollout re-finishes later, and leaves when one goes live again", async () => {
    const run = freshId("trendg");
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const now = Date.now();
    const at = (minutesAgo: number) => now - minutesAgo * 60_000;
    const rows = [
      row(run, 0, "finished", { correct: 1 }, 10, at(30)),
      row(run, 6, "finished", { correct: 1 }, 11, at(20)),
    ];
    for (const r of rows) await index.upsert(r);
    let a = await expectExact(run, rows);
    /** A time's place in the window the relay answered (its clock may have passed a minute since `now`). */
    const slot = (ms: number) => minuteOf(ms) - minuteOf(Date.parse(a.groups!.trend!.start));
    expect(a.groups!.trend!.completed[slot(at(20))]).toBe(1);
    expect(a.groups!.trend!.zero_variance[slot(at(20))]).toBe(1);
    // re-finished later with another score: the group moves to that minute and is no longer zero-variance
    rows[1] = row(run, 6, "finished", { correct: 0 }, 12, at(5));
    await index.upsert(rows[1]);
    a = await expectExact(run, rows);
    const t = a.groups!.trend!;
    expect([t.completed[slot(at(20))], t.completed[slot(at(5))], t.zero_variance[slot(at(5))]]).toEqual([0, 1, 0]);
    expect(a.groups!.trend!.cumulative_share.at(-1)).toBe(0);
    // live again: no longer complete anywhere
    rows[1] = row(run, 6, "live", { correct: 0 }, 13, null);
    await index.upsert(rows[1]);
    a = await expectExact(run, rows);
    expect(a.groups!.trend!.completed.every((c) => c === 0)).toBe(true);
    expect(a.groups!.trend!.cumulative_share.every((c) => c === null)).toBe(true);
  });
});

describe("storage at schema version 4 upgrades to the same numbers", () => {
  it("scores' status, the finished-only counters, the reward and group minutes are filled from the rows", async () => {
    const run = freshId("trendv4");
    const name = `run:${run}`;
    const index = env.EPISODE_INDEX.getByName(name);
    const rand = rng(7);
    const rows: IndexRow[] = [];
    for (let n = 0; n < 24; n++) {
      const status = STATUSES[Math.floor(rand() * 3)]!;
      const r = row(
        run,
        n,
        status,
        { correct: [0, 1][Math.floor(rand() * 2)]! },
        10 + n,
        status === "live" ? null : Date.now() - n * 60_000,
      );
      rows.push(r);
      await index.upsert(r);
    }
    const before = await expectExact(run, rows);
    // take version 5's additions away, as the release before it would have left the storage
    await runInDurableObject(index, (_i, state) => {
      const sql = state.storage.sql;
      sql.exec("DROP INDEX scores_finished_by_key");
      sql.exec("ALTER TABLE scores DROP COLUMN status");
      sql.exec("ALTER TABLE groups DROP COLUMN done_minute");
      sql.exec("DROP TABLE reward_minutes");
      sql.exec("DROP TABLE group_minutes");
      // and version 15's: the counters saved were every row's (since 15 the ended rows' only, under `settled`)
      const c = structuredClone(recount(rows).counters) as unknown as Record<string, unknown>;
      delete c.finished_rewards;
      sql.exec("DELETE FROM state WHERE k = 'settled'");
      sql.exec("INSERT INTO state VALUES ('counters', ?)", JSON.stringify(c));
      sql.exec("UPDATE schema_version SET version = 4");
    });
    await abortAllDurableObjects();
    const after = await expectExact(run, rows);
    expect(after.finished_rewards).toEqual(before.finished_rewards);
    // each was recounted from the rows above (expectExact); over the same minutes they are the same series (a minute
    // that turned between the two reads moves the window: CI run 42)
    if (after.groups!.trend!.start === before.groups!.trend!.start)
      expect(after.groups!.trend!.cumulative_share).toEqual(before.groups!.trend!.cumulative_share);
    const version = await runInDurableObject(env.EPISODE_INDEX.getByName(name), (_i, state) =>
      storedVersion(state.storage.sql),
    );
    expect(version).toBe(latestVersion(INDEX_SCHEMA));
    // and it goes on keeping them: a finish after the upgrade
    const later = row(run, 0, "finished", { correct: 0.5 }, 100, Date.now());
    rows[0] = later;
    await env.EPISODE_INDEX.getByName(name).upsert(later);
    await expectExact(run, rows);
  });
});

// Every scan has a budget and a resumable cursor, shown on a run of 100,000 rows (written in SQL
// at once, as list-filters.test.ts does) through the Worker with auth on: the index object's own
// rowsRead (as billed) per request stays within its budget however narrow the token, and paging
// (or following the bulk fetch's continuation) still gives exactly what a recount finds.
// The lists of a partial scope (by primary key, or past SCOPED_BUDGET by walking), the bulk fetch
// (its idle budget), the tasks pages, the list across runs (runs asked per page) and the run
// directory's pages.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { decodeMulti } from "@msgpack/msgpack";
import { SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { DIRECTORY_SCAN_BUDGET, type RunRow } from "../../src/objects/registry/directory-store.js";
import { DIRECTORY_MS } from "../../src/objects/registry/episode-index.js";
import { SCAN_BUDGET } from "../../src/objects/registry/episode-pages.js";
import { FINISHED_WALK_BUDGET } from "../../src/objects/registry/finished-pages.js";
import { TASK_ROWS_BUDGET } from "../../src/objects/registry/group-store.js";
import { SCOPED_BUDGET } from "../../src/objects/registry/scoped-rows.js";
import { BULK_IDLE_BUDGET } from "../../src/worker/bulk-finished.js";
import worker from "../../src/worker/index.js";
import { ACROSS_RUNS_BUDGET } from "../../src/worker/run-routes.js";
import { currentRow } from "../support/index-rows.js";
import { freshId } from "./support.js";

const SECRET = "budgets-test-secret-84c1f0a9d2e3b4c5d6e7f8091a2b";
const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
const RUN = "huge";
const N = 100_000;
const TASKS = 5000;
/** Rows e000000..e009999 are live (not in the finished order); the rest finished. */
const LIVE = 10_000;
const index = () => env.EPISODE_INDEX.getByName(`run:${RUN}`);
const id = (i: number) => `${RUN}:e${String(i).padStart(6, "0")}`;
/** Row i's update time: a permutation of the ids, so the list's order is not theirs. */
const updatedOf = (i: number) => 5_000_000 + ((i * 7919) % N);

const sign = (role: string, episodes: string[]) =>
  new SignJWT({ role, episodes })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(SECRET));

/** A run's directory row with one live episode, created and updated at `t`. */
function oneLiveEpisode(run: string, t: number): RunRow {
  return {
    run,
    created: t,
    updated: t,
    episodes: 1,
    live: 1,
    finished: 0,
    failed: 0,
    finish_refused: 0,
    mean_rewards: null,
  };
}

async function get(token: string, path: string, accept = "application/json"): Promise<Response> {
  return worker.fetch(
    new Request(`https://relay.example.com${path}`, { headers: { authorization: `Bearer ${token}`, accept } }),
    AUTH_ENV,
  );
}

/** The index's rows read while `f` runs (its own meter). */
async function rowsRead<T>(f: () => Promise<T>): Promise<{ value: T; read: number }> {
  const before = (await index().usage()).rowsRead;
  const value = await f();
  return { value, read: (await index().usage()).rowsRead - before };
}

type Page = { episodes: Array<{ id: string }>; cursor: string | null; searched: number };

beforeAll(async () => {
  // one real upsert creates the tables; the rest are written in SQL at once: rows below LIVE live, the others finished; task i % TASKS
  await index().upsert(currentRow({ id: `${RUN}:seed`, run: RUN, status: "live", updated: 1 }));
  await runInDurableObject(index(), (_i, state) => {
    const sql = state.storage.sql;
    sql.exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${N - 1})
      INSERT INTO rows (id, run, status, created, updated, ended, seq, traces, nodes, calls, tokens, rewards, reward, error, finished_seq, task, grp, stop, is_timeout, run_name)
      SELECT printf('${RUN}:e%06d', i), '${RUN}', CASE WHEN i < ${LIVE} THEN 'live' ELSE 'finished' END, 1000 + i, 5000000 + (i * 7919) % ${N},
        CASE WHEN i < ${LIVE} THEN NULL ELSE 5000000 + (i * 7919) % ${N} END, i, 1, 2, 3, 10,
        CASE WHEN i < ${LIVE} THEN NULL ELSE json_object('correct', json_object('score', (i % 3) / 2.0, 'weight', 1)) END,
        CASE WHEN i < ${LIVE} THEN NULL ELSE (i % 3) / 2.0 END, NULL, CASE WHEN i < ${LIVE} THEN NULL ELSE ((i * 7919) % ${N}) + 1 END,
        printf('task-%04d', i % ${TASKS}), NULL, 'completed', 0, NULL
      FROM n`);
    sql.exec(
      `INSERT OR REPLACE INTO tasks (task, rollouts, finished, failed, calls, tokens) SELECT task, COUNT(*), SUM(status = 'finished'), SUM(status = 'failed'), SUM(calls), SUM(tokens) FROM rows WHERE task IS NOT NULL GROUP BY task`,
    );
    sql.exec("INSERT OR REPLACE INTO state VALUES ('finished_seq', ?)", String(N + 1));
  });
}, 120_000);

describe(`a partial scope's list on ${N.toLocaleString("en-US")} rows`, () => {
  it("a few exact ids: only their rows are read, searched counts them, one page and no cursor", async () => {
    const mine = [7, 50_007, 99_998].map(id);
    const token = await sign("watcher", mine);
    const { value: page, read } = await rowsRead(
      async () => (await (await get(token, `/v1/runs/${RUN}/episodes?limit=50`)).json()) as Page,
    );
    expect(page.episodes.map((e) => e.id).sort()).toEqual(mine);
    expect(page.searched).toBe(3);
    expect(page.cursor).toBeNull();
    expect(read).toBeLessThanOrEqual(10);
  });

  it(`patterns covering 1,100 rows (past SCOPED_BUDGET): the run's order walked, each page within its budget, every row once`, async () => {
    const patterns = [`${RUN}:e001*`, `${RUN}:e0020*`]; // e001000..e001999 and e002000..e002099
    const token = await sign("watcher", patterns);
    const mine = Array.from({ length: N }, (_, i) => i).filter((i) =>
      patterns.some((p) => id(i).startsWith(p.slice(0, -1))),
    );
    expect(mine.length).toBe(1100);
    expect(mine.length).toBeGreaterThan(SCOPED_BUDGET);
    const expected = [...mine].sort((a, b) => updatedOf(b) - updatedOf(a)).map(id);
    const got: string[] = [];
    let cursor: string | null = null;
    let maxRead = 0;
    let pages = 0;
    do {
      const { value: page, read } = await rowsRead(
        async () =>
          (await (
            await get(
              token,
              `/v1/runs/${RUN}/episodes?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
            )
          ).json()) as Page,
      );
      expect(page.searched).toBeLessThanOrEqual(SCAN_BUDGET);
      maxRead = Math.max(maxRead, read);
      got.push(...page.episodes.map((e) => e.id));
      cursor = page.cursor;
      pages++;
    } while (cursor !== null && pages < 1000);
    expect(got).toEqual(expected);
    // the first page learns the scope is wide (its primary-key read stops past SCOPED_BUDGET); the others walk at once
    expect(maxRead).toBeLessThanOrEqual(SCAN_BUDGET + SCOPED_BUDGET + 50);
    console.log(`a prefix of ${mine.length} rows: ${pages} pages, at most ${maxRead} rows read per page`);
  }, 120_000);

  it(`a prefix covering fewer than ${SCOPED_BUDGET} rows: one request reads them and no other`, async () => {
    const token = await sign("watcher", [`${RUN}:e0999*`]); // e099900..e099999
    const { value: page, read } = await rowsRead(
      async () => (await (await get(token, `/v1/runs/${RUN}/episodes?limit=500&sort=reward`)).json()) as Page,
    );
    expect(page.episodes.length).toBe(100);
    expect(page.searched).toBe(100);
    expect(page.cursor).toBeNull();
    expect(read).toBeLessThanOrEqual(110);
  });
});

describe("the bulk fetch's budget", () => {
  it(`a token covering a tenth of the run, none of it finished: each answer reads at most about ${BULK_IDLE_BUDGET} rows it does not send, then ends with {cursor, more: true}`, async () => {
    const token = await sign("watcher", [`${RUN}:e00*`]); // e000000..e009999: 10,000 live rows (past SCOPED_BUDGET: the finished order is walked)
    let cursor: string | null = null;
    let answers = 0;
    let maxRead = 0;
    for (; answers < 3; answers++) {
      const { value: items, read } = await rowsRead(async () => {
        const res = await get(
          token,
          `/v1/runs/${RUN}/finished${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ""}`,
          "application/msgpack",
        );
        expect(res.status).toBe(200);
        return [...decodeMulti(new Uint8Array(await res.arrayBuffer()))] as Array<{
          id?: string;
          cursor: string;
          more?: boolean;
        }>;
      });
      maxRead = Math.max(maxRead, read);
      // none of the rows walked is this token's: nothing is sent but the continuation
      expect(items.length).toBe(1);
      expect(items[0]).toMatchObject({ more: true });
      expect(items[0]!.cursor).not.toBe(cursor);
      cursor = items[0]!.cursor;
    }
    expect(maxRead).toBeLessThanOrEqual(BULK_IDLE_BUDGET + FINISHED_WALK_BUDGET + 50);
    console.log(`bulk fetch, a tenth of ${N} rows covered: at most ${maxRead} rows read per answer`);
  }, 120_000);

  it("a filter no finished row passes, for a token covering the whole run: each answer reads about its budget, then {cursor, more: true}, and the walk reaches the end", async () => {
    const token = await sign("watcher", [`${RUN}:*`]);
    let cursor: string | null = null;
    let answers = 0;
    let maxRead = 0;
    for (; answers < 40; answers++) {
      const { value: items, read } = await rowsRead(async () => {
        const q = `task=task-none&row=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
        const res = await get(token, `/v1/runs/${RUN}/finished?${q}`, "application/msgpack");
        expect(res.status).toBe(200);
        return [...decodeMulti(new Uint8Array(await res.arrayBuffer()))] as Array<{
          id?: string;
          cursor: string;
          more?: boolean;
        }>;
      });
      maxRead = Math.max(maxRead, read);
      if (items.length === 0) break; // the end of the finished order: no continuation
      expect(items).toEqual([{ cursor: items[0]!.cursor, more: true }]);
      cursor = items[0]!.cursor;
    }
    expect(maxRead).toBeLessThanOrEqual(BULK_IDLE_BUDGET + FINISHED_WALK_BUDGET + 50);
    // 90,000 finished rows walked at about BULK_IDLE_BUDGET per answer
    expect(answers).toBeGreaterThanOrEqual(Math.floor((N - LIVE) / (BULK_IDLE_BUDGET + FINISHED_WALK_BUDGET)));
    expect(answers).toBeLessThan(40);
  }, 120_000);

  it("a token covering three rows reads those three", async () => {
    const token = await sign("watcher", [id(1), id(2), id(3)]);
    const { value: items, read } = await rowsRead(async () => [
      ...decodeMulti(
        new Uint8Array(await (await get(token, `/v1/runs/${RUN}/finished`, "application/msgpack")).arrayBuffer()),
      ),
    ]);
    expect(items).toEqual([]); // no bodies behind them, no continuation: the run's end
    expect(read).toBeLessThanOrEqual(10);
  });
});

describe("the tasks' budget", () => {
  it(`${TASKS} tasks of 20 rows (18 finished): each page reads at most ${TASK_ROWS_BUDGET} of them, and paging gives every task once`, async () => {
    const token = await sign("watcher", [`${RUN}:*`]);
    const seen: string[] = [];
    let cursor: string | null = null;
    let maxRead = 0;
    let pages = 0;
    do {
      const { value: page, read } = await rowsRead(
        async () =>
          (await (
            await get(
              token,
              `/v1/runs/${RUN}/tasks?key=correct&threshold=1&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
            )
          ).json()) as {
            tasks: Array<{ task: string; rollouts: number; finished: number; solve_rate: number }>;
            cursor: string | null;
          },
      );
      maxRead = Math.max(maxRead, read);
      expect(page.tasks.length).toBeLessThan(500); // the budget ends the page first
      for (const t of page.tasks) {
        const rows = Array.from({ length: N / TASKS }, (_, k) => Number(t.task.slice(5)) + k * TASKS);
        const finished = rows.filter((i) => i >= LIVE);
        expect(t).toMatchObject({ rollouts: rows.length, finished: finished.length });
        // a finished row i scores (i % 3) / 2: a solve is a score of 1
        expect(t.solve_rate).toBeCloseTo(finished.filter((i) => i % 3 === 2).length / finished.length, 12);
      }
      seen.push(...page.tasks.map((t) => t.task));
      cursor = page.cursor;
      pages++;
    } while (cursor !== null && pages < 100);
    expect(seen).toEqual(Array.from({ length: TASKS }, (_, i) => `task-${String(i).padStart(4, "0")}`));
    // the rows of the page's tasks, the tasks listed (at most limit + 1) and a seek per task
    expect(maxRead).toBeLessThanOrEqual(TASK_ROWS_BUDGET + 2 * 501);
    console.log(`tasks: ${pages} pages, at most ${maxRead} rows read per page`);
  }, 120_000);
});

describe("the list across runs and the run directory", () => {
  const RUNS = 20;
  // a fresh prefix: the suite's files share one runtime, and index.test names its runs "across-…" too
  const across = freshId("across");
  const runName = (k: number) => `${across}-${String(k).padStart(2, "0")}`;
  beforeAll(async () => {
    for (let k = 0; k < RUNS; k++) {
      const run = runName(k);
      await env.EPISODE_INDEX.getByName(`run:${run}`).upsert(
        currentRow({ id: `${run}:only`, run, status: "live", updated: 10 + k }),
      );
      await env.RUN_DIRECTORY.getByName("runs").upsertRun(oneLiveEpisode(run, 1000 + k));
    }
    // each index's alarm sends its run to the directory within DIRECTORY_MS: let those run before requests are counted
    await new Promise((r) => setTimeout(r, 2 * DIRECTORY_MS));
  });

  it(`GET /v1/episodes asks at most ${ACROSS_RUNS_BUDGET} runs' indexes per page, and pages through all of them`, async () => {
    const token = await sign("watcher", [`${across}-*`]);
    const requests = async () => {
      let n = 0;
      for (let k = 0; k < RUNS; k++) n += (await env.EPISODE_INDEX.getByName(`run:${runName(k)}`).usage()).requests;
      return n;
    };
    const got: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const before = await requests();
      const res = await get(token, `/v1/episodes?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      const page = (await res.json()) as Page;
      expect((await requests()) - before).toBeLessThanOrEqual(ACROSS_RUNS_BUDGET);
      got.push(...page.episodes.map((e) => e.id));
      cursor = page.cursor;
      pages++;
    } while (cursor !== null && pages < 20);
    expect(got.sort()).toEqual(Array.from({ length: RUNS }, (_, k) => `${runName(k)}:only`));
    expect(pages).toBeGreaterThanOrEqual(Math.ceil(RUNS / ACROSS_RUNS_BUDGET));
  });

  it(`GET /v1/runs reads at most about ${DIRECTORY_SCAN_BUDGET} directory rows per page, however few runs the token covers`, async () => {
    const dir = env.RUN_DIRECTORY.getByName("runs");
    // written by the directory's own upsertRun, as a run index's calls would, in one event
    // (2,500 calls one at a time were most of this file's CPU)
    await runInDurableObject(dir, (directory) => {
      for (let k = 0; k < 2500; k++) {
        directory.upsertRun(oneLiveEpisode(`filler-${k}`, 5000 + k));
      }
    });
    const token = await sign("watcher", [`${runName(3)}:*`]);
    const got: string[] = [];
    let cursor: string | null = null;
    let maxRead = 0;
    let pages = 0;
    do {
      const before = (await dir.usage()).rowsRead;
      const page = (await (
        await get(token, `/v1/runs?limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`)
      ).json()) as {
        runs: Array<{ run: string }>;
        cursor: string | null;
      };
      maxRead = Math.max(maxRead, (await dir.usage()).rowsRead - before);
      got.push(...page.runs.map((r) => r.run));
      cursor = page.cursor;
      pages++;
    } while (cursor !== null && pages < 20);
    expect(got).toEqual([runName(3)]);
    expect(pages).toBeGreaterThan(1);
    expect(maxRead).toBeLessThanOrEqual(DIRECTORY_SCAN_BUDGET + 60);
  }, 60_000);
});

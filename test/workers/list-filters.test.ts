// The episode list's filters at 100,000 rows (src/objects/registry/episode-pages.ts, row-filter.ts): every
// filter and every sort (update, reward, step), paged over HTTP through the Worker, give exactly the rows a recount
// finds (all rows read back and matched with `rowMatches`, in the sort's order); no page reads
// more than its walk's budget (the index object's own rowsRead, as billed), and a deep page or a
// rare task reads about a page, not the run.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { SCAN_BUDGET } from "../../src/objects/registry/episode-pages.js";
import type { IndexEntry, IndexRow } from "../../src/protocol/registry/entry.js";
import { cursorKeys, positionText, type RowPosition, sealCursor } from "../../src/protocol/registry/list-cursors.js";
import { parseRowFilter, rowMatches } from "../../src/protocol/registry/row-filter.js";
import { relay } from "./support.js";

const RUN = "big";
const N = 100_000;
const index = () => env.EPISODE_INDEX.getByName(`run:${RUN}`);

type Page = { episodes: IndexEntry[]; cursor: string | null; searched: number };

/** A row as listed: the API's times back in ms, and the reward it sorts by. */
type Row = IndexRow & Pick<IndexEntry, "reward" | "kind" | "step">;

/** Every row, read back through the unfiltered list (the recount's source). */
let all: Row[] = [];

beforeAll(async () => {
  // one real upsert creates the tables at the latest schema; the rest are written in SQL at once
  await index().upsert(seedRow());
  await runInIndex((sql) => {
    sql.exec("DELETE FROM rows");
    sql.exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${N - 1})
      INSERT INTO rows (id, run, status, created, updated, ended, seq, traces, nodes, calls, turns, tokens, rewards, reward, error,
        finished_seq, task, grp, stop, is_timeout, is_truncated, run_name, dispatch, kind, env, step, policy_version)
      SELECT printf('${RUN}:e%06d', i), '${RUN}', st, 1000 + i, 5000000 + (i * 7919) % 50000, NULL, i, 2, 5, i % 30,
        CASE WHEN i % 17 = 0 THEN NULL ELSE (i * 7) % 30 END, (i * 13) % 20000,
        CASE WHEN st = 'live' THEN NULL ELSE json_object('correct', json_object('score', c, 'weight', 1), 'format', json_object('score', f, 'weight', 1)) END,
        CASE WHEN st = 'live' THEN NULL ELSE (c + f) / 2.0 END,
        CASE WHEN st IN ('failed', 'finish_refused') OR i % 1001 = 0 THEN 'boom' ELSE NULL END,
        NULL, CASE WHEN i IN (7, 50007, 99998) THEN 'task-rare' ELSE printf('task-%d', i % 5000) END, NULL,
        CASE WHEN i % 97 = 0 THEN 'max_turns' WHEN st = 'finished' THEN 'completed' ELSE NULL END,
        CASE WHEN i % 53 = 0 THEN 1 ELSE 0 END,
        CASE WHEN i % 97 = 0 OR i % 41 = 0 THEN 1 WHEN i % 89 = 0 THEN NULL ELSE 0 END, NULL,
        CASE WHEN i % 10 = 9 THEN NULL ELSE json_object('kind', kd, 'env', printf('env-%d', i % 4), 'step', i / 250, 'policy_version', i / 250 - i % 3) END,
        CASE WHEN i % 10 = 9 THEN NULL ELSE kd END,
        CASE WHEN i % 10 = 9 THEN NULL ELSE printf('env-%d', i % 4) END,
        CASE WHEN i % 10 = 9 THEN NULL ELSE i / 250 END,
        CASE WHEN i % 10 = 9 THEN NULL ELSE i / 250 - i % 3 END
      FROM (SELECT i, CASE i % 10 WHEN 0 THEN 'failed' WHEN 1 THEN 'live' WHEN 2 THEN 'finish_refused' ELSE 'finished' END AS st,
        ((i * 37) % 11) / 10.0 AS c, (i % 2) * 1.0 AS f, CASE WHEN i % 20 = 3 THEN 'eval' ELSE 'train' END AS kd FROM n)`);
    // the steps table as the index keeps it for those rows (episodes and statuses per step and kind)
    sql.exec("DELETE FROM steps");
    sql.exec(`INSERT INTO steps (step, kind, counters) SELECT step, kind, json_object('episodes', COUNT(*), 'live', SUM(status = 'live'),
        'finished', SUM(status = 'finished'), 'failed', SUM(status = 'failed'), 'finish_refused', SUM(status = 'finish_refused'),
        'calls', SUM(calls), 'turns', SUM(turns), 'turned', COUNT(turns), 'tokens', SUM(tokens), 'rewards', json_object(), 'staleness', json_object(), 'groups_complete', 0, 'groups_zero', 0)
      FROM rows WHERE step IS NOT NULL GROUP BY step, kind`);
    sql.exec("DELETE FROM scores");
    sql.exec(`INSERT INTO scores (id, key, score) SELECT rows.id, j.key, json_extract(j.value, '$.score') FROM rows, json_each(rows.rewards) AS j
      WHERE rows.rewards IS NOT NULL`);
  });
  all = [];
  let cursor: string | null = null;
  do {
    const page: Page = await list(`limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    all.push(...page.episodes.map(rowOfEntry));
    cursor = page.cursor;
  } while (cursor !== null);
}, 120_000);

describe("episode list filters at 100,000 rows", () => {
  it("reads back every row once", () => {
    expect(all.length).toBe(N);
    expect(new Set(all.map((r) => r.id)).size).toBe(N);
  });

  const cases: Array<[string, string]> = [
    ["a rare task", "task=task-rare&limit=2"],
    ["a task with a reward range", "task=task-17&reward=correct:0.3..0.8&limit=3"],
    ["status and tokens above a bound", "status=failed&min_tokens=19000&limit=50"],
    ["a stop condition and turns above a bound", "stop=max_turns&min_turns=25&limit=20"],
    ["timed out without an error (the deprecated alias)", "truncated=1&errored=0&limit=100"],
    ["timed out without an error", "is_timeout=1&errored=0&limit=100"],
    ["truncated (the trainer's) without an error", "is_truncated=1&errored=0&limit=100"],
    ["not truncated (uncounted rows match neither), a kind", "is_truncated=0&kind=eval&limit=100"],
    ["errored among finished (an error reported at finish)", "errored=1&status=finished&limit=30"],
    [
      "not truncated, by reward, two reward ranges",
      "truncated=0&reward=correct:0.9..&reward=format:..0&sort=reward&limit=200",
    ],
    ["by reward, status live (no rewards: the second walk)", "status=live&sort=reward&limit=500&min_turns=21"],
    ["the eval rollouts (the kind index)", "kind=eval&limit=200"],
    ["one training step (its index, by update)", "step=37&limit=50"],
    ["a step range, by step (the walk bounded by the range)", "sort=step&step=100..120&limit=300"],
    ["by step, every row (rows without a step last)", "sort=step&limit=500&min_turns=28"],
    ["a policy version and an env (checked on the walk)", "policy_version=50&env=env-1&limit=50"],
  ];
  for (const [what, query] of cases) {
    it(`${what}: ${query}`, async () => {
      const params = new URLSearchParams(query);
      const filter = parseRowFilter(params);
      const status = params.get("status");
      const sort = params.get("sort");
      const expected = all
        .filter((r) => (status === null || r.status === status) && rowMatches(r, filter))
        .sort(sort === "reward" ? rewardOrder : sort === "step" ? stepOrder : updatedOrder)
        .map((r) => r.id);
      expect(expected.length).toBeGreaterThan(0);
      const got: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      let shortPages = 0;
      let maxRead = 0;
      let ms = 0;
      const limit = Number(params.get("limit"));
      do {
        const before = (await index().usage()).rowsRead;
        const t0 = performance.now();
        const page: Page = await list(`${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
        ms += performance.now() - t0;
        const read = (await index().usage()).rowsRead - before;
        maxRead = Math.max(maxRead, read);
        expect(page.episodes.length).toBeLessThanOrEqual(limit);
        expect(page.searched).toBeLessThanOrEqual(SCAN_BUDGET);
        // a walked row, its reward-range lookups and the index's own pages: well under the run
        expect(read).toBeLessThanOrEqual(SCAN_BUDGET * (1 + filter.rewards.length) + 50);
        if (page.cursor !== null && page.episodes.length < limit) shortPages++;
        got.push(...page.episodes.map((e) => e.id));
        cursor = page.cursor;
        pages++;
      } while (cursor !== null && pages < 500);
      expect(got).toEqual(expected);
      // figures for the record (not asserted: tests assert behaviour, not time)
      console.log(
        `${what}: ${expected.length} matches, ${pages} pages (${shortPages} short on the budget), at most ${maxRead} rows read per page, ${(ms / pages).toFixed(1)} ms per page over HTTP`,
      );
    }, 120_000);
  }

  it("a page deep into the run reads about a page: the walk starts at the cursor", async () => {
    const at = [...all].sort(updatedOrder)[90_000]!;
    // a cursor as the relay seals it (auth is off here: its fixed key); an unsealed position is refused
    const raw = positionText("episodes", { key: at.updated, id: at.id });
    expect((await relay(`../runs/${RUN}/episodes?limit=50&cursor=${encodeURIComponent(raw)}`)).status).toBe(400);
    const cursor = await sealed("updated", { key: at.updated, id: at.id });
    const before = (await index().usage()).rowsRead;
    const page = await list(`limit=50&cursor=${encodeURIComponent(cursor)}`);
    const read = (await index().usage()).rowsRead - before;
    expect(page.episodes.length).toBe(50);
    expect(page.searched).toBe(51);
    expect(read).toBeLessThan(200);
    const rewardAt = [...all].sort(rewardOrder)[60_000]!;
    const before2 = (await index().usage()).rowsRead;
    const page2 = await list(
      `limit=50&sort=reward&cursor=${encodeURIComponent(await sealed("reward", { key: rewardAt.reward, id: rewardAt.id }))}`,
    );
    expect(page2.episodes.length).toBe(50);
    expect((await index().usage()).rowsRead - before2).toBeLessThan(200);
    console.log(`deep pages: ${read} and ${(await index().usage()).rowsRead - before2} rows read for 50 rows`);
  });

  it("a rare task's page reads a few rows, not the run", async () => {
    const before = (await index().usage()).rowsRead;
    const page = await list("task=task-rare&limit=50");
    const read = (await index().usage()).rowsRead - before;
    expect(page.episodes.map((e) => e.id).sort()).toEqual([`${RUN}:e000007`, `${RUN}:e050007`, `${RUN}:e099998`]);
    expect(page.cursor).toBeNull();
    expect(read).toBeLessThan(20);
  });

  it("a filter nothing matches ends after budget-sized walks, each page short with a cursor", async () => {
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Page = await list(
        `min_tokens=19999&min_turns=29&status=live&limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
      );
      expect(page.episodes).toEqual([]);
      expect(page.searched).toBeLessThanOrEqual(SCAN_BUDGET);
      cursor = page.cursor;
      pages++;
    } while (cursor !== null);
    // status=live walks the status index: a tenth of the run, a budget at a time
    expect(pages).toBe(Math.floor(N / 10 / SCAN_BUDGET) + 1);
  });

  it("the steps: every page reads about a page, however large the run; their counts are the rows'", async () => {
    const steps: Array<{ step: number; kind: string | null; episodes: number; finished: number }> = [];
    let cursor: string | null = null;
    let maxRead = 0;
    do {
      const before = (await index().usage()).rowsRead;
      const res = await relay(`../runs/${RUN}/steps?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      const page = (await res.json()) as { steps: typeof steps; cursor: string | null };
      maxRead = Math.max(maxRead, (await index().usage()).rowsRead - before);
      steps.push(...page.steps);
      cursor = page.cursor;
    } while (cursor !== null);
    expect(maxRead).toBeLessThanOrEqual(110);
    const counted = new Map<string, { episodes: number; finished: number }>();
    for (const r of all) {
      if (r.step === null) continue;
      const k = `${r.step}/${r.kind}`;
      const c = counted.get(k) ?? { episodes: 0, finished: 0 };
      c.episodes++;
      if (r.status === "finished") c.finished++;
      counted.set(k, c);
    }
    expect(steps.length).toBe(counted.size);
    for (const s of steps)
      expect({ episodes: s.episodes, finished: s.finished }, `${s.step}/${s.kind}`).toEqual(
        counted.get(`${s.step}/${s.kind}`),
      );
    const eval_ = (await (await relay(`../runs/${RUN}/steps?kind=eval&limit=500`)).json()) as { steps: typeof steps };
    expect(eval_.steps.every((s) => s.kind === "eval")).toBe(true);
    console.log(`steps: ${steps.length} steps and kinds over ${N} rows, at most ${maxRead} rows read per page of 100`);
  });

  it("refuses a bad filter with 400 bad_filter naming the parameter", async () => {
    for (const [query, field] of [
      ["truncated=maybe", "truncated"],
      ["is_truncated=maybe", "is_truncated"],
      ["is_timeout=1&truncated=0", "truncated"],
      ["min_tokens=-1", "min_tokens"],
      ["reward=correct", "reward"],
      ["reward=correct:1..0", "reward"],
      ["reward=correct:x..1", "reward"],
      ["reward=a:..1&reward=b:..1&reward=c:..1&reward=d:..1&reward=e:..1", "reward"],
      ["step=1..x", "step"],
      ["policy_version=-2", "policy_version"],
    ] as const) {
      const res = await relay(`../runs/${RUN}/episodes?${query}`);
      expect(res.status, query).toBe(400);
      expect(await res.json()).toMatchObject({ error: "bad_filter", field });
    }
  });
});

/** A position of this run's list sealed as the relay seals it for a viewer of everything (auth off). */
async function sealed(sort: string, at: RowPosition): Promise<string> {
  return sealCursor(
    await cursorKeys([]),
    { list: "episodes", detail: sort, run: RUN, scope: null },
    positionText("episodes", at),
  );
}

async function list(query: string): Promise<Page> {
  const res = await relay(`../runs/${RUN}/episodes?${query}`);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Page;
}

async function runInIndex(f: (sql: SqlStorage) => void): Promise<void> {
  await runInDurableObject(index(), (_instance, state) => f(state.storage.sql));
}

function seedRow(): IndexRow {
  return {
    id: `${RUN}:seed`,
    run: RUN,
    status: "live",
    created: 1,
    updated: 1,
    ended: null,
    seq: 1,
    traces: 1,
    nodes: 1,
    calls: 0,
    tokens: 0,
    rewards: null,
    error: null,
  };
}

function rowOfEntry(e: IndexEntry): Row {
  return {
    ...e,
    created: Date.parse(e.created),
    updated: Date.parse(e.updated),
    ended: e.ended === null ? null : Date.parse(e.ended),
  };
}

function updatedOrder(a: Row, b: Row): number {
  return b.updated - a.updated || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}

function stepOrder(a: Row, b: Row): number {
  const x = a.step;
  const y = b.step;
  if (x === null || y === null) return x === y ? (a.id < b.id ? 1 : -1) : x === null ? 1 : -1;
  return y - x || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}

function rewardOrder(a: Row, b: Row): number {
  const x = a.reward;
  const y = b.reward;
  if (x === null || y === null) return x === y ? (a.id < b.id ? 1 : -1) : x === null ? 1 : -1;
  return y - x || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}

// Rollout groups in the run index (src/protocol/registry/groups.ts, group-store.ts): each group's numbers,
// the run's zero-variance count and every rollout's advantage equal a recount from the rows after
// any sequence of creates, turns, finishes, failures and deletes, in any order of arrival; the
// HTTP pages; and the group and task an episode's row carries from its reply and first trace.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import { groupSummary } from "../../src/protocol/registry/groups.js";
import { currentRow } from "../support/index-rows.js";
import { golden, post, relay } from "./support.js";

type Page = {
  groups_total: number;
  finished_groups: number;
  zero_variance_groups: number;
  zero_variance_share: number | null;
  groups: Array<Record<string, unknown> & { id: string }>;
  cursor: string | null;
};

function row(
  run: string,
  n: number,
  status: IndexRow["status"],
  group: string,
  score: number | null,
  updated: number,
): IndexRow {
  const rewards =
    score === null ? null : { correct: { score, weight: 1 }, format: { score: score > 0.5 ? 1 : 0, weight: 0.5 } };
  return currentRow({
    id: `${run}:e${n}`,
    run,
    status,
    updated,
    seq: updated,
    nodes: 3,
    calls: 2,
    // turns are not the calls; rollout 3's are not counted (an older row's)
    turns: n === 3 ? null : n + 1,
    tokens: 100,
    rewards,
    task: `task-${group}`,
    group,
  });
}

/** A seeded generator, so a failure can be replayed. */
function rng(seed: number): () => number {
  return () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
}

async function allGroups(run: string): Promise<Page & { all: Page["groups"] }> {
  const all: Page["groups"] = [];
  let cursor: string | null = null;
  let first: Page | null = null;
  do {
    const res = await relay(
      `../runs/${run}/groups?limit=3&sort=size${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
    );
    expect(res.status, await res.clone().text()).toBe(200);
    const page = (await res.json()) as Page;
    first ??= page;
    all.push(...page.groups);
    cursor = page.cursor;
  } while (cursor);
  return { ...first!, all };
}

describe("groups equal a recount after any order of writes", () => {
  it("random creates, updates, finishes, failures and deletes over 6 groups of up to 5", async () => {
    const run = `grp-${Date.now().toString(36)}`;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const rand = rng(42);
    const rows = new Map<number, IndexRow>();
    let clock = 10;
    for (let step = 0; step < 120; step++) {
      const n = Math.floor(rand() * 24);
      const group = `g${n % 6}`;
      const have = rows.get(n);
      const r = rand();
      if (have && r < 0.12) {
        await index.remove(have.id);
        rows.delete(n);
      } else {
        const status: IndexRow["status"] = r < 0.45 ? "live" : r < 0.85 ? "finished" : "failed";
        // zero-variance groups appear: scores are drawn from few values
        const score = status === "finished" ? [0, 1, 1][Math.floor(rand() * 3)]! : null;
        const next = row(run, n, status, group, score, clock++);
        await index.upsert(next);
        rows.set(n, next);
      }
      if (step % 20 !== 19) continue;
      const got = await allGroups(run);
      const byGroup = new Map<string, IndexRow[]>();
      for (const x of rows.values()) byGroup.set(x.group!, [...(byGroup.get(x.group!) ?? []), x]);
      const want = [...byGroup].map(([id, m]) => groupSummary(id, m));
      expect(got.groups_total).toBe(want.length);
      expect(got.finished_groups).toBe(want.filter((g) => g.complete).length);
      expect(got.zero_variance_groups).toBe(want.filter((g) => g.zeroVariance).length);
      const strip = ({ complete: _c, zeroVariance: _z, ...g }: ReturnType<typeof groupSummary>) => g;
      expect(got.all.sort((a, b) => a.id.localeCompare(b.id))).toEqual(
        want.map(strip).sort((a, b) => a.id.localeCompare(b.id)),
      );
    }
  });

  it("a group's page: rollouts best first with advantages (reward − mean, ÷ std); zero variance counted", async () => {
    const run = `grp1-${Date.now().toString(36)}`;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const scores = [1, 0, 1, 0];
    for (const [i, s] of scores.entries()) await index.upsert(row(run, i, "finished", "a", s, 10 + i));
    for (const i of [4, 5]) await index.upsert(row(run, i, "finished", "same", 1, 20 + i));
    const res = await relay(`../runs/${run}/groups/a`);
    expect(res.status).toBe(200);
    const g = (await res.json()) as {
      size: number;
      rewards: Record<string, { mean: number; std: number }>;
      mean_reward: number;
      std_reward: number;
      rollouts: Array<{
        id: string;
        advantage: { raw: number; normalized: number | null };
        key_advantages: Record<string, { raw: number; normalized: number | null }>;
      }>;
    };
    expect(g.size).toBe(4);
    expect(g.rewards.correct).toEqual({ mean: 0.5, std: 0.5, min: 0, max: 1 });
    // the trainer's reward: correct × 1 + format × 0.5, so 1.5 or 0; GRPO's advantage is on it
    expect([g.mean_reward, g.std_reward]).toEqual([0.75, 0.75]);
    expect(g.rollouts.map((r) => r.advantage)).toEqual([
      { raw: 0.75, normalized: 1 },
      { raw: 0.75, normalized: 1 },
      { raw: -0.75, normalized: -1 },
      { raw: -0.75, normalized: -1 },
    ]);
    expect(g.rollouts.map((r) => r.key_advantages.correct)).toEqual([
      { raw: 0.5, normalized: 1 },
      { raw: 0.5, normalized: 1 },
      { raw: -0.5, normalized: -1 },
      { raw: -0.5, normalized: -1 },
    ]);
    const page = (await (await relay(`../runs/${run}/groups`)).json()) as Page;
    expect([page.finished_groups, page.zero_variance_groups, page.zero_variance_share]).toEqual([2, 1, 0.5]);
    expect(
      page.groups.map((x) => x.id),
      "sorted by spread, largest first",
    ).toEqual(["a", "same"]);
    expect((await relay(`../runs/${run}/groups/nope`)).status).toBe(404);
    expect((await relay(`../runs/${run}/groups?sort=nope`)).status).toBe(400);
    const agg = (await (await relay(`../runs/${run}`)).json()) as {
      aggregates: { groups: { trend: { completed: number[] } } };
    };
    expect(agg.aggregates.groups).toMatchObject({ total: 2, finished: 2, zero_variance: 1, zero_variance_share: 0.5 });
    // the trend is kept by the minute a group completed; these rows ended in 1970, before its window (trends.test.ts checks it)
    expect(agg.aggregates.groups.trend.completed.reduce((a, b) => a + b, 0)).toBe(0);
  });
});

describe("a group's order is the pages' tie rule (src/protocol/registry/ranking.ts)", () => {
  it("best first by reward; ties go to fewer tokens, then to the id; unscored last", async () => {
    const run = `grp-tie-${Date.now().toString(36)}`;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    // n, score, tokens: e1 and e3 tie on reward, e3 used fewer tokens (so it goes before e1, whose id is
    // smaller); e2 and e4 tie on both (the id decides)
    const plan: Array<[number, number | null, number]> = [
      [1, 1, 90],
      [2, 0, 80],
      [3, 1, 50],
      [4, 0, 80],
      [5, null, 10],
    ];
    for (const [n, score, tokens] of plan)
      await index.upsert({ ...row(run, n, score === null ? "live" : "finished", "g", score, 10 + n), tokens });
    const g = (await (await relay(`../runs/${run}/groups/g`)).json()) as { rollouts: Array<{ id: string }> };
    expect(g.rollouts.map((r) => r.id.split(":")[1])).toEqual(["e3", "e1", "e2", "e4", "e5"]);
  });
});

describe("per-task results", () => {
  it("rollouts, finished, failed, mean turns and tokens, mean reward and solve rate at a threshold; a delete is taken back", async () => {
    const run = `task-${Date.now().toString(36)}`;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    // task-a: four rollouts (1, 0, 1 finished; one failed); task-b: one live
    for (const [i, s] of [1, 0, 1].entries()) await index.upsert(row(run, i, "finished", "a", s, 10 + i));
    await index.upsert(row(run, 3, "failed", "a", null, 20));
    await index.upsert(row(run, 4, "live", "b", null, 21));
    const get = async (q: string) =>
      (await (await relay(`../runs/${run}/tasks${q}`)).json()) as {
        tasks: Array<Record<string, unknown>>;
        cursor: string | null;
      };
    const page = await get("?key=correct&threshold=0.5");
    expect(page.tasks).toEqual([
      {
        task: "task-a",
        rollouts: 4,
        finished: 3,
        failed: 1,
        // over the counted rollouts: (1 + 2 + 3) / 3
        mean_turns: 2,
        mean_tokens: 100,
        mean_reward: 2 / 3,
        solve_rate: 2 / 3,
      },
      {
        task: "task-b",
        rollouts: 1,
        finished: 0,
        failed: 0,
        mean_turns: 5,
        mean_tokens: 100,
        mean_reward: null,
        solve_rate: null,
      },
    ]);
    // a page of one ends after task-a (its cursor is sealed: only the relay reads it), the next holds task-b
    const one = await get("?key=correct&threshold=1&limit=1");
    expect(one.tasks.map((t) => t.task)).toEqual(["task-a"]);
    expect(one.cursor).not.toContain("task");
    expect(
      (await get(`?key=correct&threshold=1&limit=1&cursor=${encodeURIComponent(one.cursor!)}`)).tasks.map(
        (t) => t.task,
      ),
    ).toEqual(["task-b"]);
    await index.remove(`${run}:e1`);
    expect((await get("?key=correct&threshold=0.5")).tasks[0]).toMatchObject({
      rollouts: 3,
      finished: 2,
      mean_reward: 1,
      solve_rate: 1,
    });
  });
});

describe("an episode's row carries its task and group", () => {
  it("the reply head's group.id once finished; the first trace's task key while live", async () => {
    const run = `grpe-${Date.now().toString(36)}`;
    const c = await golden("multi_trace_links");
    const id = `${run}:x`;
    const producer = new ProducerCursor("p");
    for (const f of c.frames) {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(f)));
      await r.arrayBuffer();
      producer.acknowledge();
    }
    const live = (await (await relay(`../runs/${run}/groups`)).json()) as Page;
    expect(live.groups.map((g) => [g.id, g.task])).toEqual([["f5c5d5d61e062b74", "f5c5d5d61e062b74"]]);
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    const done = (await (await relay(`../runs/${run}/groups`)).json()) as Page;
    expect(done.groups.map((g) => [g.id, g.task, g.finished])).toEqual([
      ["ff2a2a75403787784bd9ede96d0db119", "f5c5d5d61e062b74", 1],
    ]);
    const list = (await (await relay(`../runs/${run}/episodes`)).json()) as {
      episodes: Array<{ group: string; run_name: string }>;
    };
    expect(list.episodes[0]).toMatchObject({
      group: "ff2a2a75403787784bd9ede96d0db119",
      run_name: "multi-agent-env-eval",
    });
  });

  it("a rollout whose reply was refused stays in its reply's group (no group of one): finish_refused counts as live there", async () => {
    const run = `grpr-${Date.now().toString(36)}`;
    const c = await golden("gap_detected");
    const id = `${run}:refused`;
    const producer = new ProducerCursor("p");
    for (const f of c.frames) {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(f)));
      await r.arrayBuffer();
      producer.acknowledge();
    }
    // a sibling of the same group that finished
    const group = "809e5310700c629b8d2d208533bbb9ba";
    await env.EPISODE_INDEX.getByName(`run:${run}`).upsert(row(run, 1, "finished", group, 1, 10));
    const res = await post(`${id}/reply`, c.reply);
    expect(res.status).toBe(409);
    await res.arrayBuffer();
    const page = (await (await relay(`../runs/${run}/groups`)).json()) as Page;
    expect(page.groups.map((g) => [g.id, g.size, g.finished, g.live])).toEqual([[group, 2, 1, 1]]);
    const list = (await (await relay(`../runs/${run}/episodes?status=finish_refused`)).json()) as {
      episodes: Array<{ id: string; group: string }>;
    };
    expect(list.episodes.map((e) => [e.id, e.group])).toEqual([[id, group]]);
  });
});

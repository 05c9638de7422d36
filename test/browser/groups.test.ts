// Rollout groups in the dashboard, in Debian's headless Chromium (playwright-core) against the
// real relay bundle (Miniflare with the dashboard's assets). A run of 16 groups of 4 rollouts over
// 4 tasks, pushed as the clients' tests do (test/node/groups-client.test.ts): the golden case
// chat_basic per rollout (its task key set per task), one more delta setting its rewards
// (`correct`, weight 1, and `format`, weight 0.25), then a reply whose head's `group.id` the test
// sets; 4 groups whose rewards are all equal (zero variance), 2 with a failed rollout (a reply
// `{success: false, error}` with the group in its head), and a group still live. Checked: the
// zero-variance share (equal to the API's, live) and its trend over the last hour, the reward
// histograms over the finished rollouts or (toggled) every one, the reward trend, the groups
// table and its orders, the per-task solve rate at a key and threshold, the runs list's mean
// reward, and the group page's rollouts, order and advantages. Screenshots at 1280×800 and
// 390×844 go to test-results/screenshots/ (`run-groups-*.png`, `runs-mean-reward-*.png`,
// `group-*.png`).
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import type { RunAggregates } from "../../src/protocol/registry/aggregates.js";
import { rewardOf } from "../../src/protocol/registry/rewards.js";
import type { ZeroVarianceTrend } from "../../src/protocol/registry/zero-variance-trend.js";
import { f, m } from "../support/deltas.js";
import { chromiumForFile } from "./chromium.js";
import { SHOTS, sharedPage, shoot } from "./pages.js";
import { relayCalls } from "./rollouts.js";

let browser: Browser;
let relay: LocalRelay;
const { api, indexed: indexedIn, pushChat, replyChat } = relayCalls(() => relay.url);

// ---- the run: 16 groups × 4 rollouts over 4 tasks, plus a live group ----

/** The reply head's run.name in chat_basic: the run's display name. */
const RUN_NAME = "chat-env-eval";
const RUN = `grp-ui-${Date.now().toString(36)}`;
const TASKS = ["task-a", "task-b", "task-c", "task-d"];
const GROUPS = 16;
const SIZE = 4;
const ZERO = new Set([0, 4, 8, 13]);
/** Groups whose last rollout fails. */
const FAILING = new Set([3, 7]);
const LIVE_GROUP = "task-live";
const WEIGHTS = { correct: 1, format: 0.25 };

type Scores = { correct: number; format: number };
interface Rollout {
  id: string;
  group: string;
  task: string;
  scores: Scores;
  outcome: "finished" | "failed" | "live";
}

const groupId = (i: number) => `g${String(i).padStart(2, "0")}`;

function plan(): Rollout[] {
  const out: Rollout[] = [];
  for (let i = 0; i < GROUPS; i++) {
    for (let j = 0; j < SIZE; j++) {
      const scores: Scores = ZERO.has(i)
        ? { correct: i % 8 === 0 ? 1 : 0, format: 0.5 }
        : { correct: [1, 0, 0, 1][(i + j) % 4]!, format: ((i * 3 + j) % 5) / 4 };
      out.push({
        id: `${RUN}:${groupId(i)}-${j}`,
        group: groupId(i),
        task: TASKS[i % TASKS.length]!,
        scores,
        outcome: FAILING.has(i) && j === SIZE - 1 ? "failed" : "finished",
      });
    }
  }
  out.push({
    id: `${RUN}:live-0`,
    group: LIVE_GROUP,
    task: LIVE_GROUP,
    scores: { correct: 1, format: 1 },
    outcome: "finished",
  });
  out.push({
    id: `${RUN}:live-1`,
    group: LIVE_GROUP,
    task: LIVE_GROUP,
    scores: { correct: 0, format: 0 },
    outcome: "live",
  });
  return out;
}
const rollouts = plan();

const rewardsOf = (s: Scores) =>
  m({
    correct: m({ score: f(s.correct), weight: f(WEIGHTS.correct) }),
    format: m({ score: f(s.format), weight: f(WEIGHTS.format) }),
  });
const rewardJson = (s: Scores) => ({
  correct: { score: s.correct, weight: WEIGHTS.correct },
  format: { score: s.format, weight: WEIGHTS.format },
});

/** chat_basic into the rollout (its task key set), one more delta with its rewards, then its reply (unless live). */
async function push(r: Rollout): Promise<void> {
  await pushChat(r.id, r.task, m({ rewards: rewardsOf(r.scores) }));
  if (r.outcome !== "live") await reply(r);
}

/** Its reply: the group and task in the head, or a failed one. */
const reply = (r: Rollout) => replyChat(r.id, r.group, r.task, r.outcome === "failed");

/** Wait until the run's index shows these counts. */
const indexed = (counts: Record<string, number>) => indexedIn(RUN, counts, 30_000);

const count = (o: Rollout["outcome"]) => rollouts.filter((r) => r.outcome === o).length;

interface GroupsPage {
  groups_total: number;
  finished_groups: number;
  zero_variance_groups: number;
  zero_variance_share: number | null;
  zero_variance_trend: ZeroVarianceTrend;
  groups: Array<{
    id: string;
    task: string | null;
    size: number;
    finished: number;
    spread: number | null;
    mean_reward: number | null;
    std_reward: number | null;
    rewards: Record<string, { mean: number; std: number }>;
  }>;
  cursor: string | null;
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  // the dashboard follows live rows here: their flush at 2 s, not the default 30 s (INDEX_FLUSH_MS), the run
  // attended or not (INDEX_IDLE_FLUSH_MS: rows written before a page opens are not held 2 minutes)
  relay = await startRelay({ vars: { INDEX_FLUSH_MS: "2000", INDEX_IDLE_FLUSH_MS: "2000" } });
  // 16 producers at a time
  for (let i = 0; i < rollouts.length; i += 16) await Promise.all(rollouts.slice(i, i + 16).map(push));
  await indexed({ finished: count("finished"), failed: count("failed"), live: count("live") });
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

// ---- page helpers ----

/** One page for the file's tests, each on its path by a route change (pages.ts sharedPage). */
const shared = sharedPage(
  () => browser,
  () => relay.url,
);
afterAll(() => shared.close());

async function waitConnection(page: Page, state: string): Promise<void> {
  await page.waitForFunction(
    (s) => (globalThis as any).document.querySelector("#connection")?.dataset.state === s,
    state,
    { timeout: 15_000 },
  );
}

async function waitGroupIds(page: Page, ids: string[]): Promise<void> {
  await page.waitForFunction(
    (want) =>
      JSON.stringify(
        [...(globalThis as any).document.querySelectorAll("#groups .g-row[data-group]")].map(
          (r: any) => r.dataset.group,
        ),
      ) === JSON.stringify(want),
    ids,
    { timeout: 15_000 },
  );
}

async function waitZeroShare(page: Page, share: number | null): Promise<void> {
  await page.waitForFunction(
    (want) => (globalThis as any).document.querySelector('.stat[data-stat="zero_variance"]')?.dataset.value === want,
    share === null ? "" : String(share),
    { timeout: 15_000 },
  );
}

/** The solve rate of a task at (key, threshold), over its finished rollouts, as the relay defines it. */
/** A key's score; `reward`: the trainer's, Σ score × weight (one trace). */
const scoreOf = (s: Scores, key: keyof Scores | "reward") =>
  key === "reward" ? s.correct * WEIGHTS.correct + s.format * WEIGHTS.format : s[key];

function solveRate(task: string, key: keyof Scores | "reward", threshold: number): number | null {
  const scores = rollouts.filter((r) => r.task === task && r.outcome === "finished").map((r) => scoreOf(r.scores, key));
  return scores.length ? scores.filter((s) => s >= threshold).length / scores.length : null;
}

async function waitSolveRates(page: Page, key: keyof Scores | "reward", threshold: number): Promise<void> {
  const want = Object.fromEntries([...TASKS, LIVE_GROUP].map((t) => [t, String(solveRate(t, key, threshold))]));
  await page.waitForFunction(
    (w) =>
      Object.entries(w).every(
        ([t, v]) =>
          (globalThis as any).document.querySelector(`#tasks .t-row[data-task="${t}"]`)?.dataset.solveRate === v,
      ),
    want,
    { timeout: 15_000 },
  );
}

/** The run's aggregates once every rollout's rewards reached the index (a live one's turn waits for its flush). */
async function scoredAll(): Promise<RunAggregates> {
  const end = Date.now() + 15_000;
  for (;;) {
    const a = (await api<{ aggregates: RunAggregates }>(`/v1/runs/${RUN}`)).aggregates;
    if (a.rewards.correct?.count === rollouts.length || Date.now() > end) return a;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The dashboard's number format (dom.ts fmtNumber): integers as they are, else 3 decimals. */
const fmt = (v: number) => (Number.isInteger(v) ? String(v) : String(Math.round(v * 1000) / 1000));

async function waitAttr(page: Page, selector: string, attr: string, value: string): Promise<void> {
  await page.waitForFunction(
    ([sel, a, v]) => (globalThis as any).document.querySelector(sel)?.getAttribute(a) === v,
    [selector, attr, value] as const,
    {
      timeout: 15_000,
    },
  );
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const pstd = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));

// ---- the tests ----

describe("rollout groups on the run page (/runs/{run})", () => {
  it("shows the zero-variance share (the API's, live), the groups table in each order, and the per-task solve rate", async () => {
    const first = await api<GroupsPage>(`/v1/runs/${RUN}/groups?limit=500`);
    expect(first.groups_total).toBe(GROUPS + 1);
    expect(first.finished_groups).toBe(GROUPS);
    expect(first.zero_variance_groups).toBe(ZERO.size);
    expect(first.zero_variance_share).toBe(ZERO.size / GROUPS);

    const { page, errors } = await shared.visit(`/runs/${RUN}`);
    await waitConnection(page, "live");
    // the run's display name (reply heads' run.name), its id under it
    await page.waitForFunction(
      (n) => (globalThis as any).document.querySelector("#run-title")?.textContent === n,
      RUN_NAME,
    );
    expect(await page.locator("#run-id").innerText()).toBe(RUN);
    // the zero-variance share beside the counters: the API's
    await waitZeroShare(page, first.zero_variance_share);
    // no rollout here carries a trainer identity: no step or kind columns, in the groups table or the list
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector(".run-page")?.dataset.identity === "none",
    );
    expect(await page.locator("#groups .g-row[data-group] .cell-gstep").first().isVisible()).toBe(false);
    expect(await page.locator("#episodes .ep-row[data-id] .cell-kind").first().isVisible()).toBe(false);
    // the list's heads each fit their column (trial 9: "TRUNCATEDUPDATED" without the identity columns)
    const spill = await page.$$eval("#episodes .ep-head [role=columnheader]", (heads) =>
      heads.filter((e: any) => e.offsetWidth > 0 && e.scrollWidth > e.clientWidth).map((e: any) => e.textContent),
    );
    expect(spill).toEqual([]);
    const tile = page.locator('.stat[data-stat="zero_variance"]');
    expect(await tile.locator(".stat-value").innerText()).toBe("25%");
    expect(await tile.locator(".stat-sub").innerText()).toBe(`${ZERO.size} of ${GROUPS} finished groups`);

    // its trend in the tile: every group completed within the last hour, the share now the tile's
    const agg = await scoredAll();
    expect(agg.groups!.trend!.completed.reduce((a, b) => a + b, 0)).toBe(GROUPS);
    expect(agg.groups!.trend!.cumulative_share.at(-1)).toBe(ZERO.size / GROUPS);
    const zv = "#zero-variance-trend svg.zv-spark";
    await waitAttr(page, zv, "data-completed", String(GROUPS));
    expect(await page.locator(zv).getAttribute("data-zero")).toBe(String(ZERO.size));
    expect(await page.locator(zv).getAttribute("data-last")).toBe(String(ZERO.size / GROUPS));
    expect(await page.locator(`${zv} rect.zv-bar`).count()).toBeGreaterThan(0);

    // at 1280 px every counter's label shows whole (trial 9: "FINISH REFU…", "EPISODES / …"), and each tile is as
    // tall as what it holds (they were all stretched to the zero-variance tile's ~160 px)
    expect(page.viewportSize()!.width).toBe(1280);
    const fit = await page.$$eval("#run-stats .stat", (tiles) =>
      tiles.map((t: any) => {
        const { getComputedStyle } = globalThis as any;
        const label = t.querySelector(".stat-label");
        const last = [...t.children].filter((c: any) => c.offsetHeight > 0).at(-1);
        const pad =
          Number.parseFloat(getComputedStyle(t).paddingBottom) +
          Number.parseFloat(getComputedStyle(t).borderBottomWidth);
        const ls = getComputedStyle(label);
        const lineHeight = Number.parseFloat(ls.lineHeight) || Number.parseFloat(ls.fontSize) * 1.2;
        return {
          key: t.dataset.stat as string,
          cut: label.scrollWidth > label.clientWidth || label.scrollHeight > label.clientHeight,
          lines: Math.round(label.getBoundingClientRect().height / lineHeight),
          slack: t.getBoundingClientRect().bottom - last.getBoundingClientRect().bottom - pad,
        };
      }),
    );
    for (const f of fit) {
      expect(f.cut, f.key).toBe(false);
      expect(f.lines, f.key).toBe(1);
      expect(f.slack, f.key).toBeLessThan(2);
    }

    // the reward over run time beside the throughput: `correct` per point over the finished rollouts (the
    // aggregates' timeline, from the run's first rollout; issue 40: it was the last hour's reward trend)
    const finishedCorrect = rollouts.filter((r) => r.outcome === "finished").map((r) => r.scores.correct);
    const trend = agg.reward_trend!.keys.correct!;
    expect(trend.count.reduce((a, b) => a + b, 0)).toBe(finishedCorrect.length);
    const line = agg.timeline!.rewards.correct!;
    expect(line.count.reduce((a, b) => a + b, 0)).toBe(finishedCorrect.length);
    await page.waitForFunction(
      () => Number((globalThis as any).document.querySelector("#reward-trend .plot")?.dataset.drawn) > 0,
    );
    const plotted = JSON.parse((await page.locator("#reward-trend .plot").getAttribute("data-series"))!) as Array<{
      key: string;
      points: Array<[number, number]>;
    }>;
    const minutes = agg.timeline!.minutes;
    expect(plotted.find((p) => p.key === "correct")!.points).toEqual(
      line.count.flatMap((c, i) => (c > 0 ? [[i * minutes, line.mean[i]]] : [])),
    );
    expect(Number(await page.locator('#reward-trend [data-stat="correct"]').getAttribute("data-mean"))).toBeCloseTo(
      mean(finishedCorrect),
      9,
    );
    expect(plotted.filter((p) => p.key === "format")).toHaveLength(1);

    // the histograms: finished rollouts only by default; "include failed / refused" counts every one
    const fin = agg.finished_rewards.correct!;
    const all = agg.rewards.correct!;
    expect([fin.count, all.count]).toEqual([finishedCorrect.length, rollouts.length]);
    expect(fin.mean).toBeCloseTo(mean(finishedCorrect), 9);
    expect(fmt(fin.mean)).not.toBe(fmt(all.mean));
    const hist = page.locator('.hist[data-key="correct"]');
    const histMean = () => hist.locator('[data-stat="mean"] dd').innerText();
    expect(await page.locator("#rewards-include-all").isChecked()).toBe(false);
    expect(await hist.getAttribute("data-count")).toBe(String(fin.count));
    expect(await histMean()).toBe(fmt(fin.mean));
    await page.check("#rewards-include-all");
    await waitAttr(page, '.hist[data-key="correct"]', "data-count", String(all.count));
    expect(await histMean()).toBe(fmt(all.mean));
    expect(await page.locator("#run-charts").getAttribute("data-rewards")).toBe("all");
    await page.uncheck("#rewards-include-all");
    await waitAttr(page, '.hist[data-key="correct"]', "data-count", String(fin.count));
    expect(await histMean()).toBe(fmt(fin.mean));

    // groups: by spread (the default), 10 rows, then the rest with "show more", in the relay's order
    const bySpread = first.groups.map((g) => g.id);
    await waitGroupIds(page, bySpread.slice(0, 10));
    expect(await page.locator("#groups-shown").innerText()).toBe(`10 of ${GROUPS + 1} groups`);
    await page.click("#groups-more");
    await waitGroupIds(page, bySpread);
    expect(await page.locator("#groups-more").isHidden()).toBe(true);
    const spreads = await page.$$eval("#groups .g-row[data-group]", (rows) =>
      rows.map((r) => (r as any).dataset.spread as string),
    );
    const numeric = spreads.filter((s) => s !== "").map(Number);
    expect(numeric).toEqual([...numeric].sort((a, b) => b - a));
    // each row: task, size, finished, per key mean ± std, spread; zero-variance groups marked
    for (const g of first.groups) {
      const row = page.locator(`#groups .g-row[data-group="${g.id}"]`);
      expect(await row.getAttribute("data-task")).toBe(g.task);
      expect(await row.getAttribute("data-size")).toBe(String(g.size));
      expect(await row.getAttribute("data-finished")).toBe(String(g.finished));
      for (const [k, s] of Object.entries(g.rewards)) {
        expect(
          Number(await row.locator(`.reward[data-key="${k}"]`).getAttribute("data-mean")),
          `${g.id} ${k}`,
        ).toBeCloseTo(s.mean, 9);
        expect(
          Number(await row.locator(`.reward[data-key="${k}"]`).getAttribute("data-std")),
          `${g.id} ${k}`,
        ).toBeCloseTo(s.std, 9);
      }
      // the trainer's reward first, mean ± std (what GRPO normalises on; trial 9 wished it shown)
      if (g.mean_reward !== null) {
        const total = row.locator(".cell-stats .reward").first();
        expect(await total.getAttribute("data-key"), g.id).toBe("reward");
        expect(Number(await total.getAttribute("data-mean")), g.id).toBeCloseTo(g.mean_reward, 9);
        expect(Number(await total.getAttribute("data-std")), g.id).toBeCloseTo(g.std_reward!, 9);
      }
      const i = Number(g.id.slice(1));
      expect(await row.getAttribute("data-zero"), g.id).toBe(String(g.id !== LIVE_GROUP && ZERO.has(i)));
    }
    // the spread says what it measures: the trainer's reward, max − min
    const spreadHead = page.locator("#groups .g-head [role=columnheader]").last();
    expect(await spreadHead.innerText()).toMatch(/^reward spread$/i);
    expect(await spreadHead.getAttribute("title")).toMatch(/max − min of the trainer's reward/);
    const g01 = first.groups.find((g) => g.id === "g01")!;
    const xs = rollouts.filter((r) => r.group === "g01").map((r) => r.scores.correct);
    expect(g01.rewards.correct!.std).toBeCloseTo(pstd(xs), 9);
    expect(
      await page.locator('#groups .g-row[data-group="g01"] .reward[data-key="correct"] .reward-v').innerText(),
    ).toBe(`${Math.round(mean(xs) * 1000) / 1000} ± ${Math.round(pstd(xs) * 1000) / 1000}`);

    // by size, by task: the API's order (first page)
    for (const sort of ["size", "task"] as const) {
      const want = (await api<GroupsPage>(`/v1/runs/${RUN}/groups?sort=${sort}&limit=10`)).groups.map((g) => g.id);
      await page.click(`.segmented button[data-gsort="${sort}"]`);
      await waitGroupIds(page, want);
    }
    const tasks = await page.$$eval("#groups .g-row[data-group]", (rows) =>
      rows.map((r) => (r as any).dataset.task as string),
    );
    expect(tasks).toEqual([...tasks].sort());

    // tasks: key `reward` (the trainer's, as the API's default), listed first, then the keys by name; threshold 1;
    // the mean column named after the key it shows (trial 9: "Mean reward" over `correct`)
    expect(await page.locator("#task-key").inputValue()).toBe("reward");
    expect(await page.locator("#task-key option").allInnerTexts()).toEqual(["reward", "correct", "format"]);
    expect(await page.locator("#task-threshold").inputValue()).toBe("1");
    await waitSolveRates(page, "reward", 1);
    expect(await page.locator("#tasks-mean-head").innerText()).toMatch(/^mean reward$/i);
    // the reward range under Filters: the same order and default
    expect(await page.locator("#filter-reward-key option").allTextContents()).toEqual(["reward", "correct", "format"]);
    expect(await page.locator("#filter-reward-key").inputValue()).toBe("reward");
    await page.selectOption("#task-key", "correct");
    await waitSolveRates(page, "correct", 1);
    expect(await page.locator("#tasks-mean-head").innerText()).toMatch(/^mean correct$/i);
    const a = page.locator('#tasks .t-row[data-task="task-a"]');
    expect(await a.locator('[data-k="rollouts"]').innerText()).toBe(
      String(rollouts.filter((r) => r.task === "task-a").length),
    );
    expect(await a.locator('[data-k="solve_rate"]').innerText()).toBe(
      `${Math.round(solveRate("task-a", "correct", 1)! * 1000) / 10}%`,
    );
    expect(await a.locator('[data-k="mean_turns"]').innerText()).toBe("3");
    // another key and threshold re-ask the relay
    await page.selectOption("#task-key", "format");
    await page.fill("#task-threshold", "0.5");
    await waitSolveRates(page, "format", 0.5);
    expect(solveRate("task-b", "format", 0.5)).not.toBe(solveRate("task-b", "correct", 1));
    await page.fill("#task-threshold", "0.75");
    await waitSolveRates(page, "format", 0.75);

    const shots = await shoot(page, "run-groups");

    // live: the last rollout finishes; its group is complete (and varied), the share drops without a reload
    await page.evaluate(() => {
      (globalThis as any).notReloaded = true;
    });
    const last = rollouts.find((r) => r.outcome === "live")!;
    last.outcome = "finished";
    await reply(last);
    await indexed({ finished: count("finished"), live: 0 });
    const after = await api<GroupsPage>(`/v1/runs/${RUN}/groups`);
    expect(after.zero_variance_share).toBe(ZERO.size / (GROUPS + 1));
    await waitZeroShare(page, after.zero_variance_share);
    expect(await tile.locator(".stat-value").innerText()).toBe(
      `${Math.round((ZERO.size / (GROUPS + 1)) * 1000) / 10}%`,
    );
    // the trend follows: one more group completed this hour, and the same in the groups page's trend
    await waitAttr(page, zv, "data-completed", String(GROUPS + 1));
    expect(await page.locator(zv).getAttribute("data-last")).toBe(String(ZERO.size / (GROUPS + 1)));
    expect(after.zero_variance_trend.cumulative_share.at(-1)).toBe(ZERO.size / (GROUPS + 1));
    expect(await page.evaluate(() => (globalThis as any).notReloaded)).toBe(true);
    expect(errors).toEqual([]);
    console.error(`[groups] screenshots: ${shots.join(", ")}`);
  });

  it("the runs list shows the run's mean reward over its finished rollouts", async () => {
    const finished = rollouts.filter((r) => r.outcome === "finished").map((r) => r.scores.correct);
    // the run's index writes its directory row within a second of a change
    let listed: { mean_rewards?: Record<string, number> } | undefined;
    const end = Date.now() + 15_000;
    for (;;) {
      const dir = await api<{ runs: Array<{ run: string; finished: number; mean_rewards?: Record<string, number> }> }>(
        `/v1/runs?prefix=${RUN}`,
      );
      listed = dir.runs.find((r) => r.run === RUN && r.finished === finished.length);
      if (listed || Date.now() > end) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(listed?.mean_rewards?.correct).toBeCloseTo(mean(finished), 9);
    // "reward": the trainer's reward (per rollout correct × its weight + format × its weight), since issue 40
    expect(Object.keys(listed!.mean_rewards!)).toEqual(["correct", "format", "reward"]);
    const totals = rollouts.filter((r) => r.outcome === "finished").map((r) => rewardOf(rewardJson(r.scores))!);
    expect(listed?.mean_rewards?.reward).toBeCloseTo(mean(totals), 9);
    const { page, errors } = await shared.visit("/");
    await waitConnection(page, "live");
    // the key `reward` is the one shown
    const cell = `.run-row[data-run="${RUN}"] .cell-mean`;
    await waitAttr(page, cell, "data-value", String(listed!.mean_rewards!.reward));
    expect(await page.locator(cell).getAttribute("data-key")).toBe("reward");
    expect(await page.locator(`${cell} .count-v`).innerText()).toBe(fmt(listed!.mean_rewards!.reward!));
    expect(await page.locator(".run-head").innerText()).toMatch(/mean reward/i);
    const shots = await shoot(page, "runs-mean-reward");
    expect(errors).toEqual([]);
    console.error(`[groups] screenshots: ${shots.join(", ")}`);
  });

  it("a group's id opens the group page", async () => {
    const { page, errors } = await shared.visit(`/runs/${RUN}`);
    await waitConnection(page, "live");
    await page.locator('#groups .g-row[data-group="g02"] a.g-id').click();
    await page.waitForURL(`**/runs/${RUN}/groups/g02`);
    await page.locator("#rollouts .r-row[data-id]").first().waitFor();
    expect(await page.locator(".group-title").innerText()).toBe("g02");
    await page.click("#crumb-run");
    await page.waitForURL(`**/runs/${RUN}`);
    expect(errors).toEqual([]);
  });
});

describe("the group page (/runs/{run}/groups/{group})", () => {
  /** The relay's order: reward descending (unscored last), then id. */
  function bestFirst(group: string): Rollout[] {
    return rollouts
      .filter((r) => r.group === group)
      .sort((x, y) => {
        const [a, b] = [rewardOf(rewardJson(x.scores)), rewardOf(rewardJson(y.scores))];
        if (a !== b) return b! - a!;
        return x.id < y.id ? -1 : x.id > y.id ? 1 : 0;
      });
  }

  it("shows the group's numbers beside its rollouts, best and worst first, with their advantages per key", async () => {
    const group = "g03"; // 3 finished (varied) and 1 failed
    const { page, errors } = await shared.visit(`/runs/${RUN}/groups/${group}`);
    await page.locator("#rollouts .r-row[data-id]").first().waitFor();
    const detail = await api<{ rollouts: Array<{ id: string }> }>(`/v1/runs/${RUN}/groups/${group}`);
    const want = bestFirst(group).map((r) => r.id);
    expect(detail.rollouts.map((r) => r.id)).toEqual(want);
    const ids = () =>
      page.$$eval("#rollouts .r-row[data-id]", (rows) => rows.map((r) => (r as any).dataset.id as string));
    expect(await ids()).toEqual(want);
    // the numbers
    const stat = (k: string) => page.locator(`#group-numbers dd[data-stat="${k}"]`).innerText();
    expect(await stat("task")).toBe("task-d");
    expect([await stat("size"), await stat("finished"), await stat("failed"), await stat("live")]).toEqual([
      "4",
      "3",
      "1",
      "0",
    ]);
    const members = rollouts.filter((r) => r.group === group);
    const done = members.filter((r) => r.outcome === "finished");
    for (const key of ["correct", "format"] as const) {
      const xs = done.map((r) => r.scores[key]);
      const s = page.locator(`#group-numbers tr[data-key="${key}"]`);
      expect(Number(await s.getAttribute("data-mean"))).toBeCloseTo(mean(xs), 9);
      expect(Number(await s.getAttribute("data-std"))).toBeCloseTo(pstd(xs), 9);
      // each rollout's advantage: raw = score − mean, normalized = raw / std
      for (const r of members) {
        const cell = page.locator(`#rollouts .r-row[data-id="${r.id}"] .cell-adv[data-key="${key}"]`);
        const raw = r.scores[key] - mean(xs);
        expect(Number(await cell.getAttribute("data-raw")), `${r.id} ${key}`).toBeCloseTo(raw, 9);
        expect(Number(await cell.getAttribute("data-normalized")), `${r.id} ${key}`).toBeCloseTo(raw / pstd(xs), 9);
      }
    }
    // side by side on a desktop
    const [nb, rb] = await Promise.all([
      page.locator("#group-numbers").boundingBox(),
      page.locator(".group-rollouts").boundingBox(),
    ]);
    expect(rb!.x).toBeGreaterThan(nb!.x + nb!.width - 1);
    expect(Math.abs(rb!.y - nb!.y)).toBeLessThan(60);
    // the failed one says why; turns, tokens, stop condition of a finished one
    const failed = members.find((r) => r.outcome === "failed")!;
    expect(await page.locator(`#rollouts .r-row[data-id="${failed.id}"]`).getAttribute("data-status")).toBe("failed");
    expect(await page.locator(`#rollouts .r-row[data-id="${failed.id}"] .ep-error`).innerText()).toContain(
      "sandbox crashed",
    );
    const top = page.locator(`#rollouts .r-row[data-id="${want[0]}"]`);
    // turns: chat_basic's three assistant nodes
    expect(await top.locator('[data-k="turns"]').innerText()).toBe("3");
    expect(await top.locator(".cell-stop").innerText()).toBe("agent_completed");
    expect(await top.locator(".cell-trunc").getAttribute("data-truncated")).toBe("false");
    expect(await top.locator(".rank").innerText()).toMatch(/best/i);
    // worst first
    await page.click('.segmented button[data-order="worst"]');
    await page.waitForFunction(
      (id) => (globalThis as any).document.querySelector("#rollouts .r-row[data-id]")?.dataset.id === id,
      want.at(-1),
    );
    expect(await ids()).toEqual([...want].reverse());
    await page.click('.segmented button[data-order="best"]');
    const shots = await shoot(page, "group");
    console.error(`[groups] screenshots: ${shots.join(", ")}`);
    // a rollout's id opens its episode
    await page.locator(`#rollouts .r-row[data-id="${want[0]}"] a.ep-id`).click();
    await page.waitForURL(`**/episodes/${encodeURIComponent(want[0]!)}`);
    expect(errors).toEqual([]);
  });

  it("fits 1400 px: no sideways scroll, every column in view, the final answer shown on its own line", async () => {
    const group = "g03";
    const { page, errors } = await shared.visit(`/runs/${RUN}/groups/${group}`);
    await page.setViewportSize({ width: 1400, height: 900 });
    await page.locator("#rollouts .r-row[data-id]").first().waitFor();
    const list = page.locator(".group-rollouts .r-list");
    const [scroll, client] = await list.evaluate((el) => [el.scrollWidth, el.clientWidth]);
    expect(scroll, "the rollout table scrolls sideways").toBeLessThanOrEqual(client);
    const box = (await list.boundingBox())!;
    const heads = page.locator(".group-rollouts .r-head [role=columnheader]");
    const names = (await heads.allTextContents()).map((t) => t.trim());
    // the truncation column (the trainer's truncation and the timeout, one column; "Timed out" before is_truncated)
    for (const name of ["Rollout", "Status", "Kind", "Turns", "Tokens", "Stop", "Trunc."])
      expect(names).toContain(name);
    for (let i = 0; i < (await heads.count()); i++) {
      const b = (await heads.nth(i).boundingBox())!;
      expect(b.x + b.width, `${names[i]} in view`).toBeLessThanOrEqual(box.x + box.width + 0.5);
    }
    // the final answer: each row's words, across the row under its numbers, not a column left mostly empty
    const top = page.locator("#rollouts .r-row[data-id]").first();
    const answer = top.locator(".cell-answer");
    expect((await answer.innerText()).trim()).toBe("391");
    const [a, row] = [(await answer.boundingBox())!, (await top.boundingBox())!];
    expect(a.width, "the answer spans the row").toBeGreaterThan(row.width / 2);
    expect(a.x + a.width).toBeLessThanOrEqual(box.x + box.width + 0.5);
    // every rollout ended: the header says the page is complete, not a grey "stream ended"
    expect(await page.locator("#connection .conn-label").innerText()).toBe("complete");
    expect(await page.locator("#connection").getAttribute("title")).toMatch(/nothing more will come/);
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, "group-1400x900.png") });
    expect(errors).toEqual([]);
  });

  it("a zero-variance group: every advantage 0, none normalized", async () => {
    const { page, errors } = await shared.visit(`/runs/${RUN}/groups/g04`);
    await page.locator("#rollouts .r-row[data-id]").first().waitFor();
    await page.locator("#group-zero").waitFor();
    const cells = await page.$$eval("#rollouts .cell-adv", (els) =>
      els.map((e) => [(e as any).dataset.raw, (e as any).dataset.normalized]),
    );
    expect(cells).toHaveLength(SIZE * 2);
    for (const [raw, normalized] of cells) expect([Number(raw), normalized]).toEqual([0, ""]);
    // equal rewards: the relay's id order
    expect(await page.$$eval("#rollouts .r-row[data-id]", (rows) => rows.map((r) => (r as any).dataset.id))).toEqual(
      bestFirst("g04").map((r) => r.id),
    );
    expect(errors).toEqual([]);
  });

  it("re-reads the group every few seconds while a rollout is live", async () => {
    const id = `${RUN}:later-live`;
    const later: Rollout = {
      id,
      group: "later",
      task: "later",
      scores: { correct: 0.5, format: 0.5 },
      outcome: "live",
    };
    rollouts.push(later);
    await push(later);
    const mate: Rollout = {
      id: `${RUN}:later-done`,
      group: "later",
      task: "later",
      scores: { correct: 1, format: 0 },
      outcome: "finished",
    };
    rollouts.push(mate);
    await push(mate);
    await indexed({ live: 1, finished: count("finished") });
    const { page, errors } = await shared.visit(`/runs/${RUN}/groups/later`);
    await page.waitForFunction(() => (globalThis as any).document.querySelector(".group-page")?.dataset.live === "1");
    expect(await page.locator(`#rollouts .r-row[data-id="${id}"]`).getAttribute("data-status")).toBe("live");
    await page.evaluate(() => {
      (globalThis as any).notReloaded = true;
    });
    later.outcome = "finished";
    await reply(later);
    await page.waitForFunction(
      (rid) =>
        (globalThis as any).document.querySelector(`#rollouts .r-row[data-id="${rid}"]`)?.dataset.status === "finished",
      id,
      {
        timeout: 15_000,
      },
    );
    expect(await page.locator('#group-numbers dd[data-stat="finished"]').innerText()).toBe("2");
    expect(await page.locator(".group-page").getAttribute("data-live")).toBe("0");
    expect(await page.evaluate(() => (globalThis as any).notReloaded)).toBe(true);
    expect(errors).toEqual([]);
  });
});

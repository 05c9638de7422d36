// The run page read without hovering (issue 40 item 2), in headless Chromium against the real relay bundle:
// a training run of 10 steps (2 groups of 4 rollouts each, rewards rising with the step) and an eval at steps
// 0 and 5, pushed as prime-rl's orchestrator would (training-run.ts). The throughput and the reward over run
// time are uPlot charts from the run's first rollout (not the last hour of wall clock): what they plot is the
// API's `timeline`, and that is a recount of what this test wrote; their axes carry values and units. The
// histograms have a count axis with values and the bins' edges under them; the zero-variance tile says its
// numbers in text. Screenshots at 1400×900 (test-results/screenshots/c40-*.png): the run page's charts, a
// step's rollouts, a group.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import type { RunAggregates } from "../../src/protocol/registry/aggregates.js";
import { chromiumForFile } from "./chromium.js";
import { gotoPage, SHOTS, sharedPage } from "./pages.js";
import { relayCalls } from "./rollouts.js";
import { pushRollout, type Rollout } from "./training-run.js";

let browser: Browser;
let relay: LocalRelay;
const { api, indexed } = relayCalls(() => relay.url);
const RUN = `runtime-ui-${Date.now().toString(36)}`;
const STEPS = 10;
const VIEW = { width: 1400, height: 900 };

function plan(now: number): Rollout[] {
  const out: Rollout[] = [];
  const add = (kind: string, step: number, g: number, j: number, scores: [number, number]) => {
    const name = `${kind === "eval" ? "e" : "t"}${step}-g${g}-${j}`;
    out.push({
      id: `${RUN}:${name}`,
      dispatch: {
        id: `d${name.replace(/-/g, "")}`,
        kind,
        env: "gsm8k",
        group: `${kind}-s${step}-g${g}`,
        task: `idx=${step * 10 + g}`,
        policy_version: step,
        step,
        started: now - 900 + out.length,
      },
      scores,
      outcome: step === 6 && g === 0 && j === 1 ? "failed" : "finished",
      answer: "391",
      cost: null,
      stop: "agent_completed",
      truncated: false,
      outputTokens: 900 - 40 * step + 8 * j,
    });
  };
  for (let step = 0; step < STEPS; step++)
    for (let g = 0; g < 2; g++)
      for (let j = 0; j < 4; j++) add("train", step, g, j, [(j + g) % 10 < step ? 1 : 0, ((j + step) % 4) / 4]);
  for (const step of [0, 5]) for (let j = 0; j < 4; j++) add("eval", step, 0, j, [j % 2, 0.5]);
  return out;
}
const rollouts = plan(Date.now() / 1000);
const finished = rollouts.filter((r) => r.outcome === "finished");
/** The trainer's reward of a rollout of one trace: correct × 1 + format × 0.25. */
const rewardOf = (r: Rollout) => r.scores[0] + r.scores[1] * 0.25;

/** A count axis as a reader expects it: from 0 in steps of 1, 2 or 5 × 10^k, at most 4, to the first at or above `peak`. */
function countAxis(peak: number): number[] {
  const step = [1, 2, 5, 10, 20, 50, 100, 200, 500].find((s) => Math.ceil(peak / s) <= 4)!;
  return Array.from({ length: Math.max(1, Math.ceil(peak / step)) + 1 }, (_, i) => i * step);
}

type Timeline = NonNullable<RunAggregates["timeline"]>;
/** A key's mean over the run from its points. */
const runMean = (k: Timeline["rewards"][string]) =>
  k.count.reduce((s, c, i) => s + c * (k.mean[i] ?? 0), 0) / k.count.reduce((x, y) => x + y, 0);

interface PlotData {
  x: number[];
  xLabel: string;
  yLabel: string;
  xTicks: string[];
  yTicks: string[];
  series: Array<{ key: string; label: string; points: Array<[number, number | null]> }>;
}

async function plotOf(page: Page, sel: string): Promise<PlotData> {
  await page.waitForFunction(
    (s) => Number((globalThis as any).document.querySelector(s)?.dataset.drawn ?? 0) > 0,
    `${sel} .plot`,
  );
  return page.$eval(`${sel} .plot`, (el: any) => ({
    x: JSON.parse(el.dataset.x),
    xLabel: el.dataset.xLabel,
    yLabel: el.dataset.yLabel,
    xTicks: JSON.parse(el.dataset.xTicks),
    yTicks: JSON.parse(el.dataset.yTicks),
    series: JSON.parse(el.dataset.series),
  }));
}

/** The page's 1400×900 view with `sel` at its top, to c40-`name`.png. */
async function shot(page: Page, sel: string, name: string): Promise<string> {
  await page.evaluate(`document.querySelector(".topbar")?.style.setProperty("position", "static", "important")`);
  await page
    .locator(sel)
    .first()
    .evaluate((el: any) => el.scrollIntoView({ block: "start" }));
  const file = join(SHOTS, `c40-${name}.png`);
  await page.screenshot({ path: file });
  console.error(`[run-charts] screenshot: ${file}`);
  return file;
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  relay = await startRelay();
  for (let i = 0; i < rollouts.length; i += 12)
    await Promise.all(rollouts.slice(i, i + 12).map((r) => pushRollout(relay.url, r)));
  const failed = rollouts.filter((r) => r.outcome === "failed").length;
  await indexed(RUN, { finished: rollouts.length - failed, failed, live: 0 }, 90_000);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

/** One page for the file's tests, each on its path by a route change (pages.ts sharedPage). */
const shared = sharedPage(
  () => browser,
  () => relay.url,
  { viewport: VIEW },
);
afterAll(() => shared.close());

describe("the run page, read without hovering", () => {
  it("throughput and reward over run time: the API's timeline from the first rollout, with axes and values", async () => {
    const a = (await api<{ aggregates: RunAggregates }>(`/v1/runs/${RUN}`)).aggregates;
    const t = a.timeline!;
    // the timeline is a recount of what was written: every ended rollout once, the finished ones' trainer reward
    expect(t.ended.reduce((x, y) => x + y, 0)).toBe(rollouts.length);
    expect(t.rewards.reward!.count.reduce((x, y) => x + y, 0)).toBe(finished.length);
    const want = finished.reduce((s, r) => s + rewardOf(r), 0) / finished.length;
    expect(runMean(t.rewards.reward!)).toBeCloseTo(want, 9);
    // a young run: minute points from its first rollout, not 60 minutes of wall clock
    expect(t.minutes).toBe(1);
    expect(t.ended.length).toBeLessThanOrEqual(5);

    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}`);
    const thr = await plotOf(page, "#throughput");
    expect(thr.xLabel).toBe("run time (h:mm since the first rollout)");
    expect(thr.yLabel).toBe("episodes ended / min");
    expect(thr.x).toEqual(t.ended.map((_, i) => i));
    expect(thr.series[0]!.points).toEqual(t.ended.map((n, i) => [i, n]));
    expect(thr.xTicks[0]).toBe("0:00");
    for (const x of thr.xTicks) expect(x).toMatch(/^\d+:\d\d$/);
    // the axis spans the run so far (at least 5 points), not an hour with the run a dot at its start
    const tickMinutes = thr.xTicks.map((x) => Number(x.split(":")[0]) * 60 + Number(x.split(":")[1]));
    expect(Math.max(...tickMinutes)).toBeLessThanOrEqual(Math.max(thr.x.at(-1)!, 5 * t.minutes));
    expect(thr.yTicks.length).toBeGreaterThanOrEqual(3);
    // the ticks span the values (uPlot puts them at round numbers inside the range, whose top is the largest)
    const top = Math.max(...thr.yTicks.map(Number));
    expect(top).toBeLessThanOrEqual(Math.max(...t.ended));
    expect(top).toBeGreaterThanOrEqual(Math.max(...t.ended) / 2);
    expect(await page.locator('#throughput [data-stat="ended"] dd').innerText()).toBe(String(rollouts.length));

    const rew = await plotOf(page, "#reward-trend");
    expect(rew.yLabel).toBe("mean score");
    // the trainer's total first, then the keys by name
    expect(rew.series.map((s) => s.key)).toEqual(["reward", "correct", "format"]);
    const reward = rew.series[0]!.points;
    expect(reward).toEqual(
      t.rewards.reward!.count.flatMap((c, i) => (c > 0 ? [[i, t.rewards.reward!.mean[i]]] : [])) as Array<
        [number, number]
      >,
    );
    expect(Number(await page.locator('#reward-trend [data-stat="reward"]').getAttribute("data-mean"))).toBeCloseTo(
      want,
      9,
    );
    // the legend reads the latest point without hovering
    const legend = await page.locator("#reward-trend .u-legend .u-series").allInnerTexts();
    expect(legend.join(" ")).toMatch(/reward\s*[\d.]+\s*correct\s*[\d.]+/);
    await shot(page, "#run-stats", "run-page");
    await shot(page, "#throughput", "run-time-charts");
    expect(errors).toEqual([]);
  });

  it("the histograms: a count axis with values, the bins' edges under them; the zero-variance tile in text", async () => {
    const a = (await api<{ aggregates: RunAggregates }>(`/v1/runs/${RUN}`)).aggregates;
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}`);
    await page.locator('.hist[data-key="reward"]').waitFor();
    for (const [key, r] of Object.entries(a.finished_rewards)) {
      const hist = page.locator(`.hist[data-key="${key}"]`);
      const peak = Math.max(r.histogram.below, r.histogram.above, ...r.histogram.counts);
      const y = JSON.parse((await hist.locator(".hist-yaxis").getAttribute("data-y-ticks"))!) as number[];
      expect(y, key).toEqual(countAxis(peak));
      expect(y[0]).toBe(0);
      expect(y.at(-1)!).toBeGreaterThanOrEqual(peak);
      expect(await hist.locator(".hist-ytick").allInnerTexts()).toEqual(y.map(String));
      expect(await hist.locator(".hist-xtick").allInnerTexts()).toEqual(["0", "0.25", "0.5", "0.75", "1"]);
      expect(await hist.locator(".hist-ylabel").innerText()).toBe("episodes");
      expect(await hist.locator(".hist-xlabel").innerText()).toBe("score (20 bins of 0.05)");
      // the tallest bar reaches its count on the axis: its height over the plot's is peak / top
      // (measured again while a live refresh replaces the bars: a detached bar has no box)
      const tallest = hist.locator(`.hist-bar[data-count="${peak}"]`).first();
      await expect
        .poll(
          async () => {
            const [fill, column] = await Promise.all([
              tallest.locator(".hist-fill").boundingBox(),
              tallest.boundingBox(),
            ]);
            return fill && column ? fill.height / column.height : null;
          },
          { timeout: 10_000 },
        )
        .toBeCloseTo(peak / y.at(-1)!, 1);
    }
    const g = a.groups!;
    const tr = g.trend!;
    const zero = tr.zero_variance.reduce((x, y) => x + y, 0);
    const done = tr.completed.reduce((x, y) => x + y, 0);
    expect(done).toBeGreaterThan(0);
    await page.locator("#zero-variance-trend .zv-text").waitFor();
    expect(await page.locator('#zero-variance-trend [data-zv="counts"]').innerText()).toBe(`${zero} of ${done} zero`);
    expect(errors).toEqual([]);
  });

  it("screenshots: a step's rollouts and a group", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}?step=7`);
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll(".ep-row[data-id]").length >= 8);
    await shot(page, ".run-episodes", "step-rollouts");
    const group = `train-s7-g0`;
    await gotoPage(page, `${relay.url}/runs/${encodeURIComponent(RUN)}/groups/${encodeURIComponent(group)}`);
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll(".r-row:not(.r-head)").length > 0);
    await shot(page, "main", "group");
    expect(errors).toEqual([]);
  });
});

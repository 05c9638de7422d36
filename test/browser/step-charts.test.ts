// The run page's per-step charts (issue 40 item 2), in headless Chromium against the real relay bundle: a run
// of 8 train steps (2 groups of 4 rollouts each, rewards rising with the step, response lengths shrinking, some
// truncated by the trainer's stop conditions, some timed out, one failed) with an eval at steps 0 and 4, pushed
// as prime-rl's orchestrator would (training-run.ts). Every number a chart plots is read back (its box's data,
// what uPlot was given) and compared with the relay's /steps and with a recount from the rollouts this test
// wrote by the trainer's definitions (docs/training.md); the
// axes' tick labels and the legend are read as uPlot drew them; hovering a step reads its exact values in the
// legend; a click opens that step's episodes. Screenshot at 1400×900: test-results/screenshots/step-charts-*.png.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { TRUNCATING_STOPS } from "../../src/protocol/registry/step-outcomes.js";
import type { StepsPage } from "../../src/protocol/registry/steps.js";
import { chromiumForFile } from "./chromium.js";
import { openPage, SHOTS } from "./pages.js";
import { relayCalls } from "./rollouts.js";
import { pushRollout, type Rollout } from "./training-run.js";

let browser: Browser;
let relay: LocalRelay;
const { api, indexed } = relayCalls(() => relay.url);
const RUN = `steps-ui-${Date.now().toString(36)}`;
const STEPS = 8;
const VIEW = { width: 1400, height: 900 };

/** The plan: train steps 0-7 (groups of 4), eval at 0 and 4; rewards rise, lengths shrink, a few cut short. */
function plan(now: number): Rollout[] {
  const out: Rollout[] = [];
  const add = (kind: string, step: number, g: number, j: number, over: Partial<Rollout>) => {
    const name = `${kind === "eval" ? "e" : "t"}${step}-g${g}-${j}`;
    out.push({
      id: `${RUN}:${name}`,
      dispatch: {
        id: `d${name.replace(/-/g, "")}`,
        kind,
        env: "gsm8k",
        group: `${kind}-s${step}-g${g}`,
        task: `idx=${step * 10 + g}`,
        policy_version: g === 1 ? Math.max(0, step - 1) : step,
        step,
        started: now - 900 + out.length,
      },
      scores: [0, 0],
      outcome: "finished",
      answer: "391",
      cost: null,
      stop: "agent_completed",
      truncated: false,
      ...over,
    });
  };
  for (let step = 0; step < STEPS; step++)
    for (let g = 0; g < 2; g++)
      for (let j = 0; j < 4; j++) {
        const cut = (j + g + step) % 8 === 0 && step < 6;
        add("train", step, g, j, {
          scores: [(j * 2 + g + step) % 8 < step + 1 ? 1 : 0, ((j + g) % 4) / 4 + (step >= 4 ? 0.25 : 0)],
          stop: cut ? (step % 2 ? "max_turns" : "max_output_tokens") : "agent_completed",
          truncated: (step === 2 || step === 5) && g === 1 && j === 3,
          // cut by its last call (finish_reason length): truncated as the trainer counts it, whatever its stop
          lastFinish: step === 1 && g === 1 && j === 1 ? "length" : undefined,
          outcome: step === 3 && g === 0 && j === 2 ? "failed" : "finished",
          // multiples of 4 under 1024: the relay keeps them exactly (step-outcomes.ts)
          outputTokens: 960 - 64 * step + 4 * (13 * j + 7 * g),
        });
      }
  for (const step of [0, 4])
    for (let j = 0; j < 4; j++) add("eval", step, 0, j, { scores: [step === 4 ? 1 : j % 2, 0.5], outputTokens: 400 });
  return out;
}
const rollouts = plan(Date.now() / 1000);

/** The trainer's numbers for a step, recounted from what this test wrote. */
function recount(kind: string, step: number) {
  const rs = rollouts.filter((r) => r.dispatch.kind === kind && r.dispatch.step === step);
  const finished = rs.filter((r) => r.outcome === "finished");
  // one trace: Σ score × weight (correct 1, format 0.25)
  const rewards = finished.map((r) => r.scores[0] * 1 + r.scores[1] * 0.25);
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, b) => a + (b - mean) ** 2, 0) / rewards.length);
  const lengths = finished.map((r) => r.outputTokens!).sort((a, b) => a - b);
  const ended = rs.length;
  return {
    mean,
    std,
    length: lengths.reduce((a, b) => a + b, 0) / lengths.length,
    // nearest rank
    p90: lengths[Math.ceil(0.9 * lengths.length) - 1]!,
    truncated: rs.filter((r) => TRUNCATING_STOPS.has(r.stop) || r.lastFinish === "length").length / ended,
    timeout: rs.filter((r) => r.truncated).length / ended,
    errored: rs.filter((r) => r.outcome === "failed").length / ended,
    staleness: rs.reduce((a, r) => a + (r.dispatch.step - r.dispatch.policy_version), 0) / rs.length,
  };
}

interface PlotData {
  x: number[];
  xLabel: string;
  yLabel: string;
  xTicks: string[];
  yTicks: string[];
  series: Array<{
    key: string;
    kind: string;
    label: string;
    /** Its colour slot. */
    tone: number;
    points: Array<[number, number | null]>;
    spread?: Array<[number, number | null]>;
  }>;
  legend: string[];
}

/** What a chart plotted, its axes' tick labels as uPlot drew them, and its legend's names. */
async function plotOf(page: Page, id: string): Promise<PlotData> {
  await page.waitForFunction(
    (sel) => Number((globalThis as any).document.querySelector(sel)?.dataset.drawn ?? 0) > 0,
    `#${id} .plot`,
  );
  return page.$eval(`#${id} .plot`, (el: any) => ({
    x: JSON.parse(el.dataset.x),
    xLabel: el.dataset.xLabel,
    yLabel: el.dataset.yLabel,
    xTicks: JSON.parse(el.dataset.xTicks),
    yTicks: JSON.parse(el.dataset.yTicks),
    series: JSON.parse(el.dataset.series),
    legend: [...el.querySelectorAll(".u-legend .u-series:not(.plot-edge) .u-label")].map((e: any) => e.textContent),
  }));
}

const valueAt = (p: PlotData, key: string, kind: string, step: number) =>
  p.series.find((s) => s.key === key && s.kind === kind)!.points.find(([x]) => x === step)?.[1];

/** Tick labels read as numbers (a "%" or thousands separator dropped): increasing, at least three. */
function ticks(labels: string[]): number[] {
  const v = labels.map((t) => Number(t.replace(/[%,]/g, "")));
  expect(v.length, labels.join(" ")).toBeGreaterThanOrEqual(3);
  for (const x of v) expect(Number.isFinite(x), labels.join(" ")).toBe(true);
  for (let i = 1; i < v.length; i++) expect(v[i]!).toBeGreaterThan(v[i - 1]!);
  return v;
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

describe("per-step charts", () => {
  it("plot the trainer's numbers per step as /steps and a recount of the rollouts give them, with axes and legends", async () => {
    const steps = (await api<StepsPage>(`/v1/runs/${RUN}/steps?limit=500`)).steps;
    const at = (kind: string, step: number) => steps.find((s) => s.kind === kind && s.step === step)!;
    // the relay's numbers are the recount's
    for (const s of steps) {
      const want = recount(s.kind!, s.step);
      expect(s.mean_reward, `${s.kind} ${s.step}`).toBeCloseTo(want.mean, 9);
      expect(s.std_reward!, `${s.kind} ${s.step}`).toBeCloseTo(want.std, 6);
      expect(s.output_tokens, `${s.kind} ${s.step}`).toEqual({ mean: want.length, p90: want.p90 });
      expect([s.truncated_share, s.timeout_share, s.error_share], `${s.kind} ${s.step}`).toEqual([
        want.truncated,
        want.timeout,
        want.errored,
      ]);
      expect(s.staleness.mean).toBeCloseTo(want.staleness, 9);
    }
    // the plan rises and is cut short: the figures a reader should see
    expect(at("train", 7).mean_reward!).toBeGreaterThan(at("train", 0).mean_reward!);
    expect(steps.some((s) => s.truncated_share! > 0) && steps.some((s) => s.timeout_share! > 0)).toBe(true);

    const { context, page, errors } = await openPage(browser, `${relay.url}/runs/${RUN}`, { viewport: VIEW });
    const reward = await plotOf(page, "step-reward-total");
    const length = await plotOf(page, "step-length");
    const outcomes = await plotOf(page, "step-outcomes");
    const zero = await plotOf(page, "step-zero-variance");
    const stale = await plotOf(page, "step-staleness");
    const keys = await plotOf(page, "step-rewards");
    for (const s of steps) {
      const k = s.kind!;
      expect(valueAt(reward, "reward", k, s.step)).toBe(s.mean_reward);
      const spread = reward.series.find((x) => x.kind === k)!.spread!.find(([x]) => x === s.step)?.[1];
      expect(spread).toBe(s.std_reward);
      expect(valueAt(length, "mean", k, s.step)).toBe(s.output_tokens.mean);
      expect(valueAt(length, "p90", k, s.step)).toBe(s.output_tokens.p90);
      expect(valueAt(outcomes, "truncated", k, s.step)).toBe(s.truncated_share);
      expect(valueAt(outcomes, "timeout", k, s.step)).toBe(s.timeout_share);
      expect(valueAt(outcomes, "errored", k, s.step)).toBe(s.error_share);
      expect(valueAt(zero, "zero_variance", k, s.step)).toBe(s.zero_variance_share);
      expect(valueAt(stale, "mean", k, s.step)).toBe(s.staleness.mean);
      expect(valueAt(stale, "max", k, s.step)).toBe(s.staleness.max);
      for (const key of ["correct", "format", "reward"])
        expect(valueAt(keys, key, k, s.step)).toBe(s.mean_rewards[key]);
    }
    // a reward key has one colour on the page (trial 9: `reward` was the first colour in one chart, the third in the
    // next): the same slot in the per-step charts and the reward over run time, `reward` the first
    const trend = await plotOf(page, "reward-trend");
    const toneOf = (p: PlotData, key: string) => [...new Set(p.series.filter((s) => s.key === key).map((s) => s.tone))];
    expect(toneOf(reward, "reward")).toEqual([0]);
    const keyTones = ["reward", "correct", "format"].map((key) => {
      expect(toneOf(keys, key), key).toEqual(toneOf(trend, key));
      expect(toneOf(keys, key), key).toHaveLength(1);
      return toneOf(keys, key)[0];
    });
    expect(keyTones[0]).toBe(0);
    expect(new Set(keyTones).size).toBe(3);
    await page.screenshot({ path: join(SHOTS, "step-charts-1400.png") });
    await page.screenshot({ path: join(SHOTS, "step-charts-1400-full.png"), fullPage: true });
    await page.locator("#step-charts").screenshot({ path: join(SHOTS, "step-charts-section-1400.png") });
    // every chart: x is the training step over every step, axes labelled with values, a legend naming each series
    for (const [p, yLabel, legend] of [
      [reward, "reward", ["reward · train", "reward · eval"]],
      [length, "output tokens", ["mean · train", "p90 · train", "mean · eval", "p90 · eval"]],
      [outcomes, "% of ended", ["truncated · train", "errored · train", "timed out · train"]],
      [zero, "% of groups", ["zero variance · train", "zero variance · eval"]],
      [stale, "steps behind", ["mean · train", "max · train"]],
    ] as const) {
      expect(p.x).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      expect([p.xLabel, p.yLabel]).toEqual(["training step", yLabel]);
      expect(p.legend.slice(0, 1 + legend.length)).toEqual(["training step", ...legend]);
      const xs = ticks(p.xTicks);
      for (const x of xs) expect(Number.isInteger(x) && x >= 0 && x <= 7, p.xTicks.join(" ")).toBe(true);
      const ys = ticks(p.yTicks);
      // the ticks lie across the plotted values (the lowest at or under the smallest, the highest near the largest)
      const vals = p.series.flatMap((s) => s.points.map(([, v]) => v).filter((v): v is number => v !== null));
      const scale = p.yTicks[0]!.endsWith("%") ? 100 : 1;
      expect(ys[0]!).toBeLessThanOrEqual(Math.min(...vals) * scale + 1e-9);
      expect(ys.at(-1)! * 1.5 + 1e-9).toBeGreaterThanOrEqual(Math.max(...vals) * scale);
    }
    expect(reward.yTicks).toContain("1");
    expect(outcomes.yTicks.every((t) => t.endsWith("%"))).toBe(true);

    // off the plot the legend reads the latest step; the crosshair at step 5 reads that step's exact values
    const legendValue = (id: string, i: number) =>
      page.locator(`#${id} .u-legend .u-series:not(.plot-edge)`).nth(i).locator(".u-value").innerText();
    const round3 = (v: number) => String(Math.round(v * 1000) / 1000);
    const s7 = at("train", 7);
    const e4 = at("eval", 4);
    expect(
      await Promise.all([0, 1, 2].map((i) => legendValue("step-reward-total", i))),
      "each series at its latest step",
    ).toEqual([
      "7",
      `${round3(s7.mean_reward!)} ± ${round3(s7.std_reward!)}`,
      `${round3(e4.mean_reward!)} ± ${round3(e4.std_reward!)} (step 4)`,
    ]);
    const box = (await page.locator("#step-reward-total .u-over").boundingBox())!;
    await page.mouse.move(box.x + (5 / 7) * box.width, box.y + box.height / 2);
    const s5 = at("train", 5);
    await expect
      .poll(() => legendValue("step-reward-total", 1))
      .toBe(`${round3(s5.mean_reward!)} ± ${round3(s5.std_reward!)}`);
    // the x under the crosshair; eval has no row at step 5: its nearest, and where it is
    expect([await legendValue("step-reward-total", 0), await legendValue("step-reward-total", 2)]).toEqual([
      "5",
      `${round3(e4.mean_reward!)} ± ${round3(e4.std_reward!)} (step 4)`,
    ]);

    // a click opens that step's episodes (the run's list filtered by it)
    const over = page.locator("#step-length .u-over");
    const lbox = (await over.boundingBox())!;
    await over.click({ position: { x: (2 / 7) * lbox.width, y: lbox.height / 2 } });
    await page.waitForFunction(() => new URL((globalThis as any).location.href).searchParams.get("step") === "2");
    const want = rollouts.filter((r) => r.dispatch.step === 2).length;
    await page.waitForFunction(
      (n) => (globalThis as any).document.querySelectorAll("#episodes .ep-row[data-id]").length === n,
      want,
    );
    expect(errors).toEqual([]);
    await context.close();
  });
});

// The run page of a GRPO-sized run, in headless Chromium against the real relay bundle: 64 groups
// of 8 rollouts over 16 tasks (chat_basic's opening and turns per rollout, its task key, then one delta setting its
// rewards, stop condition, `is_timeout` and token count; then its reply with the group in the
// head): 7 groups with zero reward variance, 16 truncated rollouts, 8 failed ones. The page is
// opened with a 50-episode snapshot, so every filter is answered by the relay's index. Checked:
// each filter (and two at once) lists exactly the rollouts the plan says, the filter travels in
// the URL (a reload keeps it), a bad range is refused in place. Screenshots at 1280×800 and
// 390×844 in test-results/screenshots/ (`run-64x8-*.png`, `run-filtered-*.png`).
import { mkdirSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { decodeLossless, type LMap } from "../../src/protocol/wire/lossless.js";
import { rewardsOf } from "../support/chat-rollouts.js";
import { m } from "../support/deltas.js";
import { chromiumForFile } from "./chromium.js";
import { openPage, reloadPage, SHOTS, shoot } from "./pages.js";
import { relayCalls } from "./rollouts.js";

let browser: Browser;
let relay: LocalRelay;
const { api, indexed, pushChat, replyChat } = relayCalls(() => relay.url);

const RUN = `filters-${Date.now().toString(36)}`;
const GROUPS = 64;
const SIZE = 8;
const TASKS = 16;

interface Rollout {
  id: string;
  group: string;
  task: string;
  correct: number;
  format: number;
  truncated: boolean;
  tokens: number;
  failed: boolean;
}

/** Groups whose rollouts all score the same (no learning signal). */
const zeroVariance = (i: number) => i % 10 === 0;

function plan(): Rollout[] {
  const out: Rollout[] = [];
  for (let i = 0; i < GROUPS; i++) {
    for (let j = 0; j < SIZE; j++) {
      const k = i * SIZE + j;
      out.push({
        id: `${RUN}:g${String(i).padStart(2, "0")}-${j}`,
        group: `g${String(i).padStart(2, "0")}`,
        task: `task-${i % TASKS}`,
        correct: zeroVariance(i) ? 1 : [1, 0, 1, 0, 0, 1, 1, 0][(i + j) % 8]!,
        format: zeroVariance(i) ? 0.5 : ((i * 3 + j) % 5) / 4,
        truncated: i % 4 === 1 && j === 7,
        tokens: 100 + ((k * 37) % 900),
        failed: i % 8 === 3 && j === 0,
      });
    }
  }
  return out;
}
const rollouts = plan();

/** The frames with nodes and calls (the reply checks their counts); the scalars come in one delta. */
const withNodes = (frame: Uint8Array) => Boolean((decodeLossless(frame) as LMap).get("nodes"));

async function push(r: Rollout): Promise<void> {
  const stop = r.truncated ? "max_turns_reached" : "agent_completed";
  const set = m({
    rewards: rewardsOf([r.correct, r.format]),
    stop_condition: stop,
    is_timeout: r.truncated,
    num_total_tokens: r.tokens,
  });
  await pushChat(r.id, r.task, set, withNodes);
  await replyChat(r.id, r.group, r.task, r.failed);
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  relay = await startRelay();
  for (let i = 0; i < rollouts.length; i += 16) await Promise.all(rollouts.slice(i, i + 16).map(push));
  const failed = rollouts.filter((r) => r.failed).length;
  await indexed(RUN, { finished: rollouts.length - failed, failed }, 60_000);
}, 600_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

/** The ids the list shows, once they are exactly `want` (any order: the relay's order is tested in the index). */
async function waitListed(page: Page, want: Rollout[]): Promise<void> {
  const ids = want.map((r) => r.id).sort();
  expect(ids.length).toBeGreaterThan(0);
  expect(ids.length).toBeLessThanOrEqual(50);
  await page.waitForFunction(
    (w) =>
      JSON.stringify(
        [...(globalThis as any).document.querySelectorAll("#episodes .ep-row[data-id]")]
          .map((r: any) => r.dataset.id)
          .sort(),
      ) === w,
    JSON.stringify(ids),
    { timeout: 20_000 },
  );
  await page.waitForFunction(
    () => (globalThis as any).document.querySelector(".run-episodes")?.dataset.complete === "true",
    null,
    { timeout: 20_000 },
  );
}

describe("the run page of 64 groups × 8 rollouts, and the episode filters", () => {
  it("draws the run, then lists exactly what each filter matches, asked of the relay", async () => {
    const { context, page, errors } = await openPage(browser, `${relay.url}/runs/${RUN}?limit=50`);
    const groups = await api<{ zero_variance_share: number; zero_variance_groups: number; finished_groups: number }>(
      `/v1/runs/${RUN}/groups`,
    );
    expect(groups.finished_groups).toBe(GROUPS);
    expect(groups.zero_variance_groups).toBe(Array.from({ length: GROUPS }, (_, i) => i).filter(zeroVariance).length);
    await page.waitForFunction(
      (want) => (globalThis as any).document.querySelector('.stat[data-stat="zero_variance"]')?.dataset.value === want,
      String(groups.zero_variance_share),
      { timeout: 20_000 },
    );
    // the snapshot holds 50 of 512: the list is not complete until a filter narrows it
    await page.waitForFunction(
      () => (globalThis as any).document.querySelectorAll("#episodes .ep-row[data-id]").length === 50,
    );
    expect(await page.locator(".run-episodes").getAttribute("data-complete")).toBe("false");
    const shots = await shoot(page, "run-64x8");

    await page.click("#episode-filters summary");
    // the rollouts timed out (is_timeout), none truncated as the trainer counts it (max_turns_reached is no limit)
    await page.selectOption("#filter-timeout", "1");
    await waitListed(
      page,
      rollouts.filter((r) => r.truncated),
    );
    expect(await page.locator("#episodes .ep-row[data-id]").first().locator(".cell-size").innerText()).toContain(
      "call",
    );
    expect(new URL(page.url()).searchParams.get("is_timeout")).toBe("1");

    // truncated and errored together: none (no truncated rollout failed); then errored alone
    await page.selectOption("#filter-errored", "1");
    await page.waitForFunction(
      () => {
        const empty = (globalThis as any).document.querySelector("#episodes-empty");
        return empty?.hidden === false && empty.textContent === "No episode matches the filter.";
      },
      null,
      { timeout: 20_000 },
    );
    expect(await page.locator("#episodes .ep-row[data-id]").count()).toBe(0);
    await page.selectOption("#filter-timeout", "");
    await waitListed(
      page,
      rollouts.filter((r) => r.failed),
    );
    expect(await page.locator('#episodes .ep-row[data-status="failed"]').count()).toBe(
      rollouts.filter((r) => r.failed).length,
    );

    // a task and a reward range (typed: the list is asked once the typing settles)
    await page.selectOption("#filter-errored", "");
    await page.fill("#filter-task", "task-5");
    await page.selectOption("#filter-reward-key", "correct");
    await page.fill("#filter-reward-min", "1");
    const solved = rollouts.filter((r) => r.task === "task-5" && r.correct >= 1);
    await waitListed(page, solved);
    const url = new URL(page.url());
    expect([url.searchParams.get("task"), url.searchParams.get("reward")]).toEqual(["task-5", "correct:1.."]);

    // the filter is in the URL: a reload lists the same rollouts
    await reloadPage(page);
    await waitListed(page, solved);
    expect(await page.locator("#filter-task").inputValue()).toBe("task-5");
    await shoot(page, "run-filtered");

    // tokens at least a bound, with the rest cleared
    await page.click("#filter-clear");
    await page.fill("#filter-min-tokens", "950");
    await waitListed(
      page,
      rollouts.filter((r) => r.tokens >= 950),
    );

    // a range whose min is above its max is refused in place; the list stays as it was
    await page.fill("#filter-reward-min", "0.9");
    await page.fill("#filter-reward-max", "0.1");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("#filter-problem")?.hidden === false,
      null,
      { timeout: 10_000 },
    );
    expect(await page.locator("#filter-problem").innerText()).toContain("MIN is above MAX");
    await waitListed(
      page,
      rollouts.filter((r) => r.tokens >= 950),
    );
    expect(errors).toEqual([]);
    expect(shots.length).toBe(2);
    await context.close();
  }, 180_000);
});

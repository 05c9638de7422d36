// The dashboard in a real browser: Debian's headless Chromium driven by playwright-core, against
// the real relay bundle (Miniflare, with the dashboard's static assets; the hub tier in a process
// of its own, as under npm run start:tiers), fed golden cases the
// way a producer feeds it (envelopes over HTTP), and a run of 240 small episodes sent as bare
// deltas. Screenshots of each page at a desktop (1280×800) and a phone (390×844) viewport go to
// test-results/screenshots/ (`<page>-desktop.png`, `<page>-phone.png`).
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encode } from "@msgpack/msgpack";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { binOf, HISTOGRAM_BINS } from "../../src/protocol/registry/aggregates.js";
import { rewardOf } from "../../src/protocol/registry/rewards.js";
import { toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { type GoldenCase, parseCase } from "../../tools/conformance/case-format.js";
import { fixturePath } from "../../tools/conformance/cases.js";
import { freePort } from "../../tools/free-port.js";
import { chromiumForFile } from "./chromium.js";
import { DESKTOP, gotoPage, openPage, PHONE, reloadPage, SHOTS, sharedPage, shoot } from "./pages.js";
import { expectRoutingFigures, shownRouting } from "./routing-figures.js";

let browser: Browser;
let relay: LocalRelay;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  // the dashboard follows live rows here: their flush at 2 s, not the default 30 s (INDEX_FLUSH_MS), the run
  // attended or not (INDEX_IDLE_FLUSH_MS: rows written before a page opens are not held 2 minutes)
  relay = await startRelay({ tiers: true, vars: { INDEX_FLUSH_MS: "2000", INDEX_IDLE_FLUSH_MS: "2000" } });
});

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

// ---- helpers ----

const cases = new Map<string, GoldenCase>();
function golden(name: string): GoldenCase {
  let c = cases.get(name);
  if (!c) cases.set(name, (c = parseCase(readFileSync(fixturePath(name)), name)));
  return c;
}

let counter = 0;
function freshId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}`;
}

/** A producer for one episode: sends frames as envelopes, honouring the case's lost acks. */
function producer(url: () => string, id: string, c: GoldenCase, auth: Record<string, string> = {}) {
  const cursor = new ProducerCursor("browser-test");
  const lost = new Set(c.ack_lost);
  let next = 0;
  return {
    get sent() {
      return next;
    },
    async send(count = 1): Promise<void> {
      for (const end = Math.min(c.frames.length, next + count); next < end; next++) {
        const frame = c.frames[next]!;
        const res = await fetch(`${url()}/v1/episodes/${id}/deltas`, {
          method: "POST",
          body: encodeEnvelope(cursor.envelope(frame)),
          headers: { "content-type": "application/msgpack", ...auth },
        });
        expect(res.status, await res.text()).toBe(200);
        if (!lost.has(next)) cursor.acknowledge();
      }
    },
    async rest(): Promise<void> {
      await this.send(c.frames.length - next);
    },
    async reply(): Promise<void> {
      const res = await fetch(`${url()}/v1/episodes/${id}/reply`, {
        method: "POST",
        body: c.reply,
        headers: { "content-type": "application/msgpack", ...auth },
      });
      expect(res.status, await res.text()).toBe(200);
    },
  };
}

async function pushCase(name: string, id: string, finish = true): Promise<void> {
  const p = producer(() => relay.url, id, golden(name));
  await p.rest();
  if (finish) await p.reply();
}

/** A page on `path` of the relay at `base` (pages.ts openPage; shots with its `shoot`). */
const open = (path: string, base = relay.url) => openPage(browser, `${base}${path}`);

const connection = (page: Page) => page.locator("#connection").getAttribute("data-state");

async function waitConnection(page: Page, state: string, timeout = 15_000): Promise<void> {
  await page.waitForFunction(
    (s) => (globalThis as any).document.querySelector("#connection")?.dataset.state === s,
    state,
    { timeout },
  );
}

/** The episode's status pill is drawn on the next animation frame after the connection state. */
async function waitStatus(page: Page, status: string, timeout = 15_000): Promise<void> {
  await page.waitForFunction(
    (s) => (globalThis as any).document.querySelector("#ep-status")?.dataset.status === s,
    status,
    { timeout },
  );
}

// ---- runs and a run (golden cases) ----

/** `{success: false, error, head: nil, traces: []}`: the producer gave up on the episode. */
function failReply(error: string): Uint8Array {
  return encode({ success: false, error, head: null, traces: [] });
}

const runRow = (page: Page, run: string) => page.locator(`.run-row[data-run="${run}"]`);
const statValue = (page: Page, key: string) => page.locator(`.stat[data-stat="${key}"]`).getAttribute("data-value");
const episodeRow = (page: Page, id: string) => page.locator(`.ep-row[data-id="${id}"]`);

/** Wait until the runs page shows `run` with these counts (the directory hears of a run within ~1 s). */
async function waitRunCounts(page: Page, run: string, counts: Record<string, number>, timeout = 15_000): Promise<void> {
  await page.waitForFunction(
    ([r, want]) => {
      const row = (globalThis as any).document.querySelector(`.run-row[data-run="${r}"]`);
      return (
        !!row &&
        Object.entries(want).every(([k, v]) => row.querySelector(`[data-count="${k}"]`)?.dataset.value === String(v))
      );
    },
    [run, counts] as const,
    { timeout },
  );
}

/** Wait until the run page's counters read these values. */
async function waitStats(page: Page, stats: Record<string, number>, timeout = 15_000): Promise<void> {
  await page.waitForFunction(
    (want) =>
      Object.entries(want).every(
        ([k, v]) => (globalThis as any).document.querySelector(`.stat[data-stat="${k}"]`)?.dataset.value === String(v),
      ),
    stats,
    { timeout },
  );
}

describe("runs page (/) and run page (/runs/{run}) with golden cases", () => {
  it("lists the run live with its counts, opens it, and lists its episodes with status, rewards and size", async () => {
    const run = freshId("golden");
    const ids = { chat: `${run}:chat`, tools: `${run}:tools`, multi: `${run}:multi`, failed: `${run}:failed` };
    await pushCase("chat_basic", ids.chat);
    await pushCase("tool_calls_pending", ids.tools);
    await pushCase("multi_trace_links", ids.multi, false); // still live
    const fail = producer(() => relay.url, ids.failed, golden("discard_retry"));
    await fail.send(3);
    const res = await fetch(`${relay.url}/v1/episodes/${ids.failed}/reply`, {
      method: "POST",
      body: failReply("sandbox crashed"),
      headers: { "content-type": "application/msgpack" },
    });
    expect(res.status, await res.text()).toBe(200);

    const { context, page, errors } = await open("/");
    await waitConnection(page, "live");
    await waitRunCounts(page, run, { live: 1, finished: 2, failed: 1, finish_refused: 0, episodes: 4 });

    // live: a new episode of the run counts without a reload, and so does its finish
    const later = `${run}:later`;
    const p = producer(() => relay.url, later, golden("routing_repair_u8"));
    await p.send(1);
    await waitRunCounts(page, run, { live: 2, episodes: 5 });
    await p.rest();
    await p.reply();
    await waitRunCounts(page, run, { live: 1, finished: 3, episodes: 5 });

    // the run's row opens the run in place
    await runRow(page, run).click();
    await page.waitForURL(`**/runs/${encodeURIComponent(run)}`);
    await waitStats(page, { episodes: 5, live: 1, finished: 3, failed: 1, finish_refused: 0 });
    expect(await episodeRow(page, ids.chat).getAttribute("data-status")).toBe("finished");
    expect(await episodeRow(page, ids.multi).getAttribute("data-status")).toBe("live");
    expect(await episodeRow(page, ids.failed).getAttribute("data-status")).toBe("failed");
    expect(await episodeRow(page, ids.tools).locator(".cell-rewards").innerText()).toMatch(/correct\s*1/);
    expect(await episodeRow(page, later).locator(".cell-rewards").innerText()).toMatch(/proof\s*0\.75/);
    expect(await episodeRow(page, ids.failed).innerText()).toContain("sandbox crashed");
    expect(await episodeRow(page, ids.chat).locator(".cell-size").innerText()).toMatch(/1 trace · 7 nodes · 3 calls/);
    // the live one: its turns reach the index by the Episode's throttled flush (its alarm, ~2 s)
    await page.waitForFunction(
      (id) =>
        /3 traces · 11 nodes · 4 calls/.test(
          (globalThis as any).document.querySelector(`.ep-row[data-id="${id}"] .cell-size`)?.textContent ?? "",
        ),
      ids.multi,
      { timeout: 10_000 },
    );
    // the histogram of `correct` counts the episodes scored on it: the finished ones, or (toggled) all
    const scoredRows = (status?: string) =>
      page
        .locator(`.ep-row[data-id]${status ? `[data-status="${status}"]` : ""} .reward-k`, { hasText: /^correct$/ })
        .count();
    expect(Number(await page.locator('.hist[data-key="correct"]').getAttribute("data-count"))).toBe(
      await scoredRows("finished"),
    );
    await page.check("#rewards-include-all");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("#run-charts")?.dataset.rewards === "all",
    );
    const scored = await page.locator('.hist[data-key="correct"]').getAttribute("data-count");
    expect(Number(scored)).toBe(await scoredRows());

    // the text filter on ids
    await page.fill("#episode-filter", "tools");
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll(".ep-row[data-id]").length === 1);
    expect(await page.locator(".ep-row[data-id]").first().getAttribute("data-id")).toBe(ids.tools);
    await page.fill("#episode-filter", "");

    // a row opens its episode; a failed rollout says so, and why (as "the rollout": "run" is the training run on every
    // page, trial 9); the breadcrumb leads back to the run
    await episodeRow(page, ids.failed).click();
    await page.waitForURL(`**/episodes/${encodeURIComponent(ids.failed)}`);
    await waitConnection(page, "failed");
    await waitStatus(page, "failed");
    expect(await page.locator("#ep-banner").innerText()).toMatch(/^The rollout failed: .*sandbox crashed/);
    expect(await page.locator("#crumb-run").innerText()).toBe(run);
    await shoot(page, "episode-failed");
    await page.click("#crumb-run");
    await page.waitForURL(`**/runs/${encodeURIComponent(run)}`);
    await episodeRow(page, ids.failed).waitFor();
    expect(errors).toEqual([]);
    await context.close();
  });
});

describe("motion", () => {
  it("the live dot pulses, and stands still for a reader who asked for less motion (as the tests do)", async () => {
    const dotAnimations = async (reducedMotion: "reduce" | "no-preference") => {
      const { context, page, errors } = await openPage(browser, `${relay.url}/`, { reducedMotion });
      await waitConnection(page, "live");
      const n = await page.evaluate(
        () => (globalThis as any).document.querySelector("#connection .dot").getAnimations().length as number,
      );
      expect(errors).toEqual([]);
      await context.close();
      return n;
    };
    expect(await dotAnimations("no-preference")).toBe(1);
    expect(await dotAnimations("reduce")).toBe(0);
  });
});

// ---- a run of 240 episodes ----

type Status = "live" | "finished" | "failed" | "finish_refused";
interface Planned {
  id: string;
  status: Status;
  /** Scores by reward key (absent: the episode has no score on that key). */
  scores: Record<string, number>;
  calls: number;
  tokens: number;
}

/** Weights the seeded episodes give their rewards (the reward an episode sorts by is Σ score × weight, the trainer's). */
const WEIGHTS: Record<string, number> = { correct: 1, format: 0.25 };

/** Episode n of a seeded run: its outcome, scores, turns and tokens (deterministic, varied). */
function planned(run: string, n: number): Planned {
  const status: Status =
    n % 4 === 0 || n % 4 === 2 ? "finished" : n % 8 === 1 ? "failed" : n % 16 === 3 ? "finish_refused" : "live";
  const scores: Record<string, number> = {};
  if (n % 10 !== 9) scores.correct = ((n * 37) % 101) / 100; // 0 … 1, one in ten unscored
  if (n % 3 === 0) scores.format = (n % 5) / 4; // 0, 0.25, 0.5, 0.75, 1
  return { id: `${run}:${n}`, status, scores, calls: n % 4, tokens: 100 + n };
}

function rewardsOf(p: Planned) {
  return Object.fromEntries(Object.entries(p.scores).map(([k, score]) => [k, { score, weight: WEIGHTS[k]! }]));
}

/**
 * Create the episode as a producer would with bare deltas: an open delta with its nodes and
 * calls, its rewards and token count; then the reply that finishes it, fails it, or is refused
 * (its node count disagrees with the assembly: 409, the episode shows as finish_refused).
 */
async function create(p: Planned): Promise<void> {
  const trace = `t${p.id.replace(/[^A-Za-z0-9]/g, "")}`;
  const nodes = Array.from({ length: p.calls }, (_, i) => ({
    parent: i === 0 ? null : i - 1,
    semantic_parents: [],
    message: { role: "assistant", content: `turn ${i} of ${p.id}` },
    sampled: true,
    timestamp: 1754101000 + i,
    token_ids: [1, 2, 3],
    mask: [true, true, true],
    logprobs: [0, -0.5, -1],
    routed_experts: null,
  }));
  const calls = nodes.map((_, i) => ({
    node: i,
    model: "policy",
    finish_reason: "stop",
    usage: { prompt_tokens: 10, completion_tokens: 3 },
    time: { start: 1754101000 + i, end: 1754101000.5 + i },
  }));
  await post(`/v1/episodes/${p.id}/deltas`, {
    trace,
    open: { version: 1, id: trace },
    ...(p.calls > 0 ? { nodes, calls } : {}),
    set: { rewards: rewardsOf(p), num_total_tokens: p.tokens },
  });
  await finish(p, trace);
}

async function finish(p: Planned, trace = `t${p.id.replace(/[^A-Za-z0-9]/g, "")}`): Promise<void> {
  const counts = { id: trace, nodes: p.calls, calls: p.calls };
  if (p.status === "finished")
    await post(`/v1/episodes/${p.id}/reply`, { success: true, error: null, head: {}, traces: [counts] });
  if (p.status === "failed")
    await post(`/v1/episodes/${p.id}/reply`, {
      success: false,
      error: `sandbox crashed (${p.id})`,
      head: null,
      traces: [],
    });
  if (p.status === "finish_refused")
    await post(
      `/v1/episodes/${p.id}/reply`,
      { success: true, error: null, head: {}, traces: [{ ...counts, nodes: p.calls + 1 }] },
      409,
    );
}

async function post(path: string, body: unknown, status = 200): Promise<void> {
  const res = await fetch(`${relay.url}${path}`, {
    method: "POST",
    body: encode(body),
    headers: { "content-type": "application/msgpack" },
  });
  expect(res.status, `${path}: ${await res.text()}`).toBe(status);
}

/** What the run's counters must read for these episodes. */
function expectedStats(plans: Planned[]): Record<string, number> {
  const count = (s: Status) => plans.filter((p) => p.status === s).length;
  return {
    episodes: plans.length,
    live: count("live"),
    finished: count("finished"),
    failed: count("failed"),
    finish_refused: count("finish_refused"),
  };
}

/** The relay's reward order: best weighted-mean reward first, unscored last, then id descending. */
function byReward(a: Planned, b: Planned): number {
  const [x, y] = [rewardOf(rewardsOf(a)), rewardOf(rewardsOf(b))];
  if (x !== y) return x === null ? 1 : y === null ? -1 : y - x;
  return a.id < b.id ? 1 : -1;
}

const shownIds = (page: Page) =>
  page.$$eval(".ep-row[data-id]", (rows) => rows.map((r) => (r as any).dataset.id as string));

/** The run page draws 50 rows, then 50 more per "show more". */
const STEP = 50;

async function waitRows(page: Page, n: number): Promise<void> {
  await page.waitForFunction(
    (want) => (globalThis as any).document.querySelectorAll(".ep-row[data-id]").length === want,
    n,
  );
}

/** Click "show more" until `n` rows are drawn (each click draws up to STEP more, loading a page when needed). */
async function showAll(page: Page, n: number): Promise<void> {
  for (let shown = Math.min(n, STEP); ; ) {
    await waitRows(page, shown);
    if (shown === n) break;
    await page.click("#episodes-more");
    shown = Math.min(n, shown + STEP);
  }
  expect(await page.locator("#episodes-more").isHidden()).toBe(true);
}

describe("a run the relay has not got", () => {
  it("says so once and looks again after a growing wait (each look a 404 the browser logs), not every few seconds", async () => {
    const run = freshId("norun");
    const path = `/v1/runs/${encodeURIComponent(run)}`;
    const { context, page, errors } = await openPage(
      browser,
      `${relay.url}/runs/${encodeURIComponent(run)}`,
      {},
      {
        clock: true,
      },
    );
    // every request from a load of the page on (the first load's went before a listener could be)
    let looks = 0;
    let alerts = 0;
    page.on("request", (r) => {
      const at = new URL(r.url()).pathname;
      if (at === path) looks++;
      if (at === `${path}/alerts`) alerts++;
    });
    await reloadPage(page);
    await waitConnection(page, "waiting");
    await page.waitForFunction(() =>
      /No run .* to show/.test((globalThis as any).document.querySelector("main")?.textContent),
    );
    const first = looks;
    expect(first).toBe(1);
    const quiet = async (ms: number) => {
      await page.clock.fastForward(ms);
      await page.waitForTimeout(300);
      return looks;
    };
    const next = async (ms: number, want: number) => {
      await page.clock.fastForward(ms);
      await expect.poll(() => looks, { timeout: 5_000 }).toBe(want);
    };
    // 3 s, then 6 s (trial 9: every ~3 s, jittered from 250 ms up, for as long as the page stayed open)
    expect(await quiet(2_000)).toBe(first);
    await next(1_500, first + 1);
    expect(await quiet(5_000)).toBe(first + 1);
    await next(1_500, first + 2);
    expect(await page.locator("#connection .conn-label").innerText()).toBe("waiting for the run");
    expect((await page.locator("main").innerText()).match(/No run /g)).toHaveLength(1);
    // nor are its alerts asked for (another 404) before the run is there
    expect(alerts).toBe(0);
    expect(errors).toEqual([]);
    await context.close();
  });
});

describe("a run of 240 episodes", () => {
  const run = freshId("grpo");
  const plans = Array.from({ length: 240 }, (_, n) => planned(run, n));
  // one page for the describe's tests, each on its path by a route change (pages.ts sharedPage)
  const shared = sharedPage(
    () => browser,
    () => relay.url,
  );
  afterAll(() => shared.close());

  beforeAll(async () => {
    // 16 producers at a time
    for (let i = 0; i < plans.length; i += 16) await Promise.all(plans.slice(i, i + 16).map(create));
  }, 120_000);

  it("the runs page lists the run with the counts of what was created", async () => {
    const want = expectedStats(plans);
    expect(want).toEqual({ episodes: 240, live: 75, finished: 120, failed: 30, finish_refused: 15 });
    const { page, errors } = await shared.visit("/");
    await waitConnection(page, "live");
    await waitRunCounts(page, run, want);
    expect(await runRow(page, run).locator(".run-name").innerText()).toBe(run);
    // the filter narrows the runs by name
    await page.fill("#run-filter", run);
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll(".run-row[data-run]").length === 1);
    await page.fill("#run-filter", "");
    await shoot(page, "runs");
    // on a phone a run is a card: its counts as words ("75 live"), zeros left out
    await page.setViewportSize(PHONE);
    expect(await runRow(page, run).innerText()).toMatch(/75 live[\s\S]*120 finished[\s\S]*30 failed[\s\S]*15 refused/);
    expect(errors).toEqual([]);
  });

  it("the run page shows counters, a histogram per reward key and the throughput of what was created", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(run)}`);
    await waitConnection(page, "live");
    await waitStats(page, expectedStats(plans));
    expect(await statValue(page, "mean_turns")).toBe(String(plans.reduce((a, p) => a + p.calls, 0) / plans.length)); // 1.5
    expect(await page.locator('.stat[data-stat="mean_turns"] .stat-value').innerText()).toBe("1.5");
    expect(await page.locator('.stat[data-stat="mean_tokens"] .stat-value').innerText()).toBe("219.5");
    // all 150 ended within the last ten minutes: 15 a minute
    expect(await statValue(page, "per_minute")).toBe("15");
    // the histograms count the finished episodes unless "include failed / refused" is checked
    const finishedCorrect = plans.filter((p) => p.status === "finished" && "correct" in p.scores).length;
    expect(await page.locator('.hist[data-key="correct"]').getAttribute("data-count")).toBe(String(finishedCorrect));
    await page.check("#rewards-include-all");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("#run-charts")?.dataset.rewards === "all",
    );

    for (const key of ["correct", "format"]) {
      const scores = plans.flatMap((p) => (key in p.scores ? [p.scores[key]!] : []));
      const hist = page.locator(`.hist[data-key="${key}"]`);
      const bars = await hist
        .locator(".hist-bins .hist-bar")
        .evaluateAll((els) => els.map((e) => Number((e as any).dataset.count)));
      const expected = new Array<number>(HISTOGRAM_BINS).fill(0);
      for (const x of scores) expected[binOf(x)]!++;
      expect(bars, `${key} bins`).toEqual(expected);
      expect(bars.reduce((a, b) => a + b, 0)).toBe(scores.length); // 216 and 80: every scored episode, once
      expect(await hist.locator(".hist-bar.outside").count()).toBe(0);
      const stat = (k: string) => hist.locator(`[data-stat="${k}"] dd`).innerText();
      expect(await stat("count")).toBe(String(scores.length));
      expect(Number(await stat("mean"))).toBeCloseTo(scores.reduce((a, b) => a + b, 0) / scores.length, 2);
      expect(await stat("min")).toBe(String(Math.min(...scores)));
      expect(await stat("max")).toBe(String(Math.max(...scores)));
    }
    // and one for "reward", the trainer's reward of every scored episode (kept beside the keys since issue 40)
    expect(await page.locator(".hist").count()).toBe(3);
    expect(await page.locator('.hist[data-key="reward"] [data-stat="count"] dd').innerText()).toBe(
      String(plans.filter((p) => rewardOf(rewardsOf(p)) !== null).length),
    );

    // the throughput over run time (issue 40: it was the last 60 minutes of wall clock, a young run a dash at
    // its end): from the run's first episode, every ended one in a point, run time 0 on the axis
    const thr = page.locator("#throughput");
    await page.waitForFunction(
      () => Number((globalThis as any).document.querySelector("#throughput .plot")?.dataset.drawn) > 0,
    );
    expect(await thr.getAttribute("data-total")).toBe("150");
    const plotted = await thr.locator(".plot").evaluate((el: any) => ({
      series: JSON.parse(el.dataset.series) as Array<{ points: Array<[number, number]> }>,
      xTicks: JSON.parse(el.dataset.xTicks) as string[],
    }));
    const points = plotted.series[0]!.points;
    expect(points.length).toBe(Number(await thr.getAttribute("data-points")));
    expect(points[0]![0]).toBe(0);
    // each point's value is per minute: times the minutes per point, they add up to the ended episodes
    const per = points.length > 1 ? points[1]![0] - points[0]![0] : 1;
    expect(points.reduce((a, [, v]) => a + v * per, 0)).toBeCloseTo(150, 9);
    expect(plotted.xTicks[0]).toBe("0:00");
    expect(await page.locator('#throughput [data-stat="ended"] dd').innerText()).toBe("150");

    // the list: the 50 most recently updated first, then more on demand
    await waitRows(page, STEP);
    expect(await page.locator("#episodes-shown").innerText()).toBe("50 of 240 episodes");
    const updated = await page.$$eval(".ep-row[data-id] .cell-age .age", (els) =>
      els.map((e) => Date.parse((e as any).dataset.ago)),
    );
    expect(updated).toEqual([...updated].sort((a, b) => b - a));
    await showAll(page, 240);
    expect(new Set(await shownIds(page))).toEqual(new Set(plans.map((p) => p.id)));
    await reloadPage(page);
    await waitStats(page, expectedStats(plans));
    await waitRows(page, STEP);
    await shoot(page, "run");
    expect(errors).toEqual([]);
  });

  it("filters by status and id, sorts by reward, and a row opens its episode", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(run)}`);
    await waitConnection(page, "live");
    await waitRows(page, STEP);
    for (const status of ["failed", "finish_refused", "live"] as const) {
      await page.click(`.segmented button[data-status="${status}"]`);
      const want = plans.filter((p) => p.status === status).map((p) => p.id);
      await showAll(page, want.length);
      expect(new Set(await shownIds(page))).toEqual(new Set(want));
      expect(await page.locator("#episodes-shown").innerText()).toBe(`${want.length} of ${want.length} episodes`);
    }
    // by reward: the relay's order, best first
    await page.click('.segmented button[data-status="all"]');
    await page.click('.segmented button[data-sort="reward"]');
    const best = [...plans].sort(byReward).map((p) => p.id);
    await page.waitForFunction(
      (first) => (globalThis as any).document.querySelector(".ep-row[data-id]")?.dataset.id === first,
      best[0],
    );
    expect(await shownIds(page)).toEqual(best.slice(0, STEP));
    const rewards = await page.$$eval(".ep-row[data-id]", (rows) => rows.map((r) => Number((r as any).dataset.reward)));
    expect(rewards).toEqual([...rewards].sort((a, b) => b - a));
    expect(rewards[0]).toBe(rewardOf(rewardsOf(plans.find((p) => p.id === best[0])!)));
    // failed ones by reward
    await page.click('.segmented button[data-status="failed"]');
    await waitRows(page, 30);
    expect(await shownIds(page)).toEqual(best.filter((id) => plans.find((p) => p.id === id)!.status === "failed"));
    // the id filter: "<run>:17" is episode 17 and 170-179
    await page.click('.segmented button[data-status="all"]');
    await page.fill("#episode-filter", `${run}:17`);
    const seventeen = best.filter((id) => id.includes(`${run}:17`));
    expect(seventeen).toHaveLength(11);
    await waitRows(page, seventeen.length);
    expect(await shownIds(page)).toEqual(seventeen);

    // a row opens its episode page; its rewards are the ones created
    const p = plans[174]!;
    expect(p.status).toBe("finished");
    expect(p.calls).toBe(2);
    await episodeRow(page, p.id).click();
    await page.waitForURL(`**/episodes/${encodeURIComponent(p.id)}`);
    await waitStatus(page, "finished");
    expect(await page.locator('.card[data-card="rewards"]').innerText()).toMatch(
      new RegExp(`correct\\s*${p.scores.correct}`),
    );
    expect(await page.locator("li.turn").count()).toBe(p.calls);
    await page.goBack();
    // back on the run page, in the order it was left (the sort lives in the URL)
    await page.waitForURL((u) => u.pathname === `/runs/${encodeURIComponent(run)}`);
    expect(new URL(page.url()).searchParams.get("sort")).toBe("reward");
    await waitStats(page, expectedStats(plans));
    expect(errors).toEqual([]);
  });

  it("with a snapshot cut short (?limit=30) the list, the status and the reward views page the relay's list", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(run)}?limit=30`);
    await waitConnection(page, "live");
    await waitRows(page, 30);
    expect(await page.locator(".run-episodes").getAttribute("data-complete")).toBe("false");
    expect(await page.locator("#episodes-shown").innerText()).toBe("30 of 240 episodes");
    // the default view goes on with the relay's pages (the first page overlaps the snapshot)
    await page.click("#episodes-more");
    await waitRows(page, 80);
    const newest = await shownIds(page);
    expect(new Set(newest).size).toBe(80);
    // reward order comes from the relay (the snapshot has the newest 30 only)
    await page.click('.segmented button[data-sort="reward"]');
    const best = [...plans].sort(byReward).map((p) => p.id);
    await page.waitForFunction(
      (first) => (globalThis as any).document.querySelector(".ep-row[data-id]")?.dataset.id === first,
      best[0],
    );
    expect(await shownIds(page)).toEqual(best.slice(0, STEP));
    await showAll(page, 240); // a page of 200, then the last 40
    expect(await shownIds(page)).toEqual(best);
    // a status from the relay too
    await page.click('.segmented button[data-sort="updated"]');
    await page.click('.segmented button[data-status="finished"]');
    await showAll(page, 120);
    expect(new Set(await shownIds(page))).toEqual(
      new Set(plans.filter((p) => p.status === "finished").map((p) => p.id)),
    );
    expect(errors).toEqual([]);
  });

  it("a finish and a new episode update the counters, the list and the throughput without a reload", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(run)}`);
    await waitConnection(page, "live");
    await waitStats(page, expectedStats(plans));
    await page.check("#rewards-include-all"); // the histograms count every episode, the live new one too
    await page.evaluate(() => {
      (globalThis as any).notReloaded = true;
    });
    // finish one more (a live one, no score on `format`)
    const p = plans[5]!;
    expect(p.status).toBe("live");
    p.status = "finished";
    await finish(p);
    await waitStats(page, expectedStats(plans));
    expect(await statValue(page, "finished")).toBe("121");
    expect(await statValue(page, "live")).toBe("74");
    await page.waitForFunction(
      (id) => (globalThis as any).document.querySelector(`.ep-row[data-id="${id}"]`)?.dataset.status === "finished",
      p.id,
    );
    expect(await page.locator(".ep-row[data-id]").first().getAttribute("data-id")).toBe(p.id); // the latest update is on top
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("#throughput")?.dataset.total === "151",
    );
    // a new episode
    const added = planned(run, 240);
    plans.push(added);
    await create(added);
    await waitStats(page, expectedStats(plans));
    expect(await statValue(page, "episodes")).toBe("241");
    await episodeRow(page, added.id).waitFor();
    expect(await page.locator('.hist[data-key="correct"]').getAttribute("data-count")).toBe(
      String(plans.filter((x) => "correct" in x.scores).length),
    );
    expect(await page.evaluate(() => (globalThis as any).notReloaded)).toBe(true);
    expect(errors).toEqual([]);
  });
});

// ---- one episode ----

describe("episode page (/episodes/{id})", () => {
  // one page for the tests on this relay, each on its episode by a route change (pages.ts sharedPage)
  const shared = sharedPage(
    () => browser,
    () => relay.url,
  );
  afterAll(() => shared.close());

  it("streams turns, tool calls and the pending preview before its turn commits, then rewards and finish", async () => {
    const id = freshId("tools");
    const c = golden("tool_calls_pending");
    const p = producer(() => relay.url, id, c);
    const { page, errors } = await shared.visit(`/episodes/${id}`);
    // opened before the episode exists: the watcher waits for it, and the page says it has no such episode yet
    await waitConnection(page, "live");
    expect(await page.locator("#connection").innerText()).toMatch(/relay\s*connected/);
    await waitStatus(page, "missing");
    expect(await page.locator("#ep-status").innerText()).toMatch(/not found/i);
    // nothing to download or route yet (trial 9: the buttons stood beside "not found"), nor counts of nothing
    for (const tool of ["#download-json", "#download-msgpack", "#routing-toggle", ".ep-stats"])
      expect(await page.locator(tool).isVisible(), tool).toBe(false);
    await p.send(2); // open + the first turn (system, user, assistant with a tool call)
    await page.locator('li.turn[data-node="2"]').waitFor();
    for (const tool of ["#download-json", "#routing-toggle", ".ep-stats"])
      expect(await page.locator(tool).isVisible(), tool).toBe(true);
    expect(await page.locator('li.turn[data-node="2"] .tool-call').innerText()).toMatch(
      /calculator[\s\S]*expr: "6\*7"/,
    );

    // frame 2: a pending preview (the tool's answer) streams before any tool turn is committed
    await p.send(1);
    const pending = page.locator("section.trace .pending");
    await pending.waitFor({ state: "visible" });
    expect(await pending.innerText()).toContain("tool says 42");
    expect(await page.locator('li.turn[data-role="tool"]').count()).toBe(0);
    // frame 3: a second message is appended to the preview
    await p.send(1);
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("section.trace .pending")?.dataset.count === "2",
    );
    expect(await pending.innerText()).toContain("sub-agent asks");
    await shoot(page, "episode-pending");
    // frame 4: the tool turn commits; the preview is absorbed
    await p.send(1);
    await page.locator('li.turn[data-role="tool"]').first().waitFor();
    await pending.waitFor({ state: "hidden" });

    await p.rest();
    await p.reply();
    await waitConnection(page, "finished");
    await waitStatus(page, "finished");
    expect(await page.locator("li.turn").count()).toBe(9);
    expect(await page.locator(".tool-call").count()).toBe(3);
    expect(await page.locator('li.turn[data-node="8"]').innerText()).toContain("The answer is 42.");
    expect(await page.locator('.card[data-card="rewards"]').innerText()).toMatch(/correct\s*1/);
    expect(await page.locator('.card[data-card="metrics"]').innerText()).toMatch(/tool_calls\s*3/);
    expect(await page.locator(".trace-errors").innerText()).toContain("upstream returned 502");
    await shoot(page, "episode-tools");
    expect(errors).toEqual([]);
  });

  it("names the delta keys the relay does not know: from the status, and live ones from the watch", async () => {
    const id = freshId("unknown");
    const post = async (delta: Record<string, unknown>) => {
      const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, { method: "POST", body: encode(delta) });
      expect(res.status).toBe(200);
      return (await res.json()) as { unknown?: string[] };
    };
    const first = await post({
      trace: "t1",
      open: { id: "t1" },
      nodes: [{ message: { role: "user", content: "What is 6*7?" } }],
      future_list: [1, 2],
      set: { future_scalar: true },
      future_flag: "only in the frame",
    });
    expect(first.unknown).toEqual(["future_list", "set.future_scalar", "future_flag"]);
    const { page, errors } = await shared.visit(`/episodes/${id}`);
    await page.locator('li.turn[data-node="0"]').waitFor();
    const note = page.locator("#ep-unknown");
    await note.waitFor({ state: "visible" });
    // the frame-only key came before the page: the status named it (a snapshot does not carry it)
    expect(await note.innerText()).toContain("future_list, set.future_scalar, future_flag");
    await post({ trace: "t1", nodes: [{ message: { role: "assistant", content: "42" } }], later_flag: 1 });
    await page.locator('li.turn[data-node="1"]').waitFor();
    await page.waitForFunction(() =>
      (globalThis as any).document.querySelector("#ep-unknown")?.textContent.includes("later_flag"),
    );
    expect(await note.innerText()).toMatch(/4 delta keys this relay does not know/);
    expect(errors).toEqual([]);
  });

  it("its watch socket offers permessage-deflate (as Chromium does) and gets none: one encoding on the wire", async () => {
    const id = freshId("deflate");
    await pushCase("chat_basic", id);
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    await cdp.send("Network.enable");
    const handshakes: Array<{ url: string; request: Record<string, string>; response: Record<string, string> }> = [];
    const urls = new Map<string, string>();
    const requests = new Map<string, Record<string, string>>();
    cdp.on("Network.webSocketCreated", (e: { requestId: string; url: string }) => urls.set(e.requestId, e.url));
    cdp.on(
      "Network.webSocketWillSendHandshakeRequest",
      (e: { requestId: string; request: { headers: Record<string, string> } }) =>
        requests.set(e.requestId, e.request.headers),
    );
    cdp.on(
      "Network.webSocketHandshakeResponseReceived",
      (e: { requestId: string; response: { status: number; headers: Record<string, string> } }) =>
        handshakes.push({
          url: urls.get(e.requestId) ?? "",
          request: requests.get(e.requestId) ?? {},
          response: e.response.headers,
        }),
    );
    await gotoPage(page, `${relay.url}/episodes/${id}`);
    await waitConnection(page, "finished");
    const watch = handshakes.find((h) => h.url.includes(`/v1/episodes/${id}/watch`));
    expect(watch, "the page's watch socket").toBeDefined();
    const header = (h: Record<string, string>, name: string) =>
      Object.entries(h).find(([k]) => k.toLowerCase() === name)?.[1];
    expect(header(watch!.request, "sec-websocket-extensions"), "Chromium offers it").toMatch(/permessage-deflate/);
    expect(header(watch!.response, "sec-websocket-extensions"), "the relay declines it").toBeUndefined();
    await context.close();
  });

  it("shows traces side by side with their semantic links (orchestrator and two sub-agents)", async () => {
    const id = freshId("multi");
    await pushCase("multi_trace_links", id);
    const { page, errors } = await shared.visit(`/episodes/${id}`);
    await waitConnection(page, "finished");
    const traces = page.locator("section.trace");
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll("section.trace").length === 3);
    expect(await traces.nth(0).locator(".trace-kind").innerText()).toMatch(/orchestrator/i);
    expect(await traces.nth(1).locator(".trace-kind").innerText()).toMatch(/sub-agent/i);
    // the sub-agents name the orchestrator turn that spawned them
    expect(await traces.nth(1).locator(".trace-head").innerText()).toMatch(/spawned by orchestrator #2/);
    expect(await traces.nth(2).locator(".trace-head").innerText()).toMatch(/spawned by orchestrator #2/);
    expect(await page.locator(".turn-links .chip.link").count()).toBeGreaterThanOrEqual(6);
    expect(await traces.nth(0).innerText()).toContain("Done: researched and implemented mergesort.");
    // side by side on a desktop: the three columns share one row
    const boxes = await Promise.all([0, 1, 2].map((i) => traces.nth(i).boundingBox()));
    expect(new Set(boxes.map((b) => Math.round(b!.y))).size).toBe(1);
    await shoot(page, "episode-multi");
    // stacked on a phone
    await page.setViewportSize(PHONE);
    await page.waitForTimeout(150);
    const narrow = await Promise.all([0, 1].map((i) => traces.nth(i).boundingBox()));
    expect(narrow[1]!.y).toBeGreaterThan(narrow[0]!.y + narrow[0]!.height - 1);
    expect(errors).toEqual([]);
  });

  it("draws the routing heatmap on demand, with repaired rows marked (routing_repair_u8)", async () => {
    const id = freshId("routing");
    await pushCase("routing_repair_u8", id);
    const { page, errors } = await shared.visit(`/episodes/${id}`);
    await waitConnection(page, "finished");
    await page.locator('li.turn[data-node="12"]').waitFor();
    expect(await page.locator("canvas.heatmap").count()).toBe(0);
    await page.click("#routing-toggle");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelectorAll("canvas.heatmap").length === 6,
      null,
      { timeout: 15_000 },
    );
    const maps = await page.evaluate(() =>
      [...(globalThis as any).document.querySelectorAll("canvas.heatmap")].map((cv: any) => {
        const d = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
        const colours = new Set<number>();
        let painted = 0;
        for (let i = 0; i < d.length; i += 4) {
          if (d[i + 3] === 0) continue;
          painted++;
          colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        }
        return {
          tokens: Number(cv.dataset.tokens),
          layers: Number(cv.dataset.layers),
          repaired: cv.dataset.repaired as string,
          painted,
          colours: colours.size,
          node: cv.closest("li.turn").dataset.node,
        };
      }),
    );
    expect(maps.map((m) => [m.node, m.tokens, m.layers])).toEqual([
      ["2", 9, 4],
      ["4", 40, 4],
      ["6", 25, 4],
      ["8", 38, 4],
      ["10", 9, 4],
      ["12", 22, 4],
    ]);
    for (const m of maps) {
      expect(m.painted).toBeGreaterThan(m.tokens * m.layers);
      expect(m.colours).toBeGreaterThan(3);
    }
    // five routing_repairs (nodes 2, 4, 6, 8, 10), each rewrote that node's last row
    expect(maps.map((m) => m.repaired)).toEqual(["8", "39", "24", "37", "8", ""]);
    expect(await page.locator(".repaired-note").count()).toBe(5);
    // beside each heatmap: its colour key and the node's per-layer expert load, figures as counted from the golden episode
    await expectRoutingFigures(page, golden("routing_repair_u8"));
    await page.locator('li.turn[data-node="4"]').scrollIntoViewIfNeeded();
    await shoot(page, "episode-heatmap");
    expect(errors).toEqual([]);
  });

  it("keys and counts uint16 routing widened by a repair, expert ids past 255 (routing_repair_widen)", async () => {
    const id = freshId("widen");
    await pushCase("routing_repair_widen", id);
    const { page, errors } = await shared.visit(`/episodes/${id}`);
    await waitConnection(page, "finished");
    await page.click("#routing-toggle");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelectorAll("canvas.heatmap").length === 4,
      null,
      { timeout: 15_000 },
    );
    await expectRoutingFigures(page, golden("routing_repair_widen"));
    expect(Math.max(...(await shownRouting(page)).map((s) => s.legend.max))).toBeGreaterThan(255);
    expect(errors).toEqual([]);
  });

  it("draws large_routing heatmaps (12 nodes of ~1500 tokens × 48 layers)", async () => {
    const id = freshId("large");
    await pushCase("large_routing", id);
    const { page, errors } = await shared.visit(`/episodes/${id}`);
    await waitConnection(page, "finished");
    await page.click("#routing-toggle");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelectorAll("canvas.heatmap").length === 12,
      null,
      { timeout: 30_000 },
    );
    const repaired = await page.evaluate(
      () =>
        [...(globalThis as any).document.querySelectorAll("canvas.heatmap")].filter(
          (c: any) => c.dataset.repaired !== "",
        ).length,
    );
    expect(repaired).toBe(11);
    // sampled heatmaps: the key covers the columns drawn; the 48-layer load tables start folded, figures as counted
    await expectRoutingFigures(page, golden("large_routing"), { sampled: true });
    await shoot(page, "episode-large-routing");
    expect(errors).toEqual([]);
  }, 120_000);

  it("after the relay restarts: resuming, then live again, and still ends with every turn", async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "relay-restart-"));
    let local = await startRelay({ port, persistDir: dir });
    try {
      const id = freshId("restart");
      const c = golden("chat_basic");
      const p = producer(() => local.url, id, c);
      await p.send(4);
      const { context, page, errors } = await open(`/episodes/${id}`, local.url);
      await waitConnection(page, "live");
      await page.locator("li.turn").first().waitFor(); // drawn in the frame after the pill turns
      const before = await page.locator("li.turn").count();
      expect(before).toBeGreaterThan(0);

      await local.stop();
      await waitConnection(page, "resuming");
      await shoot(page, "episode-resuming");
      local = await startOn(port, dir);
      await waitConnection(page, "live", 20_000);
      expect(await page.locator("li.turn").count()).toBe(before);

      await p.rest();
      await p.reply();
      await waitConnection(page, "finished");
      await waitStatus(page, "finished"); // the badge is drawn with the last turns
      expect(await page.locator("li.turn").count()).toBe(7);
      const text = await page.locator("section.trace").innerText();
      for (const t of messageTexts(c)) expect(text).toContain(t);
      expect(errors).toEqual([]);
      await context.close();
    } finally {
      await local.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});

// ---- tokens ----

describe("with auth on", () => {
  it("asks for a token, takes one from the login field or ?token=, and shows only the token's runs and episodes", async () => {
    const secret = "browser-test-secret-0c1d2e3f4a5b6c7d8e9f00112233";
    const authed = await startRelay({ vars: { RELAY_SECRET: secret } });
    try {
      const run = freshId("auth");
      const [mine, theirs, other] = [`${run}:mine`, `${run}:theirs`, `${run}-x:other`];
      const producerToken = await mintToken(secret, { role: "producer", episodes: [`${run}*`], ttl: 600 });
      for (const id of [mine, theirs, other]) {
        const p = producer(() => authed.url, id, golden("chat_basic"), { authorization: `Bearer ${producerToken}` });
        await p.rest();
        await p.reply();
      }
      // covers the run `run` whole, not the run `run-x`
      const watcher = await mintToken(secret, { role: "watcher", episodes: [`${run}:*`], ttl: 600 });
      // covers one episode of `run`: no run whole
      const narrow = await mintToken(secret, { role: "watcher", episodes: [mine], ttl: 600 });

      // no token: the runs page says why and offers the field
      const { context, page, errors } = await open("/", authed.url);
      await page.locator("#token-panel").waitFor({ state: "visible" });
      expect(await page.locator(".token-reason").innerText()).toMatch(/needs a token/);
      // the relay answered (401): the pill says a token is needed, not that the relay is offline
      expect(await connection(page)).toBe("unauthorized");
      expect(await page.locator("#connection .conn-label").innerText()).toBe("token needed");
      expect(await page.locator("#runs .empty").innerText()).toMatch(/Sign in with a token/);
      await shoot(page, "runs-token");
      await page.fill(".token-input", watcher);
      await page.click('#token-panel button[type="submit"]');
      await waitConnection(page, "live");
      await waitRunCounts(page, run, { finished: 2, episodes: 2 });
      expect(await runRow(page, `${run}-x`).count()).toBe(0);
      expect(await page.evaluate(() => (globalThis as any).sessionStorage.getItem("episode-relay-token"))).toBe(
        watcher,
      );
      // the run the token covers: counters and both episodes
      await runRow(page, run).click();
      await waitStats(page, { episodes: 2, finished: 2 });
      await episodeRow(page, theirs).waitFor();
      expect(new Set(await shownIds(page))).toEqual(new Set([mine, theirs]));
      expect(await page.locator("#run-partial").isHidden()).toBe(true);
      await context.close();

      // ?token= in the page URL: kept for the tab, taken out of the address bar, passed to the watcher
      const second = await open(`/episodes/${mine}?token=${narrow}`, authed.url);
      await waitConnection(second.page, "finished");
      expect(await second.page.locator("li.turn").count()).toBe(7);
      expect(second.page.url()).not.toContain("token=");
      // its run, for a token that covers only part of it: the episodes it may see, no run totals
      await second.page.click("#crumb-run");
      await second.page.waitForURL(`**/runs/${encodeURIComponent(run)}`);
      await waitConnection(second.page, "live");
      await episodeRow(second.page, mine).waitFor();
      await second.page.locator("#run-partial").waitFor({ state: "visible" });
      expect(await shownIds(second.page)).toEqual([mine]);
      expect(await second.page.locator("#run-stats").isVisible()).toBe(false);
      expect(await second.page.locator(".hist").count()).toBe(0);
      await shoot(second.page, "run-partial");
      // and the runs page lists no run for it
      await second.page.click('.crumbs a[href="/"]');
      await waitConnection(second.page, "live");
      await second.page.waitForFunction(() =>
        /No runs yet/.test((globalThis as any).document.querySelector("#runs .empty")?.textContent ?? ""),
      );
      // a token that does not cover the episode: the page says so
      await gotoPage(second.page, `${authed.url}/episodes/${other}`);
      await second.page.locator("#token-panel").waitFor({ state: "visible" });
      expect(await second.page.locator("#waiting").innerText()).toMatch(/does not cover/);
      await waitStatus(second.page, "denied");
      expect(await second.page.locator("#ep-status").innerText()).toMatch(/not allowed/i);
      // 403: the relay answered, the token does not cover the episode
      expect(await connection(second.page)).toBe("forbidden");
      expect(await second.page.locator("#connection .conn-label").innerText()).toBe("no access");
      // the connection pill never reads like a run status
      expect(await second.page.locator("#connection").innerText()).not.toMatch(/\b(live|finished|failed)\b/i);
      // a run the token covers nothing of (the relay answers 404 as for a run nobody wrote): the page reads the token's
      // scope, says so plainly and ends the watch (no "reconnecting", no probe after the first)
      const probes: string[] = [];
      second.page.on("request", (r) => {
        if (new URL(r.url()).pathname === `/v1/runs/${encodeURIComponent(`${run}-x`)}`) probes.push(r.url());
      });
      await gotoPage(second.page, `${authed.url}/runs/${encodeURIComponent(`${run}-x`)}`);
      await second.page.waitForFunction(() =>
        /This token covers no episode of run/.test(
          (globalThis as any).document.querySelector("main")?.textContent ?? "",
        ),
      );
      expect(await second.page.locator("main").innerText()).toContain(mine);
      await waitConnection(second.page, "forbidden");
      // the retry after a 404 comes within a second (reconnectDelay's first step): none came
      await second.page.waitForTimeout(2500);
      expect(probes).toHaveLength(1);
      expect(await connection(second.page)).toBe("forbidden");
      // a run nobody wrote yet, for a token that may see it when it comes: the pill says the page waits for it
      const any = await mintToken(secret, { role: "watcher", episodes: ["*"], ttl: 600 });
      const third = await open(`/runs/${encodeURIComponent(`${run}-none`)}?token=${any}`, authed.url);
      await waitConnection(third.page, "waiting");
      expect(await third.page.locator("#connection .conn-label").innerText()).toBe("waiting for the run");
      expect(await third.page.locator("main").innerText()).toMatch(/looks again now and then/);
      expect([...errors, ...second.errors, ...third.errors]).toEqual([]);
      await second.context.close();
      await third.context.close();
    } finally {
      await authed.stop();
    }
  });
});

/** The relay again on the same port and storage (the port may take a moment to be free). */
async function startOn(port: number, dir: string): Promise<LocalRelay> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await startRelay({ port, persistDir: dir });
    } catch (e) {
      if (attempt >= 20) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** The string message contents of a case's finished episode (what the page must show). */
function messageTexts(c: GoldenCase): string[] {
  const episode = toJson(decodeLossless(c.episode!)) as {
    traces: Array<{ nodes: Array<{ message: { content: unknown } }> }>;
  };
  return episode.traces
    .flatMap((t) => t.nodes.map((n) => n.message.content))
    .filter((x): x is string => typeof x === "string" && x.length > 0);
}

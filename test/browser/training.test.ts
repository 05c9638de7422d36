// The training a rollout belongs to, in the dashboard (issue 26), in Debian's headless Chromium
// against the real relay bundle: a run pushed as prime-rl's orchestrator would (training-run.ts):
// every rollout announced with its dispatch identity, train steps 0-3 in two groups of 4 (one
// with zero variance, one sampled a policy behind, a failed rollout, a truncated one, a reward
// hacker), eval at steps 0 and 2, a live step 4 (one booting, one running, two announced only),
// and prime-rl's annotation records posted for two finished rollouts. Every check compares what
// the page shows with what the relay holds (its /steps, /episodes, /groups, /status and
// /annotations answers) or what the test posted. Screenshots at 1280×800 and 390×844 in
// test-results/screenshots/ (`training-*.png`).
import { mkdirSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { foldOntoNodes, mismatchKl } from "../../src/protocol/annotations/fold.js";
import type { IndexEntry } from "../../src/protocol/registry/entry.js";
import type { GroupDetailJson } from "../../src/protocol/registry/groups.js";
import type { StepJson, StepsPage } from "../../src/protocol/registry/steps.js";
import { chromiumForFile } from "./chromium.js";
import { gotoPage, openPage, reloadPage, SHOTS, sharedPage, shoot, shootPart } from "./pages.js";
import { relayCalls } from "./rollouts.js";
import {
  HACK,
  type JsonNode,
  type NodeValues,
  postAnnotations,
  primeRecords,
  pushRollout,
  type Rollout,
  trainingPlan,
} from "./training-run.js";

let browser: Browser;
let relay: LocalRelay;
const { api, indexed } = relayCalls(() => relay.url);

const RUN = `train-ui-${Date.now().toString(36)}`;
const plan = trainingPlan(RUN, Date.now() / 1000);
const byName = (name: string) => plan.find((r) => r.id === `${RUN}:${name}`)!;
/** Annotated by the trainer and its orchestrator (advantage 0.75), and the zero-variance group's (advantage 0). */
const ANNOTATED = byName("t3-g1-0");
const ZERO_ADV = byName("t1-g0-0");
/** Never annotated (until the re-check test posts its records), and an eval rollout. */
const LATE = byName("t2-g0-1");
const EVAL = byName("e0-g0-0");
const expected = new Map<string, Map<number, NodeValues>>();

interface EpisodeJson {
  traces: Array<{ id: string; task: { type: string; key: string; data: Record<string, unknown> }; nodes: JsonNode[] }>;
}
const episodeJson = async (id: string) => {
  const res = await fetch(`${relay.url}/v1/episodes/${encodeURIComponent(id)}`, {
    headers: { accept: "application/json" },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as EpisodeJson;
};
async function annotationsJson(id: string) {
  const res = await fetch(`${relay.url}/v1/episodes/${encodeURIComponent(id)}/annotations`, {
    headers: { accept: "application/json" },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as {
    version: number;
    traces: Array<{ trace_id: string; info: unknown; branches: Array<{ index: number } & Record<string, unknown>> }>;
  };
}

/** Post prime-rl's two records for `r` (its only trace), remembering what each node carries. */
async function annotate(r: Rollout, advantage: number): Promise<void> {
  const ep = await episodeJson(r.id);
  const t = ep.traces[0]!;
  const { records, expected: values } = primeRecords(t.id, t.nodes, advantage, r.dispatch.step + 1);
  await postAnnotations(relay.url, r.id, records);
  expected.set(r.id, values);
}

/** Every page of a list (the relay's pages may come back short with a cursor). */
async function listed(query: string): Promise<IndexEntry[]> {
  const out: IndexEntry[] = [];
  let cursor: string | null = null;
  do {
    const q = new URLSearchParams(query);
    q.set("limit", "500");
    if (cursor) q.set("cursor", cursor);
    const page = await api<{ episodes: IndexEntry[]; cursor: string | null }>(`/v1/runs/${RUN}/episodes?${q}`);
    out.push(...page.episodes);
    cursor = page.cursor;
  } while (cursor);
  return out;
}

const allSteps = async () => (await api<StepsPage>(`/v1/runs/${RUN}/steps?limit=500`)).steps;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  // the dashboard follows live rows here: their flush at 2 s, not the default 30 s (INDEX_FLUSH_MS), the run
  // attended or not (INDEX_IDLE_FLUSH_MS: rows written before a page opens are not held 2 minutes)
  relay = await startRelay({ vars: { INDEX_FLUSH_MS: "2000", INDEX_IDLE_FLUSH_MS: "2000" } });
  for (let i = 0; i < plan.length; i += 12)
    await Promise.all(plan.slice(i, i + 12).map((r) => pushRollout(relay.url, r)));
  const n = (o: Rollout["outcome"][]) => plan.filter((r) => o.includes(r.outcome)).length;
  await indexed(
    RUN,
    { finished: n(["finished"]), failed: n(["failed"]), live: n(["boot", "running", "pending"]) },
    60_000,
  );
  // the running rollout's turns reach its row (a live row's facts are flushed in the background)
  const running = byName("t4-g0-1");
  for (const end = Date.now() + 20_000; ; ) {
    const [row] = await listed(`step=4`).then((rows) => rows.filter((r) => r.id === running.id));
    if (row?.calls === 2 && row.live?.last) break;
    if (Date.now() > end) throw new Error(`the running rollout's row never showed its turns: ${JSON.stringify(row)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  await annotate(ANNOTATED, 0.75);
  await annotate(ZERO_ADV, 0);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

/** One page for the file's tests, each on its path by a route change (pages.ts sharedPage). */
const shared = sharedPage(
  () => browser,
  () => relay.url,
);
afterAll(() => shared.close());
/** How often the episode page checks an ended episode's annotations again (dashboard/src/episode/annotations-source.ts). */
const RECHECK_MS = 15_000;

async function waitFor(page: Page, fn: string, arg?: unknown, timeout = 15_000): Promise<void> {
  await page.waitForFunction(
    new Function("arg", `const document = globalThis.document; return (${fn})(arg);`) as never,
    arg,
    { timeout },
  );
}

async function waitListed(page: Page, ids: string[]): Promise<void> {
  await waitFor(
    page,
    "(want) => JSON.stringify([...document.querySelectorAll('#episodes .ep-row[data-id]')].map((r) => r.dataset.id)) === JSON.stringify(want)",
    ids,
  );
}

describe("per-step charts on the run page", () => {
  it("draw each step's mean reward per key and zero-variance share, train and eval apart, as /steps holds them", async () => {
    const steps = await allSteps();
    expect(new Set(steps.map((s) => `${s.step}:${s.kind}`))).toEqual(
      new Set(["0:train", "1:train", "2:train", "3:train", "4:train", "0:eval", "2:eval"]),
    );
    const { page, errors } = await shared.visit(`/runs/${RUN}`);
    // each chart's points as plotted (plot.ts writes what uPlot was given on its box): [step, value] per step of the kind
    const points = (chart: string, kind: string, key: string) =>
      page.$eval(
        `#${chart} .plot`,
        (el: any, [k, kk]) =>
          JSON.parse(el.dataset.series ?? "[]").find((x: any) => x.kind === k && x.key === kk)?.points,
        [kind, key],
      ) as Promise<Array<[number, number | null]> | undefined>;
    await waitFor(page, "() => Number(document.querySelector('#step-rewards .plot')?.dataset.drawn ?? 0) > 0");
    // a point per reward key and step that has a value (the adapted form of the SVG markers it had before uPlot)
    await waitFor(
      page,
      "(n) => JSON.parse(document.querySelector('#step-rewards .plot').dataset.series).reduce((a, x) => a + x.points.filter(([, v]) => v !== null).length, 0) === n",
      countRewardPoints(steps),
    );
    for (const kind of ["train", "eval"]) {
      for (const key of ["correct", "format"]) {
        const want = steps
          .filter((s) => s.kind === kind && s.mean_rewards[key] !== undefined)
          .map((s) => [s.step, s.mean_rewards[key]!]);
        const got = ((await points("step-rewards", kind, key)) ?? []).filter(([, v]) => v !== null);
        expect(
          got.map(([s]) => s),
          `${kind} ${key}`,
        ).toEqual(want.map(([s]) => s));
        for (const [i, [, v]] of got.entries()) expect(v).toBeCloseTo(want[i]![1], 9);
      }
      // the zero-variance share: a point per step with a complete group, none where none is complete
      const zero = ((await points("step-zero-variance", kind, "zero_variance")) ?? []).filter(([, v]) => v !== null);
      expect(zero).toEqual(
        steps
          .filter((s) => s.kind === kind && s.zero_variance_share !== null)
          .map((s) => [s.step, s.zero_variance_share]),
      );
    }
    // what the plan says of it: step 1's train groups are one of zero variance in two; step 2's eval group all scored the same
    expect(steps.find((s) => s.step === 1 && s.kind === "train")!.zero_variance_share).toBe(0.5);
    expect(steps.find((s) => s.step === 2 && s.kind === "eval")!.zero_variance_share).toBe(1);
    // the live step 4 has no finished rollout: no reward value there
    for (const key of ["correct", "format", "reward"])
      expect((await points("step-rewards", "train", key))!.find(([s]) => s === 4)?.[1] ?? null).toBeNull();
    // eval series are dashed, train solid: one for the trainer's reward (mean_rewards.reward), first, and one per key
    const evalSeries = await page.$eval("#step-rewards .plot", (el: any) =>
      JSON.parse(el.dataset.series).map((x: any) => [x.kind, x.key, x.dashed]),
    );
    expect(evalSeries.filter(([k]: string[]) => k === "eval")).toEqual([
      ["eval", "reward", true],
      ["eval", "correct", true],
      ["eval", "format", true],
    ]);
    expect(evalSeries.filter(([k]: string[]) => k === "train").every(([, , d]: unknown[]) => d === false)).toBe(true);
    expect(await page.locator("#step-rewards .u-legend .u-label").allInnerTexts()).toContain("reward · eval");
    // the groups table names each group's step and kind (the relay's groups page; a run without identities has no such column)
    expect(await page.locator(".run-page").getAttribute("data-identity")).toBe("yes");
    const groups = (
      await api<{ groups: Array<{ id: string; step: number | null; kind: string | null }> }>(
        `/v1/runs/${RUN}/groups?limit=10`,
      )
    ).groups;
    await waitFor(page, "(n) => document.querySelectorAll('#groups .g-row[data-group]').length === n", groups.length);
    for (const g of groups) {
      const row = page.locator(`#groups .g-row[data-group="${g.id}"]`);
      expect([await row.getAttribute("data-step"), await row.getAttribute("data-kind")], g.id).toEqual([
        String(g.step ?? ""),
        g.kind ?? "",
      ]);
      expect((await row.locator(".cell-gstep").innerText()).replace(/\s+/g, " ").trim(), g.id).toBe(
        g.step === null ? "–" : `${g.step} ${g.kind}`,
      );
    }
    const shots = await shootPart(page, "#run-charts", "training-steps");
    console.error(`[training] screenshots: ${shots.join(", ")}`);
    // a click at a step opens that step's episodes (the list filtered by it); x spans the first to the last step
    const xs = JSON.parse((await page.locator("#step-rewards .plot").getAttribute("data-x"))!) as number[];
    const over = page.locator("#step-rewards .u-over");
    const box = (await over.boundingBox())!;
    // at the element (Playwright scrolls it into view first)
    await over.click({ position: { x: ((2 - xs[0]!) / (xs.at(-1)! - xs[0]!)) * box.width, y: box.height / 2 } });
    await waitListed(
      page,
      (await listed("step=2")).map((r) => r.id),
    );
    expect(new URL(page.url()).searchParams.get("step")).toBe("2");
    expect(errors).toEqual([]);
  });
});

function countRewardPoints(steps: StepJson[]): number {
  return steps.reduce((n, s) => n + Object.keys(s.mean_rewards).length, 0);
}

describe("the run's episode list", () => {
  it("sorts by step, filters by kind, env, step range and policy version (kept in the URL), and shows each row's identity and final answer", async () => {
    const { page, errors } = await shared.visit(`/runs/${RUN}?sort=step`);
    const bySort = await listed("sort=step");
    await waitListed(
      page,
      bySort.slice(0, 50).map((r) => r.id),
    );
    // the columns: each row's own fields as the relay lists them
    const cells = await page.$$eval("#episodes .ep-row[data-id]", (rows) =>
      rows.map((r) => {
        const text = (sel: string) => ((r.querySelector(sel) as any)?.innerText ?? "").trim();
        return {
          id: (r as any).dataset.id,
          task: text(".cell-task code"),
          group: text(".cell-group code"),
          step: text(".cell-step").replace(/^step\s*/, ""),
          kind: text(".cell-kind .chip"),
          answer: text(".cell-answer .answer-text"),
          answerTitle: r.querySelector(".cell-answer")?.getAttribute("title") ?? "",
          stop: text(".cell-stop code"),
          truncated: (r.querySelector(".cell-trunc") as any)?.dataset.truncated,
          timeout: (r.querySelector(".cell-trunc") as any)?.dataset.timeout,
          pending: r.hasAttribute("data-pending"),
        };
      }),
    );
    for (const c of cells) {
      const row = bySort.find((r) => r.id === c.id)!;
      const named = typeof row.dispatch?.task === "string" ? row.dispatch.task : "";
      expect(c, c.id).toEqual({
        id: row.id,
        task: row.task ?? (row.traces === 0 ? named : ""),
        group: row.group ?? "",
        step: row.step === null ? "–" : String(row.step),
        kind: row.kind ?? "",
        answer: row.live?.last ?? "",
        answerTitle: row.live?.last ?? "",
        stop: row.stop_condition ?? "",
        // the trainer's truncation and the timeout, apart (data-truncated held the timeout before is_truncated)
        truncated: String(row.is_truncated ?? null),
        timeout: String(row.is_timeout ?? false),
        pending: row.status === "live" && row.traces === 0,
      });
    }
    // the reward hacker's words as the relay cut them (160 characters)
    const hacker = bySort.find((r) => r.id === `${RUN}:t3-g1-3`)!;
    expect(hacker.live!.last).toBe(HACK.slice(0, 160));
    expect(cells.find((c) => c.id === hacker.id)!.answerTitle).toBe(hacker.live!.last);
    expect(cells.filter((c) => c.timeout === "true").map((c) => c.id)).toEqual([`${RUN}:t2-g1-2`]);

    // filters through the controls: kind eval, then a step range, then a policy version; the list is the relay's answer each time
    await page.click("#episode-filters summary");
    await page.selectOption("#filter-kind", "eval");
    await waitListed(
      page,
      (await listed("sort=step&kind=eval")).map((r) => r.id),
    );
    expect(new URL(page.url()).searchParams.get("kind")).toBe("eval");
    await page.selectOption("#filter-kind", "");
    await page.fill("#filter-step", "1..2");
    await page.fill("#filter-policy-version", "1");
    const both = await listed("sort=step&step=1..2&policy_version=1");
    // step 1's first group and step 2's second (sampled a policy behind)
    expect(new Set(both.map((r) => r.dispatch!.group))).toEqual(new Set(["train-s1-g0", "train-s2-g1"]));
    await waitListed(
      page,
      both.map((r) => r.id),
    );
    await page.fill("#filter-env", "gsm8k-eval");
    await waitListed(page, []);
    expect(await page.locator("#episodes-empty").innerText()).toMatch(/no episode matches/i);
    await page.fill("#filter-env", "gsm8k");
    await waitListed(
      page,
      both.map((r) => r.id),
    );
    const url = new URL(page.url());
    expect([
      url.searchParams.get("step"),
      url.searchParams.get("policy_version"),
      url.searchParams.get("env"),
      url.searchParams.get("sort"),
    ]).toEqual(["1..2", "1", "gsm8k", "step"]);
    // a reload keeps the filter and the order
    await reloadPage(page);
    await waitListed(
      page,
      both.map((r) => r.id),
    );
    expect(await page.inputValue("#filter-step")).toBe("1..2");
    // a range the relay refuses says why, in place
    await page.fill("#filter-step", "3..1");
    await waitFor(page, "() => !document.querySelector('#filter-problem').hidden");
    expect(await page.locator("#filter-problem").innerText()).toMatch(/MIN is above MAX/);

    // reward chips are coloured by score: 0 red, 1 green (not green at 0)
    await gotoPage(page, `${relay.url}/runs/${RUN}?step=3&sort=reward`);
    const step3 = await listed("step=3&sort=reward");
    await waitListed(
      page,
      step3.map((r) => r.id),
    );
    const chips = await page.$$eval("#episodes .ep-row[data-id] .reward.scored", (els) =>
      els.map((e) => {
        const bg = (globalThis as any)
          .getComputedStyle(e.querySelector(".reward-k")!)
          .backgroundColor.match(/\d+/g)!
          .map(Number);
        return {
          id: (e.closest(".ep-row") as any).dataset.id,
          key: (e as any).dataset.key,
          score: Number((e as any).dataset.score),
          r: bg[0]!,
          g: bg[1]!,
        };
      }),
    );
    expect(chips.length).toBe(step3.filter((r) => r.rewards).length * 2);
    for (const c of chips) {
      const row = step3.find((r) => r.id === c.id)!;
      expect(c.score, `${c.id} ${c.key}`).toBe((row.rewards as Record<string, { score: number }>)[c.key]!.score);
      if (c.score === 0) expect(c.r, `${c.id} ${c.key} at 0`).toBeGreaterThan(c.g);
      if (c.score === 1) expect(c.g, `${c.id} ${c.key} at 1`).toBeGreaterThan(c.r);
    }
    const shots = await shootPart(page, ".run-episodes", "training-answers");
    console.error(`[training] screenshots: ${shots.join(", ")}`);
    expect(errors).toEqual([]);
  });
});

describe("the live table", () => {
  it("shows every live rollout by start with its stage, numbers and ticking elapsed time; pending placeholders apart", async () => {
    const live = (await listed("status=live")).sort((a, b) => (a.live?.started ?? 0) - (b.live?.started ?? 0));
    expect(live.map((r) => r.live!.stage)).toEqual(["boot", "running", "pending", "pending"]);
    const { page, errors } = await shared.visit(`/runs/${RUN}`);
    await waitFor(
      page,
      "(ids) => JSON.stringify([...document.querySelectorAll('#live-table .lr-row[data-id]')].map((r) => r.dataset.id)) === JSON.stringify(ids)",
      live.map((r) => r.id),
    );
    const rows = () =>
      page.$$eval("#live-table .lr-row[data-id]", (els) =>
        els.map((r) => {
          // (the cells' labels show on a phone only)
          const k = (key: string) => ((r.querySelector(`[data-k="${key}"]`) as any)?.innerText ?? "").trim();
          return {
            id: (r as any).dataset.id,
            stage: (r.querySelector(".chip.stage") as any).dataset.stage,
            placeholder: r.classList.contains("placeholder"),
            step: k("step"),
            turns: k("turns"),
            branches: k("branches"),
            tokens: k("tokens"),
            cost: k("cost"),
            elapsed: (r.querySelector(".lr-elapsed-v") as any).innerText,
            last: ((r.querySelector(".lr-last .lr-words") as any)?.innerText ?? "").trim(),
          };
        }),
      );
    const first = await rows();
    const seconds = (s: string) => {
      const m = /^(?:(\d+) min )?(\d+) s$/.exec(s);
      if (!m) throw new Error(`not an elapsed time: ${s}`);
      return Number(m[1] ?? 0) * 60 + Number(m[2]);
    };
    first.forEach((got, i) => {
      const r = live[i]!;
      expect(got).toMatchObject({
        id: r.id,
        stage: r.live!.stage,
        placeholder: r.traces === 0,
        step: String(r.step),
        turns: String(r.calls),
        branches: String(r.live!.branches),
        tokens: `${r.live!.input_tokens} / ${r.live!.output_tokens}`,
        cost: r.live!.cost === null ? "–" : `$${r.live!.cost.toFixed(4)}`,
        last: r.live!.last ?? "",
      });
      // elapsed: from the row's start to now
      expect(Math.abs(seconds(got.elapsed) - (Date.now() / 1000 - r.live!.started!))).toBeLessThanOrEqual(3);
    });
    expect(first.filter((r) => r.placeholder).length).toBe(2);
    // it ticks (each reading is up to a tick old: 3.2 s later it moved at least 2 s)
    await page.waitForTimeout(3200);
    const later = await rows();
    for (const [i, r] of later.entries())
      expect(seconds(r.elapsed) - seconds(first[i]!.elapsed)).toBeGreaterThanOrEqual(2);
    const shots = await shootPart(page, "#run-live", "training-live");
    console.error(`[training] screenshots: ${shots.join(", ")}`);

    // a placeholder's first trace streams: it becomes a booting rollout, live
    const announced = plan.find((r) => r.id === live[2]!.id)!;
    // its identity again (the same value: a no-op), then its opening frame
    await pushRollout(relay.url, { ...announced, outcome: "boot" });
    await waitFor(
      page,
      "(id) => document.querySelector('#live-table .lr-row[data-id=\"' + id + '\"]')?.dataset.stage === 'boot'",
      announced.id,
    );
    expect(
      await page.locator(`#live-table .lr-row[data-id="${announced.id}"]`).getAttribute("data-pending"),
    ).toBeNull();
    expect((await listed("status=live")).find((r) => r.id === announced.id)!.live!.stage).toBe("boot");
    expect(errors).toEqual([]);
  });
});

describe("the group page", () => {
  it("shows the group's step and kind, and per rollout its task, step, kind, final answer, stop and truncated, as the relay holds them", async () => {
    const g = await api<GroupDetailJson>(`/v1/runs/${RUN}/groups/train-s3-g1`);
    expect([g.step, g.kind, g.size]).toEqual([3, "train", 4]);
    const { page, errors } = await shared.visit(`/runs/${RUN}/groups/train-s3-g1`);
    await waitFor(
      page,
      "(n) => document.querySelectorAll('#rollouts .r-row[data-id]').length === n",
      g.rollouts.length,
    );
    expect(await page.locator('#group-numbers [data-stat="step"]').innerText()).toBe(String(g.step));
    expect(await page.locator('#group-numbers [data-stat="step"] a').getAttribute("href")).toBe(`/runs/${RUN}?step=3`);
    expect(await page.locator('#group-numbers [data-stat="kind"]').innerText()).toBe(g.kind);
    for (const r of g.rollouts) {
      const row = page.locator(`#rollouts .r-row[data-id="${r.id}"]`);
      const text = async (sel: string) => (await row.locator(sel).innerText()).trim();
      expect(await text(".cell-task"), r.id).toBe(r.task);
      expect(await text(".cell-step"), r.id).toBe(String(r.dispatch!.step));
      expect(await text(".cell-kind"), r.id).toBe(r.dispatch!.kind);
      expect(await text(".cell-answer"), r.id).toBe(r.live!.last);
      expect(await text(".cell-stop"), r.id).toBe(r.stop_condition);
      expect(await row.locator(".cell-trunc").getAttribute("data-truncated")).toBe(String(r.is_truncated));
      expect(await row.locator(".cell-trunc").getAttribute("data-timeout")).toBe(String(r.is_timeout));
    }
    // the reward hacker's words sit beside its reward, in view without scrolling the table sideways
    const hacker = page.locator(`#rollouts .r-row[data-id="${RUN}:t3-g1-3"]`);
    expect(await hacker.locator(".cell-answer").innerText()).toMatch(/^Sure\. 1 2 3 4 5/);
    const [answer, list] = [
      await hacker.locator(".cell-answer").boundingBox(),
      await page.locator("#rollouts").boundingBox(),
    ];
    expect(answer!.x + answer!.width).toBeLessThanOrEqual(list!.x + list!.width);
    const shots = await shoot(page, "training-group");
    console.error(`[training] screenshots: ${shots.join(", ")}`);
    expect(errors).toEqual([]);
  });
});

describe("the episode page", () => {
  it("shows the task's prompt and expected answer and the training identity, linked to its group and its step", async () => {
    const ep = await episodeJson(ANNOTATED.id);
    const task = ep.traces[0]!.task;
    const status = await api<{ dispatch: Record<string, unknown> }>(
      `/v1/episodes/${encodeURIComponent(ANNOTATED.id)}/status`,
    );
    const [row] = (await listed(`step=3`)).filter((r) => r.id === ANNOTATED.id);
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(ANNOTATED.id)}`);
    await waitFor(page, "() => document.querySelector('#identity dd[data-k=\"step\"]')?.innerText === '3'");
    expect(await page.locator('#task-context [data-field="prompt"] .task-prompt').innerText()).toBe(task.data.prompt);
    expect(await page.locator('#task-context [data-field="answer"] .task-answer').innerText()).toBe(task.data.answer);
    expect(await page.locator("#task-context .task-key").innerText()).toBe(task.key);
    const dd = (k: string) => page.locator(`#identity dd[data-k="${k}"]`).innerText();
    expect([
      await dd("kind"),
      await dd("env"),
      await dd("policy_version"),
      await dd("staleness"),
      await dd("task"),
    ]).toEqual([
      status.dispatch.kind,
      status.dispatch.env,
      String(status.dispatch.policy_version),
      `${row!.staleness} step`,
      status.dispatch.task,
    ]);
    expect(row!.staleness).toBe(1);
    expect(await page.locator("#group-link").getAttribute("href")).toBe(
      `/runs/${encodeURIComponent(RUN)}/groups/${encodeURIComponent(row!.group!)}`,
    );
    const shots = await shootPart(page, "#context", "training-task");
    console.error(`[training] screenshots: ${shots.join(", ")}`);
    // the step link: the run's list filtered by that step
    await page.click("#step-link");
    const step3 = await listed("step=3");
    await waitListed(
      page,
      step3.map((r) => r.id),
    );
    expect(new URL(page.url()).searchParams.get("step")).toBe("3");
    expect(step3.every((r) => r.step === 3)).toBe(true);
    expect(errors).toEqual([]);
  });

  it("draws the trainer's signals along the sampled tokens as posted, with prime-rl's colours, scale, legend and per-node summaries", async () => {
    const ep = await episodeJson(ANNOTATED.id);
    const nodes = ep.traces[0]!.nodes;
    const want = expected.get(ANNOTATED.id)!;
    // the relay's merged record folds back to what was posted
    const rec = (await annotationsJson(ANNOTATED.id)).traces[0]!;
    const folded = foldOntoNodes(nodes, rec);
    expect([...folded.keys()]).toEqual([...want.keys()]);
    for (const [i, v] of want) expect(folded.get(i)!.get("entropies")).toEqual(v.entropies);

    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(ANNOTATED.id)}`);
    await waitFor(page, "() => document.querySelector('#signal-bar')?.dataset.version === '2'");
    const strips = async () =>
      page.$$eval(".turn[data-node]", (turns) =>
        turns.flatMap((t) => {
          const s = t.querySelector(".tok-strip:not(.tok-none)") as any;
          if (!s) return [];
          const toks = [...s.querySelectorAll(".tok.s")];
          return [
            {
              node: Number((t as any).dataset.node),
              values: toks.map((x: any) => x.dataset.v),
              colours: toks.map((x: any) => (globalThis as any).getComputedStyle(x).backgroundColor),
              context: s.querySelectorAll(".tok.ctx").length,
              mean: Number(s.dataset.mean),
              max: s.dataset.max === "" ? null : Number(s.dataset.max),
            },
          ];
        }),
      );
    const rgba = (c: string) => c.match(/[\d.]+/g)!.map(Number);
    const check = async (
      signal: string,
      values: (v: NodeValues) => Array<number | boolean>,
      colour: (x: number | boolean, max: number) => number[],
    ) => {
      await page.selectOption("#token-signal", signal);
      await waitFor(page, "(s) => document.querySelector('.tok-strip')?.dataset.overlay === s", signal);
      const all = [...want.values()].flatMap(values).filter((x): x is number => typeof x === "number");
      const max = signal === "advantage" ? Math.max(...all.map(Math.abs)) : Math.max(0, ...all);
      if (signal !== "is_masked")
        expect(Number(await page.locator("#signal-legend .sig-scale").getAttribute("data-max"))).toBeCloseTo(max, 9);
      const got = await strips();
      expect(got.map((s) => s.node)).toEqual([...want.keys()]);
      for (const s of got) {
        const v = values(want.get(s.node)!);
        expect(s.values, `${signal} node ${s.node}`).toEqual(v.map(String));
        // the node's tokens that were not sampled are drawn too, uncoloured
        expect(s.context).toBe(nodes[s.node]!.mask.filter((m) => !m).length);
        s.colours.forEach((c, k) => {
          const [r, g, b, a = 1] = rgba(c);
          const [wr, wg, wb, wa] = colour(v[k]!, max);
          if (wa === 0)
            expect(c === "rgba(0, 0, 0, 0)" || a === 0, `${signal} node ${s.node} token ${k}: ${c}`).toBe(true);
          else {
            expect([r, g, b], `${signal} node ${s.node} token ${k}`).toEqual([wr, wg, wb]);
            expect(Math.abs(a - wa!), `${signal} node ${s.node} token ${k} alpha`).toBeLessThan(0.005);
          }
        });
        const nums = v.filter((x): x is number => typeof x === "number");
        if (nums.length) expect(s.mean).toBeCloseTo(nums.reduce((x, y) => x + y, 0) / nums.length, 9);
      }
    };
    // prime-rl's colours: advantage green above 0 (red below), α = |a|/max·0.45; entropy teal, α = H/max·0.5; mismatch red, α = kl/max·0.55
    await check(
      "advantage",
      (v) => v.advantages,
      (a, max) => [182, 255, 60, (Math.abs(a as number) / max) * 0.45],
    );
    await check(
      "entropy",
      (v) => v.entropies,
      (x, max) => [94, 234, 212, ((x as number) / max) * 0.5],
    );
    const kl = (v: NodeValues) => mismatchKl(v.trainer, v.logprobs) as number[];
    await check("mismatch_kl", kl, (x, max) => [255, 69, 57, (x as number) > 0 ? ((x as number) / max) * 0.55 : 0]);
    await check(
      "is_masked",
      (v) => v.is_masked,
      (x) => (x ? [255, 69, 57, 0.35] : [74, 158, 255, 0.15]),
    );
    // the mismatch against the node's own sampling logprobs: exp(Δ) − Δ − 1, Δ = trainer − sampling (0 where they match)
    const firstNode = want.get([...want.keys()][0]!)!;
    const d = firstNode.trainer[0]! - firstNode.logprobs[0]!;
    expect(d).not.toBe(0);
    expect(kl(firstNode)[0]).toBe(Math.exp(d) - d - 1);
    expect(kl(firstNode)[2]).toBe(0);
    expect(await page.locator("#signal-legend [data-key='masked']").count()).toBe(1);
    expect(await page.locator(".signal-note:not([hidden])").count()).toBe(0);

    await page.selectOption("#token-signal", "entropy");
    const shots = await shoot(page, "training-overlays");
    console.error(`[training] screenshots: ${shots.join(", ")}`);
    expect(errors).toEqual([]);
  });

  it("says why a signal paints nothing, in prime-rl's words: every advantage 0, an eval episode, not shipped yet", async () => {
    const note = async (id: string, signal: string) => {
      const { page } = await shared.visit(`/episodes/${encodeURIComponent(id)}?signal=${signal}`);
      await waitFor(
        page,
        "() => document.querySelector('.signal-note') && !document.querySelector('.signal-note').hidden",
      );
      const text = await page.locator(".signal-note").innerText();
      const option = await page.locator(`#token-signal option[value="${signal}"]`).getAttribute("data-reason");
      return { text, option };
    };
    // the zero-variance group: the orchestrator's stream is there, all zeros
    expect((await annotationsJson(ZERO_ADV.id)).traces[0]!.branches[0]!.advantages).toSatisfy(
      (a: number[]) => a.length > 0 && a.every((x) => x === 0),
    );
    expect(await note(ZERO_ADV.id, "advantage")).toEqual({
      text: "every advantage is 0: Every member of this trace's group scored the same reward, so the group carries no learning signal.",
      option: "every advantage is 0",
    });
    // an eval rollout: the trainer never sees it
    expect((await annotationsJson(EVAL.id)).version).toBe(0);
    expect((await note(EVAL.id, "entropy")).text).toBe(
      "no trainer streams: Entropy comes from the trainer. The trainer only sees train episodes, so an eval episode never carries recomputed logprobs.",
    );
    // a train rollout no batch has shipped yet
    expect((await annotationsJson(LATE.id)).version).toBe(0);
    expect((await note(LATE.id, "mismatch_kl")).text).toBe(
      "no trainer streams: Mismatch comes from the trainer. This episode has not shipped in a batch, so the trainer has not trained it yet.",
    );
    expect((await note(LATE.id, "advantage")).text).toBe(
      "no advantage assigned: A trace is assigned its advantage when a batch ships it. This one has not shipped in a batch.",
    );
  });

  it("picks up annotations posted after the page opened (re-checked while the ended episode is shown)", async () => {
    const { context, page, errors } = await openPage(
      browser,
      `${relay.url}/episodes/${encodeURIComponent(LATE.id)}?signal=entropy`,
      {},
      { clock: true },
    );
    await waitFor(
      page,
      "() => document.querySelector('.signal-note') && !document.querySelector('.signal-note').hidden",
    );
    expect(await page.locator("#annotations-state").innerText()).toMatch(/No trainer annotations yet/);
    await annotate(LATE, 0.5);
    // after one re-check (RECHECK_MS, dashboard/src/episode/annotations-source.ts), the strips
    // appear and the note goes: the page's clock is moved on by it rather than waited for
    await page.clock.fastForward(RECHECK_MS);
    await waitFor(
      page,
      "() => document.querySelector('.signal-note')?.hidden === true && document.querySelectorAll('.tok-strip[data-overlay=\"entropy\"]').length > 0",
      undefined,
      30_000,
    );
    const want = expected.get(LATE.id)!;
    expect(await page.locator('.tok-strip[data-overlay="entropy"]:not(.tok-none)').count()).toBe(want.size);
    expect(await page.locator("#annotations-state").innerText()).toMatch(/2 records · shipped at step 3/);
    expect(errors).toEqual([]);
    await context.close();
  });
});

describe("steps kept live from the run socket", () => {
  it("a new step's rollouts add its markers; deleting them takes the step away", async () => {
    const { page, errors } = await shared.visit(`/runs/${RUN}`);
    const plotted = (chart: string) => `JSON.parse(document.querySelector('#${chart} .plot')?.dataset.series ?? "[]")`;
    await waitFor(page, `() => ${plotted("step-rewards")}.some((x) => x.points.length > 0)`);
    const group: Rollout[] = [0, 1, 2, 3].map((j) => ({
      ...plan[0]!,
      id: `${RUN}:t5-g0-${j}`,
      dispatch: {
        ...plan[0]!.dispatch,
        id: `dt5g0${j}`,
        step: 5,
        policy_version: 5,
        group: "train-s5-g0",
        task: "idx=50",
      },
      scores: [j % 2, 0.25 * j],
      outcome: "finished",
    }));
    await Promise.all(group.map((r) => pushRollout(relay.url, r)));
    let step5: StepJson | undefined;
    for (const end = Date.now() + 20_000; !step5 || step5.finished < 4; ) {
      step5 = (await allSteps()).find((s) => s.step === 5);
      if (Date.now() > end) throw new Error(`step 5 never finished: ${JSON.stringify(step5)}`);
      if (!step5 || step5.finished < 4) await new Promise((r) => setTimeout(r, 200));
    }
    const at5 = (chart: string, key: string) =>
      `${plotted(chart)}.find((x) => x.kind === "train" && x.key === "${key}")?.points.find(([s]) => s === 5)?.[1]`;
    // both waited for: a push with half the group finished already shows the same mean of `correct` (0, 1 of 0, 1, 0, 1),
    // and the group's zero-variance share comes only when all four have
    await waitFor(page, `(v) => ${at5("step-rewards", "correct")} === v`, step5.mean_rewards.correct);
    await waitFor(page, `(v) => ${at5("step-zero-variance", "zero_variance")} === v`, step5.zero_variance_share);
    expect(await page.evaluate(at5("step-zero-variance", "zero_variance"))).toBe(step5.zero_variance_share);
    for (const r of group)
      expect((await fetch(`${relay.url}/v1/episodes/${encodeURIComponent(r.id)}`, { method: "DELETE" })).status).toBe(
        200,
      );
    await waitFor(page, `() => ${plotted("step-rewards")}.every((x) => x.points.every(([s]) => s !== 5))`);
    expect((await allSteps()).some((s) => s.step === 5)).toBe(false);
    expect(errors).toEqual([]);
  });
});

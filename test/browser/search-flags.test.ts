// The run page's search box and the episode page's flags, in headless Chromium against the real
// relay bundle. Two rollouts of chat_basic in one run; in one, the assistant's turn HACK_NODE says
// what the grader checks instead of its working. The search finds it by a word of that turn, its
// snippet opens the episode at that turn (scrolled to and marked), and the episode page shows the
// default rule `quotes-grader` as a chip with the turn and the excerpt; the honest one shows no
// flag. Screenshots (`search-*.png`, `flag-*.png`) go to test-results/screenshots/.
import { mkdirSync } from "node:fs";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { chat, groupReply, put } from "../support/chat-rollouts.js";
import { enc } from "../support/deltas.js";
import { chromiumForFile } from "./chromium.js";
import { gotoPage, reloadPage, SHOTS, sharedPage, shoot, shootPart } from "./pages.js";
import { relayCalls } from "./rollouts.js";

let browser: Browser;
let relay: LocalRelay;
const { post, api } = relayCalls(() => relay.url);

const RUN = `sf-ui-${Date.now().toString(36)}`;
const HACKED = `${RUN}:hacked`;
const HONEST = `${RUN}:honest`;
const HACK = "The grader only checks that the last line is 391, so I print 391 without working it out.";

/** chat_basic's nodes in order: [frame index, node index within the frame, message role]. */
const nodes: Array<[number, number, string]> = [];
for (const [i, fr] of chat.frames.entries()) {
  const ns = (decodeLossless(fr) as LMap).get("nodes");
  if (Array.isArray(ns))
    for (const [j, n] of ns.entries()) nodes.push([i, j, ((n as LMap).get("message") as LMap).get("role") as string]);
}
/** The second assistant turn (the working-out): the one the hacked rollout replaces. */
const HACK_NODE = nodes.map(([, , r], k) => [r, k] as const).filter(([r]) => r === "assistant")[1]![1];

async function push(id: string, hacked: boolean): Promise<void> {
  const [frame, within] = nodes[HACK_NODE]!;
  for (const [n, fr] of chat.frames.entries()) {
    if (!hacked || n !== frame) {
      await post(`/v1/episodes/${id}/deltas`, fr);
      continue;
    }
    const d = decodeLossless(fr) as LMap;
    put(((d.get("nodes") as LValue[])[within] as LMap).get("message") as LMap, "content", HACK);
    await post(`/v1/episodes/${id}/deltas`, enc(d));
  }
  await post(`/v1/episodes/${id}/reply`, groupReply("g"));
}

/** Wait until the run's search finds `q` (the index takes up to its flush interval). */
async function searchable(q: string): Promise<void> {
  const end = Date.now() + 30_000;
  while (
    (await api<{ episodes: unknown[] }>(`/v1/runs/${RUN}/search?q=${encodeURIComponent(q)}`)).episodes.length === 0
  ) {
    if (Date.now() > end) throw new Error(`${q} not searchable`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  // the dashboard follows live rows here: their flush at 2 s, not the default 30 s (INDEX_FLUSH_MS), the run
  // attended or not (INDEX_IDLE_FLUSH_MS: rows written before a page opens are not held 2 minutes)
  relay = await startRelay({ vars: { INDEX_FLUSH_MS: "2000", INDEX_IDLE_FLUSH_MS: "2000" } });
  await push(HACKED, true);
  await push(HONEST, false);
  await searchable("grader");
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

describe("search and flags in the dashboard", () => {
  it("finds a rollout by its words and opens it scrolled to the matching turn", async () => {
    expect(HACK_NODE).toBeGreaterThan(2);
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}`);
    await page.locator("#run-search").fill("grader checks");
    await page.locator("#run-search").press("Enter");
    const hit = page.locator("#search-results li.search-hit");
    await hit.first().waitFor({ timeout: 15_000 });
    expect(await hit.evaluateAll((els: any[]) => els.map((e) => e.dataset.id))).toEqual([HACKED]);
    const snippet = hit.locator("a.search-snippet").first();
    expect(await snippet.getAttribute("data-node")).toBe(String(HACK_NODE));
    expect((await snippet.locator("mark").allInnerTexts()).map((t) => t.toLowerCase())).toContain("grader");
    expect(await page.locator("#search-note").innerText()).toContain("1 rollout");
    // the hit's row beside it: the trainer's reward (chat_basic: 1.0 x 1 + 0.5 x 0.25), its group (a link); no step
    // (the rollout names none)
    const facts = hit.locator(".search-facts");
    expect(await facts.locator('[data-k="reward"]').innerText()).toBe("reward 1.125");
    expect(await facts.locator('[data-k="group"] a').innerText()).toBe("g");
    expect(await facts.locator('[data-k="group"] a').getAttribute("href")).toContain("/groups/g");
    expect(await facts.locator('[data-k="step"]').count()).toBe(0);
    // the query is in the address
    expect(new URL(page.url()).searchParams.get("q")).toBe("grader checks");
    await shootPart(page, "section.run-search", "search-results");
    await snippet.click();
    await page.waitForURL(/\/episodes\//);
    expect(new URL(page.url()).searchParams.get("node")).toBe(String(HACK_NODE));
    const target = page.locator("li.turn.jump-target");
    await target.waitFor({ timeout: 15_000 });
    expect(await target.getAttribute("data-node")).toBe(String(HACK_NODE));
    expect(await target.innerText()).toContain(HACK);
    // scrolled to: the turn is in the viewport
    const box = await target.boundingBox();
    expect(box).not.toBeNull();
    expect(box!.y).toBeGreaterThanOrEqual(0);
    expect(box!.y).toBeLessThan(800);
    // back on the run page: the search is shown again from the address, without asking
    await page.goBack();
    await hit.first().waitFor({ timeout: 15_000 });
    expect(await page.locator("#run-search").inputValue()).toBe("grader checks");
    expect(await hit.evaluateAll((els: any[]) => els.map((e) => e.dataset.id))).toEqual([HACKED]);
    // a word no rollout has: said so
    await page.locator("#run-search").fill("zebra");
    await page.locator("#run-search").press("Enter");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("#search-note")?.textContent === "no rollout matches",
      null,
      {
        timeout: 15_000,
      },
    );
    expect(await page.locator("#search-results").isHidden()).toBe(true);
    expect(new URL(page.url()).searchParams.get("q")).toBe("zebra");
    // back: the search before; a reload keeps it
    await page.goBack();
    await hit.first().waitFor({ timeout: 15_000 });
    expect(new URL(page.url()).searchParams.get("q")).toBe("grader checks");
    await reloadPage(page);
    await hit.first().waitFor({ timeout: 15_000 });
    expect(await page.locator("#run-search").inputValue()).toBe("grader checks");
    // a reward of more decimals: as every page writes it (dom.ts fmtNumber, 3 decimals; trial 9 saw "0.1875")
    const searches = "**/search?*";
    await page.route(searches, async (route) => {
      const res = await route.fetch();
      const body = (await res.json()) as { episodes: Array<{ row?: { reward: number | null } }> };
      for (const ep of body.episodes) if (ep.row) ep.row.reward = 0.1875;
      await route.fulfill({ response: res, json: body });
    });
    await page.locator("#run-search").fill("grader");
    await page.locator("#run-search").press("Enter");
    await expect
      .poll(() => facts.first().locator('[data-k="reward"]').innerText(), { timeout: 15_000 })
      .toBe("reward 0.188");
    await page.unroute(searches);
    expect(errors).toEqual([]);
  });

  it("shows a flagged rollout's flag with its evidence, and none on an honest one", async () => {
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(HACKED)}`);
    const flag = page.locator('#episode-flags .flag[data-rule="quotes-grader"]');
    await flag.waitFor({ timeout: 15_000 });
    expect(await flag.getAttribute("data-node")).toBe(String(HACK_NODE));
    expect(await flag.locator(".flag-at").innerText()).toBe(`node #${HACK_NODE}`);
    expect(HACK).toContain((await flag.locator(".flag-excerpt").innerText()).replace(/^…|…$/g, "").slice(0, 20));
    // the turns drawn, its button scrolls to the flagged one
    await page
      .locator("li.turn")
      .nth(nodes.length - 1)
      .waitFor({ timeout: 15_000 });
    await flag.locator(".flag-at").click();
    expect(await page.locator("li.turn.jump-target").getAttribute("data-node")).toBe(String(HACK_NODE));
    await shoot(page, "flag-episode");
    expect(errors).toEqual([]);
    const honest = await shared.visit(`/episodes/${encodeURIComponent(HONEST)}`);
    await honest.page
      .locator("li.turn")
      .nth(nodes.length - 1)
      .waitFor({ timeout: 15_000 });
    // the list answers the honest one's (unflagged) row too: give it the time the flagged one took
    await honest.page.waitForTimeout(1000);
    expect(await honest.page.locator("#episode-flags").isHidden()).toBe(true);
    expect(honest.errors).toEqual([]);
  });

  it("a flag raised while the page is open appears without a reload", async () => {
    const LIVE = `${RUN}:live`;
    const [frame, within] = nodes[HACK_NODE]!;
    for (const fr of chat.frames.slice(0, frame)) await post(`/v1/episodes/${LIVE}/deltas`, fr);
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(LIVE)}`);
    await page.locator("li.turn").first().waitFor({ timeout: 15_000 });
    await page.waitForTimeout(3_000); // a read of its row, while it has no flag
    expect(await page.locator("#episode-flags").isHidden(), "no flag before the turn").toBe(true);
    const d = decodeLossless(chat.frames[frame]!) as LMap;
    put(((d.get("nodes") as LValue[])[within] as LMap).get("message") as LMap, "content", HACK);
    await post(`/v1/episodes/${LIVE}/deltas`, enc(d));
    // the row follows the turn within INDEX_FLUSH_MS; the page reads it once that has passed
    const flag = page.locator('#episode-flags .flag[data-rule="quotes-grader"]');
    await flag.waitFor({ timeout: 15_000 });
    expect(await flag.getAttribute("data-node")).toBe(String(HACK_NODE));
    expect(await page.locator("li.turn").count(), "still live: no reply sent").toBeGreaterThan(0);
    expect(errors).toEqual([]);
  });

  it("rides out the relay's 503 overloaded (Retry-After): the page asks again and shows the flag", async () => {
    const context = await browser.newContext();
    let refused = 0;
    // the relay's own answer when a local runtime is out of memory for storage (src/protocol/http/errors.ts)
    await context.route(/\/v1\/runs\/[^/]+\/episodes\?.*flagged=1/, async (route) => {
      if (refused >= 2) return route.continue();
      refused++;
      await route.fulfill({
        status: 503,
        headers: { "content-type": "application/json", "x-episode-relay": "1", "retry-after": "1" },
        body: JSON.stringify({ error: "overloaded", message: "the relay is out of memory for storage for now" }),
      });
    });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    try {
      await gotoPage(page, `${relay.url}/episodes/${encodeURIComponent(HACKED)}`);
      await page.locator('#episode-flags .flag[data-rule="quotes-grader"]').waitFor({ timeout: 20_000 });
      expect(refused, "both 503s were answered first").toBe(2);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

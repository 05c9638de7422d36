// Comparing two episodes in the dashboard (`/compare/{a}/{b}`), and small mends of the episode,
// run and runs pages, in Debian's headless Chromium (playwright-core) against the real relay
// bundle. Two rollouts of one group, both the golden case chat_basic, except that B's second node
// delta says something else in its first node (so the two agree up to that node and differ from
// it): the group page links "compare best and worst", the compare page marks that node as the
// first difference. Screenshots at 1280×800 and 390×844 go to test-results/screenshots/
// (`compare-*.png`).
import { mkdirSync, readFileSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { startRelay, type LocalRelay } from "../../tools/local-relay.js";
import { chat, groupReply, put, setDelta } from "../support/chat-rollouts.js";
import { enc, f, m } from "../support/deltas.js";
import { launchChromium } from "./chromium.js";
import { openPage, SHOTS, shoot } from "./pages.js";
import { relayCalls } from "./rollouts.js";

let browser: Browser;
let relay: LocalRelay;
const { post } = relayCalls(() => relay.url);

const RUN = `cmp-ui-${Date.now().toString(36)}`;
const GROUP = "pair";
const A = `${RUN}:best`;
const B = `${RUN}:worst`;
const CHANGED = "Are you sure? Prove it with long division.";
/** multi_trace_links (three traces), live: the episode page sums the tokens of all three. */
const MULTI = `${RUN}:multi`;
const multi = loadCase(fixturePath("multi_trace_links"));

/** The frames with nodes, in order; the second one's first node is where B departs from A. */
const nodeFrames = chat.frames.map((fr, i) => [i, (decodeLossless(fr) as LMap).get("nodes")] as const).filter(([, n]) => Array.isArray(n));
const DIFF_FRAME = nodeFrames[1]![0];
/** The index of the node B changes: the nodes of the frames before it. */
const DIFF_NODE = nodeFrames.filter(([i]) => i < DIFF_FRAME).reduce((s, [, n]) => s + (n as LValue[]).length, 0);
const TOTAL_NODES = nodeFrames.reduce((s, [, n]) => s + (n as LValue[]).length, 0);

async function push(id: string, correct: number, change: boolean): Promise<void> {
  for (const [n, frame] of chat.frames.entries()) {
    if (change && n === DIFF_FRAME) {
      const d = decodeLossless(frame) as LMap;
      const first = (d.get("nodes") as LMap[])[0]!;
      put(first.get("message") as LMap, "content", CHANGED);
      await post(`/v1/episodes/${id}/deltas`, enc(d));
    } else await post(`/v1/episodes/${id}/deltas`, frame);
  }
  await post(`/v1/episodes/${id}/deltas`, setDelta(m({ rewards: m({ correct: m({ score: f(correct), weight: f(1) }) }) })));
  await post(`/v1/episodes/${id}/reply`, groupReply(GROUP));
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
  relay = await startRelay({});
  await push(A, 1, false);
  await push(B, 0, true);
  for (const frame of multi.frames) await post(`/v1/episodes/${MULTI}/deltas`, frame);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

/** A page on `path` of the relay in time zone `timezoneId`, downloads accepted (pages.ts openPage). */
const open = (path: string, timezoneId = "UTC") => openPage(browser, `${relay.url}${path}`, { timezoneId, acceptDownloads: true });

describe("compare two episodes", () => {
  it("links best and worst from the group page and marks the first differing turn", async () => {
    expect(DIFF_NODE).toBeGreaterThan(0);
    const { context, page, errors } = await open(`/runs/${encodeURIComponent(RUN)}/groups/${GROUP}`);
    try {
      const link = page.locator("#compare-best-worst");
      await link.waitFor({ state: "visible", timeout: 15_000 });
      expect(await link.innerText()).toBe("compare best and worst");
      expect(await link.getAttribute("href")).toBe(`/compare/${encodeURIComponent(A)}/${encodeURIComponent(B)}`);
      await link.click();
      await page.waitForURL(/\/compare\//);
      await page.locator("#first-difference").waitFor({ timeout: 15_000 });
      const section = page.locator("section.compare-page");
      expect(await section.getAttribute("data-first-difference")).toBe(String(DIFF_NODE));
      expect(await page.locator("#first-difference").getAttribute("data-node")).toBe(String(DIFF_NODE));
      // every turn before it is the same, the marked one differs, both sides drawn
      const rows = await page.locator("#compare li.compare-row").evaluateAll((els: any[]) => els.map((e) => [Number(e.dataset.node), e.dataset.same]));
      expect(rows.length).toBe(TOTAL_NODES);
      for (const [i, same] of rows) if (i < DIFF_NODE) expect(same, `turn ${i}`).toBe("true");
      expect(rows[DIFF_NODE]![1]).toBe("false");
      expect(await page.locator("#first-difference .compare-cell").nth(1).innerText()).toContain(CHANGED);
      expect(await page.locator("#first-difference .compare-cell").nth(0).innerText()).not.toContain(CHANGED);
      expect(await page.locator("#compare-summary").innerText()).toContain(`differ from turn #${DIFF_NODE}`);
      expect(await page.locator(".compare-col-head").nth(0).innerText()).toContain("best");
      await shoot(page, "compare");
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it("says 'same' for an episode compared with itself", async () => {
    const { context, page, errors } = await open(`/compare/${encodeURIComponent(A)}/${encodeURIComponent(A)}`);
    try {
      await page.waitForFunction(() => (globalThis as any).document.querySelector("section.compare-page")?.dataset.firstDifference === "", null, {
        timeout: 15_000,
      });
      expect(await page.locator("#first-difference").count()).toBe(0);
      expect(await page.locator("#compare-summary").innerText()).toMatch(/Same conversation/);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

/** The last value a case's frames set for a trace field, per trace. */
function lastSet(frames: Uint8Array[], key: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const fr of frames) {
    const d = decodeLossless(fr) as LMap;
    const set = d.get("set");
    if (!set || !(set instanceof Object) || !("get" in set)) continue;
    const v = (set as LMap).get(key);
    if (v !== undefined && v !== null)
      out.set(d.get("trace") as string, Number(typeof v === "object" && "value" in (v as object) ? (v as { value: number }).value : v));
  }
  return out;
}

const dd = (page: Page, card: string, key: string) =>
  page.locator(`[data-card="${card}"] dt`, { hasText: new RegExp(`^${key}$`) }).locator("xpath=following-sibling::dd[1]");

describe("mends", () => {
  it("shows when an episode started with its date and time zone, in the viewer's zone", async () => {
    // chat_basic's timing.start
    expect(new Date(1754101000.930582 * 1000).toISOString()).toBe("2025-08-02T02:16:40.930Z");
    for (const [zone, want] of [
      ["UTC", "2025-08-02 02:16:40 UTC"],
      ["America/New_York", "2025-08-01 22:16:40 EDT"],
    ] as const) {
      const { context, page, errors } = await open(`/episodes/${encodeURIComponent(A)}`, zone);
      try {
        await page.locator('[data-card="timing"] dt', { hasText: /^started$/ }).waitFor({ timeout: 15_000 });
        expect(await dd(page, "timing", "started").innerText()).toBe(want);
        expect(errors).toEqual([]);
      } finally {
        await context.close();
      }
    }
    // the run's episode list: "started … ago" carries the date and zone
    const { context, page } = await open(`/runs/${encodeURIComponent(RUN)}`);
    try {
      const age = page.locator(`a.ep-row[data-id="${A}"] .age-inline`);
      await age.waitFor({ timeout: 15_000 });
      expect(await age.getAttribute("title")).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/);
    } finally {
      await context.close();
    }
  });

  it("downloads the episode as msgpack and as JSON (fetched with the token, saved from a Blob)", async () => {
    const { context, page, errors } = await open(`/episodes/${encodeURIComponent(A)}`);
    try {
      await page
        .locator("li.turn")
        .nth(TOTAL_NODES - 1)
        .waitFor({ timeout: 15_000 });
      const [json] = await Promise.all([page.waitForEvent("download"), page.click("#download-json")]);
      expect(json.suggestedFilename()).toBe(`${A.replace(/[^\w.-]+/g, "_")}.json`);
      const body = JSON.parse(readFileSync((await json.path())!, "utf8")) as { traces: Array<{ nodes: unknown[] }> };
      expect(body.traces[0]!.nodes.length).toBe(TOTAL_NODES);
      const [pack] = await Promise.all([page.waitForEvent("download"), page.click("#download-msgpack")]);
      expect(pack.suggestedFilename()).toMatch(/\.msgpack$/);
      const bytes = new Uint8Array(readFileSync((await pack.path())!));
      const decoded = decodeLossless(bytes) as LMap;
      expect((decoded.get("traces") as LMap[])[0]!.get("nodes") as unknown[]).toHaveLength(TOTAL_NODES);
      // the same bytes the relay serves
      const direct = new Uint8Array(await (await fetch(`${relay.url}/v1/episodes/${A}`, { headers: { accept: "application/msgpack" } })).arrayBuffer());
      expect(Buffer.from(bytes).equals(Buffer.from(direct))).toBe(true);
      expect(await page.locator("#download-note").innerText()).toBe("");
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it("counts the tokens of every trace on the episode page, as the run's episode list does", async () => {
    const totals = lastSet(multi.frames, "num_total_tokens");
    expect(totals.size).toBe(3);
    const sum = [...totals.values()].reduce((a, b) => a + b, 0);
    const { context, page, errors } = await open(`/episodes/${encodeURIComponent(MULTI)}`);
    try {
      await page.locator("section.trace").nth(2).waitFor({ timeout: 15_000 });
      await page.waitForFunction(
        () => (globalThis as any).document.querySelector('[data-card="tokens"] .card-title')?.textContent === "Tokens (all 3 traces)",
        null,
        { timeout: 15_000 },
      );
      expect(await dd(page, "tokens", "total").innerText()).toBe(String(sum));
      // the run's list says the same
      await page.click("#crumb-run");
      const size = page.locator(`a.ep-row[data-id="${MULTI}"] .cell-size`);
      await size.waitFor({ timeout: 15_000 });
      await page.waitForFunction((t) => (globalThis as any).document.querySelector(t.sel)?.textContent.includes(t.want), {
        sel: `a.ep-row[data-id="${MULTI}"] .cell-size`,
        want: `${sum} tok`,
      });
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

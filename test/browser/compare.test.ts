// Comparing rollouts in the dashboard (`/compare/{a}/{b}/…`, picked or best vs worst), and small mends of the episode,
// run and runs pages, in Debian's headless Chromium (playwright-core) against the real relay
// bundle. Two rollouts of one group, both the golden case chat_basic, except that B's second node
// delta says something else in its first node (so the two agree up to that node and differ from
// it): the group page links "compare best and worst", the compare page marks that node as the
// first difference. Screenshots at 1280×800 and 390×844 go to test-results/screenshots/
// (`compare-*.png`).
import { mkdirSync, readFileSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { chat, groupReply, put, setDelta } from "../support/chat-rollouts.js";
import { enc, f, m } from "../support/deltas.js";
import { chromiumForFile } from "./chromium.js";
import { gotoPage, openPage, SHOTS, sharedPage, shoot, shootPart } from "./pages.js";
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
const MULTI2 = `${RUN}:multi2`;

/**
 * A group of four for picking and the tie rule: q1 and q2 both score 1 (q1 with more tokens, so
 * q2 is best though q1 comes first by id), q3 (B's changed turn) and q4 both score 0 with equal
 * tokens (so id order makes q4 the worst).
 */
const QUAD = "quad";
const Q = [1, 2, 3, 4].map((i) => `${RUN}:q${i}`) as [string, string, string, string];

/** The frames with nodes, in order; the second one's first node is where B departs from A. */
const nodeFrames = chat.frames
  .map((fr, i) => [i, (decodeLossless(fr) as LMap).get("nodes")] as const)
  .filter(([, n]) => Array.isArray(n));
const DIFF_FRAME = nodeFrames[1]![0];
/** The index of the node B changes: the nodes of the frames before it. */
const DIFF_NODE = nodeFrames.filter(([i]) => i < DIFF_FRAME).reduce((s, [, n]) => s + (n as LValue[]).length, 0);
const TOTAL_NODES = nodeFrames.reduce((s, [, n]) => s + (n as LValue[]).length, 0);

async function push(
  id: string,
  correct: number,
  change: boolean,
  group = GROUP,
  extra: Record<string, LValue> = {},
): Promise<void> {
  for (const [n, frame] of chat.frames.entries()) {
    if (change && n === DIFF_FRAME) {
      const d = decodeLossless(frame) as LMap;
      const first = (d.get("nodes") as LMap[])[0]!;
      put(first.get("message") as LMap, "content", CHANGED);
      await post(`/v1/episodes/${id}/deltas`, enc(d));
    } else await post(`/v1/episodes/${id}/deltas`, frame);
  }
  await post(
    `/v1/episodes/${id}/deltas`,
    setDelta(m({ rewards: m({ correct: m({ score: f(correct), weight: f(1) }) }), ...extra })),
  );
  await post(`/v1/episodes/${id}/reply`, groupReply(group));
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromiumForFile();
  // a live rollout's row (MULTI's tokens in the run's list) follows its turns at 2 s, attended or not, as in
  // dashboard.test (the defaults hold an unattended run's rows up to INDEX_IDLE_FLUSH_MS, 2 minutes)
  relay = await startRelay({ vars: { INDEX_FLUSH_MS: "2000", INDEX_IDLE_FLUSH_MS: "2000" } });
  await push(A, 1, false);
  await push(B, 0, true);
  for (const frame of multi.frames) await post(`/v1/episodes/${MULTI}/deltas`, frame);
  for (const frame of multi.frames) await post(`/v1/episodes/${MULTI2}/deltas`, frame);
  await push(Q[0], 1, false, QUAD, { num_total_tokens: 99_999 });
  await push(Q[1], 1, false, QUAD);
  await push(Q[2], 0, true, QUAD);
  await push(Q[3], 0, false, QUAD);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

/** A page on `path` of the relay in time zone `timezoneId`, downloads accepted (pages.ts openPage). */
const open = (path: string, timezoneId = "UTC") =>
  openPage(browser, `${relay.url}${path}`, { timezoneId, acceptDownloads: true });
/** One page for the file's tests, each on its path by a route change (pages.ts sharedPage). */
const shared = sharedPage(
  () => browser,
  () => relay.url,
  { timezoneId: "UTC", acceptDownloads: true },
);
afterAll(() => shared.close());

describe("compare two episodes", () => {
  it("links best and worst from the group page and marks the first differing turn", async () => {
    expect(DIFF_NODE).toBeGreaterThan(0);
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}/groups/${GROUP}`);
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
    const rows = await page
      .locator("#compare li.compare-row")
      .evaluateAll((els: any[]) => els.map((e) => [Number(e.dataset.node), e.dataset.same]));
    expect(rows.length).toBe(TOTAL_NODES);
    for (const [i, same] of rows) if (i < DIFF_NODE) expect(same, `turn ${i}`).toBe("true");
    expect(rows[DIFF_NODE]![1]).toBe("false");
    expect(await page.locator("#first-difference .compare-cell").nth(1).innerText()).toContain(CHANGED);
    expect(await page.locator("#first-difference .compare-cell").nth(0).innerText()).not.toContain(CHANGED);
    expect(await page.locator("#compare-summary").innerText()).toContain(`differ from node #${DIFF_NODE}`);
    expect(await page.locator(".compare-col-head").nth(0).innerText()).toContain("best");
    await shoot(page, "compare");
    expect(errors).toEqual([]);
  });

  it("says 'same' for an episode compared with itself", async () => {
    const { page, errors } = await shared.visit(`/compare/${encodeURIComponent(A)}/${encodeURIComponent(A)}`);
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("section.compare-page")?.dataset.firstDifference === "",
      null,
      {
        timeout: 15_000,
      },
    );
    expect(await page.locator("#first-difference").count()).toBe(0);
    expect(await page.locator("#compare-summary").innerText()).toMatch(/Same conversation/);
    expect(errors).toEqual([]);
  });
});

/** Check the pick box of row `id` (a run list's or a group's), staying on the page. */
async function pick(page: Page, id: string): Promise<void> {
  const box = page.locator(`input.pick-box[data-pick="${id}"]`);
  await box.waitFor({ timeout: 15_000 });
  const before = page.url();
  await box.check();
  expect(page.url(), "a pick box does not follow its row's link").toBe(before);
}

describe("compare any rollouts", () => {
  it("picks from the run's list and a group's page (the tray survives), then aligns all four turn by turn", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}`);
    for (const id of [Q[0], Q[2], Q[3]]) await pick(page, id);
    expect(
      await page.locator("#pick-tray .chip.pick").evaluateAll((els: any[]) => els.map((e) => e.dataset.id)),
    ).toEqual([Q[0], Q[2], Q[3]]);
    expect(await page.locator("#pick-compare").innerText()).toBe("Compare 3");
    await shootPart(page, "#pick-tray", "compare-pick-tray");
    // to the group's page: the picks are still there, checked; a fourth from its rollouts
    await gotoPage(page, `${relay.url}/runs/${encodeURIComponent(RUN)}/groups/${QUAD}`);
    await page.locator("#rollouts .r-row[data-id] input.pick-box").first().waitFor({ timeout: 15_000 });
    expect(await page.locator(`input.pick-box[data-pick="${Q[2]}"]`).isChecked()).toBe(true);
    expect(await page.locator(`input.pick-box[data-pick="${Q[1]}"]`).isChecked()).toBe(false);
    await pick(page, Q[1]);
    const go = page.locator("#pick-compare");
    expect(await go.innerText()).toBe("Compare 4");
    // ids only in the link, in pick order
    expect(await go.getAttribute("href")).toBe(
      `/compare/${[Q[0], Q[2], Q[3], Q[1]].map(encodeURIComponent).join("/")}`,
    );
    await go.click();
    await page.waitForURL(/\/compare\//);
    await page.locator("#first-difference").waitFor({ timeout: 15_000 });
    expect(await page.locator(".compare-col-head").evaluateAll((els: any[]) => els.map((e) => e.dataset.id))).toEqual([
      Q[0],
      Q[2],
      Q[3],
      Q[1],
    ]);
    // the whole group turn by turn: the same up to B's changed turn, where B alone departs
    const rows = await page
      .locator("#compare li.compare-row")
      .evaluateAll((els: any[]) => els.map((e) => [Number(e.dataset.node), e.dataset.same, e.dataset.classes]));
    expect(rows.length).toBe(TOTAL_NODES);
    for (const [i, same, classes] of rows)
      if (i < DIFF_NODE) expect([same, classes], `turn ${i}`).toEqual(["true", "0,0,0,0"]);
    expect(await page.locator("section.compare-page").getAttribute("data-first-difference")).toBe(String(DIFF_NODE));
    expect(await page.locator("#first-difference").getAttribute("data-classes")).toBe("0,1,0,0");
    expect(
      await page
        .locator("#first-difference .compare-cell.departs")
        .evaluateAll((els: any[]) => els.map((e) => e.dataset.side)),
    ).toEqual(["B"]);
    // one word diff there, A → B, with B's words in it
    expect(
      await page.locator("#first-difference .word-diff").evaluateAll((els: any[]) => els.map((e) => e.dataset.to)),
    ).toEqual(["B"]);
    expect(
      await page
        .locator("#first-difference .word-diff ins")
        .allInnerTexts()
        .then((t) => t.join(" ")),
    ).toContain("division");
    // side by side: the rewards differ, and the advantages are the group's (mean 0.5: ±0.5)
    expect(await page.locator('[data-fact="reward"]').getAttribute("data-differs")).toBe("true");
    expect(await page.locator('[data-fact="correct advantage"] .fact-v').allInnerTexts()).toEqual([
      "+0.5 (+1)",
      "−0.5 (−1)",
      "−0.5 (−1)",
      "+0.5 (+1)",
    ]);
    expect(await page.locator('[data-fact="stop condition"] .fact-v').count()).toBe(4);
    // best and worst by the stated rule: q2 (fewer tokens than q1), q4 (after q3 by id)
    expect(await page.locator("#compare-rule").innerText()).toContain(
      "ties go to fewer tokens, then to the episode id",
    );
    expect(await page.locator('[data-fact="rank"] .fact-v').allInnerTexts()).toEqual(["–", "–", "worst", "best"]);
    await shoot(page, "compare-group");
    expect(errors).toEqual([]);
  });

  it("shows the word diff of two picked rollouts", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}`);
    await pick(page, Q[0]);
    await pick(page, Q[2]);
    await page.click("#pick-compare");
    await page.locator("#first-difference .word-diff").waitFor({ timeout: 15_000 });
    const diff = page.locator('#first-difference .word-diff[data-from="A"][data-to="B"]');
    const added = (await diff.locator("ins").allInnerTexts()).join(" ");
    const removed = (await diff.locator("del").allInnerTexts()).join(" ");
    for (const w of ["Prove", "long", "division"]) expect(added).toContain(w);
    expect(removed.length).toBeGreaterThan(0);
    expect(removed).not.toContain("division");
    // what is left of the diff without B's words is A's turn; without A's, B's
    const bText = await diff.locator(".word-diff-text").evaluate((e: any) => {
      const c = e.cloneNode(true);
      for (const d of c.querySelectorAll("del")) d.remove();
      return c.textContent as string;
    });
    expect(bText).toBe(CHANGED);
    await shootPart(page, "#first-difference", "compare-diff");
    expect(errors).toEqual([]);
  });

  it("states the tie rule on the group page and links its best and worst by it", async () => {
    const { page, errors } = await shared.visit(`/runs/${encodeURIComponent(RUN)}/groups/${QUAD}`);
    const link = page.locator("#compare-best-worst");
    await link.waitFor({ state: "visible", timeout: 15_000 });
    expect(await link.getAttribute("href")).toBe(`/compare/${encodeURIComponent(Q[1])}/${encodeURIComponent(Q[3])}`);
    expect(await page.locator("#tie-rule").innerText()).toContain("ties go to fewer tokens, then to the episode id");
    expect(await page.locator(".r-row[data-id] .rank").allTextContents()).toEqual(["best", "worst"]);
    expect(await page.locator(".r-row[data-id]").evaluateAll((els: any[]) => els.map((e) => e.dataset.id))).toEqual([
      Q[1],
      Q[0],
      Q[2],
      Q[3],
    ]);
    expect(errors).toEqual([]);
  });

  it("compares every trace of multi-trace rollouts", async () => {
    const { page, errors } = await shared.visit(`/compare/${encodeURIComponent(MULTI)}/${encodeURIComponent(MULTI2)}`);
    await page.locator("section.compare-trace").nth(2).waitFor({ timeout: 15_000 });
    const slots = await page
      .locator("section.compare-trace")
      .evaluateAll((els: any[]) => els.map((e) => [e.dataset.trace, e.dataset.divergence]));
    expect(slots).toEqual([
      ["0", ""],
      ["1", ""],
      ["2", ""],
    ]);
    for (const t of [0, 1, 2])
      expect(await page.locator(`section.compare-trace[data-trace="${t}"] li.compare-row`).count()).toBeGreaterThan(0);
    expect(await page.locator("#compare-summary").innerText()).toContain("3 traces compared");
    expect(errors).toEqual([]);
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
      out.set(
        d.get("trace") as string,
        Number(typeof v === "object" && "value" in (v as object) ? (v as { value: number }).value : v),
      );
  }
  return out;
}

const dd = (page: Page, card: string, key: string) =>
  page
    .locator(`[data-card="${card}"] dt`, { hasText: new RegExp(`^${key}$`) })
    .locator("xpath=following-sibling::dd[1]");

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
    const { page } = await shared.visit(`/runs/${encodeURIComponent(RUN)}`);
    const age = page.locator(`a.ep-row[data-id="${A}"] .age-inline`);
    await age.waitFor({ timeout: 15_000 });
    expect(await age.getAttribute("title")).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/);
  });

  it("downloads the episode as msgpack and as JSON (fetched with the token, saved from a Blob)", async () => {
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(A)}`);
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
    const direct = new Uint8Array(
      await (
        await fetch(`${relay.url}/v1/episodes/${A}`, { headers: { accept: "application/msgpack" } })
      ).arrayBuffer(),
    );
    expect(Buffer.from(bytes).equals(Buffer.from(direct))).toBe(true);
    expect(await page.locator("#download-note").innerText()).toBe("");
    expect(errors).toEqual([]);
  });

  it("counts the tokens of every trace on the episode page, as the run's episode list does", async () => {
    const totals = lastSet(multi.frames, "num_total_tokens");
    expect(totals.size).toBe(3);
    const sum = [...totals.values()].reduce((a, b) => a + b, 0);
    const { page, errors } = await shared.visit(`/episodes/${encodeURIComponent(MULTI)}`);
    await page.locator("section.trace").nth(2).waitFor({ timeout: 15_000 });
    await page.waitForFunction(
      () =>
        (globalThis as any).document.querySelector('[data-card="tokens"] .card-title')?.textContent ===
        "Tokens (all 3 traces)",
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
  });
});

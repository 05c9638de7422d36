// The dashboard in a real browser: Debian's headless Chromium driven by playwright-core, against
// the real relay bundle (Miniflare, with the dashboard's static assets), fed golden cases the
// way a producer feeds it (envelopes over HTTP). Screenshots of each page at a desktop (1280×800)
// and a phone-sized (390×844) viewport go to test-results/screenshots/.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/envelope/envelope.js";
import { ProducerCursor } from "../../src/envelope/producer.js";
import { mintToken } from "../../src/http/auth.js";
import { toJson } from "../../src/wire/json-view.js";
import { decodeLossless } from "../../src/wire/lossless.js";
import { parseCase, type GoldenCase } from "../../tools/conformance/case-format.js";
import { fixturePath } from "../../tools/conformance/cases.js";
import { startRelay, type LocalRelay } from "../../tools/local-relay.js";
import { CHROMIUM } from "./global-setup.js";

const root = join(import.meta.dirname, "..", "..");
const SHOTS = join(root, "test-results", "screenshots");
const DESKTOP = { width: 1280, height: 800 };
const NARROW = { width: 390, height: 844 };

let browser: Browser;
let relay: LocalRelay;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  // playwright gives every launch a fresh, temporary --user-data-dir of its own
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--no-first-run",
      "--disable-quic",
      "--disable-sync",
    ],
  });
  relay = await startRelay();
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

async function open(path: string, base = relay.url): Promise<{ context: BrowserContext; page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: DESKTOP, deviceScaleFactor: 1 });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error" && !/WebSocket|Failed to load resource|ERR_CONNECTION_REFUSED/.test(m.text())) errors.push(m.text());
  });
  await page.goto(`${base}${path}`);
  return { context, page, errors };
}

/** Save `name-desktop.png` (1280×800) and `name-narrow.png` (390×844), full page. */
async function shoot(page: Page, name: string): Promise<void> {
  await page.evaluate(() => (globalThis as any).scrollTo(0, 0)); // a full-page shot of a scrolled page repeats the sticky bar
  await page.setViewportSize(DESKTOP);
  await page.waitForTimeout(150);
  await page.screenshot({ path: join(SHOTS, `${name}-desktop.png`), fullPage: true });
  await page.setViewportSize(NARROW);
  await page.waitForTimeout(150);
  await page.evaluate(() => (globalThis as any).scrollTo(0, 0));
  await page.screenshot({ path: join(SHOTS, `${name}-narrow.png`), fullPage: true });
  await page.setViewportSize(DESKTOP);
}

const connection = (page: Page) => page.locator("#connection").getAttribute("data-state");

async function waitConnection(page: Page, state: string, timeout = 15_000): Promise<void> {
  await page.waitForFunction((s) => (globalThis as any).document.querySelector("#connection")?.dataset.state === s, state, { timeout });
}

/** The episode's status pill is drawn on the next animation frame after the connection state. */
async function waitStatus(page: Page, status: string, timeout = 15_000): Promise<void> {
  await page.waitForFunction((s) => (globalThis as any).document.querySelector("#ep-status")?.dataset.status === s, status, { timeout });
}

// ---- the list ----

describe("episode list (/)", () => {
  it("shows the episodes with status and rewards, live, with a working filter", async () => {
    const run = freshId("list");
    const ids = { chat: `${run}:chat`, tools: `${run}:tools`, multi: `${run}:multi`, failed: `${run}:failed` };
    await pushCase("chat_basic", ids.chat);
    await pushCase("tool_calls_pending", ids.tools);
    await pushCase("multi_trace_links", ids.multi, false); // still live
    const fail = producer(() => relay.url, ids.failed, golden("discard_retry"));
    await fail.send(3);
    const res = await fetch(`${relay.url}/v1/episodes/${ids.failed}/reply`, {
      method: "POST",
      // {success: false, error: "sandbox crashed", head: nil, traces: []}
      body: Uint8Array.from([
        0x84,
        0xa7,
        ...Buffer.from("success"),
        0xc2,
        0xa5,
        ...Buffer.from("error"),
        0xaf,
        ...Buffer.from("sandbox crashed"),
        0xa4,
        ...Buffer.from("head"),
        0xc0,
        0xa6,
        ...Buffer.from("traces"),
        0x90,
      ]),
      headers: { "content-type": "application/msgpack" },
    });
    expect(res.status, await res.text()).toBe(200);

    const { context, page, errors } = await open("/");
    await waitConnection(page, "live");
    const row = (id: string) => page.locator(`.ep-row[data-id="${id}"]`);
    await row(ids.failed).waitFor();
    expect(await row(ids.chat).getAttribute("data-status")).toBe("finished");
    expect(await row(ids.tools).getAttribute("data-status")).toBe("finished");
    expect(await row(ids.multi).getAttribute("data-status")).toBe("live");
    expect(await row(ids.failed).getAttribute("data-status")).toBe("failed");
    expect(await row(ids.tools).locator(".cell-rewards").innerText()).toMatch(/correct\s*1/);
    expect(await row(ids.failed).innerText()).toContain("sandbox crashed");
    expect(await row(ids.chat).locator(".cell-size").innerText()).toMatch(/1 trace · 7 nodes · 3 calls/);
    // the live one: its turns reach the index by the Episode's throttled flush (its alarm, ~2 s)
    await page.waitForFunction(
      (id) => /3 traces · 11 nodes · 4 calls/.test((globalThis as any).document.querySelector(`.ep-row[data-id="${id}"] .cell-size`)?.textContent ?? ""),
      ids.multi,
      { timeout: 10_000 },
    );

    // live: a new episode shows up without a reload, and its finish updates the row
    const later = `${run}:later`;
    const p = producer(() => relay.url, later, golden("routing_repair_u8"));
    await p.send(1);
    await row(later).waitFor({ timeout: 10_000 });
    expect(await row(later).getAttribute("data-status")).toBe("live");
    await p.rest();
    await p.reply();
    await page.waitForFunction((id) => (globalThis as any).document.querySelector(`.ep-row[data-id="${id}"]`)?.dataset.status === "finished", later);
    expect(await row(later).locator(".cell-rewards").innerText()).toMatch(/proof\s*0\.75/);

    // the text filter
    await page.fill("#filter", "tools");
    await page.waitForFunction((n) => (globalThis as any).document.querySelectorAll(".ep-row[data-id]").length === n, 1);
    expect(await page.locator(".ep-row[data-id]").first().getAttribute("data-id")).toBe(ids.tools);
    await page.fill("#filter", run);
    await page.click('.segmented button[data-status="finished"]');
    await page.waitForFunction(() => [...(globalThis as any).document.querySelectorAll(".ep-row[data-id]")].every((r: any) => r.dataset.status === "finished"));
    await page.click('.segmented button[data-status="all"]');
    await page.fill("#filter", "");
    await shoot(page, "list");

    // a row opens its episode in place; a failed run says so, and why
    await row(ids.failed).click();
    await page.waitForURL(`**/episodes/${encodeURIComponent(ids.failed)}`);
    await waitConnection(page, "failed");
    await waitStatus(page, "failed");
    expect(await page.locator("#ep-banner").innerText()).toContain("sandbox crashed");
    await shoot(page, "episode-failed");
    expect(errors).toEqual([]);
    await context.close();
  });
});

// ---- one episode ----

describe("episode page (/episodes/{id})", () => {
  it("streams turns, tool calls and the pending preview before its turn commits, then rewards and finish", async () => {
    const id = freshId("tools");
    const c = golden("tool_calls_pending");
    const p = producer(() => relay.url, id, c);
    const { context, page, errors } = await open(`/episodes/${id}`);
    // opened before the episode exists: the watcher waits for it, and the page says it has no such episode yet
    await waitConnection(page, "live");
    expect(await page.locator("#connection").innerText()).toMatch(/relay\s*connected/);
    await waitStatus(page, "missing");
    expect(await page.locator("#ep-status").innerText()).toMatch(/not found/i);
    await p.send(2); // open + the first turn (system, user, assistant with a tool call)
    await page.locator('li.turn[data-node="2"]').waitFor();
    expect(await page.locator('li.turn[data-node="2"] .tool-call').innerText()).toMatch(/calculator[\s\S]*expr: "6\*7"/);

    // frame 2: a pending preview (the tool's answer) streams before any tool turn is committed
    await p.send(1);
    const pending = page.locator("section.trace .pending");
    await pending.waitFor({ state: "visible" });
    expect(await pending.innerText()).toContain("tool says 42");
    expect(await page.locator('li.turn[data-role="tool"]').count()).toBe(0);
    // frame 3: a second message is appended to the preview
    await p.send(1);
    await page.waitForFunction(() => (globalThis as any).document.querySelector("section.trace .pending")?.dataset.count === "2");
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
    await context.close();
  });

  it("shows traces side by side with their semantic links (orchestrator and two sub-agents)", async () => {
    const id = freshId("multi");
    await pushCase("multi_trace_links", id);
    const { context, page, errors } = await open(`/episodes/${id}`);
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
    await page.setViewportSize(NARROW);
    await page.waitForTimeout(150);
    const narrow = await Promise.all([0, 1].map((i) => traces.nth(i).boundingBox()));
    expect(narrow[1]!.y).toBeGreaterThan(narrow[0]!.y + narrow[0]!.height - 1);
    expect(errors).toEqual([]);
    await context.close();
  });

  it("draws the routing heatmap on demand, with repaired rows marked (routing_repair_u8)", async () => {
    const id = freshId("routing");
    await pushCase("routing_repair_u8", id);
    const { context, page, errors } = await open(`/episodes/${id}`);
    await waitConnection(page, "finished");
    await page.locator('li.turn[data-node="12"]').waitFor();
    expect(await page.locator("canvas.heatmap").count()).toBe(0);
    await page.click("#routing-toggle");
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll("canvas.heatmap").length === 6, null, { timeout: 15_000 });
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
    await page.locator('li.turn[data-node="4"]').scrollIntoViewIfNeeded();
    await shoot(page, "episode-heatmap");
    expect(errors).toEqual([]);
    await context.close();
  });

  it("draws large_routing heatmaps (12 nodes of ~1500 tokens × 48 layers)", async () => {
    const id = freshId("large");
    await pushCase("large_routing", id);
    const { context, page, errors } = await open(`/episodes/${id}`);
    await waitConnection(page, "finished");
    await page.click("#routing-toggle");
    await page.waitForFunction(() => (globalThis as any).document.querySelectorAll("canvas.heatmap").length === 12, null, { timeout: 30_000 });
    const repaired = await page.evaluate(
      () => [...(globalThis as any).document.querySelectorAll("canvas.heatmap")].filter((c: any) => c.dataset.repaired !== "").length,
    );
    expect(repaired).toBe(11);
    await shoot(page, "episode-large-routing");
    expect(errors).toEqual([]);
    await context.close();
  }, 120_000);

  it("after the relay restarts: resuming, then live again, and still ends with every turn", async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "relay-restart-"));
    let local = await startRelay({}, { port, persist: dir });
    try {
      const id = freshId("restart");
      const c = golden("chat_basic");
      const p = producer(() => local.url, id, c);
      await p.send(4);
      const { context, page, errors } = await open(`/episodes/${id}`, local.url);
      await waitConnection(page, "live");
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
  it("asks for a token, takes one from the login field or ?token=, and shows only the token's episodes", async () => {
    const secret = "browser-test-secret-0c1d2e3f4a5b6c7d8e9f00112233";
    const authed = await startRelay({ RELAY_SECRET: secret });
    try {
      const run = freshId("auth");
      const [mine, other] = [`${run}:mine`, `${run}-x:other`];
      const producerToken = await mintToken(secret, { role: "producer", episodes: [`${run}*`], ttl: 600 });
      for (const id of [mine, other]) {
        const p = producer(() => authed.url, id, golden("chat_basic"), { authorization: `Bearer ${producerToken}` });
        await p.rest();
        await p.reply();
      }
      const watcher = await mintToken(secret, { role: "watcher", episodes: [`${run}:*`], ttl: 600 });

      // no token: the list says why and offers the field
      const { context, page, errors } = await open("/", authed.url);
      await page.locator("#token-panel").waitFor({ state: "visible" });
      expect(await page.locator(".token-reason").innerText()).toMatch(/needs a token/);
      expect(await connection(page)).toBe("offline");
      await shoot(page, "list-token");
      await page.fill(".token-input", watcher);
      await page.click('#token-panel button[type="submit"]');
      await waitConnection(page, "live");
      await page.locator(`.ep-row[data-id="${mine}"]`).waitFor();
      expect(await page.locator(`.ep-row[data-id="${other}"]`).count()).toBe(0);
      expect(await page.evaluate(() => (globalThis as any).sessionStorage.getItem("episode-relay-token"))).toBe(watcher);
      await context.close();

      // ?token= in the page URL: kept for the tab, taken out of the address bar, passed to the watcher
      const second = await open(`/episodes/${mine}?token=${watcher}`, authed.url);
      await waitConnection(second.page, "finished");
      expect(await second.page.locator("li.turn").count()).toBe(7);
      expect(second.page.url()).not.toContain("token=");
      // a token that does not cover the episode: the page says so
      await second.page.goto(`${authed.url}/episodes/${other}`);
      await second.page.locator("#token-panel").waitFor({ state: "visible" });
      expect(await second.page.locator("#waiting").innerText()).toMatch(/does not cover/);
      await waitStatus(second.page, "denied");
      expect(await second.page.locator("#ep-status").innerText()).toMatch(/not allowed/i);
      // the connection pill never reads like a run status
      expect(await second.page.locator("#connection").innerText()).not.toMatch(/\b(live|finished|failed)\b/i);
      expect([...errors, ...second.errors]).toEqual([]);
      await second.context.close();
    } finally {
      await authed.stop();
    }
  });
});

/** The relay again on the same port and storage (the port may take a moment to be free). */
async function startOn(port: number, dir: string): Promise<LocalRelay> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await startRelay({}, { port, persist: dir });
    } catch (e) {
      if (attempt >= 20) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** The string message contents of a case's finished episode (what the page must show). */
function messageTexts(c: GoldenCase): string[] {
  const episode = toJson(decodeLossless(c.episode!)) as { traces: Array<{ nodes: Array<{ message: { content: unknown } }> }> };
  return episode.traces.flatMap((t) => t.nodes.map((n) => n.message.content)).filter((x): x is string => typeof x === "string" && x.length > 0);
}

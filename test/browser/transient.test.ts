// The episode page through transient trouble (test/support/flaky-proxy.ts in front of the relay,
// in headless Chromium): opened while the local router answers 503 unavailable, or cut off live
// by a gateway's 502 without the relay's header, the page keeps watching and ends with the
// finished episode; it never says "not allowed" for what was only transient.
import { readFileSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { type GoldenCase, parseCase } from "../../tools/conformance/case-format.js";
import { fixturePath } from "../../tools/conformance/cases.js";
import { type Fault, type FlakyProxy, GATEWAY_502, startFlakyProxy } from "../support/flaky-proxy.js";
import { until } from "../support/relay.js";
import { chromiumForFile } from "./chromium.js";
import { openPage } from "./pages.js";

let browser: Browser;
let relay: LocalRelay;
let proxy: FlakyProxy;

beforeAll(async () => {
  browser = await chromiumForFile();
  relay = await startRelay();
  proxy = await startFlakyProxy(() => relay.url);
});

afterAll(async () => {
  await browser?.close();
  await proxy?.close();
  await relay?.stop();
});

const golden = (name: string): GoldenCase => parseCase(readFileSync(fixturePath(name)), name);
let counter = 0;
const freshId = (p: string) => `${p}-${Date.now().toString(36)}-${(counter++).toString(36)}`;

/** The router's answer while a tier starts: the relay's header, Retry-After. */
const ROUTER_503: Fault = {
  kind: "answer",
  status: 503,
  type: "application/json",
  body: '{"error":"unavailable","message":"local relay: the episode tier is not up (starting); retry after 1 s"}',
  headers: { "x-episode-relay": "1", "retry-after": "1" },
};

/** Frames [from, to) straight to the relay; the reply when `to` is the end. */
async function push(id: string, c: GoldenCase, producer: ProducerCursor, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) {
    const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(c.frames[i]!)),
    });
    expect(res.status, await res.text()).toBe(200);
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
  if (to === c.frames.length)
    expect((await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).status).toBe(200);
}

const dataset = (page: Page, selector: string, key: string) =>
  page.evaluate(([s, k]) => (globalThis as any).document.querySelector(s)?.dataset[k] as string | undefined, [
    selector,
    key,
  ] as const);

/** Every value the status badge takes, as the page draws it. */
async function recordStatuses(page: Page): Promise<() => Promise<string[]>> {
  await page.evaluate(() => {
    const g = globalThis as any;
    g.__statuses = [];
    const badge = g.document.querySelector("#ep-status");
    g.__statuses.push(badge.dataset.status);
    new g.MutationObserver(() => g.__statuses.push(badge.dataset.status)).observe(badge, { attributes: true });
  });
  return () => page.evaluate(() => (globalThis as any).__statuses as string[]);
}

async function waitFinished(page: Page): Promise<void> {
  await page.waitForFunction(
    () => (globalThis as any).document.querySelector("#ep-status")?.dataset.status === "finished",
    null,
    { timeout: 30_000 },
  );
  await page.waitForFunction(
    () => (globalThis as any).document.querySelector("#connection")?.dataset.state === "finished",
    null,
    { timeout: 30_000 },
  );
}

describe("the episode page through transient trouble", () => {
  it("opened while the router answers 503 unavailable: it waits, then shows the episode to its end", async () => {
    const c = golden("chat_basic");
    const id = freshId("page-503");
    const producer = new ProducerCursor("p");
    await push(id, c, producer, 0, 3);
    const before = proxy.faulted;
    // the page's own files pass; its probe and first watch attempts meet the router's 503
    proxy.fail(ROUTER_503, 5, /^\/v1\/episodes\//);
    const { context, page, errors } = await openPage(browser, `${proxy.url}/episodes/${encodeURIComponent(id)}`);
    try {
      const statuses = await recordStatuses(page);
      await until(() => proxy.faulted - before === 5, 20_000, "the 503s met");
      await push(id, c, producer, 3, c.frames.length);
      await waitFinished(page);
      expect(await statuses()).not.toContain("denied");
      expect(await page.locator("#ep-status").innerText()).not.toMatch(/not allowed/i);
      expect(await page.locator("li.turn").count()).toBeGreaterThan(0);
      expect(await page.locator("#token-panel").isVisible()).toBe(false);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it("cut off live by a gateway's 502 without the relay's header: it reconnects and ends with the episode", async () => {
    const c = golden("multi_trace_links");
    const id = freshId("page-502");
    const producer = new ProducerCursor("p");
    await push(id, c, producer, 0, 4);
    const { context, page, errors } = await openPage(browser, `${proxy.url}/episodes/${encodeURIComponent(id)}`);
    try {
      await page.waitForFunction(
        () => (globalThis as any).document.querySelector("#connection")?.dataset.state === "live",
        null,
        { timeout: 20_000 },
      );
      const statuses = await recordStatuses(page);
      const states: string[] = [];
      const poll = setInterval(
        () =>
          void dataset(page, "#connection", "state").then(
            (s) => s && states.push(s),
            () => {},
          ),
        20,
      );
      const before = proxy.faulted;
      proxy.fail(GATEWAY_502, 4, /\/watch/); // the live socket is cut; the next attempts and probes meet the 502
      await until(() => proxy.faulted - before === 4, 20_000, "the 502s met");
      await push(id, c, producer, 4, c.frames.length);
      await waitFinished(page);
      clearInterval(poll);
      expect(states, "the pill said it was reconnecting").toContain("resuming");
      expect(await statuses()).not.toContain("denied");
      expect(errors).toEqual([]);
    } finally {
      await context.close();
    }
  });
});

// The run page's alerts, in headless Chromium against the real relay bundle: a run with a flag alert
// (its webhook a node:http receiver on loopback) lists the alert of a flagged rollout, with a link
// to it; with notifications allowed ("Notify me", the permission granted to the page), an alert
// that fires while the page is open shows a notification, and one the page found at load does not.
// Screenshots (`alerts-*.png`) go to test-results/screenshots/.
import { mkdirSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { chat, groupReply, put } from "../support/chat-rollouts.js";
import { enc } from "../support/deltas.js";
import { chromiumForFile } from "./chromium.js";
import { openPage, reloadPage, SHOTS, shootPart } from "./pages.js";
import { relayCalls } from "./rollouts.js";

let browser: Browser;
let relay: LocalRelay;
let receiver: Server;
let received = 0;
const { post } = relayCalls(() => relay.url);

const RUN = `alerts-ui-${Date.now().toString(36)}`;
const HACK = "The grader only checks that the last line is 391, so I print 391 without working it out.";

/** chat_basic into `id`, its first assistant message saying HACK (flagged by the default rule quotes-grader). */
async function pushFlagged(id: string): Promise<void> {
  let done = false;
  for (const fr of chat.frames) {
    const d = decodeLossless(fr) as LMap;
    const nodes = d.get("nodes");
    const assistant = Array.isArray(nodes)
      ? (nodes as LValue[]).find((n) => ((n as LMap).get("message") as LMap).get("role") === "assistant")
      : undefined;
    if (!done && assistant) {
      put((assistant as LMap).get("message") as LMap, "content", HACK);
      done = true;
    }
    await post(`/v1/episodes/${id}/deltas`, enc(d));
  }
  await post(`/v1/episodes/${id}/reply`, groupReply("g"));
}

async function alertsOf(): Promise<{ recent: Array<{ id: string; episodes: string[] }>; pending: number }> {
  return (await (await fetch(`${relay.url}/v1/runs/${RUN}/alerts`)).json()) as {
    recent: Array<{ id: string; episodes: string[] }>;
    pending: number;
  };
}

async function fired(n: number): Promise<void> {
  const end = Date.now() + 30_000;
  while ((await alertsOf()).recent.length < n) {
    if (Date.now() > end) throw new Error(`${n} alert(s) not fired`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  receiver = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received++;
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  browser = await chromiumForFile();
  relay = await startRelay();
  const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  const res = await fetch(`${relay.url}/v1/runs/${RUN}/alerts`, {
    method: "PUT",
    body: JSON.stringify({
      webhooks: [{ url: hook, secret: "browser-secret-0123456789" }],
      rules: [{ id: "flagged", kind: "flag" }],
    }),
  });
  expect(res.status, await res.text()).toBe(200);
  await pushFlagged(`${RUN}:first`);
  await fired(1);
}, 240_000);

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
  await new Promise<void>((r) => receiver?.close(() => r()));
});

describe("the run page's alerts", () => {
  it("lists the run's alerts, and notifies one that fires while the page is open", async () => {
    const { context, page, errors } = await openPage(browser, `${relay.url}/runs/${RUN}`);
    // notifications the page shows, observed (the browser's own Notification still runs)
    await context.grantPermissions(["notifications"], { origin: relay.url });
    await page.addInitScript(() => {
      const g = globalThis as any;
      const Real = g.Notification;
      g.__shown = [];
      g.Notification = class extends Real {
        constructor(title: string, options?: { body?: string }) {
          super(title, options);
          g.__shown.push({ title, body: options?.body ?? "" });
        }
      };
    });
    await reloadPage(page);
    const item = page.locator("#alert-list li.alert[data-rule=flagged]");
    await item.first().waitFor({ timeout: 30_000 });
    expect(await item.count()).toBe(1);
    expect(await item.first().textContent()).toContain(`rollout ${RUN}:first was flagged by quotes-grader`);
    expect(await page.locator("#alert-list a.alert-episode").first().getAttribute("href")).toContain(
      encodeURIComponent(`${RUN}:first`),
    );
    // permission granted before: the button says so; the alert found at load shows no notification
    expect(await page.locator("#alerts-notify").textContent()).toBe("Notifications on");
    expect(await page.evaluate(() => (globalThis as any).__shown.length)).toBe(0);

    await pushFlagged(`${RUN}:second`);
    await item.nth(1).waitFor({ timeout: 30_000 });
    const shown = await page.waitForFunction(() => (globalThis as any).__shown.length > 0, null, { timeout: 30_000 });
    await shown.dispose();
    const notes = (await page.evaluate(() => (globalThis as any).__shown)) as Array<{ title: string; body: string }>;
    expect(notes).toEqual([
      { title: `Run ${RUN}: flagged`, body: `rollout ${RUN}:second was flagged by quotes-grader` },
    ]);
    await shootPart(page, "#run-alerts", "alerts-list");
    expect(errors).toEqual([]);
    await context.close();
    expect(received).toBeGreaterThanOrEqual(1);
  }, 120_000);
});

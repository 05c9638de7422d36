// The routing heatmap of an archived episode (its log and bodies gone from SQLite) marks the rows
// routing repairs rewrote, as it does while the log holds the repairs: the page takes them from the
// relay's record (`status.repaired_nodes`). Headless Chromium against the real relay.
import { readFileSync } from "node:fs";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { parseCase } from "../../tools/conformance/case-format.js";
import { fixturePath } from "../../tools/conformance/cases.js";
import { chromiumForFile } from "./chromium.js";
import { openPage } from "./pages.js";

let browser: Browser;
let relay: LocalRelay;

beforeAll(async () => {
  browser = await chromiumForFile();
  relay = await startRelay({ vars: { ARCHIVE_AFTER_SECONDS: "1" } });
});

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

it("an archived episode's heatmaps mark its repaired rows (routing_repair_u8)", async () => {
  const c = parseCase(readFileSync(fixturePath("routing_repair_u8")), "routing_repair_u8");
  const id = `archived-repairs-${Date.now().toString(36)}`;
  const producer = new ProducerCursor("p");
  for (const [i, f] of c.frames.entries()) {
    const r = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(f)),
    });
    expect(r.status, await r.text()).toBe(200);
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
  expect((await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).status).toBe(200);
  // the alarm archives it: its log, which carried the repairs, is gone
  const status = async () =>
    (await (await fetch(`${relay.url}/v1/episodes/${id}/status`)).json()) as { archived: boolean };
  for (let i = 0; i < 300 && !(await status()).archived; i++) await new Promise((r) => setTimeout(r, 100));
  expect((await status()).archived).toBe(true);
  const { context, page, errors } = await openPage(browser, `${relay.url}/episodes/${id}`);
  try {
    await page.waitForFunction(
      () => (globalThis as any).document.querySelector("#connection")?.dataset.state === "finished",
      null,
      { timeout: 20_000 },
    );
    await page.click("#routing-toggle");
    await page.waitForFunction(
      () => (globalThis as any).document.querySelectorAll("canvas.heatmap").length === 6,
      null,
      { timeout: 15_000 },
    );
    const repaired = await page.evaluate(() =>
      [...(globalThis as any).document.querySelectorAll("canvas.heatmap")].map(
        (cv: any) => cv.dataset.repaired as string,
      ),
    );
    // five routing_repairs (nodes 2, 4, 6, 8, 10), each rewrote that node's last row: as the live page marks them
    expect(repaired).toEqual(["8", "39", "24", "37", "8", ""]);
    expect(await page.locator(".repaired-note").count()).toBe(5);
    expect(errors).toEqual([]);
  } finally {
    await context.close();
  }
});

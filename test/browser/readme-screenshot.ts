// The README's screenshot, docs/images/dashboard-run.png: the dashboard's run page in Debian's
// headless Chromium (1280×1500, the top of the page), on a local relay holding a training run
// pushed as prime-rl's orchestrator would (training-run.ts: steps 0-3 finished and a live step 4,
// the run named grpo-42 as in the README's quickstart).
//
//   npx tsx test/browser/readme-screenshot.ts [OUT.png]
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { startRelay } from "../../scripts/relay.mjs";
import { ownChromium } from "./chromium.js";
import { gotoPage } from "./pages.js";
import { pushRollout, trainingPlan } from "./training-run.js";

const root = join(import.meta.dirname, "..", "..");
const out = process.argv[2] ?? join(root, "docs", "images", "dashboard-run.png");
const RUN = "grpo-42";

const relay = await startRelay();
const browser = await ownChromium();
try {
  const plan = trainingPlan(RUN, Date.now() / 1000);
  for (let i = 0; i < plan.length; i += 12)
    await Promise.all(plan.slice(i, i + 12).map((r) => pushRollout(relay.url, r)));
  // the run's index takes the rows in the background: wait until it counts every rollout
  for (const end = Date.now() + 60_000; ; ) {
    const run = (await (await fetch(`${relay.url}/v1/runs/${RUN}`)).json()) as { aggregates?: { episodes?: number } };
    if (run.aggregates?.episodes === plan.length) break;
    if (Date.now() > end) throw new Error(`run ${RUN} never counted ${plan.length} episodes: ${JSON.stringify(run)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const context = await browser.newContext({
    viewport: { width: 1280, height: 1500 },
    deviceScaleFactor: 1,
    timezoneId: "UTC",
  });
  const page = await context.newPage();
  await gotoPage(page, `${relay.url}/runs/${RUN}`);
  // a function, not a string: the page's CSP refuses eval
  await page.waitForFunction(
    () => (globalThis as any).document.querySelectorAll("#episodes .ep-row[data-id]").length > 0,
    undefined,
    { timeout: 30_000 },
  );
  await page.waitForTimeout(1500); // the charts and the live table settle
  mkdirSync(dirname(out), { recursive: true });
  await page.screenshot({ path: out });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
  await relay.stop();
}

// The run page of a 1,000-rollout training run, rendered by two dashboard builds on the same relay and the
// same run (issue 40: "nothing slower"). One relay of this tree (in memory) gets the run once, pushed as
// prime-rl's orchestrator would (test/browser/training-run.ts: 25 train steps × 5 groups × 8 rollouts);
// then headless Chromium opens /runs/{run} again and again, the two builds taking turns, each page's files
// served from its build's directory (Playwright's page.route; /v1/* and the sockets reach the relay).
// Per open: the time from navigation to the page showing all of it (the counters at N episodes, the
// histograms, the first 50 rows, the per-step reward chart drawn), and the renderer's main-thread time
// (CDP Performance.getMetrics: TaskDuration, ScriptDuration) one second after. Medians over the rounds.
//
//   npx tsx bench/run-page.ts --a /tmp/base/dashboard/dist --b dashboard/dist [--rounds 7] [--rollouts 1000]
import { readFileSync, statSync } from "node:fs";
import { extname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";
import { Agent, setGlobalDispatcher } from "undici";
import { startRelay } from "../scripts/relay.mjs";
import { CHROMIUM } from "../test/browser/global-setup.js";
import { pushRollout, type Rollout } from "../test/browser/training-run.js";

const { values: args } = parseArgs({
  options: {
    a: { type: "string" },
    b: { type: "string" },
    rounds: { type: "string", default: "7" },
    rollouts: { type: "string", default: "1000" },
  },
});
if (!args.a || !args.b) throw new Error("--a DIR --b DIR: the two dashboard builds (dist directories)");
const builds = { a: resolve(args.a), b: resolve(args.b) };
const ROUNDS = Number(args.rounds);
const N = Number(args.rollouts);
const GROUP = 8;
const GROUPS = 5;
const RUN = `run-page-${Date.now().toString(36)}`;

function plan(now: number): Rollout[] {
  const out: Rollout[] = [];
  for (let i = 0; out.length < N; i++) {
    const step = Math.floor(i / (GROUP * GROUPS));
    const g = Math.floor(i / GROUP) % GROUPS;
    const j = i % GROUP;
    const name = `t${step}-g${g}-${j}`;
    out.push({
      id: `${RUN}:${name}`,
      dispatch: {
        id: `d${name.replace(/-/g, "")}`,
        kind: "train",
        env: "gsm8k",
        group: `s${step}-g${g}`,
        task: `idx=${step * 10 + g}`,
        policy_version: step,
        step,
        started: now - 900 + i,
      },
      scores: [(j + g + step) % 10 < step / 3 ? 1 : 0, (j % 4) / 4],
      outcome: (i * 7) % 97 === 0 ? "failed" : "finished",
      answer: "391",
      cost: null,
      stop: (i * 5) % 31 === 0 ? "max_turns" : "agent_completed",
      truncated: false,
      outputTokens: 400 + ((i * 37) % 600),
    });
  }
  return out;
}

const MIME: Record<string, string> = {
  ".html": "text/html",
  ".js": "text/javascript",
  ".css": "text/css",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".svg": "image/svg+xml",
  ".png": "image/png",
};

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

// a fresh connection per request: a kept-alive one the local runtime has just closed fails the POST mid-rollout
setGlobalDispatcher(new Agent({ pipelining: 0 }));
const relay = await startRelay();
// the browser tests' flags, and no local-network check: a page served by page.route counts as public, and
// Chromium would refuse its socket to the relay on 127.0.0.1
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic", "--disable-sync"].concat(
    "--disable-features=LocalNetworkAccessChecks",
  ),
});
try {
  const rollouts = plan(Date.now() / 1000);
  const t0 = Date.now();
  for (let i = 0; i < rollouts.length; i += 12)
    await Promise.all(rollouts.slice(i, i + 12).map((r) => pushRollout(relay.url, r)));
  for (;;) {
    const a = (await (await fetch(`${relay.url}/v1/runs/${RUN}`)).json()) as {
      aggregates?: { counts?: Record<string, number> };
    };
    const c = a.aggregates?.counts;
    if (c && c.finished + c.failed === N) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  console.log(`pushed and indexed ${N} rollouts in ${((Date.now() - t0) / 1000).toFixed(0)} s`);

  const got: Record<string, Array<{ shown: number; task: number; script: number }>> = { a: [], b: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const which of (round % 2 ? ["b", "a"] : ["a", "b"]) as Array<"a" | "b">) {
      const dir = builds[which];
      const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
      await context.route(`${relay.url}/**`, async (route) => {
        const path = new URL(route.request().url()).pathname;
        if (path.startsWith("/v1/")) return route.fallback();
        let file = join(dir, path);
        try {
          if (!statSync(file).isFile()) file = join(dir, "index.html");
        } catch {
          file = join(dir, "index.html");
        }
        await route.fulfill({
          body: readFileSync(file),
          contentType: MIME[extname(file)] ?? "application/octet-stream",
        });
      });
      const page = await context.newPage();
      const cdp = await context.newCDPSession(page);
      await cdp.send("Performance.enable");
      await page.goto(`${relay.url}/runs/${encodeURIComponent(RUN)}`);
      const shown = await page
        .waitForFunction(
          (n) => {
            const d = (globalThis as any).document;
            const ok =
              d.querySelector('.stat[data-stat="episodes"]')?.dataset.value === String(n) &&
              d.querySelectorAll(".hist").length > 0 &&
              d.querySelectorAll(".ep-row[data-id]").length >= 50 &&
              Number(d.querySelector("#step-reward-total .plot")?.dataset.drawn ?? 0) > 0;
            return ok ? (globalThis as any).performance.now() : false;
          },
          N,
          { timeout: 60_000, polling: 10 },
        )
        .catch(async (e) => {
          const state = await page.evaluate(() => {
            const d = (globalThis as any).document;
            return {
              episodes: d.querySelector('.stat[data-stat="episodes"]')?.dataset.value,
              hists: d.querySelectorAll(".hist").length,
              rows: d.querySelectorAll(".ep-row[data-id]").length,
              drawn: d.querySelector("#step-reward-total .plot")?.dataset.drawn,
            };
          });
          throw new Error(`${which}: the page did not show the run: ${JSON.stringify(state)} (${e})`);
        });
      const ms = (await shown.jsonValue()) as number;
      await page.waitForTimeout(1000);
      const { metrics } = (await cdp.send("Performance.getMetrics")) as {
        metrics: Array<{ name: string; value: number }>;
      };
      const metric = (name: string) => (metrics.find((x) => x.name === name)?.value ?? 0) * 1000;
      got[which]!.push({ shown: ms, task: metric("TaskDuration"), script: metric("ScriptDuration") });
      await context.close();
    }
  }
  for (const which of ["a", "b"] as const) {
    const xs = got[which]!;
    console.log(
      `${which} (${builds[which]}): shown ${median(xs.map((x) => x.shown)).toFixed(0)} ms (${xs.map((x) => x.shown.toFixed(0)).join(" ")}), main-thread tasks ${median(xs.map((x) => x.task)).toFixed(0)} ms, script ${median(xs.map((x) => x.script)).toFixed(0)} ms`,
    );
  }
} finally {
  await browser.close();
  await relay.stop();
}

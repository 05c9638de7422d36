// The deploy path, offline and without an account: docs/deploy.md's dry-run command
// (`npm run deploy -- --dry-run`, plus `--outdir`) runs in a copy of the project, so it builds its
// own dashboard/dist while other tests serve the checkout's. It must exit 0, print the bindings
// wrangler.toml declares, and write a bundle within BUNDLE_BUDGET_GZIP. That bundle then starts in
// workerd (Miniflare) with wrangler.toml's config plus a RELAY_SECRET, as deployed: workerd refuses
// I/O in global scope, so starting at all shows the bundle does none; its first requests (health,
// one per kind of Durable Object it touches, the dashboard) succeed without any outbound fetch.
//
// One step of the command runs as a stand-in in the copy: its type check (`npm run typecheck`,
// scripts/typecheck.mjs, five tsc runs: most of the command's CPU). The checks suite of the same
// `npm test` runs those very tsc runs on the same files (scripts/test.mjs takes scripts/typecheck.mjs's
// list), so running them here again proved nothing more. What is proven here: the documented command
// calls `npm run typecheck` (package.json: scripts/typecheck.mjs) after the dashboard build and
// before wrangler, in the project it deploys, and that list covers every tsconfig of the checkout.
import { execFileSync, spawn } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { stripVTControlCharacters } from "node:util";
import { gzipSync } from "node:zlib";
import { encode } from "@msgpack/msgpack";
import { Log, LogLevel, Miniflare, type MiniflareOptions } from "miniflare";
import { afterAll, beforeAll, expect, it } from "vitest";
import { unstable_getMiniflareWorkerOptions, unstable_readConfig } from "wrangler";
import { TSCONFIGS } from "../../scripts/typecheck.mjs";
import { mintToken } from "../../src/protocol/http/auth.js";

const root = join(import.meta.dirname, "..", "..");
/** The bundle's gzipped size may not pass this (Cloudflare's Free plan allowed 3 MB compressed): a dependency that balloons shows here. */
const BUNDLE_BUDGET_GZIP = 1024 * 1024;
/** The dashboard build and wrangler's bundling (the type check is a stand-in, above): ~10 s on 2 idle cores. */
const DRY_RUN_TIMEOUT_MS = 180_000;

/** docs/deploy.md's command, as written there. */
function documentedDryRun(): string {
  const page = readFileSync(join(root, "docs", "deploy.md"), "utf8");
  const m = /<!-- doc-snippet: deploy-dry-run -->\s*```sh\n([\s\S]*?)```/.exec(page);
  if (!m) throw new Error("docs/deploy.md has no sh snippet deploy-dry-run");
  return m[1]!.trim();
}

/**
 * A copy of the project: symlinks to everything but what the deploy writes or resolves from its
 * own location. scripts/ (they find the project from their path), wrangler.toml (its paths resolve
 * from the file) and dashboard/'s files (Vite's root and output follow them) are copied; no
 * .dev.vars or .env (a dry run needs no secret), no .wrangler state.
 */
function projectCopy(): string {
  const copy = mkdtempSync(join(tmpdir(), "episode-relay-deploy-"));
  const own = new Set([
    ".git",
    ".wrangler",
    ".dev.vars",
    ".env",
    ".env.local",
    ".scratch",
    "test-results",
    "scripts",
    "dashboard",
    "wrangler.toml",
  ]);
  for (const name of readdirSync(root)) if (!own.has(name)) symlinkSync(join(root, name), join(copy, name));
  cpSync(join(root, "scripts"), join(copy, "scripts"), { recursive: true });
  // the type check's stand-in (see the top of this file): it says it ran, and where
  writeFileSync(
    join(copy, "scripts", "typecheck.mjs"),
    [
      'import { writeFileSync } from "node:fs";',
      'writeFileSync(new URL("../typecheck-ran", import.meta.url), process.cwd());',
      `console.error(${JSON.stringify(TYPECHECK_STAND_IN)});`,
    ].join("\n"),
  );
  cpSync(join(root, "wrangler.toml"), join(copy, "wrangler.toml"));
  mkdirSync(join(copy, "dashboard"));
  for (const e of readdirSync(join(root, "dashboard"), { withFileTypes: true })) {
    if (e.name === "dist") continue;
    if (e.isDirectory()) symlinkSync(join(root, "dashboard", e.name), join(copy, "dashboard", e.name));
    else cpSync(join(root, "dashboard", e.name), join(copy, "dashboard", e.name));
  }
  return copy;
}

interface DryRun {
  code: number | null;
  output: string;
  ms: number;
}

/** Runs `command` in `cwd` with no Cloudflare credentials in its environment; kills its process group at the deadline. */
function runDryRun(command: string, cwd: string): Promise<DryRun> {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("CLOUDFLARE_")) delete env[k];
  const started = Date.now();
  const p = spawn("bash", ["-euo", "pipefail", "-c", command], {
    cwd,
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  p.stdout.on("data", (d) => (output += d));
  p.stderr.on("data", (d) => (output += d));
  const deadline = setTimeout(() => {
    output += `\n[deploy.test] killed after ${DRY_RUN_TIMEOUT_MS} ms`;
    process.kill(-p.pid!, "SIGKILL");
  }, DRY_RUN_TIMEOUT_MS);
  return new Promise((resolve) =>
    p.on("close", (code) => {
      clearTimeout(deadline);
      resolve({ code, output: stripVTControlCharacters(output), ms: Date.now() - started });
    }),
  );
}

/** wrangler's binding table: `env.NAME (detail)   Type` per line. */
function printedBindings(output: string): Map<string, { detail: string; type: string }> {
  const bindings = new Map<string, { detail: string; type: string }>();
  for (const m of output.matchAll(/^env\.(\w+) \((.*?)\) {2,}(\S.*?)\s*$/gm))
    bindings.set(m[1]!, { detail: m[2]!, type: m[3]! });
  return bindings;
}

/** What the type check's stand-in prints. */
const TYPECHECK_STAND_IN = "[deploy.test] typecheck stand-in ran";

let copy = "";
let outdir = "";
let run: DryRun;
let command = "";

beforeAll(async () => {
  copy = projectCopy();
  outdir = mkdtempSync(join(tmpdir(), "episode-relay-bundle-"));
  command = `${documentedDryRun()} --outdir ${outdir}`;
  run = await runDryRun(command, copy);
}, DRY_RUN_TIMEOUT_MS + 10_000);

afterAll(() => {
  if (copy) rmSync(copy, { recursive: true, force: true });
  if (outdir) rmSync(outdir, { recursive: true, force: true });
});

it("docs/deploy.md's dry run is `npm run deploy -- --dry-run` and exits 0 offline, with no account and no network look-ups", () => {
  expect(documentedDryRun()).toBe("npm run deploy -- --dry-run");
  expect(run.code, `${command}\n${run.output}`).toBe(0);
  // the steps npm run deploy promises, in order
  const steps = [
    "[dashboard] built dashboard/dist",
    "[deploy] checking types",
    TYPECHECK_STAND_IN,
    "[deploy] wrangler deploy --dry-run",
    "--dry-run: exiting now.",
  ];
  const at = steps.map((s) => run.output.indexOf(s));
  expect(at.every((i) => i >= 0) && at.every((i, k) => k === 0 || i > at[k - 1]!), run.output).toBe(true);
  expect(run.output).not.toMatch(/ENOTFOUND|EAI_AGAIN|update available|ERROR/);
  console.log(`[deploy.test] dry run in ${(run.ms / 1000).toFixed(1)} s`);
});

it("its type check is `npm run typecheck`, run in the project it deploys, over every tsconfig the checks suite runs", () => {
  // the stand-in ran through package.json's script, in the copy (npm's working directory there)
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> };
  expect(pkg.scripts.typecheck).toBe("node scripts/typecheck.mjs");
  expect(readFileSync(join(copy, "typecheck-ran"), "utf8")).toBe(copy);
  // the real step's list: every tsconfig of the checkout but the build's (npm run build emits with it)
  const tracked = execFileSync("git", ["ls-files"], { cwd: root, encoding: "utf8" })
    .split("\n")
    .filter((f) => /(^|\/)tsconfig\.json$/.test(f));
  expect([...TSCONFIGS].sort()).toEqual(tracked.sort());
});

it("prints the Durable Objects, the dashboard's assets and wrangler.toml's vars as bindings, and no secret", () => {
  const bindings = printedBindings(run.output);
  const objects = {
    EPISODES: "Episode",
    EPISODE_INDEX: "EpisodeIndex",
    RUN_DIRECTORY: "RunDirectory",
    HUBS: "ViewerHub",
    ARCHIVE_GATE: "ArchiveGate",
  };
  for (const [name, className] of Object.entries(objects))
    expect(bindings.get(name), `${name} in\n${run.output}`).toEqual({ detail: className, type: "Durable Object" });
  const config = unstable_readConfig({ config: join(copy, "wrangler.toml") });
  const vars = Object.entries(config.vars);
  expect(vars.length).toBeGreaterThan(0);
  for (const [name, value] of vars)
    expect(bindings.get(name), `${name} in\n${run.output}`).toEqual({
      detail: JSON.stringify(value),
      type: "Environment Variable",
    });
  // the dashboard, from the copy's own build (not a binding: it is served before the Worker runs)
  const assets = /Read (\d+) files from the assets directory (\S+)/.exec(run.output);
  expect(assets, run.output).not.toBeNull();
  expect(Number(assets![1])).toBeGreaterThanOrEqual(2);
  expect(assets![2]).toBe(join(copy, "dashboard", "dist"));
  // the secret comes from `wrangler secret put`, and the loopback switch never from wrangler.toml
  expect(bindings.has("RELAY_SECRET")).toBe(false);
  expect(bindings.has("AUTH_OFF_ON_LOOPBACK")).toBe(false);
  expect(config.observability).toMatchObject({ enabled: true, head_sampling_rate: 1 });
});

it("deploys the dashboard without source maps, and with its security headers (dashboard/public/_headers)", () => {
  const dist = join(copy, "dashboard", "dist");
  const files = (readdirSync(dist, { recursive: true }) as string[]).map(String);
  const scripts = files.filter((f) => f.endsWith(".js"));
  expect(scripts.length, files.join(", ")).toBeGreaterThan(0);
  expect(files.filter((f) => f.endsWith(".map"))).toEqual([]);
  for (const f of scripts) expect(readFileSync(join(dist, f), "utf8"), f).not.toMatch(/sourceMappingURL/);
  const headers = readFileSync(join(dist, "_headers"), "utf8");
  expect(headers).toMatch(/^\/\*$/m);
  expect(headers).toMatch(/^ {2}Content-Security-Policy: .*default-src 'none'.*frame-ancestors 'none'/m);
  expect(headers).toMatch(/^ {2}X-Content-Type-Options: nosniff$/m);
  expect(headers).toMatch(/^ {2}Referrer-Policy: no-referrer$/m);
});

it(`writes a bundle within ${BUNDLE_BUDGET_GZIP / 1024} KiB gzipped`, () => {
  const bundle = join(outdir, "index.js");
  expect(existsSync(bundle), run.output).toBe(true);
  const raw = statSync(bundle).size;
  const gzip = gzipSync(readFileSync(bundle)).length;
  const wrangler = /Total Upload: (.+)/.exec(run.output)?.[1]?.trim() ?? "?";
  const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
  console.log(
    `[deploy.test] bundle index.js: ${kib(raw)}, gzip ${kib(gzip)} (budget ${kib(BUNDLE_BUDGET_GZIP)}); wrangler: ${wrangler}`,
  );
  mkdirSync(join(root, "test-results"), { recursive: true });
  writeFileSync(
    join(root, "test-results", "deploy-bundle.json"),
    `${JSON.stringify({ raw, gzip, budgetGzip: BUNDLE_BUDGET_GZIP, wrangler }, null, 2)}\n`,
  );
  expect(gzip).toBeLessThanOrEqual(BUNDLE_BUDGET_GZIP);
});

it("the bundle starts in workerd with wrangler.toml's config and answers its first requests without reaching out", async () => {
  const bundle = join(outdir, "index.js");
  expect(existsSync(bundle), run.output).toBe(true);
  const w = unstable_getMiniflareWorkerOptions(join(copy, "wrangler.toml")).workerOptions;
  const secret = "deploy-test-secret-0123456789abcdefghijklmnop";
  const outbound: string[] = [];
  let stdio = "";
  const mf = new Miniflare({
    ...(w as MiniflareOptions),
    modules: true,
    scriptPath: bundle,
    modulesRoot: dirname(bundle),
    // as after `wrangler secret put RELAY_SECRET`
    bindings: { ...(w.bindings as Record<string, string>), RELAY_SECRET: secret },
    durableObjectsPersist: false,
    cf: false,
    host: "127.0.0.1",
    port: 0,
    log: new Log(LogLevel.WARN),
    outboundService: (req: Request) => {
      outbound.push(`${req.method} ${req.url}`);
      return new Response("no network in this test", { status: 502 });
    },
    handleRuntimeStdio: (out, err) => {
      out.on("data", (d) => (stdio += d));
      err.on("data", (d) => (stdio += d));
    },
  } as MiniflareOptions);
  try {
    await mf.ready;
    const base = "https://episode-relay.example.workers.dev";
    const api = readFileSync(join(root, "docs", "http-api.md"), "utf8");
    const health = /<!-- doc-health -->`200 (\{[^`]*\})`/.exec(api)![1];
    const h = await mf.dispatchFetch(`${base}/v1/health`);
    expect(h.status).toBe(200);
    expect(await h.text()).toBe(health);
    expect((await mf.dispatchFetch(`${base}/v1/runs`)).status).toBe(401);
    const producer = await mintToken(secret, { role: "producer", episodes: ["deploy-check:*"], ttl: 300 });
    const posted = await mf.dispatchFetch(`${base}/v1/episodes/deploy-check:0/deltas`, {
      method: "POST",
      headers: { authorization: `Bearer ${producer}`, "content-type": "application/msgpack" },
      body: encode({ trace: "t1", open: { id: "t1" } }),
    });
    expect(posted.status, await posted.clone().text()).toBe(200);
    expect(await posted.json()).toMatchObject({ ok: true, seq: 1 });
    const admin = await mintToken(secret, { role: "admin", episodes: ["*"], ttl: 300 });
    const runs = await mf.dispatchFetch(`${base}/v1/runs`, { headers: { authorization: `Bearer ${admin}` } });
    expect(runs.status, await runs.clone().text()).toBe(200);
    const page = await mf.dispatchFetch(`${base}/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("<!doctype html>");
    expect(outbound).toEqual([]);
    expect(stdio).not.toMatch(/Uncaught|Disallowed operation|global scope/);
  } finally {
    await mf.dispose();
  }
}, 60_000);

#!/usr/bin/env node
// `npm run build:dashboard`: build the dashboard (dashboard/, plain TypeScript + DOM) with Vite
// into dashboard/dist, which the Worker serves as static assets (wrangler.toml [assets]).
// `--if-missing`: only when dashboard/dist/index.html does not exist yet (tools and test configs
// that need the directory to exist call it this way).
// `--if-stale`: only when an input changed since the last build here (`npm start`, `npm test`):
// a build records what it read (every module Vite bundled, dashboard/public, the Vite config,
// package-lock.json) with each file's hash, outside dist (dist is served as it is), and a later
// one skips when dist is there and every one of those files hashes the same. A new input can only
// enter through a changed file (an import) or dashboard/public, both seen.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, isAbsolute, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
export const distIndex = join(root, "dashboard", "dist", "index.html");
const config = join(root, "dashboard", "vite.config.ts");
const publicDir = join(root, "dashboard", "public");
// node_modules/.cache: ignored by git and by the linters; one record per checkout's dist
const stampFile = join(
  root,
  "node_modules",
  ".cache",
  "episode-relay",
  `dashboard-${createHash("sha256").update(distIndex).digest("hex").slice(0, 16)}.json`,
);

/** @param {string} file */
const hashOf = (file) => createHash("sha256").update(readFileSync(file)).digest("hex");

/**
 * Every file under a directory (absolute paths).
 * @param {string} dir
 * @returns {string[]}
 */
function filesUnder(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath ?? e.path, e.name)); // parentPath from Node 20.12
}

/** The inputs every build reads whatever the modules import. */
const fixedInputs = () => [config, join(root, "package-lock.json"), ...filesUnder(publicDir)];

/** Whether dist holds a build of exactly the inputs as they are now. */
function upToDate() {
  if (!existsSync(distIndex) || !existsSync(stampFile)) return false;
  /** @type {Record<string, string>} */
  let files;
  try {
    files = JSON.parse(readFileSync(stampFile, "utf8")).files;
  } catch {
    return false;
  }
  for (const f of fixedInputs()) if (!(relative(root, f) in files)) return false;
  return Object.entries(files).every(([f, hash]) => {
    const abs = join(root, f);
    return existsSync(abs) && hashOf(abs) === hash;
  });
}

/**
 * Record the build's inputs: the real files among the bundled modules' ids, and the fixed ones.
 * @param {unknown} result what Vite's build() returned
 */
function recordInputs(result) {
  const outputs = /** @type {{ output: { type: string; moduleIds?: string[] }[] }[]} */ (
    Array.isArray(result) ? result : [result]
  );
  const inputs = new Set(fixedInputs());
  for (const o of outputs)
    for (const item of o.output ?? [])
      for (const id of item.moduleIds ?? []) if (isAbsolute(id) && existsSync(id)) inputs.add(id);
  inputs.add(join(root, "dashboard", "index.html"));
  /** @type {Record<string, string>} */
  const files = {};
  for (const f of [...inputs].sort()) files[relative(root, f)] = hashOf(f);
  mkdirSync(dirname(stampFile), { recursive: true });
  writeFileSync(stampFile, JSON.stringify({ files }));
}

/** Build the dashboard (or, with ifMissing, only if it was never built; with ifStale, only if an input changed). */
export async function buildDashboard({ ifMissing = false, ifStale = false } = {}) {
  if (ifMissing && existsSync(distIndex)) return false;
  if (ifStale && upToDate()) {
    console.error("[dashboard] dashboard/dist is up to date");
    return false;
  }
  const started = Date.now();
  rmSync(stampFile, { force: true });
  const { build } = await import("vite");
  const result = await build({ configFile: config, logLevel: "warn" });
  recordInputs(result);
  console.error(`[dashboard] built dashboard/dist in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return true;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    await buildDashboard({
      ifMissing: process.argv.includes("--if-missing"),
      ifStale: process.argv.includes("--if-stale"),
    });
  } catch (e) {
    console.error(`[dashboard] build failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}

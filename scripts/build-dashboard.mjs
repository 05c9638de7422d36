#!/usr/bin/env node
// `npm run build:dashboard`: build the dashboard (dashboard/, plain TypeScript + DOM) with Vite
// into dashboard/dist, which the Worker serves as static assets (wrangler.toml [assets]).
// `--if-missing`: only when dashboard/dist/index.html does not exist yet (tools and test configs
// that need the directory to exist call it this way).
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
export const distIndex = join(root, "dashboard", "dist", "index.html");

/** Build the dashboard (or, with ifMissing, only if it was never built). */
export async function buildDashboard({ ifMissing = false } = {}) {
  if (ifMissing && existsSync(distIndex)) return false;
  const started = Date.now();
  const { build } = await import("vite");
  await build({ configFile: join(root, "dashboard", "vite.config.ts"), logLevel: "warn" });
  console.error(`[dashboard] built dashboard/dist in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return true;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    await buildDashboard({ ifMissing: process.argv.includes("--if-missing") });
  } catch (e) {
    console.error(`[dashboard] build failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}

#!/usr/bin/env node
// `npm run typecheck`: tsc -b for every tsconfig (the Worker code, its tests, the Node tools,
// the dashboard each see only their own types), one after another, stopping at the first that
// fails. src/protocol is a project the others reference: they read its declarations (emitted with
// the build info under node_modules/.cache/tsc, nothing in the tree) instead of checking its files
// again under their own types, and the first check that needs it builds it (a clean clone's checks
// cost a quarter less CPU). The build info also lets a run with nothing changed skip the work. `npm run deploy` runs it before wrangler; `npm test`'s checks suite (scripts/test.mjs) runs
// the same list, one check per tsconfig, so the two cannot differ.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Every tsconfig the project type-checks, in the order they run (the one the others reference first). */
export const TSCONFIGS = [
  "src/protocol/tsconfig.json",
  "tsconfig.json",
  "src/tsconfig.json",
  "test/workers/tsconfig.json",
  "dashboard/tsconfig.json",
];

/** @param {string} tsconfig */
export const tscArgs = (tsconfig) => ["-b", tsconfig];

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const tsc = join(root, "node_modules", ".bin", process.platform === "win32" ? "tsc.cmd" : "tsc");
  for (const tsconfig of TSCONFIGS) {
    const r = spawnSync(tsc, tscArgs(tsconfig), { cwd: root, stdio: "inherit", shell: process.platform === "win32" });
    if (r.status !== 0) {
      console.error(`[typecheck] tsc -b ${tsconfig} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`);
      process.exit(r.status || 1);
    }
  }
}

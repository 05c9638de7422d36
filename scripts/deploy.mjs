#!/usr/bin/env node
// `npm run deploy [-- wrangler deploy options]`: builds the dashboard, checks types, then runs
// `wrangler deploy` with the options given; stops at the first step that fails.
// `npm run deploy -- --dry-run` does it all but the upload (no account needed) and prints the
// bundle's size and bindings. Credentials are left to wrangler, which says what is missing
// (`wrangler login` state or CLOUDFLARE_API_TOKEN): it knows every place they can live.
// A RELAY_SECRET (or RELAY_SECRET_PREVIOUS) in the environment shorter than 32 bytes stops it
// before anything is built: the deployed relay would refuse every request with it. (The secret
// put with `wrangler secret put` is not readable here; the relay itself fails closed on it.)
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildDashboard } from "./build-dashboard.mjs";
import { secretTooShort } from "./dev-vars.mjs";
import { QUIET_ENV } from "./quiet-env.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const win = process.platform === "win32";

/**
 * @param {string} what
 * @param {string} command
 * @param {string[]} args
 */
function step(what, command, args) {
  console.error(`[deploy] ${what}`);
  const r = spawnSync(command, args, {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, ...QUIET_ENV },
    shell: win,
  });
  if (r.status !== 0) {
    console.error(`[deploy] stopped: ${what} failed (${r.error?.message ?? `exit ${r.status ?? r.signal}`})`);
    process.exit(r.status || 1);
  }
}

for (const name of ["RELAY_SECRET", "RELAY_SECRET_PREVIOUS"]) {
  const weak = process.env[name] ? secretTooShort(process.env[name], "the environment") : null;
  if (weak) {
    console.error(`[deploy] stopped: ${weak.replace("RELAY_SECRET", name)}`);
    process.exit(1);
  }
}
console.error("[deploy] building the dashboard (dashboard/dist, served as the Worker's assets)");
try {
  await buildDashboard();
} catch (e) {
  console.error(`[deploy] stopped: the dashboard build failed: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
step("checking types (npm run typecheck)", "npm", ["run", "-s", "typecheck"]);
step(
  `wrangler deploy ${process.argv.slice(2).join(" ")}`.trimEnd(),
  join(root, "node_modules", ".bin", win ? "wrangler.cmd" : "wrangler"),
  ["deploy", ...process.argv.slice(2)],
);

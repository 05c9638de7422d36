// The Worker bundled by `wrangler deploy --dry-run` (the build `wrangler deploy` ships), for
// relays started by scripts/relay.mjs. Bundling costs seconds of CPU, so a test run bundles
// once: scripts/test.mjs (or a test project's global setup, when vitest runs alone) names an empty
// directory in RELAY_BUNDLE_DIR, and the first relay started under it, in whichever process,
// bundles into it while the others wait; a run that starts no relay bundles nothing.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { QUIET_ENV } from "./quiet-env.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The variable that names the run's shared bundle directory. */
export const BUNDLE_ENV = "RELAY_BUNDLE_DIR";

/**
 * Bundle src/worker/index.ts into a new directory under `parent` (it needs dashboard/dist, which
 * wrangler.toml's [assets] names); returns the directory, which holds index.js.
 * @param {string} [parent]
 * @returns {string}
 */
export function bundleWorker(parent = tmpdir()) {
  if (!existsSync(join(root, "dashboard", "dist", "index.html"))) {
    throw new Error("dashboard/dist is missing: run `npm run build:dashboard` (startRelay builds it)");
  }
  const dir = mkdtempSync(join(parent, "episode-relay-bundle-"));
  execFileSync(
    join(root, "node_modules", ".bin", "wrangler"),
    ["deploy", "--dry-run", "--outdir", dir, "--config", join(root, "wrangler.toml")],
    { cwd: root, env: { ...process.env, ...QUIET_ENV }, stdio: ["ignore", "ignore", "pipe"] },
  );
  return dir;
}

/**
 * Name a new, empty shared bundle directory in RELAY_BUNDLE_DIR (unless one is named already)
 * for this process and the ones it starts; returns a function that removes it (a no-op when the
 * directory was not made here).
 * @returns {() => void}
 */
export function shareBundle() {
  if (process.env[BUNDLE_ENV]) return () => {};
  const dir = mkdtempSync(join(tmpdir(), "episode-relay-shared-bundle-"));
  process.env[BUNDLE_ENV] = dir;
  return () => {
    rmSync(dir, { recursive: true, force: true });
    if (process.env[BUNDLE_ENV] === dir) delete process.env[BUNDLE_ENV];
  };
}

/**
 * Whether the process holding `lock` still runs (true while its pid is not written yet).
 * @param {string} lock
 */
function alive(lock) {
  let pid;
  try {
    pid = Number(readFileSync(join(lock, "pid"), "utf8"));
  } catch {
    return true;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return /** @type {NodeJS.ErrnoException} */ (e).code === "EPERM";
  }
}

const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

/**
 * The directory of the run's shared bundle (holding index.js), bundled here if no process has
 * yet; null when RELAY_BUNDLE_DIR names no directory. One process bundles (it holds `lock`, a
 * directory made atomically) and moves the finished bundle to `worker`; the others wait for it,
 * and take over if the lock goes away without a bundle (the bundling process failed) or its
 * process is gone (killed).
 * @returns {Promise<string | null>}
 */
export async function sharedBundle() {
  const base = process.env[BUNDLE_ENV];
  if (!base || !existsSync(base)) return null;
  const done = join(base, "worker");
  const lock = join(base, "lock");
  for (;;) {
    if (existsSync(join(done, "index.js"))) return done;
    try {
      mkdirSync(lock);
    } catch (e) {
      if (/** @type {NodeJS.ErrnoException} */ (e).code !== "EEXIST") throw e;
      if (!alive(lock)) rmSync(lock, { recursive: true, force: true });
      else await sleep(100);
      continue;
    }
    try {
      writeFileSync(join(lock, "pid"), String(process.pid));
      renameSync(bundleWorker(base), done);
      return done;
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}

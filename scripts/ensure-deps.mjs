#!/usr/bin/env node
// Installs node_modules when missing or stale; a no-op otherwise (it runs before start/test/bench).
// Stale means: a required bin is missing, or package.json / package-lock.json changed since the
// last install (content hash in node_modules/.ensure-deps-stamp; an install made by hand is
// accepted if npm's node_modules/.package-lock.json is newer than both files).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = join(root, "package.json");
const lock = join(root, "package-lock.json");
const modules = join(root, "node_modules");
const stampFile = join(modules, ".ensure-deps-stamp");
const npmLock = join(modules, ".package-lock.json");
const requiredBins = ["wrangler", "vitest", "tsc", "tsx"];

/** @param {string} file */
const mtime = (file) => (existsSync(file) ? statSync(file).mtimeMs : 0);

function manifestHash() {
  const hash = createHash("sha256");
  for (const file of [pkg, lock]) hash.update(existsSync(file) ? readFileSync(file) : "-").update("\0");
  return hash.digest("hex");
}

/** @returns {string | null} why an install is needed, or null when node_modules is up to date */
function staleReason() {
  if (!existsSync(modules)) return "node_modules is missing";
  const missing = requiredBins.filter((bin) => !existsSync(join(modules, ".bin", bin)));
  if (missing.length > 0) return `missing bins: ${missing.join(", ")}`;
  const stamp = existsSync(stampFile) ? readFileSync(stampFile, "utf8").trim() : "";
  if (stamp === manifestHash()) return null;
  if (!stamp && mtime(npmLock) >= Math.max(mtime(pkg), mtime(lock))) return null;
  return "package.json or package-lock.json changed since the last install";
}

const reason = staleReason();
if (reason !== null) {
  // `npm ci` needs a lock file in sync with package.json; after editing package.json use install.
  const useCi = existsSync(lock) && mtime(lock) >= mtime(pkg);
  const args = useCi ? ["ci", "--no-audit", "--no-fund"] : ["install", "--no-audit", "--no-fund"];
  console.error(`[ensure-deps] ${reason}; running npm ${args.join(" ")}`);
  const started = Date.now();
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const result = spawnSync(npm, args, { cwd: root, stdio: "inherit" });
  if (result.status !== 0) {
    console.error(`[ensure-deps] npm ${args[0]} failed (${result.error?.message ?? `exit ${result.status}`})`);
    process.exit(result.status || 1);
  }
  const stillMissing = requiredBins.filter((bin) => !existsSync(join(modules, ".bin", bin)));
  if (stillMissing.length > 0) {
    console.error(`[ensure-deps] still missing after install: ${stillMissing.join(", ")}`);
    process.exit(1);
  }
  writeFileSync(stampFile, `${manifestHash()}\n`);
  console.error(`[ensure-deps] done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} else if (!existsSync(stampFile)) {
  writeFileSync(stampFile, `${manifestHash()}\n`);
}

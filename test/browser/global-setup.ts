// Before the browser tests: Debian's Chromium must be at /usr/bin/chromium (`npm test` installs it
// before its suites; run alone, this installs it with apt-get when missing, as
// scripts/system-deps.mjs does: never a browser download by a test tool), and the dashboard built
// (unless dashboard/dist already holds a build of its inputs as they are: scripts/build-dashboard.mjs).
import { execFileSync } from "node:child_process";
import { buildDashboard } from "../../scripts/build-dashboard.mjs";
import { CHROMIUM, ensureSystemPackages } from "../../scripts/system-deps.mjs";

export { CHROMIUM };

export default async function setup(): Promise<void> {
  ensureSystemPackages(["chromium"]);
  console.error(`[browser] ${execFileSync(CHROMIUM, ["--version"], { encoding: "utf8" }).trim()}`);
  await buildDashboard({ ifStale: true });
}

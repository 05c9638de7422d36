// Before the browser tests: Debian's Chromium must be at /usr/bin/chromium (installed here with
// apt-get when missing: never a browser download by a test tool), and the dashboard built.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { buildDashboard } from "../../scripts/build-dashboard.mjs";

export const CHROMIUM = "/usr/bin/chromium";

function apt(args: string[]): boolean {
  const r = spawnSync("apt-get", args, {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
  return r.status === 0;
}

export default async function setup(): Promise<void> {
  if (!existsSync(CHROMIUM)) {
    console.error(`[browser] ${CHROMIUM} is missing: apt-get install -y chromium`);
    if (!apt(["install", "-y", "--no-install-recommends", "chromium"])) {
      apt(["update"]);
      if (!apt(["install", "-y", "--no-install-recommends", "chromium"])) {
        throw new Error(
          `could not install Debian's chromium (apt-get install -y chromium, as root): the browser tests need ${CHROMIUM}`,
        );
      }
    }
  }
  console.error(`[browser] ${execFileSync(CHROMIUM, ["--version"], { encoding: "utf8" }).trim()}`);
  await buildDashboard();
}

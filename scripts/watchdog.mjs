// A watchdog for the local relay's process groups: the supervisor (scripts/supervisor.mjs) starts
// it with a pipe on its stdin and names each wrangler session's process group on it ("+PGID",
// "-PGID" once that group is gone). When the pipe closes, the supervisor is gone, however it went
// (SIGKILL included): every group still named is sent SIGTERM, then SIGKILL after a grace period,
// and the watchdog exits. It ignores signals meant for the supervisor's group (a terminal's ^C):
// the supervisor stops the sessions itself, then closes the pipe.
import { spawn } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { groupAlive } from "./processes.mjs";

/** How long a group has after SIGTERM before it is killed. */
const GRACE_MS = 8_000;

/**
 * The watchdog as a child of this process.
 * @returns {{ watch(pgid: number): void, unwatch(pgid: number): void, close(): Promise<void> }}
 */
export function startWatchdog() {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], { stdio: ["pipe", "inherit", "inherit"] });
  child.on("error", () => {}); // it could not start: the supervisor still stops its groups itself
  child.stdin?.on("error", () => {});
  const exited = new Promise((resolve) => child.once("exit", resolve));
  return {
    watch: (pgid) => void child.stdin?.write(`+${pgid}\n`),
    unwatch: (pgid) => void child.stdin?.write(`-${pgid}\n`),
    close: async () => {
      child.stdin?.end();
      await exited;
    },
  };
}

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** @param {Set<number>} groups */
async function killAll(groups) {
  const left = () => [...groups].filter(groupAlive);
  for (const g of left()) {
    try {
      process.kill(-g, "SIGTERM");
    } catch {
      // gone meanwhile
    }
  }
  const until = Date.now() + GRACE_MS;
  while (left().length && Date.now() < until) await sleep(100);
  for (const g of left()) {
    try {
      process.kill(-g, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const s of /** @type {const} */ (["SIGINT", "SIGTERM", "SIGHUP"])) process.on(s, () => {});
  /** @type {Set<number>} */
  const groups = new Set();
  let rest = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (d) => {
    const lines = (rest + d).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) {
      const pgid = Number(line.slice(1));
      if (!Number.isInteger(pgid) || pgid <= 1) continue;
      if (line[0] === "+") groups.add(pgid);
      else if (line[0] === "-") groups.delete(pgid);
    }
  });
  process.stdin.on("close", () => void killAll(groups).then(() => process.exit(0)));
}

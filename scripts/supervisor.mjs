// The local relay's `wrangler dev` sessions under supervision (`npm start` runs one session,
// `npm run start:tiers` two). Each session is its own process group (wrangler, its esbuild, its
// workerd runtimes), so stopping it stops everything it started:
// - a session is up once its address answers GET /v1/health as the relay (no reading of wrangler's
//   output); from then on its runtime processes (workerd) are watched: one that is gone (killed,
//   crashed) and not replaced within a moment (a reload replaces it at once) is a dead session, as
//   is a wrangler that exits with an error. A dead session is stopped whole and started again, and
//   that is said; one that dies MAX_DEATHS times within DEATH_WINDOW_MS, or does not come up, stops
//   the relay, which exits 1 naming the cause.
// - SIGINT, SIGTERM or SIGHUP to this process, a session's wrangler stopped by a signal, or this
//   process's parent gone (the `npm` that ran it killed): every session is stopped (SIGTERM to its
//   group, SIGKILL after GRACE_MS) and this process exits.
// - this process killed by SIGKILL: its watchdog (scripts/watchdog.mjs) sees its pipe close and
//   stops the groups.
import { spawn } from "node:child_process";
import { constants } from "node:os";
import { currentParent, descendants, groupAlive } from "./processes.mjs";
import { QUIET_ENV } from "./quiet-env.mjs";
import { startWatchdog } from "./watchdog.mjs";

/** A group has this long after SIGTERM (wrangler shuts workerd down) before it is killed. */
const GRACE_MS = 10_000;
/** How long a session may take to answer its health check. */
const READY_MS = 120_000;
/** More deaths than this within the window stop the relay instead of another restart. */
const MAX_DEATHS = 3;
const DEATH_WINDOW_MS = 60_000;
/** How often runtimes and the parent are looked at. */
const POLL_MS = 500;
/** Groups: POSIX only (on Windows each wrangler is stopped as one process). */
const GROUPS = process.platform !== "win32";

/**
 * @typedef {"starting" | "up" | "restarting" | "stopped"} SessionState
 * @typedef {{
 *   name: string,
 *   title: string,
 *   command: string,
 *   args: string[],
 *   cwd?: string,
 *   env?: NodeJS.ProcessEnv,
 *   health: string,
 *   output?: (line: string, stream: NodeJS.WriteStream) => void,
 * }} SessionSpec
 */

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Whether the relay answers its health check at `url` (a fresh connection, bounded). @param {string} url */
async function answers(url) {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.status === 200 && res.headers.has("x-episode-relay");
  } catch {
    return false;
  }
}

/** One session: its spec, its current wrangler process, what the supervisor knows of it. */
class Session {
  /** @param {SessionSpec} spec */
  constructor(spec) {
    this.spec = spec;
    /** @type {SessionState} */
    this.state = "starting";
    /** @type {import("node:child_process").ChildProcess | null} */
    this.child = null;
    this.restarts = 0;
    /** @type {number[]} */
    this.deaths = [];
    /** @type {string | null} */
    this.lastDeath = null;
    /** workerd processes once up, and how many there were. */
    this.runtimes = new Set();
    this.expected = 0;
    this.suspect = false;
  }

  /** What /v1/health reports of it. */
  report() {
    return { state: this.state, restarts: this.restarts, ...(this.lastDeath ? { last_death: this.lastDeath } : {}) };
  }
}

export class Supervisor {
  /**
   * @param {{ label: string, sessions: SessionSpec[], onChange?: () => void, onStop?: () => void | Promise<void> }} o
   */
  constructor(o) {
    this.label = o.label;
    this.sessions = o.sessions.map((s) => new Session(s));
    this.onChange = o.onChange ?? (() => {});
    this.onStop = o.onStop;
    this.stopping = false;
    this.watchdog = GROUPS ? startWatchdog() : null;
    this.parent = currentParent();
    /** @type {NodeJS.Timeout | undefined} */
    this.poll = undefined;
  }

  /** @param {string} message */
  say(message) {
    console.error(`${this.label} ${message}`);
  }

  /** Each session's state, by name (for /v1/health). */
  report() {
    return Object.fromEntries(this.sessions.map((s) => [s.spec.name, s.report()]));
  }

  /** @param {string} name */
  up(name) {
    return this.sessions.find((s) => s.spec.name === name)?.state === "up";
  }

  /** Start every session; resolves once all are up (the relay stops itself when one cannot come up). */
  async start() {
    for (const signal of /** @type {const} */ (["SIGINT", "SIGTERM", "SIGHUP"])) {
      process.on(signal, () => void this.stop(128 + constants.signals[signal], `${signal} received`));
    }
    // whoever started us went away (our output pipe broke): stop too
    for (const out of [process.stdout, process.stderr])
      out.on("error", () => void this.stop(1, "the output pipe closed"));
    // never leave a group behind, however this process ends (the watchdog covers SIGKILL)
    process.on("exit", () => {
      for (const s of this.sessions) if (s.child?.pid !== undefined) this.signal(s.child.pid, s.child, "SIGKILL");
    });
    this.poll = setInterval(() => this.tick(), POLL_MS);
    await Promise.all(this.sessions.map((s) => this.launch(s)));
  }

  /** @param {Session} s */
  async launch(s) {
    const child = spawn(s.spec.command, s.spec.args, {
      cwd: s.spec.cwd,
      stdio: ["ignore", s.spec.output ? "pipe" : "inherit", s.spec.output ? "pipe" : "inherit"],
      env: { ...process.env, ...QUIET_ENV, ...s.spec.env },
      detached: GROUPS,
    });
    s.child = child;
    s.runtimes = new Set();
    s.expected = 0;
    if (child.pid !== undefined && GROUPS) this.watchdog?.watch(child.pid);
    if (s.spec.output) {
      const output = s.spec.output;
      for (const [from, to] of /** @type {const} */ ([
        [child.stdout, process.stdout],
        [child.stderr, process.stderr],
      ])) {
        let rest = "";
        from?.on("data", (d) => {
          const lines = (rest + d).split("\n");
          rest = lines.pop() ?? "";
          for (const line of lines) output(line, to);
        });
      }
    }
    child.on(
      "error",
      (err) => void this.stop(1, `could not start ${s.spec.command}: ${err.message} (run npm install)`),
    );
    child.on("exit", (code, signal) => this.exited(s, child, code, signal));
    const until = Date.now() + READY_MS;
    while (!(await answers(s.spec.health))) {
      if (this.stopping || s.child !== child || child.exitCode !== null || child.signalCode !== null) return;
      if (Date.now() > until)
        return void this.stop(1, `the ${s.spec.title} did not answer ${s.spec.health} within ${READY_MS / 1000} s`);
      await sleep(200);
    }
    if (this.stopping || s.child !== child) return;
    const runtimes = this.runtimesOf(s);
    s.runtimes = new Set(runtimes);
    s.expected = runtimes.length;
    const again = s.state === "restarting";
    s.state = "up";
    this.say(again ? `the ${s.spec.title} is up again (restart ${s.restarts})` : `the ${s.spec.title} is up`);
    this.onChange();
  }

  /** The workerd processes of a session. @param {Session} s */
  runtimesOf(s) {
    if (s.child?.pid === undefined) return [];
    return descendants(s.child.pid)
      .filter((p) => p.comm === "workerd")
      .map((p) => p.pid);
  }

  tick() {
    if (this.stopping) return;
    if (currentParent() !== this.parent) return void this.stop(1, `its parent (pid ${this.parent}) went away`);
    for (const s of this.sessions) {
      if (s.state !== "up" || s.expected === 0) continue;
      const now = this.runtimesOf(s);
      if (now.length >= s.expected) {
        s.suspect = false;
        s.runtimes = new Set(now);
        continue;
      }
      // a reload replaces its runtime at once: gone twice in a row is gone
      if (!s.suspect) {
        s.suspect = true;
        continue;
      }
      const gone = [...s.runtimes].filter((p) => !now.includes(p));
      void this.died(s, `its runtime (workerd ${gone.join(", ") || "?"}) is gone`);
    }
  }

  /**
   * @param {Session} s
   * @param {import("node:child_process").ChildProcess} child
   * @param {number | null} code
   * @param {NodeJS.Signals | null} signal
   */
  exited(s, child, code, signal) {
    // what it started goes with it
    if (child.pid !== undefined && GROUPS) this.signal(child.pid, child, "SIGTERM");
    if (this.stopping || s.child !== child) return;
    // stopped on purpose (a signal to it, or wrangler's own clean exit): everything stops
    if (
      signal === "SIGINT" ||
      signal === "SIGTERM" ||
      signal === "SIGHUP" ||
      code === 0 ||
      code === 130 ||
      code === 143
    ) {
      return void this.stop(
        code ?? 128 + constants.signals[/** @type {NodeJS.Signals} */ (signal)],
        `the ${s.spec.title}'s wrangler stopped (${signal ?? code})`,
      );
    }
    void this.died(s, `its wrangler exited (${signal ?? `code ${code}`})`);
  }

  /** A session died: restart it, unless it keeps dying. @param {Session} s @param {string} cause */
  async died(s, cause) {
    if (this.stopping || s.state === "restarting") return;
    const now = Date.now();
    s.deaths = [...s.deaths.filter((t) => now - t < DEATH_WINDOW_MS), now];
    s.lastDeath = cause;
    if (s.deaths.length >= MAX_DEATHS)
      return void this.stop(1, `the ${s.spec.title} died ${s.deaths.length} times within a minute (last: ${cause})`);
    s.state = "restarting";
    s.restarts++;
    this.say(`the ${s.spec.title} died: ${cause}; restarting it`);
    this.onChange();
    const old = s.child;
    s.child = null;
    await this.end(old);
    if (!this.stopping) await this.launch(s);
  }

  /**
   * Stop one wrangler process and its group; resolves when none of it is left. @param
   * {import("node:child_process").ChildProcess | null} child
   */
  async end(child) {
    if (!child?.pid) return;
    const pid = child.pid;
    const running = () => (GROUPS ? groupAlive(pid) : child.exitCode === null && child.signalCode === null);
    if (!running()) return void this.watchdog?.unwatch(pid);
    this.signal(pid, child, "SIGTERM");
    const until = Date.now() + GRACE_MS;
    while (running() && Date.now() < until) await sleep(100);
    if (running()) this.signal(pid, child, "SIGKILL");
    while (running()) await sleep(50);
    this.watchdog?.unwatch(pid);
  }

  /**
   * @param {number} pid
   * @param {import("node:child_process").ChildProcess} child
   * @param {NodeJS.Signals} signal
   */
  signal(pid, child, signal) {
    try {
      if (GROUPS) process.kill(-pid, signal);
      else child.kill(signal);
    } catch {
      // gone meanwhile
    }
  }

  /** Stop everything and exit with `code`. @param {number} code @param {string} why */
  async stop(code, why) {
    if (this.stopping) return;
    this.stopping = true;
    if (this.poll) clearInterval(this.poll);
    this.say(`stopping: ${why}`);
    for (const s of this.sessions) s.state = "stopped";
    await this.onStop?.();
    await Promise.all(this.sessions.map((s) => this.end(s.child)));
    await this.watchdog?.close();
    process.exit(code);
  }
}

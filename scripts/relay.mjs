#!/usr/bin/env node
// The local relay: the one launcher behind `npm start`, `npm run start:tiers`, the Node and
// browser tests, the benches and the Python tests. The Worker is bundled by wrangler (`wrangler
// deploy --dry-run`, the build a deploy ships; once per test run, scripts/worker-bundle.mjs) and
// run by Miniflare's API: workerd on loopback, Durable Objects in SQLite (in memory, or under
// `persistDir` where `wrangler dev --persist-to` keeps them), the dashboard's assets; no account,
// no network look-up.
//
// With `tiers`, the relay as production threads it. On Cloudflare every Durable Object has a
// thread of its own; one workerd process runs all its objects on one, so a watcher storm would
// land on the producer's thread. So the episode tier (Episode, EpisodeIndex, RunDirectory, the
// dashboard) and the hub tier (ViewerHub: every watcher socket) run in two workerd processes,
// each binding the other's objects by script name through a dev registry of their own, behind
// scripts/router.mjs in a process of its own (one address; 503 with Retry-After while a tier is
// down). Watchers reach the hub tier through a direct socket, so its `no_web_socket_compression`
// flag holds as on Cloudflare. Deployed, it is one Worker.
//
// Supervision: each runtime process is watched; one that is gone (crashed, killed) is started
// again on its port and storage, and that is said; one that dies MAX_DEATHS times within
// DEATH_WINDOW_MS stops the relay (`onFatal`). With `watchdog`, a child process kills the
// runtimes should this process die without stopping them (SIGKILL).
//
// As a command (`npm start`, `npm run start:tiers`): see `main` below.
import { fork, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs, parseEnv } from "node:util";
import { Log, LogLevel, Miniflare } from "miniflare";
import { buildDashboard } from "./build-dashboard.mjs";
import { devVarsFiles, FROM_ENVIRONMENT, findRelaySecret, secretTooShort } from "./dev-vars.mjs";
import { freePort, listenable } from "./free-port.mjs";
import { currentParent, processTable } from "./processes.mjs";
import { BUNDLE_ENV, bundleWorker, sharedBundle } from "./worker-bundle.mjs";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Durable Object classes on the hub tier; every other class is on the episode tier. */
export const HUB_CLASSES = Object.freeze(["ViewerHub"]);
/** More deaths than this within the window stop the relay instead of another restart. */
const MAX_DEATHS = 3;
const DEATH_WINDOW_MS = 60_000;
/** How often runtimes (and, as a command, the parent) are looked at. */
const POLL_MS = 500;

/**
 * @typedef {{ state: "starting" | "up" | "restarting" | "stopped", restarts: number, last_death?: string }} TierReport
 * @typedef {{
 *   tiers?: boolean,
 *   port?: number,
 *   host?: string,
 *   persistDir?: string,
 *   vars?: Record<string, string>,
 *   script?: string,
 *   watchdog?: boolean,
 *   say?: (message: string) => void,
 *   onFatal?: (why: string) => void,
 * }} RelayOptions
 *   port: a fixed port (a relay restarted where its clients expect it); default a free one.
 *   host: the address to listen on (default loopback; the tiers themselves always listen on loopback).
 *   persistDir: keep Durable Objects and the archive here (survives a restart); default in memory.
 *   vars: added to wrangler.toml's [vars] (AUTH_OFF_ON_LOOPBACK is "true" on loopback unless given).
 *   script: another bundled Worker (an index.js beside its modules) on the same storage, as a
 *     deploy hands over (test/node/deploy-handover.test.ts); default this tree's.
 *   say: where supervision says what it does (default: nowhere).
 *   onFatal: a runtime kept dying; the relay is already stopped (default: `say` it).
 * @typedef {{
 *   url: string,
 *   mf: Miniflare,
 *   runtimes: Miniflare[],
 *   watchUrl?: string,
 *   ports: Record<string, number>,
 *   report(): Record<string, TierReport>,
 *   restartHubs?(): Promise<void>,
 *   stop(): Promise<void>,
 * }} LocalRelay
 *   mf: the episode tier's Miniflare (all of the relay without tiers); runtimes: each tier's.
 *   watchUrl (tiers): the hub tier's own address, for a bench with more watchers than the router's
 *     file descriptors allow (two per watcher).
 *   ports: each tier's own port ("relay", or "episodes" and "hubs"): its workerd names it.
 *   restartHubs (tiers): restart the hub tier's runtime; every watcher socket drops.
 */

/** @param {string} ip */
export function isLoopback(ip) {
  const h = ip.toLowerCase().replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** This process's bundle directory, once made (or found: the run's shared one). */
let bundleDir = /** @type {string | null} */ (null);

/** This tree's Worker bundle (index.js), made once per process (removed at exit). */
export function bundle() {
  if (!bundleDir) {
    const dir = bundleWorker();
    bundleDir = dir;
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return join(bundleDir, "index.js");
}

/**
 * Miniflare's options for the Worker, as wrangler derives them from wrangler.toml. wrangler is
 * imported only for that, and its import costs each process seconds of CPU: in a test run
 * (RELAY_BUNDLE_DIR, scripts/worker-bundle.mjs) the first process keeps the options (plain JSON)
 * beside the run's shared bundle, named by wrangler.toml's hash, and every later relay process of
 * the run (npm start in the tests, the Python tests' relays) reads them instead.
 * @returns {Promise<Record<string, any>>}
 */
async function workerOptions() {
  const config = join(root, "wrangler.toml");
  const base = process.env[BUNDLE_ENV];
  const kept =
    base &&
    join(base, `worker-options-${createHash("sha256").update(readFileSync(config)).digest("hex").slice(0, 16)}.json`);
  if (kept) {
    try {
      return JSON.parse(readFileSync(kept, "utf8"));
    } catch {
      // not kept yet (or the directory is gone): derived below
    }
  }
  const { unstable_getMiniflareWorkerOptions } = await import("wrangler");
  const options = unstable_getMiniflareWorkerOptions(config).workerOptions;
  if (kept) {
    try {
      // written whole, then renamed: a process reading it never sees half of it
      const tmp = `${kept}.${process.pid}`;
      writeFileSync(tmp, JSON.stringify(options));
      renameSync(tmp, kept);
    } catch {
      // the run's directory is gone: the next process derives them again
    }
  }
  return options;
}

/** The relay's compatibility date and flags (wrangler.toml), for other Workers measured beside it. */
export async function relayCompat() {
  const w = await workerOptions();
  return { date: w.compatibilityDate ?? "", flags: [...(w.compatibilityFlags ?? [])] };
}

/**
 * The workerd process Miniflare runs for the tier listening on `port` (its entry socket names it);
 * 0 where /proc cannot tell (not Linux): that runtime is then not supervised.
 * @param {number} port
 */
function runtimeOn(port) {
  const entry = new RegExp(`--socket-addr=entry=\\S*:${port}(?:\\0|$)`);
  for (const p of processTable().values()) {
    if (p.ppid !== process.pid || p.comm !== "workerd" || p.state === "Z") continue;
    try {
      if (entry.test(readFileSync(`/proc/${p.pid}/cmdline`, "utf8"))) return p.pid;
    } catch {
      // gone meanwhile
    }
  }
  return 0;
}

/** @param {number} pid */
function running(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * A watchdog child process: told each runtime's pid ("+PID", "-PID" once it is gone), it kills
 * the ones still named when its pipe closes, however this process went (SIGKILL included).
 */
function startWatchdog() {
  const code = `const pids = new Set(); let rest = "";
for (const s of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(s, () => {});
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => { const lines = (rest + d).split("\\n"); rest = lines.pop();
  for (const l of lines) { const pid = Number(l.slice(1)); if (l[0] === "+") pids.add(pid); else pids.delete(pid); } });
process.stdin.on("close", () => { for (const p of pids) { try { process.kill(p, "SIGKILL"); } catch {} } process.exit(0); });`;
  const child = spawn(process.execPath, ["-e", code], { stdio: ["pipe", "ignore", "inherit"] });
  child.on("error", () => {}); // it could not start: stop() still stops the runtimes itself
  child.stdin?.on("error", () => {});
  const exited = new Promise((r) => child.once("exit", r));
  return {
    /** @param {number} pid */
    watch: (pid) => void child.stdin?.write(`+${pid}\n`),
    /** @param {number} pid */
    unwatch: (pid) => void child.stdin?.write(`-${pid}\n`),
    close: async () => {
      child.stdin?.end();
      await exited;
    },
  };
}

/** scripts/router.mjs in a child process (its own thread and file descriptors), told each tier's state. */
async function startRouterProcess(
  /** @type {{ host: string, port: number, rest: { host: string, port: number }, watch: { host: string, port: number } }} */ o,
) {
  const child = fork(join(root, "scripts", "router.mjs"), [], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const port = await new Promise((done, fail) => {
    child.once("message", (/** @type {any} */ m) =>
      m.port ? done(m.port) : fail(Object.assign(new Error(m.error.message), { code: m.error.code })),
    );
    child.once("error", fail);
    child.once("exit", (code) => fail(new Error(`the router exited (${code})`)));
    child.send({ start: o });
  });
  return {
    port: /** @type {number} */ (port),
    /** @param {Record<string, TierReport>} report */
    tell: (report) => {
      if (child.connected) child.send({ tiers: report });
    },
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.send("stop");
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}

/**
 * Start the relay; resolves once it answers.
 * @param {RelayOptions} [o]
 * @returns {Promise<LocalRelay>}
 */
export async function startRelay(o = {}) {
  await buildDashboard({ ifMissing: true });
  const w = await workerOptions();
  if (!o.script && !bundleDir) bundleDir = await sharedBundle();
  const script = o.script ?? bundle();
  const host = o.host ?? "127.0.0.1";
  const say = o.say ?? (() => {});
  const persist = o.persistDir ? resolve(o.persistDir) : undefined;
  const shared = {
    modules: /** @type {const} */ (true),
    scriptPath: script,
    modulesRoot: dirname(script),
    compatibilityDate: w.compatibilityDate,
    compatibilityFlags: w.compatibilityFlags,
    // one archive step at a time per object class: a local runtime runs every object on one
    // thread (src/objects/archive/gate.ts)
    bindings: {
      .../** @type {Record<string, string>} */ (w.bindings),
      ...(isLoopback(host) ? { AUTH_OFF_ON_LOOPBACK: "true" } : {}),
      ARCHIVE_SLOTS: "1",
      ...o.vars,
    },
    r2Buckets: w.r2Buckets,
    cf: false,
    inspectorPort: 0,
    log: new Log(LogLevel.WARN),
  };
  const durableObjects = /** @type {Record<string, { className: string, useSQLite?: boolean }>} */ (w.durableObjects);
  // wrangler's derived options carry no name: the tiers are named from wrangler.toml's own
  const name = String(w.name ?? /^name\s*=\s*"([^"]+)"/m.exec(readFileSync(join(root, "wrangler.toml"), "utf8"))?.[1]);
  const names = { episodes: name, hubs: `${name}-hubs` };
  /** @param {boolean} hubTier objects of the other tier bound by script name */
  const bound = (hubTier) =>
    Object.fromEntries(
      Object.entries(durableObjects).map(([k, d]) => [
        k,
        HUB_CLASSES.includes(d.className) === hubTier ? d : { ...d, scriptName: hubTier ? names.episodes : names.hubs },
      ]),
    );
  const registry = o.tiers ? mkdtempSync(join(tmpdir(), "episode-relay-registry-")) : undefined;
  const tierPort = o.tiers ? await freePort() : (o.port ?? (await freePort()));
  /** @type {Tier[]} */
  const tiers = [
    new Tier(o.tiers ? "episodes" : "relay", o.tiers ? "episode tier" : "relay", tierPort, {
      ...shared,
      ...(o.tiers ? { name: names.episodes, unsafeDevRegistryPath: registry } : {}),
      durableObjects: o.tiers ? bound(false) : durableObjects,
      assets: w.assets,
      host: o.tiers ? "127.0.0.1" : host,
      port: tierPort,
      // where `wrangler dev --persist-to` keeps them: an existing .wrangler/state stays readable
      defaultPersistRoot: persist && join(persist, "v3"),
    }),
  ];
  if (o.tiers) {
    const hubsPort = await freePort();
    tiers.push(
      new Tier("hubs", "hub tier", hubsPort, {
        ...shared,
        name: names.hubs,
        durableObjects: bound(true),
        host: "127.0.0.1",
        port: hubsPort,
        unsafeDirectSockets: [{ host: "127.0.0.1", port: await freePort() }],
        unsafeDevRegistryPath: registry,
        // two runtimes must not share one directory's files
        defaultPersistRoot: persist && join(persist, "hub-tier", "v3"),
      }),
    );
  }
  const watchdog = o.watchdog ? startWatchdog() : null;
  let stopping = false;
  /** @type {Awaited<ReturnType<typeof startRouterProcess>> | null} */
  let router = null;
  const report = () => Object.fromEntries(tiers.map((t) => [t.name, t.report()]));
  const changed = () => router?.tell(report());

  /** @param {Tier} t */
  const up = async (t) => {
    await t.mf.ready;
    t.pid = runtimeOn(t.port);
    if (t.pid) watchdog?.watch(t.pid);
  };
  /** @param {Tier} t @param {string} cause */
  const died = async (t, cause) => {
    if (stopping || t.state !== "up") return;
    const now = Date.now();
    t.deaths = [...t.deaths.filter((d) => now - d < DEATH_WINDOW_MS), now];
    t.lastDeath = cause;
    if (t.deaths.length >= MAX_DEATHS) {
      const why = `the ${t.title} died ${t.deaths.length} times within a minute (last: ${cause})`;
      await stop();
      return void (o.onFatal ?? say)(why);
    }
    say(`the ${t.title} died: ${cause}; restarting it`);
    await restart(t);
  };
  /** @param {Tier} t */
  const restart = async (t) => {
    t.state = "restarting";
    t.restarts++;
    changed();
    if (t.pid) watchdog?.unwatch(t.pid);
    try {
      await t.mf.setOptions(t.options);
      await up(t);
    } catch (e) {
      if (stopping) return;
      await stop();
      return void (o.onFatal ?? say)(`the ${t.title} did not come up again: ${/** @type {Error} */ (e).message}`);
    }
    if (stopping) return;
    t.state = "up";
    say(`the ${t.title} is up again (restart ${t.restarts})`);
    changed();
  };
  const poll = setInterval(() => {
    for (const t of tiers)
      if (t.state === "up" && t.pid && !running(t.pid)) void died(t, `its runtime (workerd ${t.pid}) is gone`);
  }, POLL_MS);
  poll.unref();

  const stop = async () => {
    if (stopping) return;
    stopping = true;
    clearInterval(poll);
    for (const t of tiers) t.state = "stopped";
    await router?.stop();
    // a tier whose Miniflare could not even be made has nothing to stop
    await Promise.all(tiers.map((t) => t.mf?.dispose().catch(() => {})));
    if (registry) rmSync(registry, { recursive: true, force: true });
    await watchdog?.close();
  };

  try {
    for (const t of tiers) t.mf = new Miniflare(t.options);
    await Promise.all(tiers.map(up));
    for (const t of tiers) t.state = "up";
    const [episodes, hubs] = tiers;
    if (!episodes) throw new Error("no tier");
    if (!hubs) {
      const url = (await episodes.mf.ready).toString().replace(/\/$/, "");
      return { url, mf: episodes.mf, runtimes: [episodes.mf], ports: { relay: episodes.port }, report, stop };
    }
    const direct = await hubs.mf.unsafeGetDirectURL(names.hubs);
    router = await startRouterProcess({
      host,
      port: o.port ?? 0,
      rest: { host: "127.0.0.1", port: episodes.port },
      watch: { host: direct.hostname, port: Number(direct.port) },
    });
    changed();
    const at = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host;
    return {
      url: `http://${at}:${router.port}`,
      mf: episodes.mf,
      runtimes: [episodes.mf, hubs.mf],
      watchUrl: direct.toString().replace(/\/$/, ""),
      ports: { episodes: episodes.port, hubs: hubs.port },
      report,
      restartHubs: () => restart(hubs),
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** One runtime process: its Miniflare, its options (kept for a restart), what supervision knows. */
class Tier {
  /** @param {string} name @param {string} title @param {number} port @param {any} options */
  constructor(name, title, port, options) {
    this.name = name;
    this.title = title;
    this.port = port;
    this.options = options;
    /** @type {Miniflare} set once made (before anything can stop it but a failed start) */
    this.mf = /** @type {any} */ (null);
    /** @type {TierReport["state"]} */
    this.state = "starting";
    this.pid = 0;
    this.restarts = 0;
    /** @type {number[]} */
    this.deaths = [];
    /** @type {string | null} */
    this.lastDeath = null;
  }

  /** @returns {TierReport} */
  report() {
    return { state: this.state, restarts: this.restarts, ...(this.lastDeath ? { last_death: this.lastDeath } : {}) };
  }
}

/**
 * `npm start` (`node scripts/relay.mjs`) and `npm run start:tiers` (`--tiers`): the relay on
 * http://127.0.0.1:${PORT:-8787} (or `--port`), Durable Objects in .wrangler/state (`--persist-to DIR`), `--ip`
 * to listen elsewhere, `--var NAME:VALUE` added to wrangler.toml's vars. A busy port is said and
 * exits 1 before anything is started or written. SIGINT, SIGTERM or SIGHUP, its parent (npm)
 * gone, or its output closed: everything stops; killed outright, its watchdog stops the runtimes.
 */
async function main() {
  const { values } = parseArgs({
    options: {
      tiers: { type: "boolean", default: false },
      port: { type: "string" },
      ip: { type: "string", default: "127.0.0.1" },
      "persist-to": { type: "string", default: ".wrangler/state" },
      var: { type: "string", multiple: true, default: [] },
    },
  });
  const command = values.tiers ? "npm run start:tiers" : "npm start";
  const port = Number(values.port ?? (process.env.PORT || "8787"));
  const ip = values.ip.replace(/^\[|\]$/g, "");
  const where = `http://${ip.includes(":") ? `[${ip}]` : ip}:${port}`;
  const log = (/** @type {string} */ m) => console.error(`[dev] ${m}`);
  const busy = await listenable(ip, port);
  if (busy) {
    log(
      busy.code === "EADDRINUSE"
        ? `port ${port} is already in use (another npm start?): pick another with PORT, e.g. PORT=${port + 1} ${command}`
        : `could not listen on ${ip}:${port}: ${busy.message}`,
    );
    process.exit(1);
  }
  /** @type {Record<string, string>} */
  const vars = { ...accessVars(ip, where, command), ARCHIVE_SLOTS: process.env.ARCHIVE_SLOTS || "1" };
  for (const v of values.var) {
    const i = v.indexOf(":");
    if (i < 1) {
      log(`--var ${v}: expected NAME:VALUE; not starting.`);
      process.exit(1);
    }
    vars[v.slice(0, i)] = v.slice(i + 1);
  }
  log(
    `the relay on ${where}${values.tiers ? " as two tiers behind one address" : ""} (Durable Objects in ${values["persist-to"]}; offline: no account, no network)`,
  );
  const starting = startRelay({
    tiers: values.tiers,
    port,
    host: ip,
    persistDir: values["persist-to"],
    vars,
    watchdog: true,
    say: log,
    onFatal: (why) => {
      log(`stopping: ${why}`);
      process.exit(1);
    },
  });
  let stopping = false;
  const stop = async (/** @type {number} */ code, /** @type {string} */ why) => {
    if (stopping) return;
    stopping = true;
    log(`stopping: ${why}`);
    await (await starting.catch(() => null))?.stop();
    process.exit(code);
  };
  // ours alone: wrangler's module and Miniflare add handlers that exit at once, before a clean stop
  const ownSignals = () => {
    for (const [signal, code] of /** @type {const} */ ([
      ["SIGINT", 130],
      ["SIGTERM", 143],
      ["SIGHUP", 129],
    ])) {
      process.removeAllListeners(signal);
      process.on(signal, () => void stop(code, `${signal} received`));
    }
  };
  ownSignals();
  // whoever started us went away: our output pipe broke, or our parent (npm) is gone
  for (const out of [process.stdout, process.stderr]) out.on("error", () => void stop(1, "the output pipe closed"));
  const parent = currentParent();
  setInterval(() => {
    if (currentParent() !== parent) void stop(1, `its parent (pid ${parent}) went away`);
  }, POLL_MS);
  let relay;
  try {
    relay = await starting;
  } catch (e) {
    log(`could not start: ${/** @type {Error} */ (e).message}`);
    process.exit(1);
  }
  if (stopping) return;
  ownSignals();
  const own = values.tiers ? `episode tier on :${relay.ports.episodes}, hub tier on :${relay.ports.hubs}; ` : "";
  log(`${own}Ready on ${where}`);
}

/**
 * Access control (docs/access-control.md) as `wrangler dev` would have it, plus the loopback
 * switch: the vars of .dev.vars (else .env, .env.local), RELAY_SECRET from the environment first.
 * With a secret, auth is on; without one, off only because the relay listens on loopback
 * (AUTH_OFF_ON_LOOPBACK); bound elsewhere, the Worker fails closed (503). A secret too short
 * stops here: the relay would refuse every request with it.
 * @param {string} ip @param {string} where @param {string} command
 * @returns {Record<string, string>}
 */
function accessVars(ip, where, command) {
  /** @type {Record<string, string>} */
  const vars = {};
  for (const f of devVarsFiles(root)) Object.assign(vars, parseEnv(readFileSync(f, "utf8")));
  const found = findRelaySecret(root);
  const weak = found.secret === null ? null : secretTooShort(found.secret, found.source);
  if (weak) {
    console.error(`[dev] ${weak}; not starting.`);
    process.exit(1);
  }
  if (found.secret !== null) {
    if (found.source === FROM_ENVIRONMENT) vars.RELAY_SECRET = found.secret;
    console.error(
      `[dev] auth ON: RELAY_SECRET from ${found.source}. Every request except GET /v1/health needs a bearer token: npm run token -- --role producer --episode '*'`,
    );
  } else if (isLoopback(ip)) {
    vars.AUTH_OFF_ON_LOOPBACK = "true";
    console.error(
      `[dev] auth OFF: no RELAY_SECRET (environment, .dev.vars, .env) and bound to loopback ${where}, so requests to localhost need no token.`,
    );
    console.error(
      `[dev]   For auth: echo "RELAY_SECRET=$(openssl rand -base64 32)" > .dev.vars, then ${command} (npm run token reads it too).`,
    );
  } else {
    console.error(
      `[dev] auth FAIL-CLOSED: no RELAY_SECRET and bound to ${ip}, not loopback: every request except GET /v1/health is refused (503). Set RELAY_SECRET.`,
    );
  }
  return vars;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();

#!/usr/bin/env node
// `npm start`: the relay on http://127.0.0.1:${PORT:-8787}, Durable Object state in .wrangler/state.
//
// It runs as two `wrangler dev` sessions, each its own workerd process (scripts/tiers.mjs): the
// episode tier (episodes, run indexes, the dashboard) and the hub tier (viewer hubs: every watcher
// socket), bound to each other through a local dev registry of their own, behind one address
// (scripts/router.mjs, in this process). On Cloudflare every object has its own thread; this way
// a watcher storm here lands on the hubs' process, as it would there, not on the producer's.
// Extra arguments go to both sessions. SIGINT/SIGTERM stop both.
//
// Access control (README "Access control"): with RELAY_SECRET in the environment (passed on with
// `--var`), in .dev.vars or in .env, auth is on. Without one, auth is off, but only because the
// relay listens on loopback: then `--var AUTH_OFF_ON_LOOPBACK:true` tells the Worker so. Bound
// elsewhere (`npm start -- --ip 0.0.0.0`) without a secret, the Worker fails closed (503).
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { constants, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { devVarsFiles, findRelaySecret, FROM_ENVIRONMENT, secretTooShort } from "./dev-vars.mjs";
import { QUIET_ENV } from "./quiet-env.mjs";
import { startRouter } from "./router.mjs";
import { writeTierConfigs } from "./tiers.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const wrangler = join(root, "node_modules", ".bin", process.platform === "win32" ? "wrangler.cmd" : "wrangler");
const port = process.env.PORT || "8787";
const extra = process.argv.slice(2);

/** The last `--NAME X` / `--NAME=X` among the extra arguments, if any; removed from them. */
function takeArgument(/** @type {string} */ name) {
  /** @type {string | undefined} */
  let value;
  for (let i = 0; i < extra.length; i++) {
    if (extra[i] === `--${name}`) {
      value = extra[i + 1];
      extra.splice(i--, 2);
    } else if (extra[i]?.startsWith(`--${name}=`)) {
      value = extra[i]?.slice(name.length + 3);
      extra.splice(i--, 1);
    }
  }
  return value;
}

/** @param {string} ip */
function isLoopback(ip) {
  const h = ip.toLowerCase().replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Session output not worth passing on (bindings tables, registry chatter). */
const QUIET_LINE =
  /^env\.|Environment Variable|Your Worker has access|^\s*Binding\s|Durable Object\s+local|⎔ Starting|⎔ Connection status|Service bindings, Durable Object bindings|^-+$/;

/** A free loopback port (for a tier's own address or its inspector). */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => resolve(typeof a === "object" && a ? a.port : 0));
    });
  });
}

const userIp = takeArgument("ip");
const ip = userIp ?? "127.0.0.1";
const persist = takeArgument("persist-to") ?? ".wrangler/state";
const bare = ip.replace(/^\[|\]$/g, "");
const where = `http://${bare.includes(":") ? `[${bare}]` : bare}:${port}`;

/** Arguments both sessions get besides their own config, ports and storage. */
const common = ["--ip", "127.0.0.1", "--show-interactive-dev-session=false"];
/** Each tier's local storage: the episode tier's where it always was, the hub tier's beside it (two runtimes must not share one directory's files). */
const storage = { episodes: persist, hubs: join(persist, "hub-tier") };
const found = findRelaySecret(root);
const weak = found.secret === null ? null : secretTooShort(found.secret, found.source);
if (weak) {
  // the relay would refuse every request with it: say so now, and start nothing
  console.error(`[dev] ${weak}; not starting.`);
  process.exit(1);
}
if (found.secret !== null) {
  // the sessions' configs live in .wrangler/tiers: they get the vars files (or the secret) explicitly
  if (found.source === FROM_ENVIRONMENT) common.push("--var", `RELAY_SECRET:${found.secret}`);
  for (const f of devVarsFiles(root)) common.push("--env-file", f);
  console.error(
    `[dev] auth ON: RELAY_SECRET from ${found.source}. Every request except GET /v1/health needs a bearer token: npm run token -- --role producer --episode '*'`,
  );
} else if (isLoopback(ip)) {
  common.push("--var", "AUTH_OFF_ON_LOOPBACK:true");
  for (const f of devVarsFiles(root)) common.push("--env-file", f);
  console.error(`[dev] auth OFF: no RELAY_SECRET (environment, .dev.vars, .env) and bound to loopback ${where}, so requests to localhost need no token.`);
  console.error(`[dev]   For auth: echo "RELAY_SECRET=$(openssl rand -base64 32)" > .dev.vars, then npm start (npm run token reads it too).`);
} else {
  console.error(
    `[dev] auth FAIL-CLOSED: no RELAY_SECRET and bound to ${ip}, not loopback: every request except GET /v1/health is refused (503). Set RELAY_SECRET.`,
  );
}

// wrangler's banner is hidden (its update check is a network look-up): name the version here
const version = JSON.parse(readFileSync(join(root, "node_modules", "wrangler", "package.json"), "utf8")).version;
const configs = writeTierConfigs(root, join(root, ".wrangler", "tiers"));
const registry = mkdtempSync(join(tmpdir(), "episode-relay-registry-"));
const [episodesPort, hubsPort, episodesInspector, hubsInspector] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
console.error(
  `[dev] wrangler ${version} dev on ${where} (Durable Objects in ${persist}; offline: no metrics, no update check): episode tier on :${episodesPort} (inspector :${episodesInspector}), hub tier on :${hubsPort} (inspector :${hubsInspector})`,
);

/** @type {import("node:child_process").ChildProcess[]} */
const children = [];
/** @type {Set<string>} */
const ready = new Set();
let router = /** @type {Awaited<ReturnType<typeof startRouter>> | null} */ (null);

/**
 * One `wrangler dev` session; its output is passed on line by line, named, its own "Ready on" kept back.
 * @param {string} name
 * @param {string} config
 * @param {number} tierPort
 * @param {number} inspector
 */
function session(name, config, tierPort, inspector) {
  const dir = name === "hubs" ? storage.hubs : storage.episodes;
  const child = spawn(
    wrangler,
    ["dev", "-c", config, "--port", String(tierPort), "--inspector-port", String(inspector), "--persist-to", dir, ...common, ...extra],
    {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...QUIET_ENV, WRANGLER_REGISTRY_PATH: registry },
    },
  );
  children.push(child);
  for (const [from, to] of /** @type {const} */ ([
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ])) {
    let rest = "";
    from?.on("data", (d) => {
      const lines = (rest + d).split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) {
        if (/Ready on /.test(line)) {
          ready.add(name);
          to.write(`[dev] ${name} tier ready\n`);
          if (ready.size === 2) open();
        } else if (line.trim() !== "" && !QUIET_LINE.test(line)) {
          to.write(`[${name}] ${line}\n`);
        }
      }
    });
  }
  child.on("error", (err) => {
    console.error(`[dev] could not start ${wrangler}: ${err.message} (run npm install)`);
    stop(1);
  });
  child.on("exit", (code, signal) => {
    if (!stopping) console.error(`[dev] the ${name} tier exited (${signal ?? code}); stopping`);
    stop(code ?? (signal ? 128 + constants.signals[signal] : 1));
  });
}

/** Both tiers are up: the public address (open already) leads somewhere. */
function open() {
  console.error(`[dev] Ready on ${where}`);
}

let stopping = false;
/** @type {NodeJS.Timeout | undefined} */
let forceKill;
/** @param {number} code */
function stop(code) {
  if (stopping) {
    if (children.every((c) => c.exitCode !== null || c.signalCode !== null)) finish(code);
    return;
  }
  stopping = true;
  void router?.close();
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGTERM");
  // give wrangler time to shut workerd down; then make sure it goes
  forceKill ??= setTimeout(() => {
    for (const c of children) c.kill("SIGKILL");
  }, 10_000).unref();
  if (children.every((c) => c.exitCode !== null || c.signalCode !== null)) finish(code);
}

/** @param {number} code */
function finish(code) {
  if (forceKill) clearTimeout(forceKill);
  rmSync(registry, { recursive: true, force: true });
  process.exit(code);
}

for (const signal of /** @type {const} */ (["SIGINT", "SIGTERM", "SIGHUP"])) process.on(signal, () => stop(128 + constants.signals[signal]));
// whoever started us went away (our output pipe broke): stop too
for (const out of [process.stdout, process.stderr]) out.on("error", () => stop(1));
// never leave a session behind, however this process ends
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGTERM");
});

// the public address first: a busy port is said at once, before any session starts
try {
  router = await startRouter({
    host: bare,
    port: Number(port),
    rest: { host: "127.0.0.1", port: episodesPort },
    watch: { host: "127.0.0.1", port: hubsPort },
    stripDeflateOffer: true,
  });
} catch (e) {
  const err = /** @type {NodeJS.ErrnoException} */ (e);
  console.error(
    err.code === "EADDRINUSE"
      ? `[dev] port ${port} is already in use (another npm start?): pick another with PORT, e.g. PORT=${Number(port) + 1} npm start`
      : `[dev] could not listen on ${where}: ${err.message}`,
  );
  rmSync(registry, { recursive: true, force: true });
  process.exit(1);
}
session("episodes", configs.episodes, episodesPort, episodesInspector);
session("hubs", configs.hubs, hubsPort, hubsInspector);

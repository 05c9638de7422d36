#!/usr/bin/env node
// `npm run start:tiers`: the relay as production threads it, on the same address and state
// folder as `npm start`: two `wrangler dev` sessions, each its own workerd process (scripts/tiers.mjs):
// the episode tier (episodes, run indexes, the dashboard) and the hub tier (viewer hubs: every
// watcher socket), bound to each other through a local dev registry of their own, behind one
// address (scripts/router.mjs, in this process). On Cloudflare every object has its own thread;
// this way a watcher storm here lands on the hubs' process, as it would there, not on the
// producer's. Extra arguments go to both sessions.
//
// The port is taken first (a second start on a busy port leaves the running one untouched: it
// writes nothing). The sessions run under scripts/supervisor.mjs: a tier that dies is restarted
// and that is said (while it is not up the router answers 503 with Retry-After, and GET
// /v1/health says each tier's state); SIGINT or SIGTERM to this process (or to `npm`), a tier's
// wrangler stopped by a signal, the `npm` above killed, or this process killed: everything stops.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { address, authArgs, localVarArgs, portTaken, root, wrangler, wranglerVersion } from "./dev-args.mjs";
import { devVarsFiles } from "./dev-vars.mjs";
import { startRouter } from "./router.mjs";
import { Supervisor } from "./supervisor.mjs";
import { writeTierConfigs } from "./tiers.mjs";

/** Session output not worth passing on (bindings tables, registry chatter, its own private address). */
const QUIET_LINE =
  /^env\.|Environment Variable|Your Worker has access|^\s*Binding\s|Durable Object\s+local|⎔ Starting|⎔ Connection status|Service bindings, Durable Object bindings|Ready on |^-+$/;

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

const extra = process.argv.slice(2);
const a = address(extra);
/** @type {Supervisor | null} */
let supervisor = null;
/** @type {Record<"rest" | "watch", string[]>} what each kind of request needs up */
const NEEDS = { rest: ["episodes"], watch: ["episodes", "hubs"] };

// the public address first: a busy port is said at once, before any config is written or session started
/** @type {Awaited<ReturnType<typeof startRouter>>} */
let router;
const [episodesPort, hubsPort, episodesInspector, hubsInspector] = /** @type {number[]} */ (
  await Promise.all([freePort(), freePort(), freePort(), freePort()])
);
try {
  router = await startRouter({
    host: a.bare,
    port: a.port,
    rest: { host: "127.0.0.1", port: episodesPort },
    watch: { host: "127.0.0.1", port: hubsPort },
    stripDeflateOffer: true,
    notUp: (to) => {
      const down = NEEDS[to].filter((n) => !supervisor?.up(n));
      return down.length
        ? `the ${down.map((n) => (n === "hubs" ? "hub" : "episode")).join(" and ")} tier${down.length > 1 ? "s are" : " is"} not up`
        : null;
    },
    tiers: () => supervisor?.report() ?? {},
  });
} catch (e) {
  portTaken(/** @type {NodeJS.ErrnoException} */ (e), a.bare, a.port, "npm run start:tiers");
}

const auth = authArgs(a.ip, a.where, "npm run start:tiers", devVarsFiles(root));
const configs = writeTierConfigs(root, join(root, ".wrangler", "tiers"));
const registry = mkdtempSync(join(tmpdir(), "episode-relay-registry-"));
console.error(
  `[dev] wrangler ${wranglerVersion} dev, two tiers on ${a.where} (Durable Objects in ${a.persist}; offline: no metrics, no update check): episode tier on :${episodesPort} (inspector :${episodesInspector}), hub tier on :${hubsPort} (inspector :${hubsInspector})`,
);

/**
 * @param {"episodes" | "hubs"} name
 * @param {string} config
 * @param {number} port
 * @param {number} inspector
 */
function tier(name, config, port, inspector) {
  // two runtimes must not share one directory's files: the hub tier's beside the episode tier's
  const dir = name === "hubs" ? join(a.persist, "hub-tier") : a.persist;
  return {
    name,
    title: name === "hubs" ? "hub tier" : "episode tier",
    command: wrangler,
    cwd: root,
    args: [
      "dev",
      "-c",
      config,
      "--port",
      String(port),
      "--inspector-port",
      String(inspector),
      "--persist-to",
      dir,
      "--ip",
      "127.0.0.1",
    ].concat(["--show-interactive-dev-session=false", ...auth, ...localVarArgs(), ...extra]),
    env: { WRANGLER_REGISTRY_PATH: registry },
    health: `http://127.0.0.1:${port}/v1/health`,
    output: (/** @type {string} */ line, /** @type {NodeJS.WriteStream} */ to) => {
      if (line.trim() !== "" && !QUIET_LINE.test(line)) to.write(`[${name}] ${line}\n`);
    },
  };
}

let ready = false;
supervisor = new Supervisor({
  label: "[dev]",
  sessions: [
    tier("episodes", configs.episodes, episodesPort, episodesInspector),
    tier("hubs", configs.hubs, hubsPort, hubsInspector),
  ],
  onChange: () => {
    if (!ready && supervisor?.up("episodes") && supervisor.up("hubs")) {
      ready = true;
      console.error(`[dev] Ready on ${a.where}`);
    }
  },
  onStop: async () => {
    await router.close();
    rmSync(registry, { recursive: true, force: true });
  },
});
await supervisor.start();

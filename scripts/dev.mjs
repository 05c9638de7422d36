#!/usr/bin/env node
// `npm start`: local `wrangler dev` on 127.0.0.1:${PORT:-8787}, Durable Object state in .wrangler/state.
// Extra arguments are passed on to wrangler. SIGINT/SIGTERM are forwarded to wrangler, which stops workerd.
//
// Access control (README "Access control"): with RELAY_SECRET in the environment (passed on with
// `--var`), in .dev.vars or in .env, auth is on. Without one, auth is off, but only because the
// relay listens on loopback: then `--var AUTH_OFF_ON_LOOPBACK:true` tells the Worker so. Bound
// elsewhere (`npm start -- --ip 0.0.0.0`) without a secret, the Worker fails closed (503).
import { spawn } from "node:child_process";
import { constants } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";
import { findRelaySecret, FROM_ENVIRONMENT, MIN_SECRET_CHARS } from "./dev-vars.mjs";
import { QUIET_ENV } from "./quiet-env.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const wrangler = join(root, "node_modules", ".bin", process.platform === "win32" ? "wrangler.cmd" : "wrangler");
const port = process.env.PORT || "8787";
const extra = process.argv.slice(2);

/** The last `--NAME X` / `--NAME=X` among the extra arguments, if any. */
function argument(/** @type {string} */ name) {
  /** @type {string | undefined} */
  let value;
  for (let i = 0; i < extra.length; i++) {
    if (extra[i] === `--${name}`) value = extra[i + 1];
    else if (extra[i]?.startsWith(`--${name}=`)) value = extra[i]?.slice(name.length + 3);
  }
  return value;
}

/** @param {string} ip */
function isLoopback(ip) {
  const h = ip.toLowerCase().replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

const userIp = argument("ip");
const ip = userIp ?? "127.0.0.1";
const persist = argument("persist-to") ?? ".wrangler/state";
const args = ["dev", ...(userIp === undefined ? ["--ip", ip] : []), "--port", port, ...(argument("persist-to") === undefined ? ["--persist-to", persist] : [])];

const found = findRelaySecret(root);
const bare = ip.replace(/^\[|\]$/g, "");
const where = `http://${bare.includes(":") ? `[${bare}]` : bare}:${port}`;
if (found.secret !== null) {
  // wrangler reads .dev.vars / .env itself; a secret from the environment goes in as a hidden --var
  // (it wins over the files, as it does for `npm run token`).
  if (found.source === FROM_ENVIRONMENT) args.push("--var", `RELAY_SECRET:${found.secret}`);
  console.error(
    `[dev] auth ON: RELAY_SECRET from ${found.source}. Every request except GET /v1/health needs a bearer token: npm run token -- --role producer --episode '*'`,
  );
  if (found.secret.length < MIN_SECRET_CHARS) {
    console.error(`[dev] warning: RELAY_SECRET is shorter than ${MIN_SECRET_CHARS} characters; use e.g. \`openssl rand -base64 32\``);
  }
} else if (isLoopback(ip)) {
  args.push("--var", "AUTH_OFF_ON_LOOPBACK:true");
  console.error(`[dev] auth OFF: no RELAY_SECRET (environment, .dev.vars, .env) and bound to loopback ${where}, so requests to localhost need no token.`);
  console.error(`[dev]   For auth: echo "RELAY_SECRET=$(openssl rand -base64 32)" > .dev.vars, then npm start (npm run token reads it too).`);
} else {
  console.error(
    `[dev] auth FAIL-CLOSED: no RELAY_SECRET and bound to ${ip}, not loopback: every request except GET /v1/health is refused (503). Set RELAY_SECRET.`,
  );
}
args.push(...extra);

// wrangler's banner is hidden (its update check is a network look-up): name the version here
const version = JSON.parse(readFileSync(join(root, "node_modules", "wrangler", "package.json"), "utf8")).version;
console.error(`[dev] wrangler ${version} dev on ${where} (Durable Objects in ${persist}; offline: no metrics, no update check)`);
const child = spawn(wrangler, args, {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, ...QUIET_ENV },
});

/** @type {NodeJS.Timeout | undefined} */
let forceKill;
for (const signal of /** @type {const} */ (["SIGINT", "SIGTERM"])) {
  process.on(signal, () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    // Give wrangler time to shut workerd down; then make sure it goes.
    forceKill ??= setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
  });
}

child.on("error", (err) => {
  console.error(`[dev] could not start ${wrangler}: ${err.message} (run npm install)`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (forceKill) clearTimeout(forceKill);
  process.exit(code ?? (signal ? 128 + constants.signals[signal] : 1));
});

// What `npm start` (scripts/dev.mjs) and `npm run start:tiers` (scripts/tiers-dev.mjs) share: the
// port, address and state folder they take, the check that the port is free (made before anything
// is written or started), and the access-control arguments for wrangler.
//
// Access control (docs/access-control.md): with RELAY_SECRET in the environment (passed on with
// `--var`), in .dev.vars or in .env, auth is on. Without one, auth is off, but only because the
// relay listens on loopback: then `--var AUTH_OFF_ON_LOOPBACK:true` tells the Worker so. Bound
// elsewhere (`-- --ip 0.0.0.0`) without a secret, the Worker fails closed (503).
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { FROM_ENVIRONMENT, findRelaySecret, secretTooShort } from "./dev-vars.mjs";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..");
export const wrangler = join(root, "node_modules", ".bin", process.platform === "win32" ? "wrangler.cmd" : "wrangler");
/** wrangler's banner is hidden (its update check is a network look-up): the scripts name the version. */
export const wranglerVersion = JSON.parse(
  readFileSync(join(root, "node_modules", "wrangler", "package.json"), "utf8"),
).version;

/**
 * The last `--NAME X` / `--NAME=X` among `args`, if any; removed from them.
 * @param {string[]} args
 * @param {string} name
 */
export function takeArgument(args, name) {
  /** @type {string | undefined} */
  let value;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === `--${name}`) {
      value = args[i + 1];
      args.splice(i--, 2);
    } else if (args[i]?.startsWith(`--${name}=`)) {
      value = args[i]?.slice(name.length + 3);
      args.splice(i--, 1);
    }
  }
  return value;
}

/** @param {string} ip */
export function isLoopback(ip) {
  const h = ip.toLowerCase().replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * The relay's address as `npm start` takes it: PORT, `--ip`, `--persist-to` (taken out of `extra`).
 * @param {string[]} extra
 */
export function address(extra) {
  const port = Number(process.env.PORT || "8787");
  const ip = takeArgument(extra, "ip") ?? "127.0.0.1";
  const persist = takeArgument(extra, "persist-to") ?? ".wrangler/state";
  const bare = ip.replace(/^\[|\]$/g, "");
  const host = bare.includes(":") ? `[${bare}]` : bare;
  // the supervisor's health check: the address itself, or loopback when it listens on every address
  const local = bare === "0.0.0.0" || bare === "::" ? "127.0.0.1" : host;
  return { port, ip, bare, persist, where: `http://${host}:${port}`, health: `http://${local}:${port}/v1/health` };
}

/**
 * Exit 1 saying so when the port is taken (another npm start?), before anything is written or
 * started, so a running relay is left untouched.
 * @param {string} host
 * @param {number} port
 * @param {string} command how the user started it ("npm start", "npm run start:tiers")
 */
export async function ensurePortFree(host, port, command) {
  const problem = await new Promise((resolve) => {
    const s = createServer();
    s.once("error", (/** @type {NodeJS.ErrnoException} */ e) => resolve(e));
    s.listen(port, host, () => s.close(() => resolve(null)));
  });
  if (problem) portTaken(/** @type {NodeJS.ErrnoException} */ (problem), host, port, command);
}

/**
 * Say why the port cannot be had, and exit 1.
 * @param {NodeJS.ErrnoException} err
 * @param {string} host
 * @param {number} port
 * @param {string} command
 * @returns {never}
 */
export function portTaken(err, host, port, command) {
  console.error(
    err.code === "EADDRINUSE"
      ? `[dev] port ${port} is already in use (another npm start?): pick another with PORT, e.g. PORT=${port + 1} ${command}`
      : `[dev] could not listen on ${host}:${port}: ${err.message}`,
  );
  process.exit(1);
}

/**
 * The `--var` arguments for access control (and, with `envFiles`, the vars files wrangler would
 * read beside wrangler.toml, for sessions whose config lives elsewhere); says which mode it is.
 * @param {string} ip
 * @param {string} where
 * @param {string} command
 * @param {string[]} envFiles
 */
export function authArgs(ip, where, command, envFiles = []) {
  /** @type {string[]} */
  const args = [];
  const found = findRelaySecret(root);
  const weak = found.secret === null ? null : secretTooShort(found.secret, found.source);
  if (weak) {
    // the relay would refuse every request with it: say so now, and start nothing
    console.error(`[dev] ${weak}; not starting.`);
    process.exit(1);
  }
  if (found.secret !== null) {
    if (found.source === FROM_ENVIRONMENT) args.push("--var", `RELAY_SECRET:${found.secret}`);
    for (const f of envFiles) args.push("--env-file", f);
    console.error(
      `[dev] auth ON: RELAY_SECRET from ${found.source}. Every request except GET /v1/health needs a bearer token: npm run token -- --role producer --episode '*'`,
    );
  } else if (isLoopback(ip)) {
    args.push("--var", "AUTH_OFF_ON_LOOPBACK:true");
    for (const f of envFiles) args.push("--env-file", f);
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
  return args;
}

/**
 * The `--var` arguments every local run adds to wrangler.toml's vars: one archive step at a time
 * per object class (a local runtime runs every object on one thread: src/objects/archive/gate.ts);
 * ARCHIVE_SLOTS in the environment overrides it.
 * @returns {string[]}
 */
export function localVarArgs() {
  return ["--var", `ARCHIVE_SLOTS:${process.env.ARCHIVE_SLOTS || "1"}`];
}

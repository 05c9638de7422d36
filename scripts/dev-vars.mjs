// Where local tools find RELAY_SECRET, in the order `wrangler dev` would apply it (and `npm start`,
// scripts/relay.mjs, does): the environment (passed on as a var, which wins), else
// .dev.vars if that file exists, else .env then .env.local (wrangler reads those only when there
// is no .dev.vars). Shared by scripts/relay.mjs and tools/token.ts so tokens match the server.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseEnv } from "node:util";

/** `source` of a secret taken from the process environment. */
export const FROM_ENVIRONMENT = "the environment";

/**
 * @param {string} root project directory (where wrangler.toml and .dev.vars live)
 * @param {NodeJS.ProcessEnv} [env]
 * @returns {{ secret: string, source: string } | { secret: null, source: string | null }}
 *   source names where the secret came from, or (secret null) the file that was read without one
 */
export function findRelaySecret(root, env = process.env) {
  if (env.RELAY_SECRET) return { secret: env.RELAY_SECRET, source: FROM_ENVIRONMENT };
  const devVars = join(root, ".dev.vars");
  if (existsSync(devVars)) {
    const secret = parseEnv(readFileSync(devVars, "utf8")).RELAY_SECRET;
    return secret ? { secret, source: ".dev.vars" } : { secret: null, source: ".dev.vars" };
  }
  /** @type {{ secret: string, source: string } | null} */
  let found = null;
  for (const name of [".env", ".env.local"]) {
    const file = join(root, name);
    if (!existsSync(file)) continue;
    const secret = parseEnv(readFileSync(file, "utf8")).RELAY_SECRET;
    if (secret) found = { secret, source: name };
  }
  return found ?? { secret: null, source: null };
}

/**
 * Secrets shorter than this many UTF-8 bytes are refused, as the Worker refuses them (src/protocol/http/keys.ts
 * MIN_SECRET_BYTES).
 */
export const MIN_SECRET_BYTES = 32;

/**
 * Why `secret` (found in `source`) cannot be the relay's, or null when it can.
 * @param {string} secret
 * @param {string} source
 * @returns {string | null}
 */
export function secretTooShort(secret, source) {
  const bytes = Buffer.byteLength(secret, "utf8");
  if (bytes >= MIN_SECRET_BYTES) return null;
  return `RELAY_SECRET from ${source} is ${bytes} bytes long; it must be at least ${MIN_SECRET_BYTES} (make one with \`openssl rand -base64 32\`)`;
}

/**
 * The files `wrangler dev` would read vars from next to wrangler.toml (.dev.vars, else .env then
 * .env.local): the launcher reads every var in them (scripts/relay.mjs).
 * @param {string} root
 * @returns {string[]}
 */
export function devVarsFiles(root) {
  const devVars = join(root, ".dev.vars");
  if (existsSync(devVars)) return [devVars];
  return [".env", ".env.local"].map((n) => join(root, n)).filter((f) => existsSync(f));
}

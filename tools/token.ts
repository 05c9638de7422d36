// `npm run token -- --role producer|watcher|admin --episode ID|PREFIX*|'*' [--episode ...] [--ttl 1h] [--sub NAME]`
// Prints one HS256 token on its last line (stdout), signed with RELAY_SECRET from the environment,
// else .dev.vars (else .env / .env.local), the same order `npm start` applies. A summary goes to stderr.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { findRelaySecret, secretTooShort } from "../scripts/dev-vars.mjs";
import {
  formatTtl,
  isEpisodePattern,
  maxTtlFrom,
  mintToken,
  parseTtl,
  ROLES,
  type Role,
} from "../src/protocol/index.js";
import { parseOptions, UsageError } from "./parse-options.js";

const USAGE = `usage: npm run token -- --role producer|watcher|admin --episode ID|PREFIX*|'*' [--episode ...] [--ttl 1h] [--sub NAME]
  --role      producer (write + read), watcher (read, status, watch), admin (everything, incl. the usage routes);
              any role lists the runs and episodes its --episode patterns cover
  --episode   an episode id, a prefix pattern such as 'run-42:*', or '*' for all; repeat or comma-separate
  --ttl       lifetime: 90, 90s, 15m, 1h (default), 7d; at most the role's TOKEN_MAX_TTL (default producer 30d, watcher 7d, admin 1d)
  --sub       optional subject (who the token is for)
The token is signed with RELAY_SECRET from the environment, else .dev.vars (else .env/.env.local).`;

function fail(message: string, code = 2): never {
  console.error(`token: ${message}`);
  if (code === 2) console.error(USAGE);
  process.exit(code);
}

function options(argv: string[]) {
  try {
    return parseOptions({
      args: argv,
      options: {
        help: { type: "boolean", short: "h" },
        role: { type: "string" },
        episode: { type: "string", multiple: true },
        episodes: { type: "string", multiple: true },
        ttl: { type: "string", default: "1h" },
        sub: { type: "string" },
      },
      tokens: true,
    });
  } catch (e) {
    if (e instanceof UsageError) fail(e.message);
    throw e;
  }
}

function parseArgs(argv: string[]): { role: Role; episodes: string[]; ttl: number; sub?: string } {
  const { values, tokens } = options(argv);
  if (values.help) {
    // asked for: on stdout (a pager or grep reads it); a usage error's goes to stderr
    console.log(USAGE);
    process.exit(0);
  }
  const { role, ttl, sub } = values;
  // --episode and --episodes are one list, in command-line order (parseArgs keeps them apart),
  // each value comma-separated (parseArgs has no value lists)
  const episodes = tokens
    .flatMap((t) => (t.kind === "option" && (t.name === "episode" || t.name === "episodes") ? t.value.split(",") : []))
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (!role) fail("--role is required");
  if (!(ROLES as readonly string[]).includes(role)) fail(`--role must be one of ${ROLES.join(", ")}`);
  if (episodes.length === 0) fail("at least one --episode is required ('*' for every episode)");
  const bad = episodes.filter((e) => !isEpisodePattern(e));
  if (bad.length > 0) {
    fail(
      `not an episode id or PREFIX* pattern: ${bad.join(", ")} (ids are 1-128 characters of [A-Za-z0-9._:-]; a pattern is such a prefix followed by *, e.g. run-42:*)`,
    );
  }
  const seconds = parseTtl(ttl);
  if (seconds === null) fail(`--ttl ${ttl}: expected a number of seconds or 90s, 15m, 1h, 7d`);
  return { role: role as Role, episodes, ttl: seconds, ...(sub ? { sub } : {}) };
}

/** The relay's TOKEN_MAX_TTL: the environment's, else wrangler.toml's [vars] in this folder, else the defaults. */
function relayMaxTtl() {
  let value = process.env.TOKEN_MAX_TTL;
  const toml = join(process.cwd(), "wrangler.toml");
  if (value === undefined && existsSync(toml))
    value = /^TOKEN_MAX_TTL\s*=\s*"([^"]*)"/m.exec(readFileSync(toml, "utf8"))?.[1];
  try {
    return maxTtlFrom(value);
  } catch (e) {
    return fail((e as Error).message, 1);
  }
}

const opts = parseArgs(process.argv.slice(2));
// the project directory: where `npm run token` runs, and where `npx episode-relay token` is called
const found = findRelaySecret(process.cwd());
if (found.secret === null) {
  // in the project there is an example file; in an installed package there is none
  const example = existsSync(join(process.cwd(), ".dev.vars.example")) ? "; see .dev.vars.example" : "";
  fail(
    `RELAY_SECRET is not set (looked in the environment${found.source ? ` and ${found.source}` : ", .dev.vars, .env"}): set it to the relay's secret, e.g. RELAY_SECRET=... npx episode-relay token ...${example}`,
    1,
  );
}
const weak = secretTooShort(found.secret, found.source ?? "the environment");
if (weak) fail(`${weak}: the relay refuses it`, 1);
const maxTtl = relayMaxTtl();
if (opts.ttl > maxTtl[opts.role])
  fail(
    `--ttl ${formatTtl(opts.ttl)} is longer than the relay accepts for a ${opts.role} (${formatTtl(maxTtl[opts.role])}, TOKEN_MAX_TTL)`,
  );
const now = Date.now();
const token = await mintToken(found.secret, { ...opts, now, maxTtl });
const expires = new Date(Math.floor(now / 1000) * 1000 + opts.ttl * 1000).toISOString();
console.error(
  `token: role=${opts.role} episodes=${JSON.stringify(opts.episodes)} expires=${expires} (secret from ${found.source})`,
);
console.log(token);

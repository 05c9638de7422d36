// What the Worker's Env holds besides wrangler.toml's bindings and [vars] (those are generated
// into src/worker-env.d.ts by `wrangler types`, and `npm test` checks they are current).
declare namespace Cloudflare {
  interface Env {
    /**
     * HMAC key (its UTF-8 bytes) of the HS256 bearer tokens: a Wrangler secret in production
     * (`wrangler secret put RELAY_SECRET`), .dev.vars or the environment of `npm start` locally.
     * Set: every request but /v1/health needs a token. Unset: see AUTH_OFF_ON_LOOPBACK.
     */
    RELAY_SECRET?: string;
    /**
     * During a key rollover, the secret before RELAY_SECRET: tokens it signed (their `kid` names
     * it) are still accepted until they expire; new ones are signed with RELAY_SECRET only.
     */
    RELAY_SECRET_PREVIOUS?: string;
    /**
     * "true" only from `npm start` (scripts/relay.mjs, `--var`) when no RELAY_SECRET is configured:
     * auth is then off for requests addressed to a local host name. Never set in wrangler.toml;
     * without it and without a secret the Worker refuses everything but /v1/health (503).
     */
    AUTH_OFF_ON_LOOPBACK?: string;
  }
}

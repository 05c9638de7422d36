// Access control: scoped HS256 bearer tokens (JWT) signed with RELAY_SECRET.
//
// Claims: `role` (producer | watcher | admin), `episodes` (exact ids and/or prefix patterns
// `PREFIX*`, `*` alone = every episode), `exp` (required). Any other claim is ignored.
//   producer: read + write its episodes      (deltas, ingest socket, reply, DELETE, GET, status, watch)
//   watcher:  read its episodes              (GET, status, watch)
//   admin:    read + write                   (everything; episode requests still within `episodes`)
// The usage routes (`/v1/episodes/{id}/usage`, `/v1/runs/{run}/usage`: billing units) are admin only.
// Listing (`GET /v1/episodes`, `/v1/runs` and its socket, a run's pages and socket under
// `/v1/runs/{run}`) takes any valid token and shows only the episodes its `episodes` patterns
// cover (the Worker passes them to the run's index). `/v1/episodes/watch`, the old index socket,
// is gone: any valid token gets a 404.
//
// Where a request carries its token, and its removal (no token travels past the Worker: `stripCredentials`):
// credentials.ts.
//
// Modes (see `authMode`): RELAY_SECRET set → tokens required. No secret → auth is off only when
// AUTH_OFF_ON_LOOPBACK = "true" (set by `npm start`, never in wrangler.toml) AND the request URL
// names a local host; otherwise every request but /v1/health is refused (503, fail closed). A
// secret shorter than 32 bytes, or an unreadable TOKEN_MAX_TTL, fails closed too, saying why.
// Keys, key ids, the previous secret of a rollover and the lifetimes per role: keys.ts.
//
// Nothing here logs, and no response carries a token, a secret or a jose error text.

import { decodeProtectedHeader, errors, jwtVerify, SignJWT } from "jose";
import { BAD_PROTOCOL, findToken, offeredProtocols, WS_PROTOCOL, WS_TOKEN_PREFIX } from "./credentials.js";
import { RelayError } from "./errors.js";
import {
  DEFAULT_MAX_TTL,
  lifetimeProblem,
  maxTtlFrom,
  ROLES,
  type Role,
  type SigningKey,
  secretProblem,
  signingKey,
} from "./keys.js";
import { EPISODE_ID, INDEX_METHODS, isWebSocketUpgrade, METHODS, type Route, RUN_METHODS } from "./route.js";

export { ROLES, type Role } from "./keys.js";

/** What a role may do to the episodes its token covers (every role may list them). */
export type Permission = "read" | "write";

const GRANTS: Record<Role, ReadonlySet<Permission>> = {
  producer: new Set<Permission>(["read", "write"]),
  watcher: new Set<Permission>(["read"]),
  admin: new Set<Permission>(["read", "write"]),
};

/** The verified claims of a token. */
export interface Claims {
  role: Role;
  episodes: string[];
  exp: number;
  sub?: string;
  /** The id of the key that verified the token (what a share it makes is signed with). */
  kid?: string;
}

/** Seconds of clock skew tolerated on `exp` and `nbf`. */
export const CLOCK_TOLERANCE_S = 30;
/** Longest token accepted (characters); longer is malformed. */
export const MAX_TOKEN_CHARS = 8192;

// ---- episode patterns ----

const PREFIX_PATTERN = /^[A-Za-z0-9._:-]{0,127}\*$/;

/** An `episodes` entry: an exact episode id, `PREFIX*` (PREFIX of id characters), or `*`. */
export function isEpisodePattern(p: unknown): p is string {
  return typeof p === "string" && (EPISODE_ID.test(p) || PREFIX_PATTERN.test(p));
}

/** Whether `id` is within any of `patterns` (exact match, or `PREFIX*` prefix match). */
export function inScope(patterns: readonly string[], id: string): boolean {
  for (const p of patterns) {
    if (p.endsWith("*") ? id.startsWith(p.slice(0, -1)) : p === id) return true;
  }
  return false;
}

// ---- modes ----

export type AuthMode =
  /** `secrets`: the one that signs first, then the previous one of a rollover (verifies only). */
  | { kind: "on"; secrets: readonly string[]; maxTtl: Readonly<Record<Role, number>> }
  /** No secret, started by `npm start`: auth is off for requests addressed to a local host. */
  | { kind: "loopback" }
  /** No (usable) secret and not local dev: refuse everything but health, saying why. */
  | { kind: "closed"; reason?: string };

/** The vars auth reads (a subset of the Worker's Env, declared here so the CLI can use this module). */
interface AuthEnv {
  RELAY_SECRET?: string;
  RELAY_SECRET_PREVIOUS?: string;
  TOKEN_MAX_TTL?: string;
  AUTH_OFF_ON_LOOPBACK?: string;
}

let cachedMode: { env: string; mode: AuthMode } | null = null;

export function authMode(env: AuthEnv): AuthMode {
  const secret = env.RELAY_SECRET;
  if (typeof secret !== "string" || secret === "")
    return env.AUTH_OFF_ON_LOOPBACK === "true" ? { kind: "loopback" } : { kind: "closed" };
  const previous = env.RELAY_SECRET_PREVIOUS || null;
  const key = JSON.stringify([secret, previous, env.TOKEN_MAX_TTL ?? null]);
  if (cachedMode?.env !== key) cachedMode = { env: key, mode: modeOf(secret, previous, env.TOKEN_MAX_TTL) };
  return cachedMode.mode;
}

function modeOf(secret: string, previous: string | null, maxTtl: string | undefined): AuthMode {
  const problem =
    secretProblem("RELAY_SECRET", secret) ??
    (previous === null ? null : secretProblem("RELAY_SECRET_PREVIOUS", previous));
  if (problem)
    return {
      kind: "closed",
      reason: `${problem}: this relay refuses every request except GET /v1/health until it is replaced`,
    };
  try {
    return { kind: "on", secrets: previous === null ? [secret] : [secret, previous], maxTtl: maxTtlFrom(maxTtl) };
  } catch (e) {
    return {
      kind: "closed",
      reason: `${(e as Error).message}: this relay refuses every request except GET /v1/health until it is fixed`,
    };
  }
}

/**
 * Host names that only reach this machine: localhost, *.localhost, 127.0.0.0/8, [::1], and the
 * reserved testing TLD *.test (RFC 6761: never resolvable on the internet; the workerd tests use
 * relay.test). A `URL.hostname` (lower case, IPv6 in brackets).
 */
export function isLocalHostname(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, "");
  return (
    h === "localhost" ||
    h.endsWith(".localhost") ||
    h.endsWith(".test") ||
    h === "[::1]" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)
  );
}

function localOrigin(origin: string): boolean {
  try {
    return isLocalHostname(new URL(origin).hostname);
  } catch {
    return false; // "null" (sandboxed pages, file:) and garbage
  }
}

// ---- what a request needs ----

export type Need =
  /** No token (health). */
  | { kind: "open" }
  /** Any valid token (unknown paths, bad ids, wrong methods: they end in 4xx after auth). */
  | { kind: "token" }
  | { kind: "episode"; permission: "read" | "write"; id: string }
  /** The admin role (an episode's, within its `episodes`; null: a run's). */
  | { kind: "admin"; id: string | null }
  | { kind: "list" };

const WRITE_ACTIONS = new Set(["deltas", "ingest", "reply", "dispatch"]);

/** The permission a routed request needs. */
export function need(method: string, route: Route): Need {
  if (route.kind === "health") return { kind: "open" };
  if (route.kind === "episode") {
    if (!METHODS[route.action].includes(method)) return { kind: "token" };
    if (route.action === "usage") return { kind: "admin", id: route.id };
    // the trainer's annotations are written by the producer role, read by watchers
    const write =
      WRITE_ACTIONS.has(route.action) ||
      (route.action === "episode" && method === "DELETE") ||
      (route.action === "annotations" && method === "POST");
    return { kind: "episode", permission: write ? "write" : "read", id: route.id };
  }
  if ((route.kind === "list" || route.kind === "runs") && INDEX_METHODS[route.kind].includes(method)) {
    return { kind: "list" };
  }
  // a run's pages and sockets are filtered to the token's episodes by the run's index
  // (a run's rules are set by an admin or a producer covering the run: src/worker/run-routes.ts runRules)
  if (route.kind === "run" && RUN_METHODS[route.action].includes(method)) {
    // a run's alerts are set by its admin (their webhooks' secrets sign what the relay sends)
    const admin =
      route.action === "usage" || route.action === "share" || (route.action === "alerts" && method === "PUT");
    return admin ? { kind: "admin", id: null } : { kind: "list" };
  }
  return { kind: "token" };
}

// ---- verification ----

export type Verified = { ok: true; claims: Claims } | { ok: false; reason: string };

/**
 * Verify signature (HS256, constant time in WebCrypto) with the key its `kid` names (no `kid`:
 * each key in turn), `exp`/`nbf`, the lifetime its role allows, and the claims' shape.
 */
export async function verifyToken(
  token: string,
  keys: readonly SigningKey[],
  maxTtl: Readonly<Record<Role, number>> = DEFAULT_MAX_TTL,
  now?: Date,
): Promise<Verified> {
  if (token.length === 0 || token.length > MAX_TOKEN_CHARS) return { ok: false, reason: "malformed token" };
  let kid: unknown;
  try {
    kid = decodeProtectedHeader(token).kid;
  } catch {
    return { ok: false, reason: "malformed token" };
  }
  const candidates = kid === undefined ? keys : keys.filter((k) => k.kid === kid);
  if (candidates.length === 0)
    return {
      ok: false,
      reason: "token signed with a key this relay does not hold (its kid names none of RELAY_SECRET's)",
    };
  let payload: Record<string, unknown> | null = null;
  let failure: unknown = null;
  let verifiedBy = "";
  for (const candidate of candidates) {
    verifiedBy = candidate.kid;
    try {
      ({ payload } = await jwtVerify(token, candidate.key, {
        algorithms: ["HS256"],
        requiredClaims: ["exp"],
        clockTolerance: CLOCK_TOLERANCE_S,
        ...(now ? { currentDate: now } : {}),
      }));
      break;
    } catch (e) {
      // a bad signature may be the other key's turn; any other failure is the token's own
      failure = e;
      if (!(e instanceof errors.JWSSignatureVerificationFailed)) break;
    }
  }
  if (payload === null) return { ok: false, reason: verifyFailure(failure) };
  const { role, episodes, exp, sub, iat } = payload;
  if (typeof role !== "string" || !(ROLES as readonly string[]).includes(role)) {
    return { ok: false, reason: 'token claim "role" must be "producer", "watcher" or "admin"' };
  }
  if (!Array.isArray(episodes) || !episodes.every(isEpisodePattern)) {
    return { ok: false, reason: 'token claim "episodes" must be an array of episode ids and PREFIX* patterns' };
  }
  // lived since it was issued (a claimed issue time in the future counts from now)
  const nowS = Math.floor((now ?? new Date()).getTime() / 1000);
  const issued = typeof iat === "number" ? Math.min(iat, nowS) : nowS;
  const tooLong = lifetimeProblem(role as Role, exp as number, issued, maxTtl, CLOCK_TOLERANCE_S);
  if (tooLong) return { ok: false, reason: tooLong };
  return {
    ok: true,
    claims: {
      role: role as Role,
      episodes: episodes as string[],
      exp: exp as number,
      ...(typeof sub === "string" ? { sub } : {}),
      kid: verifiedBy,
    },
  };
}

/** A fixed, token-free reason for a failed verification. */
function verifyFailure(e: unknown): string {
  if (e instanceof errors.JWTExpired) return "token expired";
  if (e instanceof errors.JWSSignatureVerificationFailed) return "token signature does not verify";
  if (e instanceof errors.JOSEAlgNotAllowed) return "token algorithm must be HS256";
  if (e instanceof errors.JWTClaimValidationFailed) {
    if (e.claim === "exp") return 'token has no valid "exp" claim';
    if (e.claim === "nbf") return "token not yet valid (nbf)";
    if (e.claim === "iat") return 'token has an invalid "iat" claim';
    return "token claims are invalid";
  }
  return "malformed token";
}

// ---- the authorization ----

export type Authorization = { ok: true; claims: Claims | null } | { ok: false; refusal: RelayError };

/**
 * Decide one request: `claims` is null when no token was needed (health, auth off on loopback).
 * `listedOrigin` says whether an Origin is named in CORS_ORIGINS: with auth off, a browser page
 * from any other non-local origin is refused (no drive-by writes, no cross-site WebSockets).
 */
export async function authorize(
  request: Request,
  url: URL,
  req: Need,
  mode: AuthMode,
  listedOrigin: (origin: string) => boolean = () => false,
): Promise<Authorization> {
  if (req.kind === "open") return { ok: true, claims: null };
  if (mode.kind === "closed") {
    return notConfigured(
      mode.reason ??
        "RELAY_SECRET is not set: this relay refuses every request except GET /v1/health (set it with `wrangler secret put RELAY_SECRET`)",
    );
  }
  if (mode.kind === "loopback" && !isLocalHostname(url.hostname)) {
    return notConfigured(
      "RELAY_SECRET is not set and auth is off only for requests to localhost or 127.0.0.1: this request names another host, so it is refused",
    );
  }
  const protocols = offeredProtocols(request);
  if (protocols.some((p) => p.startsWith(WS_TOKEN_PREFIX)) && !protocols.includes(WS_PROTOCOL)) {
    return { ok: false, refusal: new RelayError("bad_protocol", BAD_PROTOCOL) };
  }
  if (mode.kind === "loopback") {
    const origin = request.headers.get("origin");
    if (origin !== null && !localOrigin(origin) && !listedOrigin(origin)) {
      return forbidden(
        "auth is off (local dev without RELAY_SECRET): requests from web pages of other origins are refused; list the origin in CORS_ORIGINS",
      );
    }
    return { ok: true, claims: null };
  }

  const found = findToken(request, url, isWebSocketUpgrade(request));
  if ("badRequest" in found) return { ok: false, refusal: new RelayError("bad_protocol", found.badRequest) };
  if ("missing" in found) return unauthorized(found.missing);
  if ("malformed" in found) return unauthorized(found.malformed);
  // the keys' ids are hashes of the secrets, computed once per secret (keys.ts)
  const v = await verifyToken(found.token, await Promise.all(mode.secrets.map(signingKey)), mode.maxTtl);
  if (!v.ok) return unauthorized(v.reason);
  const { claims } = v;
  switch (req.kind) {
    case "token":
      return { ok: true, claims };
    case "list":
      // every role may list: the index shows each token only the episodes its `episodes` cover
      return { ok: true, claims };
    case "episode":
      if (!GRANTS[claims.role].has(req.permission)) {
        return forbidden(
          `role ${claims.role} cannot ${req.permission === "write" ? "write to or delete" : "read"} episodes`,
        );
      }
      if (!inScope(claims.episodes, req.id)) return forbidden(`episode ${req.id} is outside this token's episodes`);
      return { ok: true, claims };
    case "admin":
      if (claims.role !== "admin")
        return forbidden(`role ${claims.role} cannot do this: usage, share links and a run's alerts are admin only`);
      if (req.id !== null && !inScope(claims.episodes, req.id))
        return forbidden(`episode ${req.id} is outside this token's episodes`);
      return { ok: true, claims };
  }
}

// 401s and 403s carry `WWW-Authenticate: Bearer` (RFC 6750)
function unauthorized(message: string): Authorization {
  return {
    ok: false,
    refusal: new RelayError("unauthorized", message, undefined, {
      "www-authenticate": `Bearer realm="episode-relay", error="invalid_token"`,
    }),
  };
}

function forbidden(message: string): Authorization {
  return {
    ok: false,
    refusal: new RelayError("forbidden", message, undefined, {
      "www-authenticate": `Bearer realm="episode-relay", error="insufficient_scope"`,
    }),
  };
}

function notConfigured(message: string): Authorization {
  return { ok: false, refusal: new RelayError("auth_not_configured", message) };
}

// ---- minting (tools/token.ts, tests, clients) ----

export interface MintOptions {
  role: Role;
  episodes: string[];
  /** Lifetime in seconds. */
  ttl: number;
  sub?: string;
  now?: number;
  /** The relay's lifetimes per role (TOKEN_MAX_TTL); default DEFAULT_MAX_TTL. A longer ttl is refused. */
  maxTtl?: Readonly<Record<Role, number>>;
}

/** Sign a token with `secret` (its UTF-8 bytes are the HMAC key; its key id in the header). */
export async function mintToken(secret: string, o: MintOptions): Promise<string> {
  const weak = secretProblem("RELAY_SECRET", secret);
  if (weak) throw new Error(weak);
  if (!ROLES.includes(o.role)) throw new Error(`role must be one of ${ROLES.join(", ")}`);
  const bad = o.episodes.filter((p) => !isEpisodePattern(p));
  if (bad.length > 0)
    throw new Error(`not an episode id or PREFIX* pattern: ${bad.join(", ")} (ids are 1-128 of [A-Za-z0-9._:-])`);
  if (!(Number.isFinite(o.ttl) && o.ttl > 0)) throw new Error("ttl must be a positive number of seconds");
  const max = (o.maxTtl ?? DEFAULT_MAX_TTL)[o.role];
  if (o.ttl > max) throw new Error(`ttl ${o.ttl} s exceeds the ${o.role} maximum of ${max} s (TOKEN_MAX_TTL)`);
  const { kid } = await signingKey(secret);
  const now = Math.floor((o.now ?? Date.now()) / 1000);
  const jwt = new SignJWT({ role: o.role, episodes: o.episodes })
    .setProtectedHeader({ alg: "HS256", typ: "JWT", kid })
    .setIssuedAt(now)
    .setExpirationTime(now + Math.ceil(o.ttl));
  if (o.sub) jwt.setSubject(o.sub);
  return jwt.sign(new TextEncoder().encode(secret));
}

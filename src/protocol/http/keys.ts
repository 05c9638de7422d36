// The keys tokens are signed with, and how long a token may live. Pure (WebCrypto only).
//
// - RELAY_SECRET signs and verifies; RELAY_SECRET_PREVIOUS (optional) only verifies, so tokens
//   signed before a rollover keep working until they expire. Each secret's UTF-8 bytes are its HMAC
//   key and must be at least MIN_SECRET_BYTES long: a shorter one refuses to start (the Worker
//   fails closed with the reason; `npm start`, `npm run token` and `npm run deploy` stop).
// - A token names its key in its header's `kid`: the first 8 bytes of SHA-256 over a label and the
//   secret, hex, so the id follows from the secret and says nothing about it. Tokens without a
//   `kid` (minted before kids) are tried with each key.
// - TOKEN_MAX_TTL (wrangler.toml [vars]) bounds a token's lifetime per role, e.g.
//   "producer=30d, watcher=7d, admin=1d": a token whose `exp` lies further from when it was issued
//   (or from now) is refused, whoever signed it.

export type Role = "producer" | "watcher" | "admin";
export const ROLES: readonly Role[] = ["producer", "watcher", "admin"];

/** Shortest secret accepted, UTF-8 bytes (HS256's key should be as long as its hash). */
export const MIN_SECRET_BYTES = 32;

/** The lifetimes when TOKEN_MAX_TTL does not say (seconds). */
export const DEFAULT_MAX_TTL: Readonly<Record<Role, number>> = {
  producer: 30 * 86400,
  watcher: 7 * 86400,
  admin: 86400,
};

export interface SigningKey {
  kid: string;
  key: Uint8Array;
}

/** Why `secret` (named `name`) cannot sign tokens, or null when it can. */
export function secretProblem(name: string, secret: string): string | null {
  const bytes = new TextEncoder().encode(secret).length;
  if (bytes >= MIN_SECRET_BYTES) return null;
  return `${name} is ${bytes} bytes long; it must be at least ${MIN_SECRET_BYTES} (make one with \`openssl rand -base64 32\`)`;
}

const KID_LABEL = "episode-relay key id\u0000";
const kids = new Map<string, Promise<string>>();

/** The key id of `secret` (16 hex digits), cached per secret. */
export function keyId(secret: string): Promise<string> {
  let kid = kids.get(secret);
  if (!kid) {
    kid = crypto.subtle
      .digest("SHA-256", new TextEncoder().encode(KID_LABEL + secret))
      .then((d) => [...new Uint8Array(d).slice(0, 8)].map((b) => b.toString(16).padStart(2, "0")).join(""));
    kids.set(secret, kid);
  }
  return kid;
}

/** The signing key of `secret`. */
export async function signingKey(secret: string): Promise<SigningKey> {
  return { kid: await keyId(secret), key: new TextEncoder().encode(secret) };
}

/** `90`, `90s`, `15m`, `1h`, `7d` → seconds; null if unparseable. */
export function parseTtl(s: string): number | null {
  const m = /^(\d+)([smhd]?)$/.exec(s.trim());
  if (!m) return null;
  const n = Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as "" | "s" | "m" | "h" | "d"];
  return n > 0 ? n : null;
}

/**
 * TOKEN_MAX_TTL ("producer=30d, watcher=7d, admin=1d", any subset) → seconds per role; roles it
 * does not name keep DEFAULT_MAX_TTL. Throws on a value it cannot read (a deploy must not guess).
 */
export function maxTtlFrom(value: string | undefined): Record<Role, number> {
  const out = { ...DEFAULT_MAX_TTL };
  for (const part of (value ?? "").split(",")) {
    if (part.trim() === "") continue;
    const m = /^\s*(producer|watcher|admin)\s*=\s*(\S+)\s*$/.exec(part);
    const ttl = m ? parseTtl(m[2]!) : null;
    if (!m || ttl === null)
      throw new Error(
        `TOKEN_MAX_TTL: cannot read ${JSON.stringify(part.trim())} (expected role=TTL, e.g. "watcher=7d")`,
      );
    out[m[1] as Role] = ttl;
  }
  return out;
}

/** Why a token of `role` living from `issued` to `exp` (seconds) is too long-lived, or null. */
export function lifetimeProblem(
  role: Role,
  exp: number,
  issued: number,
  max: Readonly<Record<Role, number>>,
  toleranceS: number,
): string | null {
  if (exp - issued <= max[role] + toleranceS) return null;
  return `token lifetime exceeds the ${role} maximum of ${formatTtl(max[role])} (TOKEN_MAX_TTL)`;
}

export function formatTtl(s: number): string {
  for (const [unit, n] of [
    ["d", 86400],
    ["h", 3600],
    ["m", 60],
  ] as const) {
    if (s % n === 0) return `${s / n}${unit}`;
  }
  return `${s}s`;
}

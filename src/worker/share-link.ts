// `POST /v1/runs/{run}/share[?ttl=7d]`: a read-only token for one run, for a link an admin hands
// out (the dashboard puts it in the URL's fragment, which browsers never send to a server). It
// takes an admin token covering the whole run; the token it answers is a watcher's for `RUN:*`,
// living `ttl` (default 7 days, at most TOKEN_MAX_TTL's watcher lifetime) but never past its maker:
// it expires when the admin's token does, at the latest, and is signed with the key that verified
// the admin's token, so that a rollover's end (RELAY_SECRET_PREVIOUS removed) ends it with its maker.
// With auth off there is no token to make: the answer says so (`token: null`), and a plain link does.
// The answer's `url` is the link itself, on PUBLIC_URL's origin (src/protocol/http/public-url.ts),
// else the request's.

import { type AuthMode, type Claims, mintToken } from "../protocol/http/auth.js";
import { RelayError } from "../protocol/http/errors.js";
import { formatTtl, keyId, parseTtl } from "../protocol/http/keys.js";
import { NO_RUN } from "../protocol/registry/run.js";
import { needsWholeRun, type RunAccess } from "./run-routes.js";

/** A share link's lifetime unless `?ttl=` says (bounded by the watcher's TOKEN_MAX_TTL). */
const SHARE_TTL_S = 7 * 86400;

interface ShareAnswer {
  run: string;
  /** The read-only token (null: auth is off, a link needs none). */
  token: string | null;
  role: "watcher";
  episodes: string[];
  /** When the token expires (ISO 8601), null without one. */
  expires: string | null;
  /** The link to hand out: the run's page on the relay's public origin, the token in its fragment. */
  url: string;
}

/** The run's page at `origin`, with `token` (if any) in the fragment, which browsers never send to a server. */
function linkTo(origin: string, run: string, token: string | null): string {
  const link = new URL(`/runs/${encodeURIComponent(run)}`, origin);
  if (token) link.hash = `token=${encodeURIComponent(token)}`;
  return link.toString();
}

export async function shareRun(
  a: RunAccess,
  mode: AuthMode,
  claims: Claims | null,
  url: URL,
  origin: string,
): Promise<ShareAnswer> {
  needsWholeRun(a, "share links");
  if (a.run === NO_RUN)
    throw new RelayError(
      "bad_run",
      "episodes without a run (ids without ':') have no run pattern to share: share each by its id",
    );
  const episodes = [`${a.run}:*`];
  if (mode.kind !== "on")
    return { run: a.run, token: null, role: "watcher", episodes, expires: null, url: linkTo(origin, a.run, null) };
  const max = mode.maxTtl.watcher;
  const asked = url.searchParams.get("ttl");
  const ttl = asked === null ? Math.min(SHARE_TTL_S, max) : parseTtl(asked);
  if (ttl === null || ttl > max) {
    throw new RelayError(
      "malformed",
      `ttl must be a lifetime such as 1h or 7d, at most the watcher's ${formatTtl(max)} (TOKEN_MAX_TTL)`,
      "ttl",
    );
  }
  const now = Date.now();
  const sub = `share of ${a.run}${claims?.sub ? ` by ${claims.sub}` : ""}`;
  const left = claims === null ? ttl : claims.exp - Math.floor(now / 1000);
  if (left <= 0) throw new RelayError("unauthorized", "the token making the share has expired");
  const lives = Math.min(ttl, left);
  const secret = await makersSecret(mode.secrets, claims?.kid);
  const token = await mintToken(secret, { role: "watcher", episodes, ttl: lives, sub, now, maxTtl: mode.maxTtl });
  return {
    run: a.run,
    token,
    role: "watcher",
    episodes,
    expires: new Date((Math.floor(now / 1000) + lives) * 1000).toISOString(),
    url: linkTo(origin, a.run, token),
  };
}

/** The secret whose key verified the maker's token (the signing one when none is named). */
async function makersSecret(secrets: readonly string[], kid: string | undefined): Promise<string> {
  for (const s of secrets) if ((await keyId(s)) === kid) return s;
  return secrets[0]!;
}

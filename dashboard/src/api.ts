// Where the relay is (the page's own origin) and the viewer's token.
//
// A token comes from a link, `#token=` in the page URL's fragment (browsers never send a fragment
// to a server, nor put it in a Referer), or from the token field; it is then kept in
// sessionStorage (this tab, this session) and removed from the address bar. `?token=` (older links)
// is taken the same way, though that request has already carried it to the server. A token that
// came in a fragment (a share link) rides along in the page's own links' fragments, so a link
// opened in a new tab (whose session starts empty) still has it; a pasted token does not travel so.

import { RETRY_503_FOR_MS, retryAfterMs } from "../../clients/typescript/relay-fetch.js";
import { RELAY_HEADER } from "../../src/protocol/index.js";

const KEY = "episode-relay-token";
/** Set when the token came in a link: the page's links then carry it on. */
const FROM_LINK = "episode-relay-token-from-link";

export const relayUrl = location.origin;

export function takeTokenFromUrl(): void {
  const u = new URL(location.href);
  const fragment = new URLSearchParams(u.hash.slice(1));
  const linked = fragment.get("token");
  const t = linked ?? u.searchParams.get("token");
  if (t === null) return;
  setToken(t, linked !== null);
  u.searchParams.delete("token");
  fragment.delete("token");
  const rest = fragment.toString();
  history.replaceState(history.state, "", u.pathname + u.search + (rest ? `#${rest}` : ""));
}

export function getToken(): string | undefined {
  try {
    return sessionStorage.getItem(KEY) || undefined;
  } catch {
    return undefined;
  }
}

export function setToken(t: string | null, fromLink = false): void {
  try {
    if (t) sessionStorage.setItem(KEY, t.trim());
    else sessionStorage.removeItem(KEY);
    if (t && fromLink) sessionStorage.setItem(FROM_LINK, "1");
    else sessionStorage.removeItem(FROM_LINK);
  } catch {
    // storage disabled: the token lasts as long as the page
  }
}

/** `#token=…` for the page's own links when the token came by link (else ""): a new tab opened from one keeps it. */
export function tokenFragment(): string {
  try {
    const t = getToken();
    return t && sessionStorage.getItem(FROM_LINK) === "1" ? `#token=${encodeURIComponent(t)}` : "";
  } catch {
    return "";
  }
}

/** The token's payload (unverified: only to choose what the page offers and says), or null. */
function tokenClaims(): Record<string, unknown> | null {
  const part = getToken()?.split(".")[1];
  if (!part) return null;
  try {
    const claims = JSON.parse(atob(part.replace(/-/g, "+").replace(/_/g, "/"))) as unknown;
    return claims !== null && typeof claims === "object" ? (claims as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** The token's role as its payload says, or null. */
export function tokenRole(): string | null {
  const role = tokenClaims()?.role;
  return typeof role === "string" ? role : null;
}

/** The episode patterns the token's payload names (its scope), or null: no token, or none readable. */
export function tokenEpisodes(): string[] | null {
  const episodes = tokenClaims()?.episodes;
  return Array.isArray(episodes) && episodes.every((p) => typeof p === "string") ? episodes : null;
}

export function authHeaders(): Record<string, string> {
  const t = getToken();
  return t ? { authorization: `Bearer ${t}` } : {};
}

/** A socket URL on the relay (ws: or wss:). */
export function socketUrl(path: string): string {
  const u = new URL(path, relayUrl);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  return u.toString();
}

/** Subprotocols carrying the token (preferred over ?token=, which ends up in request logs). */
export function socketProtocols(): string[] | undefined {
  const t = getToken();
  return t ? ["episode-relay", `bearer.${t}`] : undefined;
}

export type AccessProblem = { status: 401 | 403 | 503; message: string };

/**
 * Check a GET answers; the relay's refusal (401, 403, 503 `auth_not_configured`) comes back as an
 * AccessProblem. Anything transient throws, so the caller tries again: a network failure, the
 * relay's other 5xx, 408 and 429, and an error answer without the relay's header (a proxy's 502,
 * the local router's 503 while a tier starts).
 */
export async function probe(
  path: string,
): Promise<{ ok: true; status: number; body: unknown } | ({ ok: false } & AccessProblem)> {
  const res = await fetch(new URL(path, relayUrl), { headers: { accept: "application/json", ...authHeaders() } });
  let body: unknown = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  const code = (body as { error?: string } | null)?.error;
  const relays = res.headers.has(RELAY_HEADER);
  if (relays && (res.status === 401 || res.status === 403 || (res.status === 503 && code === "auth_not_configured"))) {
    const message = (body as { message?: string } | null)?.message ?? res.statusText;
    return { ok: false, status: res.status as AccessProblem["status"], message };
  }
  if (
    res.status >= 500 ||
    res.status === 408 ||
    res.status === 429 ||
    (!relays && !res.ok && ![404, 405, 410].includes(res.status))
  ) {
    throw new Error(`${path}: ${res.status} ${res.statusText}, retrying`);
  }
  return { ok: true, status: res.status, body };
}

/**
 * GET a JSON answer of the relay (with the token); a refusal or failure throws an Error carrying the relay's message
 * (and `status`). The relay's 503 with Retry-After is asked again after it, for up to RETRY_503_FOR_MS (as the
 * TypeScript client's calls do: clients/typescript/relay-fetch.ts).
 */
export async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const giveUp = Date.now() + RETRY_503_FOR_MS;
  let res: Response;
  for (;;) {
    res = await fetch(new URL(path, relayUrl), {
      headers: { accept: "application/json", ...authHeaders() },
      signal,
    });
    // the relay's own "ask again" (503 with Retry-After: overloaded, or a local tier not up), waited out
    const after = res.status === 503 && res.headers.has(RELAY_HEADER) ? res.headers.get("retry-after") : null;
    if (after === null) break;
    const wait = retryAfterMs(after);
    if (Date.now() + wait > giveUp) break;
    await res.body?.cancel().catch(() => {});
    await new Promise((r) => setTimeout(r, wait));
    signal?.throwIfAborted();
  }
  const body = (await res.json().catch(() => null)) as (T & { message?: string }) | null;
  if (!res.ok || body === null)
    throw Object.assign(new Error(body?.message ?? `${res.status} ${res.statusText}`), { status: res.status });
  return body;
}

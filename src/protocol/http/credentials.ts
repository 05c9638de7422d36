// Where a request carries its bearer token (src/protocol/http/auth.ts checks it), and the request without
// it that goes on past the Worker (`stripCredentials`).
//
// A token may come in `Authorization: Bearer <token>` on any request; on WebSocket upgrades of
// `ingest` and `watch` also as a `Sec-WebSocket-Protocol` entry `bearer.<token>` (offered together
// with `episode-relay`, which the server answers) or as `?token=<token>`.
// Precedence: header, then protocol entry, then query parameter.

/** The WebSocket subprotocol the relay speaks; a client offering a `bearer.` entry must offer it too. */
export const WS_PROTOCOL = "episode-relay";
/** Prefix of the `Sec-WebSocket-Protocol` entry that carries a token. */
export const WS_TOKEN_PREFIX = "bearer.";
/** Query parameter that carries a token on WebSocket upgrades. */
export const TOKEN_PARAM = "token";

/** Entries of the request's `Sec-WebSocket-Protocol` header. */
export function offeredProtocols(request: Request): string[] {
  const h = request.headers.get("sec-websocket-protocol");
  return h
    ? h
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "")
    : [];
}

/** Why an upgrade offering a `bearer.` entry without the relay's subprotocol is refused (400 bad_protocol). */
export const BAD_PROTOCOL = `offer "${WS_PROTOCOL}" together with "${WS_TOKEN_PREFIX}<token>" in Sec-WebSocket-Protocol; the relay answers "${WS_PROTOCOL}"`;

/** What `findToken` found: a token, or why there is none to use. */
export type Found = { token: string } | { missing: string } | { malformed: string } | { badRequest: string };

/** The token a request carries, and from where (upgrades may use the protocol entry or ?token=). */
export function findToken(request: Request, url: URL, upgrade: boolean): Found {
  const header = request.headers.get("authorization");
  if (header !== null) {
    const m = /^Bearer[ ]+([^\s,]+)\s*$/i.exec(header);
    if (!m) return { malformed: 'Authorization header must be "Bearer <token>"' };
    return { token: m[1]! };
  }
  const protocols = offeredProtocols(request);
  const entries = protocols.filter((p) => p.startsWith(WS_TOKEN_PREFIX));
  if (entries.length > 0) {
    if (!upgrade)
      return { malformed: "a bearer.<token> Sec-WebSocket-Protocol entry is accepted only on WebSocket upgrades" };
    if (!protocols.includes(WS_PROTOCOL)) return { badRequest: BAD_PROTOCOL };
    if (entries.length > 1) return { malformed: "more than one bearer.<token> Sec-WebSocket-Protocol entry" };
    return { token: entries[0]!.slice(WS_TOKEN_PREFIX.length) };
  }
  const query = url.searchParams.getAll(TOKEN_PARAM);
  if (query.length > 0) {
    if (!upgrade)
      return {
        missing:
          "missing bearer token: ?token= is accepted only on WebSocket upgrades; send Authorization: Bearer <token>",
      };
    if (query.length > 1) return { malformed: "more than one ?token= parameter" };
    return { token: query[0]! };
  }
  return {
    missing: upgrade
      ? "missing bearer token (Authorization: Bearer <token>, Sec-WebSocket-Protocol: episode-relay, bearer.<token>, or ?token=<token>)"
      : "missing bearer token (Authorization: Bearer <token>)",
  };
}

/**
 * The request as forwarded to the Durable Object: without `Authorization`, without `?token=`,
 * and without `bearer.` protocol entries, so no token travels past the Worker.
 */
export function stripCredentials(request: Request, url: URL, extraHeaders: Record<string, string>): Request {
  const headers = new Headers(request.headers);
  headers.delete("authorization");
  const protocols = offeredProtocols(request);
  const kept = protocols.filter((p) => !p.startsWith(WS_TOKEN_PREFIX));
  if (kept.length !== protocols.length) {
    if (kept.length > 0) headers.set("sec-websocket-protocol", kept.join(", "));
    else headers.delete("sec-websocket-protocol");
  }
  for (const [k, v] of Object.entries(extraHeaders)) headers.set(k, v);
  if (!url.searchParams.has(TOKEN_PARAM)) return new Request(request, { headers });
  const clean = new URL(url);
  clean.searchParams.delete(TOKEN_PARAM);
  return new Request(clean.toString(), new Request(request, { headers }));
}

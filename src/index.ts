// The Worker: checks access (src/http/auth.ts), answers CORS (src/http/cors.ts), and routes
// `/v1/episodes/{id}/...` to that episode's Durable Object, and the listing paths
// (`GET /v1/episodes`, `GET /v1/episodes/watch`) to the episode index. It holds no state and logs
// nothing. Everything outside /v1/ is the dashboard, served as static assets (wrangler.toml
// `[assets]`, `run_worker_first = ["/v1/*"]`) without reaching this code.
import { EPISODE_ID_HEADER } from "./episode/episode.js";
import { authMode, authorize, isWebSocketUpgrade, need, offeredProtocols, refusal, stripCredentials, WS_PROTOCOL, type Claims } from "./http/auth.js";
import { tooLarge } from "./http/body.js";
import { corsConfig, isPreflight, listedOrigin, preflightResponse, withCors } from "./http/cors.js";
import { errorResponse } from "./http/errors.js";
import { INDEX_METHODS, METHODS, parseRoute, RESERVED_IDS, type Route } from "./http/route.js";
import { limitsFrom } from "./episode/limits.js";
import { INDEX_NAME } from "./registry/episode-index.js";
import { SCOPE_HEADER } from "./registry/rows.js";

export { Episode } from "./episode/episode.js";
export { EpisodeIndex } from "./registry/episode-index.js";

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const cors = corsConfig(env);
    const route = parseRoute(url.pathname);
    const mode = authMode(env);

    // A preflight carries no credentials: answer it without a token (but not when fail-closed).
    if (isPreflight(request) && (route.kind === "health" || mode.kind !== "closed")) {
      return preflightResponse(request, cors);
    }

    const decision = await authorize(request, url, need(request.method, url.pathname, route), mode, (o) => listedOrigin(cors, o));
    if (!decision.ok) return withCors(refusal(decision), request, cors);
    return withCors(await dispatch(request, url, route, env, decision.claims), request, cors);
  },
} satisfies ExportedHandler<Env>;

/** The routing proper (unchanged by access control). */
async function dispatch(request: Request, url: URL, route: Route, env: Env, claims: Claims | null): Promise<Response> {
  switch (route.kind) {
    case "health":
      return Response.json({ ok: true, service: "episode-relay" });
    case "not_found":
      return Response.json({ error: "not_found", message: `no route for ${url.pathname}` }, { status: 404 });
    case "bad_id":
      if (RESERVED_IDS.has(route.id)) {
        return Response.json(
          { error: "bad_episode_id", message: `"${route.id}" is reserved (/v1/episodes/${route.id} is an index path) and cannot name an episode` },
          { status: 400 },
        );
      }
      return Response.json({ error: "bad_episode_id", message: "episode ids are 1-128 characters of [A-Za-z0-9._:-]" }, { status: 400 });
    case "list":
    case "index_watch": {
      const allowed = INDEX_METHODS[route.kind];
      if (!allowed.includes(request.method)) {
        return Response.json(
          { error: "method_not_allowed", message: `${request.method} is not allowed on this path` },
          { status: 405, headers: { allow: allowed.join(", ") } },
        );
      }
      // The index filters by the viewer's `episodes` patterns; with auth off (loopback dev) all.
      const scope = claims === null ? ["*"] : claims.episodes;
      const stub = env.EPISODE_INDEX.getByName(INDEX_NAME);
      return answerProtocol(request, await stub.fetch(stripCredentials(request, url, { [SCOPE_HEADER]: JSON.stringify(scope) })));
    }
  }
  const allowed = METHODS[route.action];
  if (!allowed.includes(request.method)) {
    return Response.json(
      { error: "method_not_allowed", message: `${request.method} is not allowed on this path` },
      { status: 405, headers: { allow: allowed.join(", ") } },
    );
  }
  const declared = Number(request.headers.get("content-length") ?? 0);
  const max = limitsFrom(env).maxMessage;
  if (declared > max) return errorResponse(tooLarge(declared, max));
  const stub = env.EPISODES.get(env.EPISODES.idFromName(route.id));
  // No token travels past the Worker: Authorization, ?token= and bearer.* protocol entries are removed.
  return answerProtocol(request, await stub.fetch(stripCredentials(request, url, { [EPISODE_ID_HEADER]: route.id })));
}

/** A 101 to a client that offered our subprotocol (browsers send it with bearer.<token>) must name it. */
function answerProtocol(request: Request, res: Response): Response {
  if (res.status === 101 && res.webSocket && isWebSocketUpgrade(request) && offeredProtocols(request).includes(WS_PROTOCOL)) {
    // The client offered our subprotocol (browsers send it with bearer.<token>): it must be answered.
    const headers = new Headers(res.headers);
    if (!headers.has("sec-websocket-protocol")) headers.set("sec-websocket-protocol", WS_PROTOCOL);
    return new Response(null, { status: 101, webSocket: res.webSocket, headers });
  }
  return res;
}

// The Worker: checks access (src/http/auth.ts), answers CORS (src/http/cors.ts), and routes
// `/v1/episodes/{id}/...` to that episode's Durable Object. It holds no state and logs nothing.
import type { Env } from "./env";
import { EPISODE_ID_HEADER } from "./episode/episode";
import { authMode, authorize, isWebSocketUpgrade, need, offeredProtocols, refusal, stripCredentials, WS_PROTOCOL } from "./http/auth";
import { tooLarge } from "./http/body";
import { corsConfig, isPreflight, listedOrigin, preflightResponse, withCors } from "./http/cors";
import { errorResponse } from "./http/errors";
import { METHODS, parseRoute, type Route } from "./http/route";
import { limitsFrom } from "./episode/limits";

export { Episode } from "./episode/episode";

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
    return withCors(await dispatch(request, url, route, env), request, cors);
  },
} satisfies ExportedHandler<Env>;

/** The routing proper (unchanged by access control). */
async function dispatch(request: Request, url: URL, route: Route, env: Env): Promise<Response> {
  switch (route.kind) {
    case "health":
      return Response.json({ ok: true, service: "episode-relay" });
    case "not_found":
      return Response.json({ error: "not_found", message: `no route for ${url.pathname}` }, { status: 404 });
    case "bad_id":
      return Response.json({ error: "bad_episode_id", message: "episode ids are 1-128 characters of [A-Za-z0-9._:-]" }, { status: 400 });
  }
  const allowed = METHODS[route.action];
  if (!allowed.includes(request.method)) {
    return Response.json({ error: "method_not_allowed", message: `${request.method} is not allowed on this path` }, { status: 405, headers: { allow: allowed.join(", ") } });
  }
  const declared = Number(request.headers.get("content-length") ?? 0);
  const max = limitsFrom(env).maxMessage;
  if (declared > max) return errorResponse(tooLarge(declared, max));
  const stub = env.EPISODES.get(env.EPISODES.idFromName(route.id));
  // No token travels past the Worker: Authorization, ?token= and bearer.* protocol entries are removed.
  const res = await stub.fetch(stripCredentials(request, url, { [EPISODE_ID_HEADER]: route.id }));
  if (res.status === 101 && res.webSocket && isWebSocketUpgrade(request) && offeredProtocols(request).includes(WS_PROTOCOL)) {
    // The client offered our subprotocol (browsers send it with bearer.<token>): it must be answered.
    const headers = new Headers(res.headers);
    if (!headers.has("sec-websocket-protocol")) headers.set("sec-websocket-protocol", WS_PROTOCOL);
    return new Response(null, { status: 101, webSocket: res.webSocket, headers });
  }
  return res;
}

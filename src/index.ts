// The Worker: routes `/v1/episodes/{id}/...` to that episode's Durable Object. It holds no state.
import type { Env } from "./env";
import { EPISODE_ID_HEADER } from "./episode/episode";
import { tooLarge } from "./http/body";
import { errorResponse } from "./http/errors";
import { METHODS, parseRoute } from "./http/route";
import { limitsFrom } from "./episode/limits";

export { Episode } from "./episode/episode";

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const route = parseRoute(url.pathname);
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
    const headers = new Headers(request.headers);
    headers.set(EPISODE_ID_HEADER, route.id);
    const stub = env.EPISODES.get(env.EPISODES.idFromName(route.id));
    return stub.fetch(new Request(request, { headers }));
  },
} satisfies ExportedHandler<Env>;

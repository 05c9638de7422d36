import type { Env } from "./env";

export { Episode } from "./episode/episode";

function json(body: unknown, status = 200): Response {
  return Response.json(body, { status });
}

export default {
  async fetch(request: Request, _env: Env, _ctx: ExecutionContext): Promise<Response> {
    const url = new URL(request.url);
    if (request.method === "GET" && url.pathname === "/v1/health") {
      return json({ ok: true, service: "episode-relay" });
    }
    return json({ error: "not_found" }, 404);
  },
} satisfies ExportedHandler<Env>;

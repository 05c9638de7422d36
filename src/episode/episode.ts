import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";

/** One Durable Object per episode (SQLite-backed, see the v1 migration in wrangler.toml). */
export class Episode extends DurableObject<Env> {
  async fetch(_request: Request): Promise<Response> {
    return Response.json({ error: "not_implemented" }, { status: 501 });
  }
}

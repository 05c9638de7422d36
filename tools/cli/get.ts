// `episode-relay get URL/ID [--json] [--token T] [-o FILE]`: the episode as msgpack (or JSON).
import { writeFileSync } from "node:fs";
import { fetchEpisode } from "../../clients/typescript/watch.js";
import type { Target } from "./target.js";

export async function get(t: Target, opts: { json?: boolean; token?: string; output?: string }): Promise<number> {
  const v = await fetchEpisode(t.base, t.id, { token: opts.token, json: opts.json });
  const bytes = v instanceof Uint8Array ? v : new TextEncoder().encode(`${JSON.stringify(v, null, 2)}\n`);
  if (opts.output) writeFileSync(opts.output, bytes);
  else process.stdout.write(bytes);
  return 0;
}

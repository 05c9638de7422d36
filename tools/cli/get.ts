// `episode-relay get URL/ID [--json] [--token T] [-o FILE]`: the episode as msgpack (or JSON).
// `episode-relay get --run R --out DIR URL [--json] [--token T]`: every finished episode of run R
// into DIR, one file each, resuming where the last call stopped (DIR/.cursor).
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fetchRun } from "../../clients/typescript/bulk.js";
import { fetchEpisode } from "../../clients/typescript/watch.js";
import { EPISODE_ID } from "../../src/protocol/index.js";
import { CLI_HINTS } from "./hints.js";
import type { Target } from "./target.js";

export async function get(t: Target, opts: { json?: boolean; token?: string; output?: string }): Promise<number> {
  const v = await fetchEpisode(t.base, t.id, { token: opts.token, json: opts.json, hints: CLI_HINTS });
  const bytes = v instanceof Uint8Array ? v : jsonBytes(v);
  if (opts.output) writeFileSync(opts.output, bytes);
  else process.stdout.write(bytes);
  return 0;
}

/** The JSON view as `get --json` writes it: indented, with a final newline. */
function jsonBytes(v: unknown): Uint8Array {
  return new TextEncoder().encode(`${JSON.stringify(v, null, 2)}\n`);
}

/** The file that holds the cursor of the last episode written into a `get --run` directory. */
export const CURSOR_FILE = ".cursor";

/** Write `bytes` to `path` atomically: a temporary file beside it, then a rename over it. */
function writeAtomic(path: string, bytes: Uint8Array | string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, bytes);
  renameSync(tmp, path);
}

/**
 * Every finished episode of `run` after DIR/.cursor into `DIR/<id>.msgpack` (`.json` with json),
 * each written atomically and followed by the cursor, so an interrupted call loses nothing and the
 * next one continues after the last episode written. Prints how many it wrote.
 */
export async function getRun(
  base: string,
  run: string,
  opts: { out: string; json?: boolean; token?: string },
): Promise<number> {
  mkdirSync(opts.out, { recursive: true });
  const cursorPath = join(opts.out, CURSOR_FILE);
  const cursor = existsSync(cursorPath) ? readFileSync(cursorPath, "utf8").trim() || undefined : undefined;
  let written = 0;
  try {
    for await (const e of fetchRun(base, run, { token: opts.token, cursor, json: opts.json, hints: CLI_HINTS })) {
      // the id names a file: it must be an episode id (no `/`; the extension keeps it from being `.` or `..`)
      if (!EPISODE_ID.test(e.id))
        throw new Error(`the relay sent an element whose id is not an episode id: ${JSON.stringify(e.id)}`);
      writeAtomic(
        join(opts.out, `${e.id}.${opts.json ? "json" : "msgpack"}`),
        opts.json ? jsonBytes(e.episode) : (e.episode as Uint8Array),
      );
      writeAtomic(cursorPath, `${e.cursor}\n`);
      written++;
    }
  } catch (e) {
    console.log(
      `${written} episode(s) of run ${run} written to ${opts.out} before the error; run the command again to resume`,
    );
    throw e;
  }
  console.log(`${written} episode(s) of run ${run} written to ${opts.out}`);
  return 0;
}

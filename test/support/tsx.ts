// A TypeScript tool (tools/*.ts) as a child process, through tsx's loader as `npm run` runs it,
// in one Node process: `node --import tsx FILE ARGS`. The `tsx` command puts a Node process of its
// own in front of that one (measured here: 1.4 CPU-s per `tsx tools/token.ts --help` against 1.0),
// and the suite runs such tools a few dozen times.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

/** tsx's loader (the package's entry: what `node --import tsx` loads), by URL: any cwd finds it. */
const loader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

/** The program and arguments that run `file` with `args` under tsx, for spawn/spawnSync. */
export function tsx(file: string, ...args: string[]): [string, string[]] {
  return [process.execPath, ["--import", loader, file, ...args]];
}

// Golden cases (`../shared/golden/README.md` format): one msgpack container per case.
import { parseCase, type GoldenCase } from "./case-format";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";

export type { GoldenCase };

export function loadCase(path: string): GoldenCase {
  return parseCase(readFileSync(path), basename(path, ".msgpack"));
}

/** Case files named by the paths: files as given, directories expanded to their `*.msgpack`. */
export function casePaths(paths: string[]): string[] {
  const out: string[] = [];
  for (const p of paths) {
    if (statSync(p).isDirectory()) {
      for (const f of readdirSync(p).sort()) if (f.endsWith(".msgpack")) out.push(join(p, f));
    } else out.push(p);
  }
  return out;
}

/** The golden directory beside the project (`../shared/golden`), overridable by GOLDEN_DIR. */
export function goldenDir(): string {
  return process.env.GOLDEN_DIR ?? join(import.meta.dirname ?? new URL(".", import.meta.url).pathname, "..", "..", "..", "shared", "golden");
}

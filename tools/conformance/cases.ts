// Golden cases (format: test/fixtures/golden/README.md): one msgpack container per case.
//
// The public cases live in the repository as test fixtures (test/fixtures/golden), byte for byte
// as the Python reference wrote them. GOLDEN_DIR may name one more directory of cases (held-out
// ones): they are added to the fixtures, never replace them.

import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type GoldenCase, parseCase } from "./case-format.js";

export type { GoldenCase };

/** The fixtures directory of the public golden cases. */
export const FIXTURES_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "test", "fixtures", "golden");

/** The public cases every checkout holds (see test/fixtures/golden/README.md). */
export const PUBLIC_CASES = [
  "ack_lost",
  "chat_basic",
  "discard_retry",
  "empty_trace",
  "failed_sends",
  "gap_detected",
  "large_routing",
  "multi_trace_links",
  "odd_values",
  "routing_repair_u8",
  "routing_repair_widen",
  "tool_calls_pending",
] as const;

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

/**
 * Why the fixtures cannot be used, or null when every public case is there. One message for
 * the whole set, so a broken checkout fails once and says what to do.
 */
export function fixturesProblem(): string | null {
  const missing = PUBLIC_CASES.filter((n) => !existsSync(join(FIXTURES_DIR, `${n}.msgpack`)));
  if (missing.length === 0) return null;
  return (
    `golden fixtures missing from ${FIXTURES_DIR}: ${missing.join(", ")}. They are part of the repository ` +
    "(test/fixtures/golden); restore them with `git checkout -- test/fixtures/golden`."
  );
}

/** The path of a public case in the fixtures. */
export function fixturePath(name: string): string {
  return join(FIXTURES_DIR, `${name}.msgpack`);
}

/** Every case to test: the fixtures, then GOLDEN_DIR's cases whose names the fixtures do not hold. */
export function goldenCasePaths(): string[] {
  const problem = fixturesProblem();
  if (problem) throw new Error(problem);
  const paths = casePaths([FIXTURES_DIR]);
  const extra = process.env.GOLDEN_DIR;
  if (extra) {
    const names = new Set(paths.map((p) => basename(p)));
    for (const p of casePaths([extra])) if (!names.has(basename(p))) paths.push(p);
  }
  return paths;
}

// The node suite's file order (test/support/sequencer.ts): the longest first, by vitest's last
// durations where it has them, else by the committed figures; a file that failed last time first.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { TestSpecification, Vitest } from "vitest/node";
import LongestFirst, { EXPECTED_SECS } from "../support/sequencer.js";

const root = join(import.meta.dirname, "..", "..");

/** The sequencer over `files` (paths from the root) with vitest's cache holding `cached`. */
async function order(
  files: string[],
  cached: Record<string, { duration: number; failed: boolean }> = {},
): Promise<string[]> {
  // what BaseSequencer.sort and LongestFirst read of vitest: the root, the cache, each file's project
  const project = { name: "node", config: { sequence: { groupOrder: 0 }, isolate: false } };
  const ctx = {
    config: { root },
    cache: {
      getFileTestResults: (key: string) => cached[key.replace(/^node:/, "")],
      getFileStats: (key: string) => ({ size: key.length }),
    },
  } as unknown as Vitest;
  const specs = files.map((f) => ({ moduleId: join(root, f), project }) as unknown as TestSpecification);
  const sorted = await new LongestFirst(ctx).sort(specs);
  return sorted.map((s) => s.moduleId.slice(root.length + 1));
}

describe("the node suite's file order", () => {
  it("names only files that exist (a renamed file would lose its place)", () => {
    const missing = Object.keys(EXPECTED_SECS).filter((f) => !existsSync(join(root, f)));
    expect(missing).toEqual([]);
  });

  it("a fresh clone: the committed figures, longest first, files without one after them", async () => {
    expect(
      await order([
        "test/node/errors.test.ts",
        "test/node/relay-conformance.test.ts",
        "test/node/finished-deltas.test.ts",
        "test/node/local-runtime.test.ts",
      ]),
    ).toEqual([
      "test/node/local-runtime.test.ts",
      "test/node/relay-conformance.test.ts",
      "test/node/finished-deltas.test.ts",
      "test/node/errors.test.ts",
    ]);
  });

  it("vitest's last durations win over the figures; a file that failed last time goes first", async () => {
    expect(
      await order(["test/node/local-runtime.test.ts", "test/node/errors.test.ts", "test/node/keys.test.ts"], {
        "test/node/local-runtime.test.ts": { duration: 1_000, failed: false },
        "test/node/errors.test.ts": { duration: 5_000, failed: false },
        "test/node/keys.test.ts": { duration: 10, failed: true },
      }),
    ).toEqual(["test/node/keys.test.ts", "test/node/errors.test.ts", "test/node/local-runtime.test.ts"]);
  });
});

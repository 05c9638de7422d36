// The node suite's file order: the longest first. Its two processes each take the next file when
// they end one, so a long file taken late runs alone at the end while the other process idles.
// vitest orders by its last run's durations (node_modules/.vite), which a fresh clone (CI) does
// not have; it then goes by file size, and a short file can be the slowest (relay-conformance.test.ts,
// 107 lines, 82 s in CI run 32, was taken near the end). So a file vitest has no duration for
// takes the one below (seconds, CI run 32, 2 cores beside two other suites), else 0 (then the
// larger file first). An outdated figure only costs packing, never a test.
import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

export const EXPECTED_SECS: Readonly<Record<string, number>> = {
  "test/node/local-runtime.test.ts": 144.5,
  "test/node/readme.test.ts": 111.1,
  "test/node/relay-conformance.test.ts": 82.5,
  "test/node/cli.test.ts": 70.4,
  "test/node/cli-export.test.ts": 66.6,
  "test/node/tiers.test.ts": 55.4,
  "test/node/package.test.ts": 50.2,
  "test/node/cli-tail.test.ts": 43.8,
  "test/node/bulk.test.ts": 41.4,
  "test/node/deploy.test.ts": 38.7,
  "test/node/watch-transient.test.ts": 37.4,
  "test/node/episodes-client.test.ts": 35.4,
  "test/node/finished-deltas.test.ts": 32.6,
  "test/node/groups-client.test.ts": 29.7,
  "test/node/archive-json.test.ts": 20.0,
};

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    // vitest's own order first (it also orders by size), then a stable sort by expected time
    const sorted = await super.sort(files);
    const root = this.ctx.config.root;
    // a file that failed last time first (as vitest does), then the longest
    const key = (spec: TestSpecification): number => {
      const path = relative(root, spec.moduleId);
      const cached = this.ctx.cache.getFileTestResults(`${spec.project.name}:${path}`);
      if (cached?.failed) return Number.POSITIVE_INFINITY;
      return cached?.duration ?? (EXPECTED_SECS[path] ?? 0) * 1000;
    };
    const keys = new Map(sorted.map((s) => [s, key(s)]));
    return sorted.sort((a, b) => (keys.get(b) ?? 0) - (keys.get(a) ?? 0));
  }
}

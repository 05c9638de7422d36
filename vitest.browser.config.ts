import { defineConfig } from "vitest/config";

// Browser tests: Node-side, they start the relay (Miniflare, with the dashboard's assets), push
// golden cases, and drive Debian's headless Chromium with playwright-core. One file at a time:
// Chromium and workerd share the machine's two cores. Each file starts its own relay; the files
// share one Node process and its loaded modules (isolate: false), which saves a process start and
// the import of playwright-core and the relay's tools per file, and one Chromium (test/browser/
// chromium.ts: each file closes the contexts it opened, not the browser).
export default defineConfig({
  test: {
    name: "browser",
    environment: "node",
    include: ["test/browser/**/*.test.ts"],
    globalSetup: ["test/support/fixtures-setup.ts", "test/browser/global-setup.ts"],
    fileParallelism: false,
    isolate: false,
    testTimeout: 60_000,
    hookTimeout: 240_000,
  },
});

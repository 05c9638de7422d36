import { defineConfig } from "vitest/config";

// Tests that run in Node (they may start the local relay, scripts/relay.mjs, and drive it over the network).
// Files run one after another in one long-lived worker process, taking the next file when it ends one
// (`isolate: false`): a fresh process per file cost each file its own imports (wrangler and Miniflare
// alone take seconds of CPU), about half of a small file's time. So a file leaves nothing behind: it
// stops its relays, restores its spies, globals and environment variables, and names its runs and
// episodes afresh. The things kept across files are the process's two suite relays
// (test/support/relay.ts: useRelay() without vars, and useAuthedRelay() with a secret), each
// started once.
// One process, not two: two cut the suite's wall (770 s against 603 s on a loaded machine), but
// package.test's `npm pack` rebuilds dist/ in place while another file runs the CLI from it (CI: a
// half-written dist/tools/cli module), so they wait for package.test to build into a copy.
export default defineConfig({
  test: {
    name: "node",
    environment: "node",
    include: ["test/node/**/*.test.ts"],
    globalSetup: ["test/support/fixtures-setup.ts"],
    setupFiles: ["test/support/no-keep-alive.ts"],
    isolate: false,
    maxWorkers: 1,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});

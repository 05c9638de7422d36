import { defineConfig } from "vitest/config";

// Tests that run in Node (they may start the local relay, scripts/relay.mjs, and drive it over the network).
// Files run in two long-lived worker processes, each taking the next file when it ends one
// (`isolate: false`): a fresh process per file cost each file its own imports (wrangler and Miniflare
// alone take seconds of CPU), about half of a small file's time. So a file leaves nothing behind: it
// stops its relays, restores its spies, globals and environment variables, and names its runs and
// episodes afresh. The things kept across files are each process's two suite relays
// (test/support/relay.ts: useRelay() without vars, and useAuthedRelay() with a secret), each
// started once per process.
// Two processes, not one (vitest's default on 2 cores): much of this suite waits (on spawned CLIs,
// npm start, relay restarts, timeouts it proves), so a second file runs in those waits. Measured on
// a shared, loaded 2-core machine, same code: 770 s wall / 426 CPU-s in one process, 603 s / 436
// CPU-s in two. `--maxWorkers=1` on the command line runs them one at a time again.
export default defineConfig({
  test: {
    name: "node",
    environment: "node",
    include: ["test/node/**/*.test.ts"],
    globalSetup: ["test/support/fixtures-setup.ts"],
    setupFiles: ["test/support/no-keep-alive.ts"],
    isolate: false,
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});

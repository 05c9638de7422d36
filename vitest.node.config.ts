import { defineConfig } from "vitest/config";

// Tests that run in Node (they may start the local relay, scripts/relay.mjs, and drive it over the network).
// Every file runs in one worker process (`isolate: false`): a fresh process per file cost each file
// its own imports (wrangler and Miniflare alone take seconds of CPU), about half of a small file's
// time. So a file leaves nothing behind: it stops its relays, restores its spies, globals and
// environment variables, and names its runs and episodes afresh. The things kept across files are
// the suite's two relays (test/support/relay.ts: useRelay() without vars, and useAuthedRelay() with
// a secret), each started once.
export default defineConfig({
  test: {
    name: "node",
    environment: "node",
    include: ["test/node/**/*.test.ts"],
    globalSetup: ["test/support/fixtures-setup.ts"],
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});

import { defineConfig } from "vitest/config";
import LongestFirst from "./test/support/sequencer.js";

// Tests that run in Node (they may start the local relay, scripts/relay.mjs, and drive it over the network).
// Files run in two long-lived worker processes, each taking the next file when it ends one
// (`isolate: false`): a fresh process per file cost each file its own imports (wrangler and Miniflare
// alone take seconds of CPU), about half of a small file's time. So a file leaves nothing behind: it
// stops its relays, restores its spies, globals and environment variables, and names its runs and
// episodes afresh. The things kept across files are each process's two suite relays
// (test/support/relay.ts: useRelay() without vars, and useAuthedRelay() with a secret), each
// started once per process.
// Two processes, not one: much of this suite waits (on spawned CLIs, npm start, relay restarts),
// so a second file runs in those waits. So no file writes what another reads: package.test packs
// a copy of the checkout (npm pack's build rewrote dist/ while another file ran the CLI from it),
// and the global setup brings dashboard/dist up to date before any file runs (npm start's prestart,
// and a relay finding no dashboard, would build it in place). `--maxWorkers=1` runs them one at a time.
// The longest files go first (test/support/sequencer.ts), so that neither process runs one alone at the end.
export default defineConfig({
  test: {
    name: "node",
    environment: "node",
    include: ["test/node/**/*.test.ts"],
    globalSetup: ["test/support/fixtures-setup.ts", "test/support/dashboard-setup.ts"],
    setupFiles: ["test/support/no-keep-alive.ts"],
    isolate: false,
    maxWorkers: 2,
    sequence: { sequencer: LongestFirst },
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});

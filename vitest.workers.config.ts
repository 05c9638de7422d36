import { readFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { Response } from "miniflare";
import { defineConfig } from "vitest/config";
import { buildDashboard } from "./scripts/build-dashboard.mjs";
import { goldenCasePaths } from "./tools/conformance/cases.js";

// wrangler.toml's [assets] names dashboard/dist, which must exist for the pool to start
await buildDashboard({ ifMissing: true });

// Golden cases (test/fixtures/golden, plus GOLDEN_DIR's) by name; workerd has no filesystem, so
// tests fetch them through the GOLDEN service binding, which runs here in Node. A checkout
// without its fixtures fails here, once, with a message that says so.
const golden = new Map(goldenCasePaths().map((p) => [basename(p), p]));

// Tests that run inside workerd. `main`, bindings, vars and migrations come from wrangler.toml;
// the limits are lowered so the 413, watcher-cap, slow-watcher and log-trimming paths are
// reached with small cases.
export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: {
        bindings: {
          MAX_MESSAGE_BYTES: String(4 * 1024 * 1024),
          MAX_EPISODE_BYTES: String(10 * 1024 * 1024),
          MAX_WATCHERS: "20",
          WATCHER_LAG_BYTES: String(1024 * 1024),
          WATCHER_WINDOW_BYTES: String(1024 * 1024),
          MAX_CATCHUPS: "2",
          // a small pool: catch-ups wait for acknowledgements and reuse buffers all along
          HUB_POOL_BYTES: String(4 * 1024 * 1024),
          // a hub lets 8 watchers wait for a catch-up slot; the 9th is refused 1013 with a retry hint
          MAX_WAITING: "8",
          // a run index (or the directory) takes 40 sockets, 10 starting a second: storms reach 1013 with small cases
          MAX_RUN_SOCKETS: "40",
          RUN_SOCKET_RATE: "10",
          LOG_KEEP_FRAMES: "6",
          // throttled index updates wait for the Episode's alarm, which tests run on demand
          // (runDurableObjectAlarm): half an hour keeps it from firing by itself mid-test (e.g.
          // while another test aborts every Durable Object)...
          INDEX_FLUSH_MS: String(1800 * 1000),
          // ... 40 minutes while nobody attends the run (no run socket, no read of its rows: attention.ts)
          INDEX_IDLE_FLUSH_MS: String(2400 * 1000),
          // backpressure shows with a few episodes: 2 live in one run already ask for more than the half hour above,
          // 3 for more than the idle interval
          INDEX_WRITES_PER_S: "0.001",
          // finished episodes are archived when a test runs the alarm (runDurableObjectAlarm), not by themselves
          ARCHIVE_AFTER_SECONDS: "3600",
          // one archive step at a time per object class, as every local run (src/objects/archive/gate.ts)
          ARCHIVE_SLOTS: "1",
          // an episode past 5 MiB (R2's least part) goes to R2 in parts: a test's 9 MiB episode takes two
          ARCHIVE_PART_BYTES: String(5 * 1024 * 1024),
          // an episode's merged annotations past 256 KiB are refused (413) with small records
          MAX_ANNOTATION_BYTES: String(256 * 1024),
          // a run's tokenizer.json past 64 KiB is refused (413): the test's real tokenizer is smaller
          MAX_TOKENIZER_BYTES: String(64 * 1024),
          // no RELAY_SECRET here: tests address the Worker as http://relay.test/ (a local test
          // host), where auth is off as under `npm start`; test/workers/auth.test.ts adds a secret
          AUTH_OFF_ON_LOOPBACK: "true",
        },
        serviceBindings: {
          async GOLDEN(request) {
            const name = decodeURIComponent(new URL(request.url).pathname).replace(/^\/+/, "");
            if (name === "") return new Response(JSON.stringify([...golden.keys()].sort()));
            const path = golden.get(name);
            return path ? new Response(await readFile(path)) : new Response(`no golden case ${name}`, { status: 404 });
          },
          // storage written by an earlier release (test/fixtures/storage), for the migration tests
          async STORAGE_FIXTURES(request) {
            const name = decodeURIComponent(new URL(request.url).pathname).replace(/^\/+/, "");
            if (!/^[\w.-]+\/[\w.-]+\.json$/.test(name)) return new Response("bad name", { status: 400 });
            return new Response(await readFile(join(import.meta.dirname, "test", "fixtures", "storage", name)));
          },
        },
      },
    }),
  ],
  test: {
    name: "workers",
    include: ["test/workers/**/*.test.ts"],
    testTimeout: 60_000,
    // one file at a time: several files restart every object (abortAllDurableObjects, as a deploy
    // does), which drops the sockets and requests of whatever another file has in flight
    fileParallelism: false,
    // one runtime (workerd, the Worker's modules) for every file, not a new one per file (~3 CPU-s
    // each); files share its storage, so each names what it writes afresh (freshId)
    isolate: false,
    // and the one object every file shares by name, the archive gate, is emptied before each file
    setupFiles: ["test/workers/fresh-file.ts"],
    // a test that resets every object (abortAllDurableObjects) cuts their work in flight: what an
    // object still awaited rejects with this message, unhandled where nothing awaits it (an alarm
    // being set, an RPC being answered). It comes from the reset the test asked for, not from the
    // code under test; every other unhandled error fails the run
    onUnhandledError: (error) => error.message !== "Application called abortAllDurableObjects().",
  },
});

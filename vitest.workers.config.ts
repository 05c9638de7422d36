import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { Response } from "miniflare";
import { readFile } from "node:fs/promises";
import { join, normalize } from "node:path";
import { defineConfig } from "vitest/config";
import { buildDashboard } from "./scripts/build-dashboard.mjs";

// wrangler.toml's [assets] names dashboard/dist, which must exist for the pool to start
await buildDashboard({ ifMissing: true });

// Golden vectors live beside the project (../shared/golden) and workerd has no filesystem:
// tests fetch them through this service binding, which runs here in Node.
const golden = process.env.GOLDEN_DIR ?? join(import.meta.dirname, "..", "shared", "golden");

// Tests that run inside workerd. `main`, bindings, vars and migrations come from wrangler.toml;
// the limits are lowered so the 413, watcher-cap, slow-watcher and log-compaction paths are
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
          LOG_COMPACT_FRAMES: "6",
          // throttled index updates wait for the Episode's alarm, which tests run on demand
          // (runDurableObjectAlarm): an hour keeps it from firing by itself mid-test (e.g.
          // while another test aborts every Durable Object)
          INDEX_FLUSH_MS: String(3600 * 1000),
          // no RELAY_SECRET here: tests address the Worker as http://relay.test/ (a local test
          // host), where auth is off as under `npm start`; test/workers/auth.test.ts adds a secret
          AUTH_OFF_ON_LOOPBACK: "true",
        },
        serviceBindings: {
          async GOLDEN(request) {
            const name = normalize(decodeURIComponent(new URL(request.url).pathname)).replace(/^\/+/, "");
            if (name === "" || name === "." ) {
              const { readdir } = await import("node:fs/promises");
              return new Response(JSON.stringify((await readdir(golden)).filter((f) => f.endsWith(".msgpack")).sort()));
            }
            if (name.includes("..")) return new Response("bad name", { status: 400 });
            try {
              return new Response(await readFile(join(golden, name)));
            } catch {
              return new Response("not found", { status: 404 });
            }
          },
        },
      },
    }),
  ],
  test: {
    name: "workers",
    include: ["test/workers/**/*.test.ts"],
    testTimeout: 60_000,
  },
});

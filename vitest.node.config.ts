import { defineConfig } from "vitest/config";

// Tests that run in Node (they may start Miniflare or `wrangler dev` and drive it over the network).
export default defineConfig({
  test: {
    name: "node",
    environment: "node",
    include: ["test/node/**/*.test.ts"],
    globalSetup: ["test/support/fixtures-setup.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});

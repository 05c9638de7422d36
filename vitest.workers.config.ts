import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

// Tests that run inside workerd. `main`, bindings, vars and migrations come from wrangler.toml.
export default defineConfig({
  plugins: [cloudflareTest({ wrangler: { configPath: "./wrangler.toml" } })],
  test: {
    name: "workers",
    include: ["test/workers/**/*.test.ts"],
  },
});

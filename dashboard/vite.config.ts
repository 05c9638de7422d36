import { defineConfig } from "vite";

// The dashboard: plain TypeScript + DOM, built into dashboard/dist, which the Worker serves as
// static assets (wrangler.toml [assets]). It imports the TypeScript watcher client
// (clients/typescript/watch.ts) and, through it, the project's own assembly code.
export default defineConfig({
  root: import.meta.dirname,
  base: "/",
  logLevel: "warn",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    // no source maps: nothing deployed but the code that runs
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
});

// How `Env` (src/worker-env.d.ts) is generated from wrangler.toml: `npm run types` writes it,
// `npm test` checks it is current. Runtime types come from @cloudflare/workers-types (pinned), so
// only the bindings and vars are generated.
export const WRANGLER_TYPES_ARGS = ["src/worker-env.d.ts", "--include-runtime=false", "--strict-vars=false"];

// `npm run types`: regenerate it.
if (process.argv[1] && import.meta.url === (await import("node:url")).pathToFileURL(process.argv[1]).href) {
  const { spawnSync } = await import("node:child_process");
  const r = spawnSync("wrangler", ["types", ...WRANGLER_TYPES_ARGS], {
    stdio: "inherit",
    shell: process.platform === "win32",
  });
  process.exit(r.status ?? 1);
}

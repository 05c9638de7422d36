#!/usr/bin/env node
// `npm start`: local `wrangler dev` on 127.0.0.1:${PORT:-8787}, Durable Object state in .wrangler/state.
// Extra arguments are passed on to wrangler. SIGINT/SIGTERM are forwarded to wrangler, which stops workerd.
import { spawn } from "node:child_process";
import { constants } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const wrangler = join(root, "node_modules", ".bin", process.platform === "win32" ? "wrangler.cmd" : "wrangler");
const port = process.env.PORT || "8787";
const args = ["dev", "--ip", "127.0.0.1", "--port", port, "--persist-to", ".wrangler/state", ...process.argv.slice(2)];

const child = spawn(wrangler, args, {
  cwd: root,
  stdio: "inherit",
  env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
});

/** @type {NodeJS.Timeout | undefined} */
let forceKill;
for (const signal of /** @type {const} */ (["SIGINT", "SIGTERM"])) {
  process.on(signal, () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    // Give wrangler time to shut workerd down; then make sure it goes.
    forceKill ??= setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
  });
}

child.on("error", (err) => {
  console.error(`[dev] could not start ${wrangler}: ${err.message} (run npm install)`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (forceKill) clearTimeout(forceKill);
  process.exit(code ?? (signal ? 128 + constants.signals[signal] : 1));
});

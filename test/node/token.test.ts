// `npm run token` says what the relay does: its --help names what each role may do, and tokens it
// prints are taken by a relay with the same secret exactly so (any role lists what its patterns
// cover; only admin reads the usage routes).
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { useAuthedRelay } from "../support/relay.js";
import { tsx } from "../support/tsx.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const relay = useAuthedRelay();
const secret = relay.secret;

/**
 * tools/token.ts with these arguments (the secret from the environment, as `npm run token` would
 * find it). Run without blocking: a spawnSync of seconds left the fetch after it a kept-alive
 * socket the relay had closed meanwhile, unread ("other side closed", seen under load).
 */
function token(...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const p = spawn(...tsx(join(root, "tools", "token.ts"), ...args), {
    cwd: root,
    env: { ...process.env, RELAY_SECRET: secret },
  });
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (d) => (stdout += d));
  p.stderr.on("data", (d) => (stderr += d));
  return new Promise((resolve) => p.on("close", (status) => resolve({ status, stdout, stderr })));
}

it("--help says any role lists what its patterns cover, and admin alone reads usage; the relay agrees", async () => {
  const help = await token("--help");
  expect(help.status).toBe(0);
  expect(help.stdout).not.toMatch(/admin \([^)]*listing/);
  expect(help.stdout).toMatch(/any role lists/);
  expect(help.stdout).toMatch(/admin \(everything, incl\. the usage routes\)/);
  const get = (path: string, t: string) => fetch(`${relay.url}${path}`, { headers: { authorization: `Bearer ${t}` } });
  for (const role of ["watcher", "producer", "admin"]) {
    const t = await token("--role", role, "--episode", "*");
    expect(t.status, t.stderr).toBe(0);
    const bearer = t.stdout.trim();
    expect((await get("/v1/episodes", bearer)).status, `${role} lists episodes`).toBe(200);
    expect((await get("/v1/runs", bearer)).status, `${role} lists runs`).toBe(200);
    expect((await get("/v1/runs/r/usage", bearer)).status, `${role} reads usage`).toBe(role === "admin" ? 200 : 403);
  }
}, 90_000); // a CLI process per role, each a few seconds under a loaded CI

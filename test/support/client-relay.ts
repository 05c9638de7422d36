// What the TypeScript client's and the CLI's tests against a relay share: a relay with auth on
// (started for the file, an admin token minted before its tests), posts to it as that admin, the
// wait for a run's index to show its counts, and the CLI run as a child process.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { beforeAll, expect } from "vitest";
import { mintToken } from "../../src/protocol/http/auth.js";
import { useRelay } from "./relay.js";

const root = join(import.meta.dirname, "..", "..");

/** A relay with RELAY_SECRET `secret` for this file; `admin` is an admin token once the tests run. */
export function useAuthedRelay(secret: string) {
  const relay = useRelay({ RELAY_SECRET: secret });
  let admin = "";
  beforeAll(async () => {
    admin = await mintToken(secret, { role: "admin", episodes: ["*"], ttl: 3600 });
  });
  return {
    get url() {
      return relay.url;
    },
    get admin() {
      return admin;
    },
    /** POST `body` to `path` as the admin; a 200 expected. */
    async post(path: string, body: Uint8Array): Promise<void> {
      const res = await fetch(`${relay.url}${path}`, {
        method: "POST",
        body,
        headers: { authorization: `Bearer ${admin}` },
      });
      expect(res.status, await res.text()).toBe(200);
    },
    /** Wait until the run's index shows these counts (the episodes update it in the background). */
    async indexed(run: string, counts: Record<string, number>): Promise<void> {
      const end = Date.now() + 20_000;
      let last = "";
      for (;;) {
        last = await (
          await fetch(`${relay.url}/v1/runs/${encodeURIComponent(run)}`, {
            headers: { authorization: `Bearer ${admin}` },
          })
        ).text();
        const got = (JSON.parse(last) as { aggregates?: { counts?: Record<string, number> } }).aggregates?.counts ?? {};
        if (Object.entries(counts).every(([k, v]) => got[k] === v)) return;
        if (Date.now() > end)
          throw new Error(`run ${run} not indexed with ${JSON.stringify(counts)}: ${last.slice(0, 300)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

/** Every item of a paged listing. */
export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const e of it) out.push(e);
  return out;
}

/** What `p` rejects with, or null when it resolves. */
export const failure = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

/** The built CLI (dist/tools/cli/main.js) with these arguments, RELAY_TOKEN set to `token` (empty: none). */
export function runCli(args: string[], token = "") {
  const p = spawn(process.execPath, [join(root, "dist", "tools", "cli", "main.js"), ...args], {
    cwd: root,
    env: { ...process.env, RELAY_TOKEN: token },
  });
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (d) => (stdout += d));
  p.stderr.on("data", (d) => (stderr += d));
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    p.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr })),
  );
}

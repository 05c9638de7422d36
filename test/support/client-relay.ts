// What the TypeScript client's and the CLI's tests against a relay share: the suite's relay with
// auth on (test/support/relay.ts: useAuthedRelay, an admin token minted before the file's tests),
// posts to it as that admin, the wait for a run's index to show its counts, and the CLI run as a
// child process.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { beforeAll, expect } from "vitest";
import { mintToken } from "../../src/protocol/http/auth.js";
import { useAuthedRelay } from "./relay.js";

const root = join(import.meta.dirname, "..", "..");

/**
 * The suite's relay with auth on (shared with other files: a file names its runs as no other file
 * does); `admin` is an admin token once the tests run, `secret` what tokens are signed with.
 */
export function useAdminRelay() {
  const relay = useAuthedRelay();
  let admin = "";
  beforeAll(async () => {
    admin = await mintToken(relay.secret, { role: "admin", episodes: ["*"], ttl: 3600 });
  });
  return {
    get url() {
      return relay.url;
    },
    secret: relay.secret,
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

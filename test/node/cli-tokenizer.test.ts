// `episode-relay tokenizer --run R FILE URL`: the CLI keeps a run's tokenizer.json on a relay with
// auth on (a real one, started here); the relay then serves the file's exact bytes, the same
// bytes again change nothing, and a watcher's token is refused with the relay's reason (exit 1).
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { mintToken } from "../../src/protocol/http/auth.js";
import { useAuthedRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useAuthedRelay();
const SECRET = relay.secret;
const FIXTURE = join(root, "test", "fixtures", "tokenizer", "tokenizer.json");

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [join(root, "dist", "tools", "cli", "main.js"), ...args], { cwd: root });
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (d) => (stdout += d));
  p.stderr.on("data", (d) => (stderr += d));
  return new Promise((resolve) => p.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr })));
}

describe("episode-relay tokenizer", () => {
  it("uploads FILE (or its folder) for the run; again: unchanged; a watcher's token: 403, exit 1", async () => {
    const run = `cli-tk-${Date.now().toString(36)}`;
    const producer = await mintToken(SECRET, { role: "producer", episodes: [`${run}:*`], ttl: 3600 });
    const watcher = await mintToken(SECRET, { role: "watcher", episodes: [`${run}:*`], ttl: 3600 });
    const first = await cli("tokenizer", "--run", run, FIXTURE, relay.url, "--token", producer);
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(
      new RegExp(`^run ${run}: tokenizer .*tokenizer\\.json \\(4659 bytes, sha256 [0-9a-f]{12}\\) kept\\n$`),
    );
    const got = await fetch(`${relay.url}/v1/runs/${run}/tokenizer`, {
      headers: { authorization: `Bearer ${watcher}` },
    });
    expect(got.status).toBe(200);
    expect(Buffer.from(await got.arrayBuffer()).equals(readFileSync(FIXTURE))).toBe(true);
    const again = await cli(
      "tokenizer",
      "--run",
      run,
      join(root, "test", "fixtures", "tokenizer"),
      relay.url,
      "--token",
      producer,
    );
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/already kept, unchanged\n$/);
    const refused = await cli("tokenizer", "--run", run, FIXTURE, relay.url, "--token", watcher);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /episode-relay tokenizer: 403 forbidden: a run's tokenizer is set by an admin or the run's producer/,
    );
    const missing = await cli("tokenizer", "--run", run, join(root, "no-such.json"), relay.url, "--token", producer);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no-such\.json: no such file/);
    const noRun = await cli("tokenizer", FIXTURE, relay.url, "--token", producer);
    expect(noRun.code).toBe(2);
    expect(noRun.stderr).toMatch(/--run R is required/);
  }, 120_000);
});

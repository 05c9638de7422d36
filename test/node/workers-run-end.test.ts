// The workerd-side suite ends even when an object printed something and was reset right after
// (test/workers/object-console.test.ts): vitest-pool-workers, as patched in patches/, sends an
// object's console output and unhandled errors to vitest as events, waiting for the runner's own
// context if need be. Unpatched, the call went from the object and was lost with it, and vitest
// waited for its answer at the end of the run: the suite never ended (issue 43; about one full
// run in three, after schema.test.ts's crash tests). Here the file runs alone, in its own vitest.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");

/** A vitest run of the workers config on `file`: its exit code (null: it had not ended by the deadline and was killed) and its output. */
function runWorkersFile(file: string, deadlineMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      join(root, "node_modules", ".bin", "vitest"),
      ["run", "--config", "vitest.workers.config.ts", "--reporter=default", file],
      { cwd: root, stdio: ["ignore", "pipe", "pipe"], detached: true, env: { ...process.env, NO_COLOR: "1" } },
    );
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    let ended = false;
    // a hang is what this test looks for: past the deadline the run (and its workerd) is stopped
    const kill = setTimeout(() => {
      if (!ended && child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    }, deadlineMs);
    child.on("close", (code, signal) => {
      ended = true;
      clearTimeout(kill);
      resolve({ code: signal === "SIGKILL" ? null : code, out });
    });
  });
}

describe("the workerd-side suite's end", () => {
  it("comes after an object printed and was reset at once; what it printed is shown, with its test", async () => {
    const { code, out } = await runWorkersFile("test/workers/object-console.test.ts", 120_000);
    expect(code, out).toBe(0);
    expect(out).toContain("1 passed");
    // both lines, under the test that made them print (vitest's "stdout | file > test" header)
    const printed = out.slice(out.indexOf("stdout | test/workers/object-console.test.ts"));
    expect(printed).toContain("object-console: printed by an object reset right after");
    expect(printed).toContain("object-console: printed by an object that lives on");
  }, 150_000);
});

// `npm run conformance` (tools/conformance.ts) as a process: output lines and exit status.

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { decode, encode } from "@msgpack/msgpack";
import { afterAll, describe, expect, it } from "vitest";
import { parseArgs, UsageError } from "../../tools/conformance/args.js";
import { goldenCasePaths } from "../../tools/conformance/cases.js";
import { tsx } from "../support/tsx.js";

const root = join(import.meta.dirname, "..", "..");
const cli = join(root, "tools", "conformance.ts");

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function conformance(...args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(...tsx(cli, ...args), { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s));
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const lines = (s: string) => s.split("\n").filter((l) => l !== "");

const temp = mkdtempSync(join(tmpdir(), "conformance-cli-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe("conformance CLI", () => {
  const files = goldenCasePaths();

  it("passes every golden case, one `ok NAME` line each, and exits 0", async () => {
    expect(files.length).toBeGreaterThanOrEqual(12);
    const r = await conformance(...files);
    expect(r.stderr).toBe("");
    const out = lines(r.stdout);
    const names = files.map((f) => basename(f, ".msgpack"));
    expect(out).toEqual([...names.map((n) => `ok ${n}`), `${files.length} passed, 0 failed`]);
    expect(r.code).toBe(0);
  });

  it("reports a case whose expected episode was altered as FAIL and exits 1", async () => {
    const path = files.find((f) => basename(f) === "chat_basic.msgpack")!;
    const original = readFileSync(path);
    // The container holds only str/int/bin/nil, arrays and maps with str keys: a generic codec round-trips it exactly.
    expect(Buffer.compare(Buffer.from(encode(decode(original))), original)).toBe(0);
    const c = decode(original) as { episode: Uint8Array };
    const episode = c.episode.slice();
    episode[episode.length - 2] ^= 0x01; // a byte inside the last value, still valid msgpack
    c.episode = episode;
    const altered = join(temp, "chat_basic.msgpack");
    writeFileSync(altered, encode(c));

    const r = await conformance(temp);
    const out = lines(r.stdout);
    expect(out).toHaveLength(2);
    expect(out[0]).toMatch(/^FAIL chat_basic: episode \$\.traces\[0\].* expected .+ got .+$/);
    expect(out[1]).toBe("0 passed, 1 failed");
    expect(r.code).toBe(1);
  });

  it("counts an unreadable path as a failed case, not a crash", async () => {
    const r = await conformance(join(temp, "missing.msgpack"), files[0]!);
    const out = lines(r.stdout);
    expect(out[0]).toMatch(/^FAIL missing: cannot read .*missing\.msgpack/);
    expect(out[1]).toMatch(/^ok /);
    expect(out[2]).toBe("1 passed, 1 failed");
    expect(r.code).toBe(1);
  });

  it("exits 2 on usage errors", async () => {
    const [none, bad] = await Promise.all([conformance(), conformance("--bogus", files[0]!)]);
    expect(none.code).toBe(2);
    expect(none.stdout).toBe("");
    expect(none.stderr).toMatch(/no PATH given/);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown option --bogus/);
  });
});

describe("conformance CLI options", () => {
  it("parses local and relay mode", () => {
    expect(parseArgs(["a", "b"])).toEqual({ help: false, paths: ["a", "b"], dispatch: "none" });
    expect(parseArgs(["--dispatch", "delta", "a"])).toEqual({ help: false, paths: ["a"], dispatch: "delta" });
    expect(
      parseArgs([
        "--relay=http://h:1/",
        "--ingest",
        "ws",
        "--watchers",
        "3",
        "--token",
        "t",
        "--dispatch",
        "envelope",
        "x",
      ]),
    ).toEqual({
      help: false,
      paths: ["x"],
      dispatch: "envelope",
      relay: { relay: "http://h:1", ingest: "ws", watchers: 3, token: "t", dispatch: "envelope" },
    });
    expect(parseArgs(["--relay", "https://h", "--", "--odd-name"]).relay).toEqual({
      relay: "https://h",
      ingest: "http",
      watchers: 0,
      dispatch: "none",
    });
    expect(parseArgs(["--relay", "https://h", "--", "--odd-name"]).paths).toEqual(["--odd-name"]);
  });

  it("refuses bad command lines", () => {
    for (const argv of [
      [],
      ["--relay", "http://h"],
      ["--ingest", "ws", "x"],
      ["--token", "t", "x"],
      ["--relay", "ftp://h", "x"],
      ["--relay", "not a url", "x"],
      ["--relay", "http://h", "--ingest", "udp", "x"],
      ["--relay", "http://h", "--watchers", "-1", "x"],
      ["--relay", "http://h", "--watchers", "1.5", "x"],
      ["--relay", "http://h", "--relay", "http://i", "x"],
      ["--dispatch", "both", "x"],
      ["--relay"],
      ["--nope", "x"],
    ]) {
      expect(() => parseArgs(argv), argv.join(" ")).toThrow(UsageError);
    }
  });
});

// The conformance command in relay mode against a real relay the test starts (the wrangler
// bundle in Miniflare, real HTTP and WebSockets): every golden case through HTTP and through the
// producer socket, each with three watchers (from the start, joining midway, dropping and
// resuming), all ending with the golden bytes. Then the same with the relay in two tiers (the hub
// tier in its own process, as under npm run start:tiers) and one hub per watcher: six watchers spread over
// hubs. The 27 MB large_routing case goes once through each path it proves something about (each
// ingest; the hub tier): the runs that vary what rides along (dispatch) or the ingest before the
// hub tier again take every other case, which holds the same shapes at a fraction of the bytes.
import { spawn } from "node:child_process";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { fixturePath, goldenCasePaths } from "../../tools/conformance/cases.js";
import { useRelay } from "../support/relay.js";
import { tsx } from "../support/tsx.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();
/** Every golden case but the 27 MB one (for the runs where its size proves nothing new). */
function smallCases(): string[] {
  const all = goldenCasePaths();
  const small = all.filter((p) => basename(p) !== "large_routing.msgpack");
  expect(small.length, "large_routing is one of the cases, left out here").toBe(all.length - 1);
  return small;
}

function conformance(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(...tsx(join(root, "tools", "conformance.ts"), ...args), {
      cwd: root,
    });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d) => (stdout += d));
    p.stderr.on("data", (d) => (stderr += d));
    p.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

describe("conformance through a live relay", () => {
  const cases = goldenCasePaths();
  for (const ingest of ["http", "ws"]) {
    it(`--ingest ${ingest} --watchers 3: every golden case passes`, async () => {
      const r = await conformance("--relay", relay.url, "--ingest", ingest, "--watchers", "3", ...cases);
      expect(r.stderr).toBe("");
      const lines = r.stdout.trim().split("\n");
      expect(lines.filter((l) => l.startsWith("ok ")).length).toBe(cases.length);
      expect(lines.at(-1)).toBe(`${cases.length} passed, 0 failed`);
      expect(r.code).toBe(0);
    }, 180_000);
  }

  for (const [ingest, via] of [
    ["ws", "delta"],
    ["http", "envelope"],
  ]) {
    it(`--ingest ${ingest} --watchers 3 --dispatch ${via}: a trainer's identity changes no byte, and arrives`, async () => {
      const cases = smallCases();
      const r = await conformance(
        "--relay",
        relay.url,
        "--ingest",
        ingest!,
        "--watchers",
        "3",
        "--dispatch",
        via!,
        ...cases,
      );
      expect(r.stderr).toBe("");
      expect(r.stdout.trim().split("\n").at(-1)).toBe(`${cases.length} passed, 0 failed`);
      expect(r.code).toBe(0);
    }, 180_000);
  }

  it("a case whose golden episode was altered fails in relay mode too", async () => {
    const { mkdtempSync, readFileSync, writeFileSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { decode, encode } = await import("@msgpack/msgpack");
    const c = decode(readFileSync(fixturePath("chat_basic"))) as { episode: Uint8Array };
    c.episode = c.episode.slice();
    c.episode[c.episode.length - 1] ^= 1;
    const dir = mkdtempSync(join(tmpdir(), "relay-conf-"));
    writeFileSync(join(dir, "chat_basic.msgpack"), encode(c));
    const r = await conformance("--relay", relay.url, dir);
    expect(r.stdout).toMatch(/^FAIL chat_basic: episode \$/m);
    expect(r.code).toBe(1);
  }, 60_000);
});

describe("conformance through the relay in two tiers, watchers spread over hubs", () => {
  let tiered: LocalRelay;
  beforeAll(async () => {
    tiered = await startRelay({ vars: { WATCHERS_PER_HUB: "1", MAX_HUBS: "6" }, tiers: true });
  }, 120_000);
  afterAll(() => tiered?.stop());
  for (const ingest of ["http", "ws"]) {
    // the hub tier proves itself with the big case once (its ingest path is proven above)
    it(`--ingest ${ingest} --watchers 6: every golden case passes${ingest === "http" ? "" : " (large_routing: through http)"}`, async () => {
      const cases = ingest === "http" ? goldenCasePaths() : smallCases();
      const r = await conformance("--relay", tiered.url, "--ingest", ingest, "--watchers", "6", ...cases);
      expect(r.stderr).toBe("");
      expect(r.stdout.trim().split("\n").at(-1)).toBe(`${cases.length} passed, 0 failed`);
      expect(r.code).toBe(0);
    }, 180_000);
  }
});

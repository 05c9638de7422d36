// The npm package as a user gets it: `npm pack`, installed into an empty folder with nothing
// else, then its CLI (`npx episode-relay get`) and a short Node script using the client
// (`episode-relay/client`) against a relay the test starts.
// It packs a copy of the checkout, not the checkout: `npm pack` runs the build (the `prepare`
// script), which rewrites dist/ in place, and other test files run the CLI from the checkout's
// dist/ meanwhile (the node suite runs two files at a time): one once read a half-written module.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { useRelay } from "../support/relay.js";
import { typeCheckAsConsumer } from "../support/typecheck.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();
const work = mkdtempSync(join(tmpdir(), "episode-relay-pack-"));
const app = join(work, "app");
/** The copy that is packed (see the top of this file); its dist/ is its own. */
const tree = join(work, "tree");
afterAll(() => rmSync(work, { recursive: true, force: true }));

const npm = (args: string[], cwd: string) =>
  execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
/**
 * What `npm pack` would pack now. Its `prepare` script (the build) already ran for the pack above,
 * and a dry run runs it again unless told not to: seconds of tsc each time, for the same dist/.
 */
const packList = () => npm(["pack", "--dry-run", "--json", "--ignore-scripts"], tree);

/**
 * The checkout's files as git sees them (tracked, and new ones not ignored: so no dist/, no
 * node_modules, no local state) copied into `tree`, and node_modules linked (the build's tsc).
 */
function copyCheckout(): void {
  const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
    cwd: root,
    encoding: "utf8",
  })
    .split("\0")
    .filter((f) => f !== "");
  for (const f of files) {
    // a file deleted but not yet staged is still listed: it is not packed either
    if (!existsSync(join(root, f))) continue;
    mkdirSync(dirname(join(tree, f)), { recursive: true });
    cpSync(join(root, f), join(tree, f));
  }
  symlinkSync(join(root, "node_modules"), join(tree, "node_modules"));
}

beforeAll(() => {
  copyCheckout();
  npm(["pack", "--pack-destination", work, "--silent"], tree);
  const tarball = readdirSync(work).find((f) => f.endsWith(".tgz"))!;
  execFileSync("mkdir", [app]);
  npm(["init", "-y"], app);
  // the dependencies come from the registry (or npm's cache): nothing from this checkout but the tarball
  npm(["install", "--no-audit", "--no-fund", "--prefer-offline", join(work, tarball)], app);
}, 180_000);

describe("the packed package, installed into an empty folder", () => {
  it("ships built JavaScript with declarations, no TypeScript sources and no test data", () => {
    const list = packList();
    const files = (JSON.parse(list) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path);
    expect(files).toContain("dist/clients/typescript/watch.js");
    expect(files).toContain("dist/clients/typescript/watch.d.ts");
    expect(files).toContain("dist/clients/typescript/bulk.js");
    expect(files).toContain("dist/tools/cli/main.js");
    expect(files.filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))).toEqual([]);
    expect(files.some((f) => f.includes("fixtures"))).toBe(false);
  });

  it("the tarball `npm pack` leaves in the project is git-ignored", () => {
    const name = (JSON.parse(packList()) as Array<{ filename: string }>)[0]!.filename;
    expect(name).toMatch(/\.tgz$/);
    const check = spawnSync("git", ["check-ignore", "--no-index", "-q", name], { cwd: root });
    expect(check.status, `${name} is not ignored by .gitignore`).toBe(0);
  });

  it("its declarations type-check in a consumer with Node's ESM resolution (nodenext)", () => {
    writeFileSync(
      join(app, "check.mts"),
      [
        'import { watchEpisode, fetchRun, RelayRefusal, type RunEpisode, type WatchEvent, type WatchState } from "episode-relay/client";',
        'const w = watchEpisode("http://127.0.0.1:8787", "run-42:episode-7");',
        "const state: WatchState = w.state;",
        'w.on((e: WatchEvent) => { if (e.type === "refused") console.log(e.error instanceof RelayRefusal, e.error.status); });',
        "console.log(state);",
        'for await (const e of fetchRun("http://127.0.0.1:8787", "run-42", { cursor: undefined })) { const bytes: Uint8Array = e.episode; console.log(e.id, e.cursor, bytes.length); }',
        'const views: AsyncIterable<RunEpisode<unknown>> = fetchRun("http://127.0.0.1:8787", "run-42", { json: true });',
        "console.log(views);",
      ].join("\n"),
    );
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    const r = typeCheckAsConsumer(tsc, app, ["check.mts"], ["--lib", "es2022,dom", "--skipLibCheck", "false"]);
    expect(r.status, r.output).toBe(0);
  });

  it("npx episode-relay get and a script using episode-relay/client both get the golden episode", async () => {
    const c = loadCase(fixturePath("multi_trace_links"));
    const id = `pack-${Date.now().toString(36)}`;
    const producer = new ProducerCursor("pack");
    for (const f of c.frames) {
      const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: encodeEnvelope(producer.envelope(f)),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      producer.acknowledge();
    }
    await (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();

    const out = join(app, "episode.msgpack");
    const get = spawnSync("npx", ["--no-install", "episode-relay", "get", `${relay.url}/${id}`, "-o", out], {
      cwd: app,
      encoding: "utf8",
    });
    expect(get.status, get.stderr).toBe(0);
    expect(Buffer.compare((await import("node:fs")).readFileSync(out), Buffer.from(c.episode!))).toBe(0);

    writeFileSync(
      join(app, "watch.mjs"),
      [
        'import WebSocket from "ws";',
        'import { watchEpisode, fetchEpisode } from "episode-relay/client";',
        "const [url, id] = process.argv.slice(2);",
        "const watch = watchEpisode(url, id, { WebSocket });",
        "const done = await watch.finished();",
        "const fetched = await fetchEpisode(url, id);",
        "const same = Buffer.compare(Buffer.from(done.episode), Buffer.from(fetched)) === 0;",
        "console.log(done.state, done.episode.length, same);",
      ].join("\n"),
    );
    const script = spawnSync(process.execPath, ["watch.mjs", relay.url, id], { cwd: app, encoding: "utf8" });
    expect(script.status, script.stderr).toBe(0);
    expect(script.stdout.trim()).toBe(`finished ${c.episode!.length} true`);

    // `token` without a secret says what to do where it runs: the package has no .dev.vars.example
    const env = { ...process.env };
    delete env.RELAY_SECRET;
    const token = spawnSync("npx", ["--no-install", "episode-relay", "token", "--role", "watcher", "--episode", "*"], {
      cwd: app,
      encoding: "utf8",
      env,
    });
    expect(token.status).toBe(1);
    expect(token.stderr).toMatch(/RELAY_SECRET is not set.*RELAY_SECRET=\.\.\. npx episode-relay token/);
    expect(token.stderr).not.toMatch(/dev\.vars\.example/);
  }, 60_000);
});

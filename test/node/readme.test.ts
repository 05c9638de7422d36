// The docs' snippets run as written (each marked `<!-- doc-snippet: NAME -->` on its page):
// docs/typescript.md's watcher snippet is extracted and run (with tsx, resolving
// "episode-relay/client" through the package's exports) against a relay the test starts, while a
// golden case is pushed into the episode it names, and its bulk fetch snippet lists a run; both
// TypeScript snippets type-check (strict, Node's ESM resolution, @types/ws); docs/protocol.md's
// delta-by-hand and compare shell snippets run against the relay; docs/access-control.md's local
// auth flow runs in a copy of the project; the health answer is docs/http-api.md's.
import { spawn, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { useRelay } from "../support/relay.js";
import { typeCheckAsConsumer } from "../support/typecheck.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();

/** A snippet of a docs page (`docs/PAGE`), as written: the fenced block after its marker. */
function docSnippet(page: string, name: string, lang: "ts" | "sh"): string {
  const text = readFileSync(join(root, "docs", page), "utf8");
  const m = new RegExp(`<!-- doc-snippet: ${name} -->\\s*\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``).exec(text);
  if (!m) throw new Error(`docs/${page} has no ${lang} snippet ${name}`);
  return m[1]!;
}

/** docs/typescript.md's TypeScript snippets. */
const snippet = (name: string) => docSnippet("typescript.md", name, "ts");

it("docs/typescript.md's watcher snippet runs as written and ends with the episode", async () => {
  const code = snippet("watch");
  expect(code).toContain('from "episode-relay/client"');
  // only the relay address differs from the page: it points at the relay this test started
  const dir = join(root, "test-results", "readme");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "watch-snippet.mts");
  writeFileSync(file, code.replaceAll("http://127.0.0.1:8787", relay.url));
  const p = spawn(join(root, "node_modules", ".bin", "tsx"), [file], { cwd: root });
  let out = "";
  let err = "";
  p.stdout.on("data", (d) => (out += d));
  p.stderr.on("data", (d) => (err += d));
  const exited = new Promise<number>((r) => p.on("close", (c) => r(c ?? 1)));
  const c = loadCase(fixturePath("chat_basic"));
  const producer = new ProducerCursor("readme");
  const send = async (f: Uint8Array) => {
    await (
      await fetch(`${relay.url}/v1/episodes/run-42:episode-7/deltas`, {
        method: "POST",
        body: encodeEnvelope(producer.envelope(f)),
      })
    ).arrayBuffer();
    producer.acknowledge();
  };
  // the first frame, then the rest once the snippet watches (tsx may take seconds to start): it sees them as deltas
  await send(c.frames[0]!);
  const ready = Date.now() + 30_000;
  const watchers = async () =>
    ((await (await fetch(`${relay.url}/v1/episodes/run-42:episode-7/status`)).json()) as { watchers?: number })
      .watchers ?? 0;
  while ((await watchers()) < 1) {
    if (Date.now() > ready || p.exitCode !== null) throw new Error(`the snippet did not start watching:\n${out}${err}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  for (const f of c.frames.slice(1)) await send(f);
  await (
    await fetch(`${relay.url}/v1/episodes/run-42:episode-7/reply`, { method: "POST", body: c.reply })
  ).arrayBuffer();
  expect(await exited, err).toBe(0);
  expect(out).toMatch(/seq \d+: trace [0-9a-f]{32}/);
  expect(out.trim().split("\n").at(-1)).toBe(`finished ${c.episode!.length} bytes`);
}, 60_000);

it("docs/typescript.md's bulk fetch snippet runs as written and lists the run's finished episodes", async () => {
  const code = snippet("bulk");
  expect(code).toContain('from "episode-relay/client"');
  const c = loadCase(fixturePath("multi_trace_links"));
  const id = "run-42:episode-bulk";
  const producer = new ProducerCursor("readme-bulk");
  for (const f of c.frames) {
    await (
      await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: encodeEnvelope(producer.envelope(f)),
      })
    ).arrayBuffer();
    producer.acknowledge();
  }
  expect((await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).status).toBe(200);
  // the run's index takes the finished row in the background
  const end = Date.now() + 20_000;
  while (!(await (await fetch(`${relay.url}/v1/runs/run-42/episodes?status=finished`)).text()).includes(id)) {
    if (Date.now() > end) throw new Error(`${id} never showed as finished in run-42's index`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const dir = join(root, "test-results", "readme");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "bulk-snippet.mts");
  writeFileSync(file, code.replaceAll("http://127.0.0.1:8787", relay.url));
  const r = spawnSync(join(root, "node_modules", ".bin", "tsx"), [file], { cwd: root, encoding: "utf8" });
  expect(r.status, r.stderr).toBe(0);
  expect(r.stdout.split("\n")).toContain(`${id} ${c.episode!.length} bytes`);
}, 60_000);

/**
 * What the groups and episodes snippets take from the page's prose around them: a token and the
 * relay's address (the episodes snippet follows the groups one, which defines `url`).
 */
const PRELUDE: Record<string, string> = {
  watch: "",
  bulk: "",
  groups: "declare const token: string | undefined;\n",
  episodes: "declare const token: string | undefined;\ndeclare const url: string;\n",
};

it("docs/typescript.md's TypeScript snippets type-check as written (strict, nodenext, with ws's types)", () => {
  const dir = join(root, "test-results", "readme-types");
  mkdirSync(dir, { recursive: true });
  const files = Object.entries(PRELUDE).map(([name, prelude]) => {
    const file = join(dir, `${name}.mts`);
    writeFileSync(file, prelude + snippet(name));
    return file;
  });
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  const r = typeCheckAsConsumer(tsc, root, files, ["--types", "node", "--skipLibCheck"]);
  expect(r.output).toBe("");
  expect(r.status).toBe(0);
}, 60_000);

it("docs/protocol.md's delta by hand (push and curl) and its comparison with a fixture run as written", () => {
  const dir = mkdtempSync(join(tmpdir(), "episode-relay-hello-"));
  try {
    const run = (name: string) => {
      // the snippets run in the project (npx episode-relay, @msgpack/msgpack, test/fixtures); files land in `dir`
      const code = docSnippet("protocol.md", name, "sh")
        .replaceAll("http://127.0.0.1:8787", relay.url)
        .replaceAll("test/fixtures/", `${join(root, "test", "fixtures")}/`)
        .replaceAll("hello.jsonl", join(dir, "hello.jsonl"))
        .replaceAll("open.msgpack", join(dir, "open.msgpack"))
        .replaceAll("newer.msgpack", join(dir, "newer.msgpack"))
        .replaceAll("got.msgpack", join(dir, "got.msgpack"));
      const r = spawnSync("bash", ["-euo", "pipefail", "-c", code], { cwd: root, encoding: "utf8" });
      expect(r.status, `${name}: ${r.stderr}`).toBe(0);
      return r.stdout;
    };
    const hello = JSON.parse(run("hello")) as {
      id: string;
      traces: Array<{ id: string; nodes: Array<{ message: { content: string } }> }>;
    };
    expect(hello.id).toBe("hello-1");
    expect(hello.traces[0]!.nodes[0]!.message.content).toBe("What is 6*7?");
    const curl = run("hello-curl").trim().split("\n");
    expect(JSON.parse(curl[0]!)).toMatchObject({ ok: true, seq: 1, applied: 1 });
    expect(JSON.parse(curl[1]!)).toMatchObject({ id: "hello-2", status: "live", traces: 1 });
    expect(run("compare").trim()).toBe("identical");
    expect(JSON.parse(run("unknown-keys"))).toEqual({
      ok: true,
      seq: 1,
      applied: 1,
      duplicates: 0,
      producers: {},
      unknown: ["future_list", "set.future_scalar"],
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  // eight processes one after another (npx episode-relay, node -e): under the CI's three lanes each
  // can take several seconds, and one run took over 60 s
}, 180_000);

it("docs/protocol.md's curl delta runs outside the clone, in a directory set up as its setup snippet says", () => {
  const dir = mkdtempSync(join(tmpdir(), "episode-relay-outside-"));
  try {
    // the setup installs the version the relay itself pins
    const setup = docSnippet("protocol.md", "hello-setup", "sh");
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    expect(setup).toContain(`@msgpack/msgpack@${pkg.dependencies["@msgpack/msgpack"]}`);
    // what that install leaves (the tests ask no registry): the package in the directory's node_modules
    mkdirSync(join(dir, "node_modules", "@msgpack"), { recursive: true });
    symlinkSync(join(root, "node_modules", "@msgpack", "msgpack"), join(dir, "node_modules", "@msgpack", "msgpack"));
    const code = docSnippet("protocol.md", "hello-curl", "sh")
      .replaceAll("http://127.0.0.1:8787", relay.url)
      .replaceAll("hello-2", "hello-outside");
    const r = spawnSync("bash", ["-euo", "pipefail", "-c", code], { cwd: dir, encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    const [ack, status] = r.stdout.trim().split("\n");
    expect(JSON.parse(ack!)).toMatchObject({ ok: true, seq: 1, applied: 1 });
    expect(JSON.parse(status!)).toMatchObject({ id: "hello-outside", status: "live", traces: 1 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

it("npm start on a busy port says which port, and how to pick another in the README's terms (PORT=)", async () => {
  const { createServer } = await import("node:net");
  const busy = createServer();
  await new Promise<void>((r) => busy.listen(0, "127.0.0.1", () => r()));
  const port = (busy.address() as { port: number }).port;
  try {
    const r = spawnSync(process.execPath, [join(root, "scripts", "relay.mjs")], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, PORT: String(port) },
      timeout: 30_000,
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`port ${port} is already in use .*PORT=${port + 1} npm start`));
    expect(r.stderr).not.toMatch(/--port|stack|at /);
  } finally {
    busy.close();
  }
}, 60_000);

it("GET /v1/health answers exactly what docs/http-api.md says", async () => {
  const page = readFileSync(join(root, "docs", "http-api.md"), "utf8");
  const documented = /<!-- doc-health -->`200 (\{[^`]*\})`/.exec(page);
  expect(documented).not.toBeNull();
  // a fresh connection (node:http, no pool): an idle pooled one may have been closed by the relay meanwhile
  const { get } = await import("node:http");
  const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    get(`${relay.url}/v1/health`, { agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    }).on("error", reject);
  });
  expect(status).toBe(200);
  expect(body).toBe(documented![1]);
});

it("docs/access-control.md's local auth flow keeps the secret: npm start and npm run token agree", async () => {
  // A copy of the project (symlinks to everything but scripts/, copied so their paths resolve
  // here, and without .dev.vars or .wrangler), where the snippets run as written; only the port
  // differs (PORT for npm start, the address in the curl line).
  const copy = mkdtempSync(join(tmpdir(), "episode-relay-readme-"));
  const skip = new Set([".dev.vars", ".wrangler", ".git", "scripts", "test-results"]);
  for (const name of readdirSync(root)) if (!skip.has(name)) symlinkSync(join(root, name), join(copy, name));
  cpSync(join(root, "scripts"), join(copy, "scripts"), { recursive: true });
  const port = String(40000 + Math.floor(Math.random() * 20000));
  const start = spawn("bash", ["-c", docSnippet("access-control.md", "auth-start", "sh")], {
    cwd: copy,
    env: { ...process.env, PORT: port },
    detached: true,
  });
  let log = "";
  start.stdout.on("data", (d) => (log += d));
  start.stderr.on("data", (d) => (log += d));
  try {
    const ready = Date.now() + 60_000;
    while (!/Ready on/.test(log)) {
      if (Date.now() > ready || start.exitCode !== null) throw new Error(`npm start did not get ready:\n${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(log).toMatch(/auth ON: RELAY_SECRET from \.dev\.vars/);
    // no network look-ups, so no error lines on a machine without internet
    expect(log).not.toMatch(/ENOTFOUND|Error|update available/);
    const token = spawnSync(
      "bash",
      [
        "-c",
        `${docSnippet("access-control.md", "auth-token", "sh").replaceAll("127.0.0.1:8787", `127.0.0.1:${port}`)}`,
      ],
      {
        cwd: copy,
        encoding: "utf8",
      },
    );
    expect(token.status, token.stderr).toBe(0);
    expect(JSON.parse(token.stdout)).toMatchObject({ episodes: [] });
    // and without the token the relay refuses
    expect((await fetch(`http://127.0.0.1:${port}/v1/episodes`)).status).toBe(401);
  } finally {
    process.kill(-start.pid!, "SIGTERM");
    await new Promise((r) => start.once("close", r));
    rmSync(copy, { recursive: true, force: true });
  }
}, 120_000);

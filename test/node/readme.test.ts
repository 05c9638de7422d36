// README snippets run as written: the TypeScript watcher snippet is extracted from README.md and
// run (with tsx, resolving "episode-relay/client" through the package's exports) against a relay
// the test starts, while a golden case is pushed into the episode it names.
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { encodeEnvelope } from "../../src/envelope/envelope";
import { ProducerCursor } from "../../src/envelope/producer";
import { goldenDir, loadCase } from "../../tools/conformance/cases";
import { useRelay } from "../support/relay";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();

function snippet(name: string): string {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const m = new RegExp(`<!-- readme-snippet: ${name} -->\\s*\`\`\`ts\\n([\\s\\S]*?)\`\`\``).exec(readme);
  if (!m) throw new Error(`README has no snippet ${name}`);
  return m[1]!;
}

it("the README's TypeScript watcher snippet runs as written and ends with the episode", async () => {
  const code = snippet("watch");
  expect(code).toContain('from "episode-relay/client"');
  // only the relay address differs from the README: it points at the relay this test started
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
  const c = loadCase(join(goldenDir(), "chat_basic.msgpack"));
  await new Promise((r) => setTimeout(r, 1500)); // the snippet connects first
  const producer = new ProducerCursor("readme");
  for (const f of c.frames) {
    await (await fetch(`${relay.url}/v1/episodes/run-42:episode-7/deltas`, { method: "POST", body: encodeEnvelope(producer.envelope(f)) })).arrayBuffer();
    producer.acknowledge(f);
  }
  await (await fetch(`${relay.url}/v1/episodes/run-42:episode-7/reply`, { method: "POST", body: c.reply })).arrayBuffer();
  expect(await exited, err).toBe(0);
  expect(out).toMatch(/seq \d+: trace [0-9a-f]{32}/);
  expect(out.trim().split("\n").at(-1)).toBe(`finished ${c.episode!.length} bytes`);
}, 60_000);

// docs/training.md's snippets run as written (only the relay's address and the trace id differ)
// against a relay the test starts: a rollout announced, its trace streamed, listed by step, its
// step counted, annotated and its annotations read back.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { useRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();
const ID = "run-7:0a1b2c3d";

function snippet(name: string): string {
  const page = readFileSync(join(root, "docs", "training.md"), "utf8");
  const m = new RegExp(`<!-- doc-snippet: ${name} -->\\s*\`\`\`sh\\n([\\s\\S]*?)\`\`\``).exec(page);
  if (!m) throw new Error(`docs/training.md has no snippet ${name}`);
  return m[1]!;
}

/** Run a snippet with bash; each line of output parsed as JSON. */
function run(name: string, replace: Record<string, string> = {}): unknown[] {
  let code = snippet(name).replaceAll("http://127.0.0.1:8787", relay.url);
  for (const [k, v] of Object.entries(replace)) code = code.replaceAll(k, v);
  const out = execFileSync("bash", ["-euo", "pipefail", "-c", code], { encoding: "utf8" });
  return out
    .trim()
    .split(/(?<=\})\s*(?=\{)/)
    .map((l) => JSON.parse(l));
}

it("docs/training.md: announce, stream, list by step, count the step, annotate and read back", async () => {
  const [announced] = run("dispatch") as Array<{ ok: boolean; created: boolean; dispatch: { step: number } }>;
  expect(announced).toMatchObject({
    ok: true,
    created: true,
    status: "live",
    dispatch: { step: 3, kind: "train", group: "g-17" },
  });
  const c = loadCase(fixturePath("chat_basic"));
  const producer = new ProducerCursor("docs");
  for (const f of c.frames) {
    const r = await fetch(`${relay.url}/v1/episodes/${ID}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(f)),
    });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
    producer.acknowledge();
  }
  expect((await fetch(`${relay.url}/v1/episodes/${ID}/reply`, { method: "POST", body: c.reply })).status).toBe(200);
  // the row lands in the run's index in the background
  const end = Date.now() + 20_000;
  let listed: { episodes: Array<{ id: string; step: number; staleness: number; status: string }> } = { episodes: [] };
  while (listed.episodes[0]?.status !== "finished" && Date.now() < end) {
    [listed] = run("list") as [typeof listed];
    if (listed.episodes[0]?.status !== "finished") await new Promise((r) => setTimeout(r, 100));
  }
  expect(listed.episodes.map((e) => [e.id, e.step, e.staleness, e.status])).toEqual([[ID, 3, 1, "finished"]]);
  const [steps] = run("steps") as [
    { steps: Array<{ step: number; kind: string; episodes: number; finished: number }> },
  ];
  expect(steps.steps).toEqual([expect.objectContaining({ step: 3, kind: "train", episodes: 1, finished: 1 })]);
  const trace = (
    JSON.parse(
      execFileSync("curl", ["-s", `${relay.url}/v1/episodes/${ID}`, "-H", "accept: application/json"], {
        encoding: "utf8",
      }),
    ) as {
      traces: Array<{ id: string }>;
    }
  ).traces[0]!.id;
  const [posted, read] = run("annotate", { TRACE: trace }) as [
    { version: number },
    { version: number; traces: Array<{ trace_id: string; info: unknown }> },
  ];
  expect(posted).toMatchObject({ ok: true, version: 1 });
  expect(read.version).toBe(1);
  expect(read.traces.map((t) => [t.trace_id, t.info])).toEqual([[trace, { effective: true, ship: { step: 4 } }]]);
}, 60_000);

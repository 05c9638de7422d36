// docs/search.md's snippets run as written (only the relay's address differs) against a relay the
// test starts: a rollout that reasons about its grader is found by the search and flagged by a rule.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { delta, m, node, openDelta } from "../support/deltas.js";
import { useRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();

/** A snippet's shell lines, the relay's address put in. */
function lines(name: string): string[] {
  const page = readFileSync(join(root, "docs", "search.md"), "utf8");
  const m = new RegExp(`<!-- doc-snippet: ${name} -->\\s*\`\`\`sh\\n([\\s\\S]*?)\`\`\``).exec(page);
  if (!m) throw new Error(`docs/search.md has no snippet ${name}`);
  return m[1]!
    .replaceAll("http://127.0.0.1:8787", relay.url)
    .replace(/\\\n\s*/g, "")
    .trim()
    .split("\n");
}

const sh = (line: string): unknown =>
  JSON.parse(execFileSync("bash", ["-euo", "pipefail", "-c", line], { encoding: "utf8" }));

async function until<T>(f: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  const end = Date.now() + 20_000;
  for (;;) {
    const v = await f();
    if (ok(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

it("docs/search.md: a rollout found by its words, then flagged by a rule set for the run", async () => {
  const id = "run-9:a";
  const producer = new ProducerCursor("docs");
  const frames = [
    openDelta(),
    delta({
      nodes: [
        node(0, { message: m({ role: "user", content: "What is 6*7?" }) }),
        node(1, { message: m({ role: "assistant", content: "Since the grader only checks that 42 appears, 42." }) }),
      ],
    }),
  ];
  for (const f of frames) {
    const r = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(f)),
    });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
    producer.acknowledge();
  }
  const reply = m({ success: true, error: null, head: m({ id: "a" }), traces: [m({ id: "t-1", nodes: 2, calls: 0 })] });
  const { encodeLossless } = await import("../../src/protocol/wire/lossless.js");
  expect(
    (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: encodeLossless(reply) })).status,
  ).toBe(200);
  const [search] = lines("search");
  const found = (await until(
    async () =>
      sh(search!) as {
        episodes: Array<{ id: string; snippets: Array<{ node: number; text: string; highlights: number[][] }> }>;
      },
    (v) => v.episodes.length > 0,
  ))!;
  expect(found.episodes.map((e) => e.id)).toEqual([id]);
  const snip = found.episodes[0]!.snippets[0]!;
  expect(snip.node).toBe(1);
  expect(snip.text.slice(snip.highlights[0]![0]!, snip.highlights[0]![1]!)).toBe("grader");
  // the default rules already flag it
  const rows = (await (await fetch(`${relay.url}/v1/runs/run-9/episodes`)).json()) as {
    episodes: Array<{ flags: Array<{ rule: string }> }>;
  };
  expect(rows.episodes[0]!.flags.map((f) => f.rule)).toEqual(["quotes-grader"]);
  const [put, list] = lines("rules");
  const answer = sh(put!) as { budget: unknown };
  expect(answer).toMatchObject({ defaults: false, rules: [{ id: "mentions-grader" }] });
  // the budget the page shows is the one the rules' answer gives (its limits, nothing skipped yet)
  const shown = /```json\n"budget": (\{.*\})\n```/.exec(readFileSync(join(root, "docs", "search.md"), "utf8"));
  expect(shown, "docs/search.md shows the rules' budget").not.toBeNull();
  expect(answer.budget).toEqual(JSON.parse(shown![1]!));
  await until(
    async () => (await (await fetch(`${relay.url}/v1/runs/run-9/rules`)).json()) as { rescan: { done: boolean } },
    (v) => v.rescan.done,
  );
  const flagged = sh(list!) as {
    episodes: Array<{ id: string; flags: Array<{ rule: string; node: number; excerpt: string }> }>;
  };
  expect(flagged.episodes.map((e) => [e.id, e.flags.map((f) => [f.rule, f.node])])).toEqual([
    [id, [["mentions-grader", 1]]],
  ]);
}, 60_000);

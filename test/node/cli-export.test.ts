// `episode-relay export` against a relay the test starts: rollouts pushed with their identities
// are exported to JSONL (each line the relay's, the episode's JSON view byte for byte what GET
// answers) and to Parquet (read back with hyparquet: row for row a recount from the exact
// episodes); the filters and --q select what the list and the search select; an interrupted
// export resumed from its file or its state has every rollout once, no gap, no duplicate.
import { spawn } from "node:child_process";
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { asyncBufferFromFile, parquetReadObjects } from "hyparquet";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixturePath } from "../../tools/conformance/cases.js";
import { useRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();
const dir = mkdtempSync(join(tmpdir(), "cli-export-"));
const RUN = `cli-export-${Date.now().toString(36)}`;
/** [case, kind, step] per rollout r00.. */
const PLAN: Array<[string, string, number]> = [
  ["chat_basic", "train", 1],
  ["tool_calls_pending", "train", 1],
  ["multi_trace_links", "eval", 1],
  ["odd_values", "train", 2],
  ["chat_basic", "eval", 2],
  ["tool_calls_pending", "train", 3],
  ["chat_basic", "train", 3],
];
const ids = PLAN.map((_, i) => `${RUN}:r${String(i).padStart(2, "0")}`);

function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = spawn(process.execPath, [join(root, "dist", "tools", "cli", "main.js"), ...args], { cwd: root });
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (d) => (stdout += d));
  p.stderr.on("data", (d) => (stderr += d));
  return new Promise((resolve) => p.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr })));
}

async function getJson(path: string): Promise<unknown> {
  for (let attempt = 0; ; attempt++) {
    try {
      const res = await fetch(`${relay.url}${path}`, { headers: { accept: "application/json" } });
      if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
      return JSON.parse(await res.text());
    } catch (e) {
      if (attempt >= 2) throw e; // the keep-alive race with workerd: an idempotent GET is sent again
    }
  }
}

async function episodeText(id: string): Promise<string> {
  const res = await fetch(`${relay.url}/v1/episodes/${id}`, { headers: { accept: "application/json" } });
  expect(res.status).toBe(200);
  return await res.text();
}

type Listed = {
  id: string;
  kind: string;
  step: number;
  reward: number | null;
  stop_condition: string | null;
  is_truncated: boolean | null;
  is_timeout: boolean;
  truncated: boolean;
};
const listed = async (): Promise<Listed[]> =>
  ((await getJson(`/v1/runs/${RUN}/episodes?status=finished&limit=500`)) as { episodes: Listed[] }).episodes;

/** A rollout counted afresh from its exact episode (GET, the JSON view) and its listed row. */
async function recount(e: Listed) {
  const ep = JSON.parse(await episodeText(e.id)) as {
    traces: Array<{
      calls: Array<{ finish_reason?: string | null; error?: unknown }>;
      nodes: Array<{ parent: number | null; message?: { role?: string } }>;
      num_total_tokens: number;
      stop_condition: string;
      is_timeout: boolean;
      rewards: Record<string, { score: number } | null>;
    }>;
  };
  const t0 = ep.traces[0]!;
  // the trainer's truncation, restated: a limit stop, or the last call without an error ended `length`, any trace
  const limits = ["max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"];
  const truncated = ep.traces.some(
    (t) =>
      limits.includes(t.stop_condition) ||
      t.calls.filter((c) => c.error === undefined || c.error === null).at(-1)?.finish_reason === "length",
  );
  // what the API lists says the same (its `truncated`: the deprecated alias of is_timeout, docs/http-api.md)
  expect([e.is_truncated, e.is_timeout, e.truncated], e.id).toEqual([truncated, t0.is_timeout, t0.is_timeout]);
  return {
    id: e.id,
    kind: e.kind,
    step: e.step,
    reward: e.reward,
    // prime-rl's turns: assistant nodes, all traces; the calls by their own name
    turns: ep.traces.reduce((n, t) => n + t.nodes.filter((x) => x.message?.role === "assistant").length, 0),
    calls: ep.traces.reduce((n, t) => n + t.calls.length, 0),
    tokens: ep.traces.reduce((n, t) => n + t.num_total_tokens, 0),
    branches: ep.traces.reduce((n, t) => n + t.nodes.filter((_, i) => !t.nodes.some((x) => x.parent === i)).length, 0),
    stop_condition: t0.stop_condition,
    is_truncated: truncated,
    is_timeout: t0.is_timeout,
    rewards: keyMeans(ep.traces.map((t) => t.rewards)),
  };
}

/** Per reward key, the mean of its scores over the traces that score it (a key no trace scores is left out). */
function keyMeans(traces: Array<Record<string, { score: number } | null>>): Record<string, number> {
  const by: Record<string, number[]> = {};
  for (const rewards of traces)
    for (const [k, v] of Object.entries(rewards ?? {})) if (typeof v?.score === "number") (by[k] ??= []).push(v.score);
  return Object.fromEntries(
    Object.entries(by)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, xs]) => [k, xs.reduce((a, b) => a + b, 0) / xs.length]),
  );
}

async function readParts(out: string): Promise<Array<Record<string, unknown>>> {
  const rows: Array<Record<string, unknown>> = [];
  for (const name of readdirSync(out)
    .filter((n) => n.endsWith(".parquet"))
    .sort()) {
    rows.push(
      ...((await parquetReadObjects({ file: await asyncBufferFromFile(join(out, name)) })) as Array<
        Record<string, unknown>
      >),
    );
  }
  return rows;
}

function asRecount(r: Record<string, unknown>) {
  return {
    id: r.id,
    kind: r.kind,
    step: Number(r.step),
    reward: r.reward,
    turns: Number(r.turns),
    calls: Number(r.calls),
    tokens: Number(r.tokens),
    branches: Number(r.branches),
    stop_condition: r.stop_condition,
    is_truncated: r.is_truncated,
    is_timeout: r.is_timeout,
    rewards: JSON.parse(r.rewards as string),
  };
}

beforeAll(async () => {
  for (const [i, [name, kind, step]] of PLAN.entries()) {
    const identity = { kind, step, policy_version: step - 1, group: `g${step}`, env: "chat" };
    const p = await cli(
      "push",
      fixturePath(name),
      `${relay.url}/${ids[i]}`,
      "--fast",
      "--dispatch",
      JSON.stringify(identity),
    );
    expect(p.code, p.stderr).toBe(0);
  }
  for (let i = 0; i < 200; i++) {
    const rows = await listed();
    if (rows.length === PLAN.length && rows.every((r) => r.kind !== null)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the run's index never listed every rollout");
}, 120_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("episode-relay export", () => {
  it("jsonl: one line per finished rollout, the episode's JSON view byte for byte as GET answers it", async () => {
    const out = join(dir, "all.jsonl");
    const r = await cli("export", "--run", RUN, "--format", "jsonl", "--out", out, relay.url);
    expect(r.code, r.stderr).toBe(0);
    const lines = readFileSync(out, "utf8").trimEnd().split("\n");
    expect(lines.map((l) => (JSON.parse(l) as { id: string }).id).sort()).toEqual([...ids].sort());
    for (const line of lines) {
      const v = JSON.parse(line) as { id: string; row: { id: string } };
      expect(Object.keys(v)).toEqual(["id", "cursor", "row", "episode"]);
      expect(v.row.id).toBe(v.id);
      expect(line.endsWith(`,"episode":${await episodeText(v.id)}}`), v.id).toBe(true);
    }
  }, 60_000);

  it("jsonl resumes after its last complete line: a cut-off line is dropped and the rest follows, once", async () => {
    const whole = join(dir, "all.jsonl");
    const out = join(dir, "resumed.jsonl");
    const text = readFileSync(whole, "utf8");
    for (const keep of [1, 3, 6]) {
      const cut = text.split("\n").slice(0, keep).join("\n").length + 1;
      writeFileSync(out, text.slice(0, cut));
      appendFileSync(out, '{"id":"half-writ');
      const r = await cli("export", "--run", RUN, "--format", "jsonl", "--out", out, relay.url);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`${PLAN.length - keep} episode(s)`);
      expect(readFileSync(out, "utf8")).toBe(text);
    }
  }, 60_000);

  it("parquet: row for row a recount from the exact episodes; per branch, a row per branch", async () => {
    const out = join(dir, "all.parquet");
    const r = await cli("export", "--run", RUN, "--format", "parquet", "--out", out, "--batch", "3", relay.url);
    expect(r.code, r.stderr).toBe(0);
    expect(readdirSync(out).filter((n) => n.endsWith(".parquet")).length).toBe(3); // 3 + 3 + 1 rollouts
    const rows = await readParts(out);
    const expected = await Promise.all((await listed()).map(recount));
    const byId = (a: { id: unknown }, b: { id: unknown }) => String(a.id).localeCompare(String(b.id));
    expect(rows.map(asRecount).sort(byId)).toEqual(expected.sort(byId));
    // the timeout by its name only: no `truncated` column (the API's alias of is_timeout) beside is_truncated
    expect(rows.every((x) => !("truncated" in x) && "is_truncated" in x && "is_timeout" in x)).toBe(true);
    // odd_values stopped at max_turns and timed out: truncated and timed out; the rest neither
    expect(rows.filter((x) => x.is_truncated).map((x) => x.id)).toEqual([ids[3]]);
    const tool = rows.find((x) => x.id === ids[1])!;
    expect(tool.expected_answer).toBe("42");
    expect(typeof tool.final_answer).toBe("string");
    const b = await cli(
      "export",
      "--run",
      RUN,
      "--format",
      "parquet",
      "--per",
      "branch",
      "--out",
      join(dir, "branches.parquet"),
      relay.url,
    );
    expect(b.code, b.stderr).toBe(0);
    const branches = await readParts(join(dir, "branches.parquet"));
    expect(branches.every((x) => !("truncated" in x) && "is_truncated" in x && "is_timeout" in x)).toBe(true);
    const perRollout = new Map<string, number>();
    for (const x of branches) perRollout.set(String(x.id), (perRollout.get(String(x.id)) ?? 0) + 1);
    expect(Object.fromEntries([...perRollout].sort())).toEqual(
      Object.fromEntries(expected.map((e) => [e.id, e.branches]).sort()),
    );
  }, 60_000);

  it("parquet resumes from its state: a part written past it (an interrupted write) is replaced, no rollout twice or missing", async () => {
    const whole = await readParts(join(dir, "all.parquet"));
    const out = join(dir, "resumed.parquet");
    expect(
      (await cli("export", "--run", RUN, "--format", "parquet", "--out", out, "--batch", "2", relay.url)).code,
    ).toBe(0);
    // as if it stopped after its second part had been renamed into place but before its state said so:
    // the state after part 1, with the cursor of the 2nd rollout (the same selection's cursor, from a jsonl export)
    const jsonl = join(dir, "cursors.jsonl");
    expect((await cli("export", "--run", RUN, "--format", "jsonl", "--out", jsonl, relay.url)).code).toBe(0);
    const second = JSON.parse(readFileSync(jsonl, "utf8").split("\n")[1]!) as { cursor: string };
    const state = JSON.parse(readFileSync(join(out, "_export.json"), "utf8")) as {
      parts: number;
      rollouts: number;
      cursor: string;
    };
    writeFileSync(
      join(out, "_export.json"),
      JSON.stringify({ ...state, parts: 1, rollouts: 2, cursor: second.cursor }),
    );
    rmSync(join(out, "part-00003.parquet"));
    writeFileSync(join(out, "part-00002.parquet.tmp"), "half");
    const r = await cli("export", "--run", RUN, "--format", "parquet", "--out", out, "--batch", "2", relay.url);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`${PLAN.length - 2} rollout(s)`);
    const rows = await readParts(out);
    expect(rows.map((x) => x.id)).toEqual(whole.map((x) => x.id));
    expect(rows).toEqual(whole);
    // another selection is refused, the directory left as it is
    const other = await cli("export", "--run", RUN, "--format", "parquet", "--out", out, "--kind", "eval", relay.url);
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(/another selection/);
    expect(statSync(join(out, "part-00000.parquet")).size).toBeGreaterThan(0);
  }, 60_000);

  it("filters and --q select what the list and the search select", async () => {
    const exported = async (...args: string[]) => {
      const out = join(dir, `sel-${Math.random().toString(36).slice(2)}.jsonl`);
      const r = await cli("export", "--run", RUN, "--format", "jsonl", "--out", out, ...args, relay.url);
      expect(r.code, r.stderr).toBe(0);
      const text = readFileSync(out, "utf8");
      return text === ""
        ? []
        : text
            .trimEnd()
            .split("\n")
            .map((l) => (JSON.parse(l) as { id: string }).id);
    };
    const rows = await listed();
    expect((await exported("--kind", "eval")).sort()).toEqual(
      rows
        .filter((r) => r.kind === "eval")
        .map((r) => r.id)
        .sort(),
    );
    expect((await exported("--step", "2..3", "--kind", "train")).sort()).toEqual(
      rows
        .filter((r) => r.kind === "train" && r.step >= 2 && r.step <= 3)
        .map((r) => r.id)
        .sort(),
    );
    expect(await exported("--kind", "none")).toEqual([]);
    let searched: string[] = [];
    for (let i = 0; i < 100; i++) {
      searched = (
        (await getJson(`/v1/runs/${RUN}/search?q=calculator&status=finished&limit=100`)) as {
          episodes: Array<{ id: string }>;
        }
      ).episodes.map((e) => e.id);
      if (searched.includes(ids[5]!)) break;
      await new Promise((r) => setTimeout(r, 100)); // the search index is fed in the background
    }
    expect(searched).toContain(ids[1]);
    expect(await exported("--q", "calculator")).toEqual(searched);
    const bad = await cli("export", "--run", RUN, "--format", "csv", "--out", join(dir, "x"), relay.url);
    expect(bad.code).toBe(2);
    expect(
      (await cli("export", "--run", RUN, "--format", "jsonl", "--out", join(dir, "x"), "--step", "3..1", relay.url))
        .code,
    ).toBe(2);
  }, 60_000);
});

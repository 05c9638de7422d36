// `episode-relay tail` from an episode's start and `tail --run`, against relays the test starts:
// a tail that joins a running episode shows the conversation so far, then each node as it lands,
// every node once and in order (numbered by its index in its trace) through a relay restart; a
// tail of a run follows each rollout's turns to its reward, in text and as JSON lines.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/index.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { freePort } from "../../tools/free-port.js";
import { until, useAuthedRelay, useRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();
/** A relay that wants a token (the suite's, shared with other files). */
const authed = useAuthedRelay();
const running: ChildProcess[] = [];
afterAll(() => {
  for (const p of running) if (p.exitCode === null) p.kill("SIGTERM");
});

function cli(...args: string[]) {
  const p = spawn(process.execPath, [join(root, "dist", "tools", "cli", "main.js"), ...args], { cwd: root });
  running.push(p);
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
  p.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    p.on("close", (code) => resolve({ code, stdout, stderr })),
  );
  return { p, done, text: () => stdout, json: () => jsonLines(stdout) };
}

function jsonLines(text: string): Array<Record<string, unknown>> {
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function post(base: string, path: string, body: Uint8Array): Promise<void> {
  const r = await fetch(`${base}${path}`, { method: "POST", body });
  expect(r.status, await r.clone().text()).toBe(200);
  await r.arrayBuffer();
}

/** The golden episode's traces: id and node count. */
function tracesOf(episode: Uint8Array): Array<{ id: string; nodes: number }> {
  const e = decodeLossless(episode) as LMap;
  return (e.get("traces") as LValue[]).map((t) => ({
    id: (t as LMap).get("id") as string,
    nodes: ((t as LMap).get("nodes") as LValue[]).length,
  }));
}

describe("tail from the start", () => {
  it("on a running episode prints every node in order exactly once, through a relay restart (text and --json)", async () => {
    const c = loadCase(fixturePath("multi_trace_links"));
    const traces = tracesOf(c.episode!);
    const port = await freePort();
    const persist = mkdtempSync(join(tmpdir(), "cli-tail-restart-"));
    let own: LocalRelay | null = await startRelay({ port, persistDir: persist });
    try {
      const id = `cli-from-start-${Date.now().toString(36)}`;
      const half = Math.floor(c.frames.length / 2);
      for (const f of c.frames.slice(0, half)) await post(own.url, `/v1/episodes/${id}/deltas`, f);
      // both join a running episode: what came before is shown from its first node
      const text = cli("tail", `${own.url}/${id}`);
      const json = cli("tail", `${own.url}/${id}`, "--json");
      await until(
        () => /node 0 /.test(text.text()) && json.text().includes('"type":"node"'),
        30_000,
        "the nodes so far",
      );
      await own.stop();
      own = null;
      await until(
        () => text.text().includes("connection lost") && json.json().some((r) => r.type === "reconnecting"),
        30_000,
        "both tails saw the relay go",
      );
      own = await startRelay({ port, persistDir: persist });
      for (const f of c.frames.slice(half)) await post(own.url, `/v1/episodes/${id}/deltas`, f);
      await post(own.url, `/v1/episodes/${id}/reply`, c.reply);
      const [t, j] = await Promise.all([text.done, json.done]);
      expect([t.code, j.code], t.stdout + t.stderr).toEqual([0, 0]);

      // --json: per trace, the nodes 0..n-1, each once, in order
      const records = jsonLines(j.stdout);
      expect(records[0]).toMatchObject({ type: "episode", episode: id, status: "live" });
      for (const { id: trace, nodes } of traces) {
        const shown = records.filter((r) => r.type === "node" && r.trace === trace).map((r) => r.node);
        expect(shown, trace).toEqual([...Array(nodes).keys()]);
      }
      expect(records.at(-1)).toMatchObject({ type: "end", state: "finished", error: null });
      expect(records.every((r) => r.episode === id)).toBe(true);

      // text: one header, then per trace name the same numbering (a node's tool calls are lines of the same node)
      const lines = t.stdout.split("\n");
      expect(lines[0]).toBe(`episode ${id} at ${own.url} · live`);
      expect(lines.filter((l) => l.startsWith("episode "))).toHaveLength(1);
      const byName = new Map<string, number[]>();
      for (const l of lines) {
        const m = /^\[(\w+)\] node (\d+) /.exec(l);
        if (!m) continue;
        const seen = byName.get(m[1]!) ?? [];
        if (seen.at(-1) !== Number(m[2])) seen.push(Number(m[2]));
        byName.set(m[1]!, seen);
      }
      expect([...byName.values()].map((s) => s.length).sort()).toEqual(traces.map((x) => x.nodes).sort());
      for (const [name, seen] of byName) expect(seen, name).toEqual([...Array(seen.length).keys()]);
      expect(t.stdout).toMatch(/■ finished: seq \d+ · 3 trace\(s\)/);
    } finally {
      await own?.stop();
      rmSync(persist, { recursive: true, force: true });
    }
  }, 180_000);
});

describe("tail --run", () => {
  it("follows a run of 3 rollouts: their turns with rollout, step and group, then each one's reward", async () => {
    const run = `cli-run-${Date.now().toString(36)}`;
    const text = cli("tail", "--run", run, relay.url);
    const json = cli("tail", "--run", run, relay.url, "--json");
    await until(
      () => text.text().includes("no rollout of run") && json.json().some((r) => r.type === "run"),
      30_000,
      "both connected to the run, waiting for its first rollout",
    );
    const identity = { kind: "train", step: 3, group: "g-tail", policy_version: 2 };
    for (const name of ["a", "b", "c"]) {
      const p = await cli(
        "push",
        fixturePath("tool_calls_pending"),
        `${relay.url}/${run}:${name}`,
        "--fast",
        "--dispatch",
        JSON.stringify(identity),
      ).done;
      expect(p.code, p.stderr).toBe(0);
    }
    const ended = (r: Record<string, unknown>) => r.type === "finished";
    await until(() => json.json().filter(ended).length === 3, 60_000, "three rewards as JSON lines");
    await until(() => (text.text().match(/■ finished · reward/g) ?? []).length === 3, 60_000, "three reward lines");
    text.p.kill("SIGTERM");
    json.p.kill("SIGTERM");

    const listed = (await (await fetch(`${relay.url}/v1/runs/${run}/episodes`)).json()) as {
      episodes: Array<{ id: string; reward: number | null; step: number | null; group: string | null }>;
    };
    expect(listed.episodes).toHaveLength(3);
    const records = json.json();
    expect(records[0]).toMatchObject({ type: "run", run, url: relay.url });
    for (const e of listed.episodes) {
      // the reward printed is the row's, as the list answers it
      const end = records.filter((r) => ended(r) && r.rollout === e.id);
      expect(end, e.id).toEqual([expect.objectContaining({ reward: e.reward, step: 3, group: e.group })]);
      expect(e.reward).not.toBeNull();
      const turns = records.filter((r) => r.type === "turn" && r.rollout === e.id);
      expect(turns.length, e.id).toBeGreaterThan(0);
      expect(turns.every((r) => r.role === "assistant" && r.step === 3)).toBe(true);
      // turns before the end, numbered as the episode numbers its nodes
      expect(records.indexOf(turns.at(-1)!)).toBeLessThan(records.indexOf(end[0]!));
      const nodes = turns.map((r) => r.node as number);
      expect(nodes).toEqual([...nodes].sort((a, b) => a - b));
      const line = new RegExp(`^${e.id} · step 3 · group ${e.group} ■ finished · reward ${e.reward}$`, "m");
      expect(text.text()).toMatch(line);
      expect(text.text()).toMatch(
        new RegExp(`^${e.id} · step 3 · group ${e.group} \\[main\\] node \\d+ assistant: `, "m"),
      );
    }
  }, 120_000);

  it("names one group per rollout: without a dispatch group, none until the reply names it", async () => {
    const run = `cli-run-group-${Date.now().toString(36)}`;
    const text = cli("tail", "--run", run, relay.url);
    const json = cli("tail", "--run", run, relay.url, "--json");
    await until(
      () => text.text().includes("no rollout of run") && json.json().some((r) => r.type === "run"),
      30_000,
      "both connected to the run, waiting for its first rollout",
    );
    // no --dispatch: while live the index groups it by its task key, then by the reply's group.id; paced frames
    // (no --fast) so its turns are shown while it is live
    const p = await cli("push", fixturePath("tool_calls_pending"), `${relay.url}/${run}:solo`).done;
    expect(p.code, p.stderr).toBe(0);
    const ended = (r: Record<string, unknown>) => r.type === "finished";
    await until(() => json.json().some(ended), 60_000, "the reward as a JSON line");
    await until(() => text.text().includes("■ finished · reward"), 60_000, "the reward line");
    text.p.kill("SIGTERM");
    json.p.kill("SIGTERM");

    const listed = (await (await fetch(`${relay.url}/v1/runs/${run}/episodes`)).json()) as {
      episodes: Array<{ id: string; group: string | null; task: string | null }>;
    };
    const [e] = listed.episodes;
    // the case the trial found: the task key and the reply's group differ
    expect(e?.group).toBeTruthy();
    expect(e?.task).toBeTruthy();
    expect(e!.group).not.toBe(e!.task);
    const records = json.json().filter((r) => r.rollout === e!.id);
    expect(records.filter(ended).map((r) => r.group)).toEqual([e!.group]);
    const turns = records.filter((r) => r.type === "turn");
    expect(turns.length).toBeGreaterThan(0);
    expect(
      turns.every((r) => r.group === null || r.group === e!.group),
      JSON.stringify(turns),
    ).toBe(true);
    const lines = text
      .text()
      .split("\n")
      .filter((l) => l.startsWith(`${e!.id} · `));
    expect(lines.length).toBeGreaterThan(1);
    for (const l of lines) expect(l).toMatch(new RegExp(`^${e!.id} · step - · group (-|${e!.group}) `));
    expect(text.text()).not.toContain(e!.task!);
  }, 120_000);

  it("refuses with the relay's reason (no token on a relay that needs one)", async () => {
    const t = await cli("tail", "--run", "r1", authed.url).done;
    expect(t.code).toBe(1);
    expect(t.stdout).toMatch(/refused: 401 unauthorized: .*pass --token T/);
    expect((await cli("tail", "--run", "r1", authed.url, "--routing").done).code).toBe(2);
  }, 60_000);
});

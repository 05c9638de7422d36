// The command line against a relay the test starts: `push` a golden case while `tail` follows
// it; tail's terminal output is read; `get` returns the golden bytes.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encode } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { until, useAuthedRelay, useRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useRelay();
/** A relay that wants a token (the suite's, shared with other files). */
const authed = useAuthedRelay();

function cli(...args: string[]) {
  const p = spawn(process.execPath, [join(root, "dist", "tools", "cli", "main.js"), ...args], { cwd: root });
  let stdout = Buffer.alloc(0);
  let stderr = "";
  p.stdout.on("data", (d: Buffer) => (stdout = Buffer.concat([stdout, d])));
  p.stderr.on("data", (d) => (stderr += d));
  const done = new Promise<{ code: number; stdout: Buffer; stderr: string }>((resolve) =>
    p.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr })),
  );
  return { done, text: () => stdout.toString("utf8") };
}

describe("episode-relay CLI", () => {
  it("tail follows a case pushed by push: turns, tool calls, pending previews, rewards, finish", async () => {
    const target = `${relay.url}/cli-tail-${Date.now().toString(36)}`;
    const tail = cli("tail", target);
    await until(() => tail.text().includes("episode cli-tail-"));
    await until(() => tail.text().includes("nothing written to this episode yet"));
    const push = await cli("push", fixturePath("tool_calls_pending"), target, "--fast").done;
    expect(push.code).toBe(0);
    expect(push.stderr).toMatch(/\[#+\] 11\/11 deltas/);
    expect(push.stderr).not.toMatch(/does not know/);
    const t = await tail.done;
    const out = t.stdout.toString("utf8");
    expect(t.code).toBe(0);
    expect(out).toMatch(/▶ trace [0-9a-f]{8} opened \(agent solver\)/);
    expect(out).toMatch(/node 1 user: Compute 6\*7 with the calculator\./);
    expect(out).toMatch(/→ tool call calculator\(\{"expr": "6\*7"\}\)/);
    expect(out).toMatch(/… pending tool: tool says 42/);
    expect(out).toMatch(/★ rewards \{correct: \{score: 1\.0, weight: 1\.0\}\}/);
    expect(out).toMatch(/■ finished: seq 11 · 1 trace\(s\) · 9 node\(s\) · 4 call\(s\)/);
    // the pending preview was printed before the turn that absorbed it
    expect(out.indexOf("… pending tool: tool says 42")).toBeLessThan(out.indexOf("node 3 tool: tool says 42"));
  }, 60_000);

  it("get returns the golden episode bytes, and --json a JSON view", async () => {
    const c = loadCase(fixturePath("routing_repair_widen"));
    const target = `${relay.url}/cli-get-${Date.now().toString(36)}`;
    expect((await cli("push", fixturePath("routing_repair_widen"), target, "--fast").done).code).toBe(0);
    const bytes = await cli("get", target).done;
    expect(Buffer.compare(bytes.stdout, Buffer.from(c.episode!))).toBe(0);
    const json = JSON.parse((await cli("get", target, "--json").done).stdout.toString("utf8")) as {
      traces: Array<{ nodes: Array<{ routed_experts: { dtype: string } | null }> }>;
    };
    expect(json.traces[0]!.nodes.some((n) => n.routed_experts?.dtype === "uint16")).toBe(true);
  }, 60_000);

  it("push says which delta keys the relay does not know (kept), once, after the deltas", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-unknown-"));
    try {
      const file = join(dir, "newer.jsonl");
      const line = (delta: unknown) => JSON.stringify({ t: 0, delta: Buffer.from(encode(delta)).toString("base64") });
      writeFileSync(
        file,
        `${[
          line({ trace: "t1", open: { id: "t1" }, future_list: [1], set: { future_scalar: true } }),
          line({ trace: "t1", future_list: [2] }),
        ].join("\n")}\n`,
      );
      const push = await cli("push", file, `${relay.url}/cli-unknown-${Date.now().toString(36)}`, "--fast").done;
      expect(push.code).toBe(0);
      const told = push.stderr.split("\n").filter((l) => l.includes("does not know"));
      expect(told).toEqual([
        "push: the relay does not know the delta key(s) future_list, set.future_scalar (kept as sent)",
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("push --dispatch gives the rollout its identity; episodes --kind/--step/--sort step list it; a bad identity is refused", async () => {
    const run = `cli-disp-${Date.now().toString(36)}`;
    const c = loadCase(fixturePath("chat_basic"));
    const identity = { kind: "eval", step: 7, policy_version: 5, group: "g-cli", env: "chat" };
    const p = await cli(
      "push",
      fixturePath("chat_basic"),
      `${relay.url}/${run}:a`,
      "--fast",
      "--dispatch",
      JSON.stringify(identity),
    ).done;
    expect(p.code, p.stderr).toBe(0);
    expect(Buffer.compare((await cli("get", `${relay.url}/${run}:a`).done).stdout, Buffer.from(c.episode!))).toBe(0);
    expect((await cli("push", fixturePath("chat_basic"), `${relay.url}/${run}:b`, "--fast").done).code).toBe(0);
    const listed = await cli(
      "episodes",
      "--run",
      run,
      relay.url,
      "--kind",
      "eval",
      "--step",
      "5..9",
      "--sort",
      "step",
      "--json",
    ).done;
    expect(listed.code).toBe(0);
    const rows = listed.stdout
      .toString("utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { id: string; step: number; staleness: number; group: string });
    expect(rows.map((r) => [r.id, r.step, r.staleness, r.group])).toEqual([[`${run}:a`, 7, 2, "g-cli"]]);
    const table = (await cli("episodes", "--run", run, relay.url, "--sort", "step").done).stdout.toString("utf8");
    expect(table).toMatch(new RegExp(`${run}:a\\s+finished\\s+eval\\s+7`));
    const bad = await cli(
      "push",
      fixturePath("chat_basic"),
      `${relay.url}/${run}:c`,
      "--fast",
      "--dispatch",
      '{"step":"seven"}',
    ).done;
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/--dispatch: .*dispatch\.step.*int/);
    expect((await cli("episodes", "--run", run, relay.url, "--step", "x").done).code).toBe(2);
  }, 60_000);

  it("tail exits 1 on a failed run; usage errors exit 2", async () => {
    const id = `cli-fail-${Date.now().toString(36)}`;
    const tail = cli("tail", `${relay.url}/${id}`);
    await until(() => tail.text().includes("episode cli-fail-"));
    // the run wrote its first delta, then failed (a reply to an episode never written is a 404)
    await (
      await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: loadCase(fixturePath("chat_basic")).frames[0],
      })
    ).arrayBuffer();
    const reply = encodeReply({ success: false, error: "sandbox crashed" });
    expect((await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: reply })).status).toBe(200);
    const t = await tail.done;
    expect(t.code).toBe(1);
    expect(t.stdout.toString()).toMatch(/■ failed: sandbox crashed/);
    expect((await cli("tail").done).code).toBe(2);
    expect((await cli("get", "not a url").done).code).toBe(1);
  }, 60_000);

  it("tail and get exit 1 with the relay's reason when it refuses them (no token)", async () => {
    const target = `${authed.url}/cli-refused`;
    const t = await cli("tail", target).done;
    expect(t.code).toBe(1);
    const out = t.stdout.toString();
    expect(out).toMatch(/refused: 401 unauthorized: .*pass --token T \(or set RELAY_TOKEN\)/);
    expect(out.match(/401 unauthorized/g), "the refusal is printed once").toHaveLength(1);
    expect(out).not.toMatch(/resuming/);
    const g = await cli("get", target).done;
    expect(g.code).toBe(1);
    expect(g.stderr).toMatch(/401 unauthorized.*--token T/);
  }, 60_000);

  it("nothing goes to another id than the one given: #, ? and / in an id, and a page that is not the relay, fail with what was wrong", async () => {
    for (const bad of [`${relay.url}/run:a#b`, `${relay.url}/run:a?b=1`]) {
      const p = await cli("push", fixturePath("chat_basic"), bad, "--fast").done;
      expect(p.code, bad).toBe(1);
      expect(p.stderr).toMatch(/cannot contain "#" or "\?".*\[A-Za-z0-9\._:-\]/);
    }
    const slash = await cli("push", fixturePath("chat_basic"), `${relay.url}/run/a`, "--fast").done;
    expect(slash.code).toBe(1);
    expect(slash.stderr).toMatch(/not as an Episode Relay: check the relay's base URL/);
    // the dashboard's URL for an episode: its page, not the episode
    const page = await cli("get", `${relay.url}/episodes/run:1`, "-o", "/dev/null").done;
    expect(page.code).toBe(1);
    expect(page.stderr).toMatch(/answered 200 \(text\/html.*not as an Episode Relay/);
  }, 60_000);

  it("network failures name their cause; a URL without a scheme and an unknown command are refused at once", async () => {
    const port = await (await import("../../tools/free-port.js")).freePort();
    const refused = await cli("get", `http://127.0.0.1:${port}/ep`).done;
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      new RegExp(`connection refused by 127\\.0\\.0\\.1:${port}: is the relay running there\\?`),
    );
    const scheme = await cli("get", "127.0.0.1:8787/ep").done;
    expect(scheme.code).toBe(1);
    expect(scheme.stderr).toMatch(/must start with http:\/\/ or https:\/\//);
    const unknown = await cli("fetch", "x").done;
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command "fetch"/);
    for (const asked of [["--help"], ["tail", "--help"], ["push", "-h"], ["episodes", "--help"]]) {
      const help = await cli(...asked).done;
      expect(help.code, `${asked.join(" ")}: usage, not an error`).toBe(0);
      expect(help.stdout.toString()).toMatch(/^usage: episode-relay <command>[\s\S]*\n {2}tail URL\/ID/);
      expect(help.stderr.toString()).toBe("");
    }
    const t0 = Date.now();
    const tail = await cli("tail", `http://127.0.0.1:${port}/ep`, "--wait", "1").done;
    expect(tail.code).toBe(1);
    expect(tail.stdout.toString()).toMatch(/unreachable: gave up after 1 s: connection refused/);
    expect(Date.now() - t0).toBeLessThan(15_000);
  }, 60_000);

  it("push honours a recorded case's ack_lost: the relay retracts those frames and ends with the golden episode", async () => {
    const c = loadCase(fixturePath("ack_lost"));
    expect(c.ack_lost.length).toBeGreaterThan(0);
    const target = `${relay.url}/cli-ack-lost-${Date.now().toString(36)}`;
    const p = await cli("push", fixturePath("ack_lost"), target, "--fast").done;
    expect(p.code, p.stderr).toBe(0);
    expect(Buffer.compare((await cli("get", target).done).stdout, Buffer.from(c.episode!))).toBe(0);
  }, 60_000);

  it("tail labels a routing-less episode size as such", async () => {
    const target = `${relay.url}/cli-size-${Date.now().toString(36)}`;
    const tail = cli("tail", target);
    await until(() => tail.text().includes("episode cli-size-"));
    expect((await cli("push", fixturePath("routing_repair_u8"), target, "--fast").done).code).toBe(0);
    const t = await tail.done;
    expect(t.code).toBe(0);
    expect(t.stdout.toString()).toMatch(/episode \d+ bytes without routing \(--routing for the full episode\)/);
  }, 60_000);
});

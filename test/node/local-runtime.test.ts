// `npm start` (one runtime) and `npm run start:tiers` (the episode tier and the hub tier behind
// the router), both scripts/relay.mjs, as processes, each started as a user starts it, with its own
// port and state folder: SIGINT and SIGTERM to npm's pid, SIGKILL to npm and to the launcher under
// it, and SIGTERM to the launcher each stop everything, and no process of its tree (nor any
// naming its state folder) is left; a runtime killed is restarted and says so, and watchers
// through it resume and end with the golden episode; /v1/health says each tier's state; a second
// start on a busy port exits 1, writes nothing and leaves the running relay untouched.
// Every test stops its start its own way, so no two can share one; the tests that only start and
// stop run side by side (it.concurrent: their own ports and state folders), as most of a start
// is waiting on processes, and each cleans up its own start when it ends.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, type OnTestFinishedHandler } from "vitest";
import WebSocket from "ws";
import {
  type EpisodeWatch,
  type SocketFactory,
  type WatchEvent,
  watchEpisode,
} from "../../clients/typescript/watch.js";
import { descendants, type Proc, processTable } from "../../scripts/processes.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { fixturePath, type GoldenCase, loadCase } from "../../tools/conformance/cases.js";
import { freePort } from "../../tools/free-port.js";
import { until } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const WS: SocketFactory = WebSocket;
const golden = (name: string) => loadCase(fixturePath(name));
const fresh = (p: string) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 5)}`;

interface Started {
  npm: ChildProcess;
  port: number;
  url: string;
  state: string;
  log(): string;
  exited: Promise<number | null>;
}

/** The test's `onTestFinished` (from its context: the tests run side by side). */
type OnFinished = (fn: OnTestFinishedHandler) => void;

/**
 * `npm start` / `npm run start:tiers` on a free port with a state folder of its own; resolves once
 * its health says so. Whatever of it is left when the test ends is killed then.
 */
async function start(script: "start" | "start:tiers", onFinished: OnFinished, port?: number): Promise<Started> {
  const p = port ?? (await freePort());
  const state = mkdtempSync(join(tmpdir(), "episode-relay-local-"));
  const npm = spawn("npm", ["run", "-s", script, "--", "--persist-to", state], {
    cwd: root,
    env: { ...process.env, PORT: String(p), RELAY_SECRET: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  npm.stdout!.on("data", (d) => (log += d));
  npm.stderr!.on("data", (d) => (log += d));
  const exited = new Promise<number | null>((r) => npm.once("exit", (code) => r(code)));
  const s: Started = { npm, port: p, url: `http://127.0.0.1:${p}`, state, log: () => log, exited };
  onFinished(() => killLeft(s));
  const deadline = Date.now() + 100_000;
  for (;;) {
    if (npm.exitCode !== null) throw new Error(`npm run ${script} exited ${npm.exitCode}:\n${log}`);
    if (Date.now() > deadline) throw new Error(`npm run ${script} did not come up:\n${log}`);
    const h = await health(s);
    if (h?.status === 200 && (script === "start" || /Ready on/.test(log))) return s;
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function health(s: Started): Promise<{ status: number; body: Record<string, unknown> } | null> {
  try {
    const res = await fetch(`${s.url}/v1/health`, { signal: AbortSignal.timeout(3_000) });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  } catch {
    return null;
  }
}

/** The command line of a process ("" once gone). */
function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

/** Processes (of any parent) whose command line names this start's state folder. */
function naming(s: Started): string[] {
  return readdirSync("/proc")
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
    .filter((pid) => pid !== process.pid && cmdline(pid).includes(s.state))
    .map((pid) => `${pid} ${cmdline(pid).slice(0, 160)}`);
}

/** Which of `procs` still run (the same process: same pid and start time, not a zombie). */
function stillRunning(procs: Proc[]): string[] {
  const now = processTable();
  return procs
    .filter((p) => {
      const q = now.get(p.pid);
      return q !== undefined && q.start === p.start && q.state !== "Z";
    })
    .map((p) => `${p.pid} ${p.comm} ${cmdline(p.pid).slice(0, 120)}`);
}

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const c = connect(port, "127.0.0.1");
    c.once("connect", () => {
      c.destroy();
      resolve(false);
    });
    c.once("error", () => resolve(true));
  });

/** npm's whole tree now (npm itself first). */
function tree(s: Started): Proc[] {
  const t = processTable();
  return [t.get(s.npm.pid!)!, ...descendants(s.npm.pid!, t)];
}

/** Send `signal` to `pid`, then: nothing of the tree seen just before is left, nothing names the state folder, the port is free. */
async function expectAllGone(s: Started, pid: number, signal: NodeJS.Signals): Promise<void> {
  const before = tree(s);
  expect(
    before.some((p) => p.comm === "workerd"),
    "its runtimes were running",
  ).toBe(true);
  process.kill(pid, signal);
  // each look scans /proc twice (~10 ms of CPU): every 100 ms, not spinning beside the stop it waits on
  await until(
    () => stillRunning(before).length === 0 && naming(s).length === 0,
    45_000,
    `the tree gone after ${signal}`,
    100,
  ).catch(() => {});
  expect(stillRunning(before), `left after ${signal} to ${pid}`).toEqual([]);
  expect(naming(s), "nothing names its state folder").toEqual([]);
  // a killed multi-threaded process shows as a zombie while its other threads still exit, its sockets
  // open until the last one has: the port is given a moment (bounded) to be released
  let free = await portFree(s.port);
  for (const end = Date.now() + 10_000; !free && Date.now() < end; free = await portFree(s.port))
    await new Promise((r) => setTimeout(r, 50));
  expect(free, "its port is free").toBe(true);
}

/** The one process of the tree whose command line matches. */
function find(s: Started, pattern: RegExp): Proc {
  const found = tree(s).filter((p) => pattern.test(cmdline(p.pid)));
  expect(found.length, `one process matching ${pattern}`).toBe(1);
  return found[0]!;
}

/** The runtime (workerd) of a tier: "relay" listens on the public port; the launcher names each tier's own port. */
function workerRuntime(s: Started, tier: "relay" | "episode" | "hub"): Proc {
  const port = tier === "relay" ? s.port : Number(new RegExp(`${tier} tier on :(\\d+)`).exec(s.log())?.[1]);
  const runtimes = tree(s).filter((p) => p.comm === "workerd" && cmdline(p.pid).includes(`entry=127.0.0.1:${port} `));
  expect(runtimes.length, `one runtime for the ${tier} on :${port}`).toBe(1);
  return runtimes[0]!;
}

/** POST frames [from, to) (retrying the relay's 503 while a tier restarts, as a producer does). */
async function push(
  url: string,
  id: string,
  c: GoldenCase,
  from: number,
  to: number,
  producer: ProducerCursor,
): Promise<void> {
  for (let i = from; i < to; i++) {
    const body = encodeEnvelope(producer.envelope(c.frames[i]!));
    for (let attempt = 0; ; attempt++) {
      const res = await fetch(`${url}/v1/episodes/${id}/deltas`, { method: "POST", body }).catch(() => null);
      if (res?.status === 200) {
        await res.arrayBuffer();
        break;
      }
      await res?.arrayBuffer();
      if (attempt > 200) throw new Error(`frame ${i}: ${res?.status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
}

function watch(url: string, id: string): { w: EpisodeWatch; events: WatchEvent[] } {
  const w = watchEpisode(url, id, { WebSocket: WS, backoffMs: [50, 500], giveUpMs: 120_000 });
  const events: WatchEvent[] = [];
  w.on((e) => events.push(e));
  return { w, events };
}

/** A failed test's relay: its whole tree and whatever names its (unique) state folder, with their descendants, by pid. */
function killLeft(s: Started): void {
  const named = naming(s).map((line) => Number(line.split(" ")[0]));
  const pids = new Set([
    ...tree(s)
      .filter(Boolean)
      .map((p) => p.pid),
    ...named,
    ...named.flatMap((pid) => descendants(pid).map((p) => p.pid)),
  ]);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  rmSync(s.state, { recursive: true, force: true });
}

describe("npm start: the relay in one runtime", () => {
  it("a runtime killed is restarted and says so; a watcher resumes and ends exact; SIGINT to npm's pid stops everything", async ({
    onTestFinished,
  }) => {
    const s = await start("start", onTestFinished);
    const c = golden("multi_trace_links");
    const id = fresh("local-plain");
    const producer = new ProducerCursor("p");
    const half = Math.floor(c.frames.length / 2);
    await push(s.url, id, c, 0, half, producer);
    const { w, events } = watch(s.url, id);
    await until(() => w.state === "live", 20_000, "live");
    process.kill(workerRuntime(s, "relay").pid, "SIGKILL");
    await until(() => /the relay is up again \(restart 1\)/.test(s.log()), 60_000, "restarted");
    expect(s.log()).toMatch(/\[dev\] the relay died: its runtime \(workerd \d+\) is gone; restarting it/);
    await push(s.url, id, c, half, c.frames.length, producer);
    await (await fetch(`${s.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();
    await w.finished();
    expect(w.state).toBe("finished");
    expect(events.some((e) => e.type === "reconnecting")).toBe(true);
    expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!)), "golden bytes").toBe(0);
    await expectAllGone(s, s.npm.pid!, "SIGINT");
    expect(s.log()).toMatch(/\[dev\] stopping: SIGINT received/);
  }, 180_000);

  for (const [what, signal, target] of [
    ["SIGTERM to npm's pid", "SIGTERM", "npm"],
    ["SIGKILL to npm's pid (the script sees its parent go)", "SIGKILL", "npm"],
    ["SIGKILL to scripts/relay.mjs (its watchdog stops the runtime)", "SIGKILL", "script"],
  ] as const) {
    it.concurrent(`${what}: nothing is left`, async ({ onTestFinished }) => {
      const s = await start("start", onTestFinished);
      const pid = target === "npm" ? s.npm.pid! : find(s, /scripts\/relay\.mjs/).pid;
      await expectAllGone(s, pid, signal);
    }, 120_000);
  }
});

describe("npm run start:tiers: the episode tier and the hub tier behind the router", () => {
  it("health says each tier's state; a second start on the busy port exits 1, writes nothing, and leaves it untouched; SIGTERM to npm stops everything", async ({
    onTestFinished,
  }) => {
    const s = await start("start:tiers", onTestFinished);
    expect((await health(s))!.body).toMatchObject({
      ok: true,
      tiers: { episodes: { state: "up", restarts: 0 }, hubs: { state: "up", restarts: 0 } },
    });
    const c = golden("tool_calls_pending");
    const id = fresh("local-busy");
    const producer = new ProducerCursor("p");
    await push(s.url, id, c, 0, 3, producer);
    const { w, events } = watch(s.url, id);
    await until(() => w.state === "live", 20_000, "live");
    // the second start's state folder: not made, as it starts nothing
    const secondState = `${s.state}-second`;
    const second = spawnSync("npm", ["run", "-s", "start:tiers", "--", "--persist-to", secondState], {
      cwd: root,
      env: { ...process.env, PORT: String(s.port) },
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(second.status).toBe(1);
    expect(second.stderr).toMatch(
      new RegExp(`port ${s.port} is already in use .*PORT=${s.port + 1} npm run start:tiers`),
    );
    expect(existsSync(secondState), "nothing written").toBe(false);
    await push(s.url, id, c, 3, c.frames.length, producer);
    await (await fetch(`${s.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();
    await w.finished();
    expect(
      events.filter((e) => e.type === "reconnecting"),
      "the running relay's sockets never dropped",
    ).toEqual([]);
    expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!))).toBe(0);
    await expectAllGone(s, s.npm.pid!, "SIGTERM");
  }, 180_000);

  it("either tier's runtime killed: restarted and said; 503 with Retry-After meanwhile; watchers resume and end exact; SIGINT to npm stops everything", async ({
    onTestFinished,
  }) => {
    const s = await start("start:tiers", onTestFinished);
    const c = golden("multi_trace_links");
    const id = fresh("local-tiers");
    const producer = new ProducerCursor("p");
    const third = Math.floor(c.frames.length / 3);
    await push(s.url, id, c, 0, third, producer);
    const watchers = [watch(s.url, id), watch(s.url, id)];
    await until(() => watchers.every(({ w }) => w.state === "live"), 20_000, "live");

    process.kill(workerRuntime(s, "hub").pid, "SIGKILL");
    await until(
      () => /the hub tier died: its runtime \(workerd \d+\) is gone; restarting it/.test(s.log()),
      30_000,
      "the hub tier's death said",
    );
    // not up: the router answers as the relay, with Retry-After (health names the tier)
    const down = await fetch(`${s.url}/v1/health`);
    if (down.status === 503) {
      expect(down.headers.get("x-episode-relay")).toBe("1");
      expect(down.headers.get("retry-after")).toBe("1");
      expect(await down.json()).toMatchObject({ error: "unavailable", tiers: { hubs: { state: "restarting" } } });
    } else await down.arrayBuffer(); // it came back already
    await until(() => /the hub tier is up again \(restart 1\)/.test(s.log()), 60_000, "the hub tier up again");
    // the router (its own process) hears the tiers' state by IPC just after the supervisor logs it
    await expect
      .poll(async () => (await health(s))?.body, { timeout: 10_000 })
      .toMatchObject({ tiers: { episodes: { restarts: 0 }, hubs: { state: "up", restarts: 1 } } });
    await push(s.url, id, c, third, 2 * third, producer);

    process.kill(workerRuntime(s, "episode").pid, "SIGKILL");
    await until(() => /the episode tier is up again \(restart 1\)/.test(s.log()), 60_000, "the episode tier up again");
    await push(s.url, id, c, 2 * third, c.frames.length, producer);
    await (await fetch(`${s.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();
    for (const { w, events } of watchers) {
      await w.finished();
      expect(w.state).toBe("finished");
      expect(events.some((e) => e.type === "refused")).toBe(false);
      expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!)), "golden bytes").toBe(0);
    }
    const got = await fetch(`${s.url}/v1/episodes/${id}`);
    expect(Buffer.compare(Buffer.from(await got.arrayBuffer()), Buffer.from(c.episode!)), "GET: golden bytes").toBe(0);
    await expectAllGone(s, s.npm.pid!, "SIGINT");
  }, 240_000);

  for (const [what, signal, target] of [
    ["SIGKILL to npm's pid", "SIGKILL", /^npm/],
    ["SIGKILL to scripts/relay.mjs --tiers", "SIGKILL", /scripts\/relay\.mjs --tiers/],
    ["SIGTERM to scripts/relay.mjs --tiers", "SIGTERM", /scripts\/relay\.mjs --tiers/],
  ] as const) {
    it.concurrent(`${what}: everything stops, nothing is left`, async ({ onTestFinished }) => {
      const s = await start("start:tiers", onTestFinished);
      const pid = target.source === "^npm" ? s.npm.pid! : find(s, target).pid;
      await expectAllGone(s, pid, signal);
      if (signal === "SIGTERM") expect(s.log()).toMatch(/\[dev\] stopping: SIGTERM received/);
    }, 120_000);
  }
});

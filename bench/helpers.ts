// Helpers shared by the bench sections (bench/<section>.ts): synthetic upstream deltas, figures
// (percentiles, number formatting), the machine (/proc), and the relay with its clients (a local
// relay with storage on tmpfs, a keep-alive HTTP client, WebSockets, throwaway episode ids).
// A section imports these from here, never from another section.

import { existsSync, readdirSync, readFileSync } from "node:fs";
import http from "node:http";
import { WebSocket } from "ws";
import { type LocalRelay, type RelayOptions, startRelay } from "../scripts/relay.mjs";
import {
  encodeLossless,
  encodeReply,
  F64,
  type IngestAck,
  LMap,
  type LValue,
  parseAnswer,
} from "../src/protocol/index.js";

// ---- synthetic upstream deltas (the shapes of test/support/deltas.ts) ----

export const TRACE = "bench-trace";

/** Deterministic pseudo-random text (no run a compressor or a fast path could exploit). */
const TEXT = (() => {
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,";
  let x = 0x9e3779b9;
  let s = "";
  for (let i = 0; i < 300_000; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    s += letters[(x >>> 0) % letters.length];
  }
  return s;
})();

function text(n: number, i: number): string {
  if (n <= 0) return "";
  let out = "";
  let at = (i * 7919) % TEXT.length;
  while (out.length < n) {
    const take = Math.min(n - out.length, TEXT.length - at);
    out += TEXT.slice(at, at + take);
    at = 0;
  }
  return out;
}

/** Routing bytes of one turn: uint8 expert ids, shape [1500, 50, 8]. */
export const ROUTING_SHAPE = [1500, 50, 8];
const ROUTING = (() => {
  const b = new Uint8Array(1500 * 50 * 8);
  let x = 12345;
  for (let i = 0; i < b.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    b[i] = (x >>> 16) & 0x7f;
  }
  return b;
})();

function node(i: number, content: string, routed: LValue): LMap {
  return new LMap([
    ["parent", i === 0 ? null : i - 1],
    ["semantic_parents", []],
    [
      "message",
      new LMap([
        ["role", i % 2 ? "assistant" : "user"],
        ["content", content],
      ]),
    ],
    ["sampled", i % 2 === 1],
    ["timestamp", new F64(1754101000.5 + i)],
    ["token_ids", [1, 2, 3]],
    ["mask", [false, true, true]],
    ["logprobs", [new F64(-0.5), new F64(-1.0)]],
    ["routed_experts", routed],
  ]);
}

/** The `open` header of a bench trace (as verifiers writes it, with a task type). */
function openHeader(trace: string): LMap {
  return new LMap([
    ["version", 1],
    ["id", trace],
    ["verifiers", new LMap([["version", "0.1.15"]])],
    ["task", new LMap([["type", "MathTask"]])],
  ]);
}

function delta(i: number, content: string, routed: LValue, trace: string): Uint8Array {
  const entries: Array<[LValue, LValue]> = [["trace", trace]];
  if (i === 0) {
    entries.push(["open", openHeader(trace)]);
  }
  entries.push(["nodes", [node(i, content, routed)]]);
  return encodeLossless(new LMap(entries));
}

/** Delta `i` of a trace (`i = 0` carries `open`); each appends one node. */
export type DeltaFactory = (i: number) => Uint8Array;

/** Deltas of about `bytes` each (the node's message text is sized to fit). */
export function sizedDeltas(bytes: number, trace = TRACE): DeltaFactory {
  let pad = Math.max(0, bytes - delta(1, "", null, trace).length);
  for (let k = 0; k < 3; k++) pad = Math.max(0, pad + bytes - delta(1, text(pad, 1), null, trace).length);
  return (i) => delta(i, text(pad, i), null, trace);
}

/** Token ids and logprobs the rollout turns take their slices from (deterministic). */
const TOKEN_POOL = (() => {
  const ids: number[] = [];
  const logprobs: F64[] = [];
  let x = 0x2545f491;
  for (let i = 0; i < 4096; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    ids.push((x >>> 8) % 151_000);
    logprobs.push(new F64(-((x >>> 4) % 100_000) / 10_000));
  }
  return { ids, logprobs };
})();

/** Token ids (and logprobs) per rollout turn. */
export const TURN_TOKENS = 200;

/**
 * Delta `k` of an LLM rollout trace (no routing): `k = 0` opens the trace (`open`, then `set` of
 * the agent, empty rewards and `set`); `k ≥ 1` is one turn: a sampled assistant node (TURN_TOKENS
 * token ids, mask and logprobs, a ~800-character message) with its model call, and `set`. About
 * 4 KB per turn. `set` is the trace's changed scalars, e.g. `num_total_tokens`.
 */
export function rolloutDelta(k: number, set: Array<[string, LValue]>, trace = TRACE): Uint8Array {
  if (k === 0) {
    return encodeLossless(
      new LMap([
        ["trace", trace],
        ["open", openHeader(trace)],
        [
          "set",
          new LMap([
            ["agent", new LMap([["name", "solver"]])],
            ["rewards", new LMap([])],
            ["is_completed", false],
            ...set,
          ]),
        ],
      ]),
    );
  }
  const node = k - 1;
  const at = (k * 131) % (TOKEN_POOL.ids.length - TURN_TOKENS);
  const t = 1754101000.5 + k;
  return encodeLossless(
    new LMap([
      ["trace", trace],
      [
        "nodes",
        [
          new LMap([
            ["parent", node === 0 ? null : node - 1],
            ["semantic_parents", []],
            [
              "message",
              new LMap([
                ["role", "assistant"],
                ["content", text(800, k)],
                ["reasoning_content", null],
                ["tool_calls", null],
              ]),
            ],
            ["sampled", true],
            ["timestamp", new F64(t)],
            ["token_ids", TOKEN_POOL.ids.slice(at, at + TURN_TOKENS)],
            ["mask", new Array<boolean>(TURN_TOKENS).fill(true)],
            ["logprobs", TOKEN_POOL.logprobs.slice(at, at + TURN_TOKENS)],
            ["routed_experts", null],
          ]),
        ],
      ],
      [
        "calls",
        [
          new LMap([
            ["node", node],
            ["model", "policy-moe-30b"],
            ["finish_reason", "stop"],
            [
              "usage",
              new LMap([
                ["prompt_tokens", 64 + node * TURN_TOKENS],
                ["completion_tokens", TURN_TOKENS],
              ]),
            ],
            [
              "time",
              new LMap([
                ["start", new F64(t - 0.75)],
                ["end", new F64(t)],
              ]),
            ],
          ]),
        ],
      ],
      ["set", new LMap(set)],
    ]),
  );
}

/** A delta that only `set`s scalars of a trace (e.g. the final `rewards`). */
export function setDelta(set: Array<[string, LValue]>, trace = TRACE): Uint8Array {
  return encodeLossless(
    new LMap([
      ["trace", trace],
      ["set", new LMap(set)],
    ]),
  );
}

/** The upstream reply that ends an episode of one trace: finished with its counts, or failed. */
export function replyBody(
  r: { success: true; nodes: number; calls: number; trace?: string } | { success: false; error: string },
): Uint8Array {
  return encodeReply(
    r.success ? { success: true, traces: [{ id: r.trace ?? TRACE, nodes: r.nodes, calls: r.calls }] } : r,
  );
}

/** Routing deltas: one node with `routed_experts` {__nd__, uint8, [1500, 50, 8], 600,000 B}. */
export function routingDeltas(trace = TRACE): DeltaFactory {
  const nd = new LMap([
    ["__nd__", true],
    ["dtype", "uint8"],
    ["shape", ROUTING_SHAPE],
    ["data", ROUTING],
  ]);
  return (i) => delta(i, text(64, i), nd, trace);
}

/** `routingDeltas` without the routing: the same nodes and text (what an episode's row and search text carry). */
export function textDeltas(trace = TRACE): DeltaFactory {
  return (i) => delta(i, text(64, i), null, trace);
}

// ---- the machine ----

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * /proc/PID/stat (Linux): the command name, and the fields after it (proc(5)'s fields 3 on):
 * `fields[1]` is the parent pid, `fields[11]`..`fields[14]` utime, stime, cutime, cstime in
 * clock ticks (USER_HZ, 100). Throws once the process is gone.
 */
export function procStat(pid: number | string): { comm: string; fields: string[] } {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return {
    comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")),
    fields: stat.slice(stat.lastIndexOf(")") + 2).split(" "),
  };
}

/**
 * CPU used by other processes on this machine (Linux /proc): this bench shares the machine,
 * and a busy neighbour skews the figures. `start()` then `stop()` gives the CPU time of every
 * process except this one and its children (workerd), in % of one core over the interval;
 * undefined where /proc is not readable.
 */
/** CPU ticks (USER_HZ, 100/s) the whole machine spent busy so far, and how many cores it has. */
export function machineBusyTicks(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal
  return f[0]! + f[1]! + f[2]! + f[5]! + f[6]! + f[7]!;
}

export class ForeignCpu {
  private t0 = 0;
  private busy0 = 0;
  private own0 = 0;

  private static busy(): number {
    return machineBusyTicks();
  }

  private static own(): number {
    let ticks = 0;
    const self = procStat("self").fields;
    ticks += Number(self[11]) + Number(self[12]) + Number(self[13]) + Number(self[14]);
    for (const d of readdirSync("/proc")) {
      if (!/^[0-9]+$/.test(d)) continue;
      try {
        const st = procStat(d).fields;
        if (st[1] === String(process.pid)) ticks += Number(st[11]) + Number(st[12]) + Number(st[13]) + Number(st[14]);
      } catch {
        // gone
      }
    }
    return ticks;
  }

  start(): void {
    try {
      this.t0 = performance.now();
      this.busy0 = ForeignCpu.busy();
      this.own0 = ForeignCpu.own();
    } catch {
      this.t0 = NaN;
    }
  }

  /** % of one core used by other processes since `start()`. */
  stop(): number | undefined {
    try {
      if (Number.isNaN(this.t0)) return undefined;
      const ms = performance.now() - this.t0;
      const hz = 100; // USER_HZ
      const foreign = ForeignCpu.busy() - this.busy0 - (ForeignCpu.own() - this.own0);
      return Math.max(0, Math.round((foreign * (1000 / hz) * 100) / ms));
    } catch {
      return undefined;
    }
  }
}

/** Pids of this process's descendants whose command is `comm` (e.g. the workerd of a relay it started). */
export function descendantPids(comm: string, root = process.pid): number[] {
  const children = new Map<number, number[]>();
  const names = new Map<number, string>();
  for (const e of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(e)) continue;
    try {
      const st = procStat(e);
      names.set(Number(e), st.comm);
      const ppid = Number(st.fields[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(e)]);
    } catch {
      // gone
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      if (names.get(c) === comm) out.push(c);
      walk(c);
    }
  };
  walk(root);
  return out;
}

/** CPU time (user + system) the processes `pids` used so far, ms (processes gone count 0). */
export function cpuMsOf(pids: readonly number[]): number {
  let ticks = 0;
  for (const p of pids) {
    try {
      const { fields } = procStat(p);
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // gone
    }
  }
  return ticks * 10; // USER_HZ is 100 on Linux
}

/** wrangler.toml `[vars]` (flat `KEY = "string"` lines): the relay's defaults. */
export function wranglerVars(): Record<string, string> {
  const toml = readFileSync(new URL("../wrangler.toml", import.meta.url), "utf8");
  const section = toml.split(/^\[vars\]\s*$/m)[1]?.split(/^\[/m)[0] ?? "";
  const vars: Record<string, string> = {};
  for (const m of section.matchAll(/^([A-Z0-9_]+)\s*=\s*"([^"]*)"/gm)) vars[m[1]!] = m[2]!;
  return vars;
}

// ---- figures ----

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const k = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[k]!;
}

export function stats(samples: number[]): { p50: number; p99: number } {
  const s = Float64Array.from(samples).sort();
  return { p50: percentile(s as unknown as number[], 50), p99: percentile(s as unknown as number[], 99) };
}

/** A figure for a table cell: a whole number from 100 up (thousands separated), else 1 or 2 decimals. */
export function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (Math.abs(x) >= 100) return Math.round(x).toLocaleString("en-US");
  if (Math.abs(x) >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

// ---- the relay and its clients ----

export function wsUrl(base: string, path: string): string {
  return base.replace(/^http/, "ws") + path;
}

/**
 * Open a ws client with its defaults: it offers permessage-deflate, as every browser does (the
 * relay declines it: one encoding per message on the wire).
 * `setup` attaches listeners before the connection opens: messages that arrive with the 101
 * response (the relay's catch-up) are emitted in the same tick as `open`, before any code
 * awaiting this promise runs.
 */
export function openSocket(
  url: string,
  setup?: (ws: WebSocket) => void,
  options?: ConstructorParameters<typeof WebSocket>[2],
): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, options);
    ws.binaryType = "nodebuffer";
    setup?.(ws);
    const fail = (e: unknown) => reject(e instanceof Error ? e : new Error(String(e)));
    ws.once("open", () => {
      ws.off("error", fail);
      ws.on("error", () => {}); // a later failure shows as `close`, which the callers watch
      resolve(ws);
    });
    ws.once("error", fail);
    ws.once("unexpected-response", (_req, res) =>
      fail(new Error(`${url}: HTTP ${res.statusCode} instead of an upgrade`)),
    );
  });
}

export function closeSocket(ws: WebSocket, timeoutMs = 2000): Promise<void> {
  if (ws.readyState === WebSocket.CLOSED) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      ws.terminate();
      resolve();
    }, timeoutMs);
    ws.once("close", () => {
      clearTimeout(t);
      resolve();
    });
    if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
    else ws.close(1000, "bench done");
  });
}

/**
 * A keep-alive HTTP/1.1 client on one connection (node:http). Node's global `fetch` (undici)
 * costs ~0.5 ms more per request here, more than the Worker's own round trip.
 */
export class HttpClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private readonly host: string;
  private readonly port: number;

  constructor(base: string) {
    const u = new URL(base);
    this.host = u.hostname;
    this.port = Number(u.port);
  }

  request(
    method: string,
    path: string,
    body?: Uint8Array,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: Buffer; headers: http.IncomingHttpHeaders }> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          host: this.host,
          port: this.port,
          path,
          method,
          agent: this.agent,
          headers: body ? { ...headers, "content-length": String(body.length) } : headers,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks),
              headers: res.headers,
            }),
          );
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  }

  async post(path: string, body: Uint8Array): Promise<IngestAck> {
    const res = await this.request("POST", path, body, { "content-type": "application/msgpack" });
    const answer = res.status === 200 ? parseAnswer(res.body.toString()) : null;
    if (!answer?.ok) throw new Error(`POST ${path}: ${res.status} ${res.body.toString().slice(0, 300)}`);
    return answer;
  }

  async deleteEpisode(id: string): Promise<void> {
    await this.request("DELETE", `/v1/episodes/${id}`);
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Where the relay's Durable Object SQLite files live (see `startBenchRelay`). */
export type Storage = "tmpfs" | "disk";

/**
 * `startRelay` with its Durable Object storage on tmpfs or on disk. Miniflare keeps
 * "non-persisted" storage in a fresh directory under `os.tmpdir()`, i.e. SQLite files on the
 * machine's disk (ext4 here), and workerd syncs each commit: ~2-3 ms per acknowledged write on
 * this machine, which says more about the VM's disk than about the relay (and matches nothing
 * in production, where the output gate waits for replicated storage). "tmpfs" points
 * `os.tmpdir()` at /dev/shm while Miniflare starts, so the storage really is in memory.
 */
export async function startBenchRelay(
  storage: Storage,
  vars: Record<string, string> = {},
  options: RelayOptions = {},
): Promise<LocalRelay> {
  const shm = "/dev/shm";
  if (storage === "disk" || !existsSync(shm)) return startRelay({ ...options, vars });
  const before = process.env.TMPDIR;
  process.env.TMPDIR = shm;
  try {
    return await startRelay({ ...options, vars });
  } finally {
    if (before === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = before;
  }
}

let episodeCounter = 0;

/** A fresh episode id for one measurement (unique in this process and across runs). */
export function episodeId(tag: string): string {
  return `bench-${tag}-${process.pid}-${Date.now().toString(36)}-${++episodeCounter}`;
}

/** `GET /v1/health` every 250 ms while a case runs: the slowest answer (a timeout counts as 10 s) and the failures. */
export function healthProbe(base: string): { stop(): Promise<{ probes: number; maxMs: number; failures: number }> } {
  let stopped = false;
  let probes = 0;
  let maxMs = 0;
  let failures = 0;
  const loop = (async () => {
    while (!stopped) {
      const t = performance.now();
      try {
        const r = await fetch(`${base}/v1/health`, { signal: AbortSignal.timeout(10_000) });
        await r.arrayBuffer();
        if (!r.ok) failures++;
      } catch {
        failures++;
      }
      probes++;
      maxMs = Math.max(maxMs, performance.now() - t);
      await sleep(250);
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { probes, maxMs, failures };
    },
  };
}

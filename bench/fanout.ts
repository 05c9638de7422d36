// Bench section `fanout`: one producer, N watchers of one episode, against the real relay as
// `npm run start:tiers` runs it (scripts/relay.mjs `tiers`: the episode tier and the hub tier in two
// workerd processes, one address; Durable Object storage on tmpfs, see bench/helpers.ts
// `startBenchRelay`) and, under identical load, a bare Node `ws` broadcast server (no logic: every
// message it gets on a producer connection goes to every watcher connection; it runs in a process
// of its own, as workerd does, so each server's CPU time is read apart from the clients'). Every
// client offers permessage-deflate (ws defaults, as browsers do); neither server takes it. The
// producer reaches the relay at its address; the watchers at the hub tier's own (its Worker, then
// its hubs): the local router is a Node process that moves every byte, and at 1000 watchers ×
// 16 KiB × 50/s it, not the relay, would be measured (on Cloudflare the edge carries them).
//
// Cells: N watchers ∈ {10, 100, 1000} × delta sizes {1, 16, 256} KiB (one node whose message
// text fills the size). Per cell and server, fresh watchers (and for the relay a fresh episode
// whose first delta, carrying `open`, is sent before the watchers join; each watcher waits for
// its `caught_up`), a warm-up of WINDOW deltas, then:
//   latency     a fixed offered rate of 50 deltas/s (LAT_COUNT deltas, fewer when N × size is
//               large, so the bytes delivered stay bounded): p50/p99 of producer send → watcher
//               receipt over every (watcher, delta);
//   throughput  the maximum rate with at most WINDOW deltas in flight, where in flight means
//               not yet received by every watcher, for ~MAX_MS: deltas/s delivered per watcher
//               (deltas ÷ time from the first send until every watcher had the last one),
//               delivered MB/s (all watchers; MB = 10^6 B of delta), p50/p99 as well.
// The producer writes over the producer socket (`/ingest`; envelopes, acks checked) to the
// relay and over a plain socket to the bare server, which gets the same delta bytes wrapped as
// a watcher `frames` message (so both sides' watchers decode the same shape). Watchers: `ws`
// clients in this process (`?routing=1`, the default variant), msgpack-decoded, every frame's
// seq checked (each watcher must see every delta once, in order), an ack every 1 MiB received
// (as the relay's watcher protocol asks; the bare server ignores it, at the same client cost).
// Send and receipt times come from the same clock (this process). Beside the rates, each server's
// CPU (user + system, /proc) per delivery (one delta to one watcher) over the measured phases, and
// this process's (the clients'): at 1000 watchers the clients' one JS thread is the bound, and on
// this 2-core machine what a server spends is CPU the clients do not get.
// The clients (up to 1000 sockets in one Node process) may well be the bottleneck: that is why
// the bare server under the same clients is the baseline. A second baseline, a bare broadcast on
// workerd (bench/bare-workerd.ts: one Durable Object, no relay logic), under the same clients,
// tells what the runtime costs from what the relay adds.

import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { Decoder } from "@msgpack/msgpack";
import type { WebSocket } from "ws";
import { relayCompat } from "../scripts/relay.mjs";
import { ACK_BYTES, ackMessage, encodeEnvelope, framesMessage, ProducerCursor } from "../src/protocol/index.js";
import { type BareWorkerd, startBareWorkerd } from "./bare-workerd.js";
import { type BenchOptions, sig } from "./harness.js";
import {
  closeSocket,
  cpuMsOf,
  type DeltaFactory,
  descendantPids,
  episodeId,
  ForeignCpu,
  fmt,
  HttpClient,
  openSocket,
  sizedDeltas,
  sleep,
  startBenchRelay,
  stats,
  wsUrl,
} from "./helpers.js";

export const name = "fanout";

const WATCHERS = [10, 100, 1000];
const SIZES_KIB = [1, 16, 256];
const RATE = 50;
const WINDOW = 8;
/** Fixed-rate phase: at most this many deltas (2 s at 50/s) ... */
const LAT_COUNT = 100;
/** ... and at most this many bytes delivered in all (at least LAT_MIN deltas). */
const LAT_BUDGET = 2 * 1024 ** 3;
const LAT_MIN = 8;
/** Maximum-rate phase: send for about this long. */
const MAX_MS = 2000;
/** A phase that has not been delivered to every watcher this long after its last send fails. */
const DRAIN_TIMEOUT_MS = 60_000;
const CONNECT_PARALLEL = 50;

/** The cell the issue sets targets for. */
export const TARGET_CELL = "1000x16KiB";
export const TARGETS = { minThroughputRatio: 1.0, maxP99Ratio: 2.0 } as const;

/** Runs of the target cell (ws, bare workerd, then relay, each time); its figures are the medians. */
const TARGET_RUNS = 3;

/** Who serves a cell: the relay, the bare ws server, or the bare broadcast on workerd (bench/bare-workerd.ts). */
type Target = "relay" | "ws" | "workerd";

// ---- the bare broadcast server (its own process) ----

const BARE_SERVER = `
const { WebSocketServer } = require(process.env.WS_PATH);
// permessage-deflate: ws's server declines it by default (as the relay does)
const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, maxPayload: 64 * 1024 * 1024 });
const watchers = new Set();
wss.on("connection", (ws, req) => {
  if (req.url.startsWith("/producer")) {
    ws.on("message", (data, isBinary) => { for (const w of watchers) w.send(data, { binary: isBinary }); });
  } else {
    watchers.add(ws);
    ws.on("message", (data, isBinary) => { if (!isBinary && String(data) === "ping") ws.send("pong"); });
    ws.on("close", () => watchers.delete(ws));
  }
});
wss.on("listening", () => process.stdout.write(JSON.stringify({ port: wss.address().port }) + "\\n"));
process.stdin.on("end", () => { for (const c of wss.clients) c.terminate(); wss.close(() => process.exit(0)); });
process.stdin.resume();
`;

interface BareServer {
  url: string;
  /** Its process (its CPU time is the baseline's server cost). */
  pid: number;
  stop(): Promise<void>;
}

/**
 * The bare server in a process of its own (a core to itself, as workerd has, and its CPU time
 * read apart from the clients'); it stops when its stdin closes, so it never outlives the bench.
 */
async function startBareServer(): Promise<BareServer> {
  const wsPath = createRequire(import.meta.url).resolve("ws");
  const child = spawn(process.execPath, ["-e", BARE_SERVER], {
    env: { ...process.env, WS_PATH: wsPath },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += String(d);
      if (out.includes("\n")) resolve((JSON.parse(out.slice(0, out.indexOf("\n"))) as { port: number }).port);
    });
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`bare ws server exited ${code}`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    stop: async () => {
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.stdin!.end();
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}

// ---- watchers ----

interface Phase {
  /** Seqs [first, end) belong to the phase. */
  first: number;
  end: number;
  latencies: number[];
  /** Time every watcher had the phase's last seq. */
  doneAt: number;
}

/** N watcher sockets of one cell, and the producer's view of what they received. */
class Watchers {
  readonly sockets: WebSocket[] = [];
  /** Per seq: how many watchers received it. */
  private received = new Uint32Array(1024);
  /** Per seq: when the producer sent it. */
  sentAt = new Float64Array(1024);
  /** Seqs received by every watcher, counted in order (they complete in order here). */
  complete = 0;
  phase: Phase | null = null;
  errors: string[] = [];
  private onProgress: (() => void) | null = null;
  private readonly decoder = new Decoder();

  constructor(
    readonly target: Target,
    readonly n: number,
    /** Seqs up to this one were sent before the watchers joined (relay: the `open` delta). */
    readonly startSeq: number,
  ) {
    this.complete = startSeq;
  }

  grow(seq: number): void {
    if (seq < this.received.length) return;
    let size = this.received.length;
    while (size <= seq) size *= 2;
    const r = new Uint32Array(size);
    r.set(this.received);
    this.received = r;
    const s = new Float64Array(size);
    s.set(this.sentAt);
    this.sentAt = s;
  }

  async connect(url: string): Promise<void> {
    for (let k = 0; k < this.n; k += CONNECT_PARALLEL) {
      const batch = Array.from({ length: Math.min(CONNECT_PARALLEL, this.n - k) }, () => this.connectOne(url));
      this.sockets.push(...(await Promise.all(batch)));
    }
  }

  private connectOne(url: string): Promise<WebSocket> {
    let last = this.startSeq;
    let received = 0;
    let ackedAt = 0;
    return new Promise<WebSocket>((resolve, reject) => {
      let opened: WebSocket | null = null;
      let caughtUp = this.target !== "relay"; // the bare servers have no catch-up
      const ready = () => {
        if (opened && caughtUp) resolve(opened);
      };
      // listeners go on before `open`: the relay's catch-up arrives with the 101 response
      const setup = (ws: WebSocket) => {
        ws.on("close", (code, reason) => {
          const msg = `watcher closed ${code} ${String(reason)}`;
          if (!caughtUp) reject(new Error(msg));
          else if (!this.closing) this.fail(msg);
        });
        ws.on("message", (data: Buffer, isBinary: boolean) => {
          const now = performance.now();
          if (!isBinary) return; // "pong"
          received += data.length;
          // catching up: every message; live: every ACK_BYTES (the watcher protocol)
          if (!caughtUp || received - ackedAt >= ACK_BYTES) {
            ackedAt = received;
            ws.send(ackMessage(received));
          }
          const m = this.decoder.decode(data) as { type: string; seq?: number; frames?: Array<[number, Uint8Array]> };
          if (m.type === "frames") {
            for (const [seq] of m.frames!) {
              if (seq !== last + 1) this.fail(`watcher got seq ${seq} after ${last}`);
              last = seq;
              this.receipt(seq, now);
            }
          } else if (m.type === "caught_up") {
            if (m.seq !== this.startSeq) reject(new Error(`caught_up at ${m.seq}, expected ${this.startSeq}`));
            caughtUp = true;
            ready();
          } else if (m.type !== "hello" && m.type !== "snapshot") this.fail(`unexpected ${m.type} message`);
        });
      };
      openSocket(url, setup).then((ws) => {
        opened = ws;
        ready();
      }, reject);
    });
  }

  closing = false;

  private fail(msg: string): void {
    if (this.errors.length < 5) this.errors.push(msg);
    this.onProgress?.();
  }

  private receipt(seq: number, now: number): void {
    if (seq >= this.received.length) return this.fail(`seq ${seq} never sent`);
    const c = ++this.received[seq]!;
    const p = this.phase;
    if (p && seq >= p.first && seq < p.end) p.latencies.push(now - this.sentAt[seq]!);
    if (c === this.n) {
      while (this.received[this.complete + 1] === this.n) this.complete++;
      if (p && this.complete >= p.end - 1 && p.doneAt === 0) p.doneAt = now;
      this.onProgress?.();
    }
  }

  /** Resolve when `check` holds (re-checked on every completed seq), or fail after `timeoutMs`. */
  until(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.onProgress = null;
        reject(
          new Error(
            `${this.target}: ${what}: not delivered to all ${this.n} watchers within ${timeoutMs} ms (complete ${this.complete})`,
          ),
        );
      }, timeoutMs);
      this.onProgress = () => {
        if (this.errors.length) {
          clearTimeout(t);
          this.onProgress = null;
          reject(new Error(`${this.target}: ${this.errors.join("; ")}`));
        } else if (check()) {
          clearTimeout(t);
          this.onProgress = null;
          resolve();
        }
      };
      this.onProgress();
    });
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.sockets.map((ws) => closeSocket(ws)));
  }
}

// ---- producer ----

interface Producer {
  /** Send delta `seq` now (records the send time). */
  send(seq: number): void;
  close(): Promise<void>;
  errors: string[];
}

async function relayProducer(base: string, id: string, make: DeltaFactory): Promise<Producer> {
  const cursor = new ProducerCursor("bench");
  const errors: string[] = [];
  let acked = 0;
  let sent = 0;
  let waiter: (() => void) | null = null;
  const ws = await openSocket(wsUrl(base, `/v1/episodes/${id}/ingest`), (ws) =>
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      const ack = JSON.parse(String(data)) as { ok: boolean };
      if (isBinary || !ack.ok) errors.push(`ingest refused: ${String(data).slice(0, 300)}`);
      acked++;
      if (acked === sent) waiter?.();
    }),
  );
  const p: Producer = {
    errors,
    send(seq) {
      const d = make(seq - 1); // delta index 0 (with `open`) is seq 1
      const msg = encodeEnvelope(cursor.envelope(d));
      cursor.acknowledge(); // pipelined: the acked view advances as sent (see bench/ingest.ts)
      sent++;
      ws.send(msg);
    },
    async close() {
      if (acked < sent) await Promise.race([new Promise<void>((r) => (waiter = r)), sleep(5000)]);
      await closeSocket(ws);
    },
  };
  return p;
}

async function bareProducer(base: string, make: DeltaFactory): Promise<Producer> {
  const ws = await openSocket(wsUrl(base, "/producer"));
  return {
    errors: [],
    send(seq) {
      ws.send(framesMessage([{ seq, delta: make(seq - 1) }]));
    },
    close: () => closeSocket(ws),
  };
}

// ---- one cell ----

interface PhaseFigures {
  deltas: number;
  ms: number;
  p50: number;
  p99: number;
  offeredPerS: number;
}

interface CellFigures {
  latency: PhaseFigures;
  throughput: PhaseFigures;
  deltaBytes: number;
}

/** What runCell calls around its measured phases. */
export interface CellHooks {
  measuring?: () => Promise<void>;
  measured?: () => Promise<void>;
}

export async function runCell(
  target: Target,
  url: string,
  client: HttpClient | null,
  n: number,
  sizeKiB: number,
  latCount: number,
  maxMs: number,
  /** Called around the measured phases (after the watchers joined; before they leave): for CPU time, profiling. */
  hooks: CellHooks = {},
  /** Where watchers connect, if not `url` (the relay's hub tier, skipping the local router). */
  watchBase?: string,
): Promise<CellFigures> {
  const make = sizedDeltas(sizeKiB * 1024);
  const deltaBytes = make(5).length;
  let id = "";
  let producer: Producer;
  let startSeq: number;
  if (target === "relay") {
    id = episodeId(`fanout-${n}x${sizeKiB}`);
    producer = await relayProducer(url, id, make);
    // the first delta (with `open`) before anyone watches; confirmed by the status call below
    producer.send(1);
    startSeq = 1;
  } else {
    producer = await bareProducer(url, make);
    startSeq = 1;
  }
  const w = new Watchers(target, n, startSeq);
  try {
    if (target === "relay") {
      // wait for the `open` delta's commit: a watcher joining now is caught up at seq 1
      for (let k = 0; k < 200; k++) {
        const res = await client!.request("GET", `/v1/episodes/${id}/status`);
        if (res.status === 200 && (JSON.parse(res.body.toString()) as { seq: number }).seq === 1) break;
        await sleep(10);
      }
    }
    await w.connect(
      target === "relay" ? wsUrl(watchBase ?? url, `/v1/episodes/${id}/watch?routing=1`) : wsUrl(url, "/watch"),
    );
    let seq = startSeq;
    const send = () => {
      seq++;
      w.grow(seq);
      w.sentAt[seq] = performance.now();
      producer.send(seq);
    };
    const check = () => {
      if (producer.errors.length) throw new Error(`${target}: ${producer.errors[0]}`);
    };

    await hooks.measuring?.();
    // warm-up: WINDOW deltas at once
    for (let k = 0; k < WINDOW; k++) send();
    await w.until(() => w.complete >= seq, DRAIN_TIMEOUT_MS, "warm-up");
    check();

    // latency: fixed offered rate
    const lat: Phase = { first: seq + 1, end: seq + 1 + latCount, latencies: [], doneAt: 0 };
    w.phase = lat;
    const t0 = performance.now();
    let firstSend = 0;
    let lastSend = 0;
    await new Promise<void>((resolve) => {
      let k = 0;
      const tick = () => {
        while (k < latCount && performance.now() >= t0 + (k * 1000) / RATE) {
          send();
          if (k === 0) firstSend = w.sentAt[seq]!;
          lastSend = w.sentAt[seq]!;
          k++;
        }
        if (k < latCount) setTimeout(tick, Math.max(0, t0 + (k * 1000) / RATE - performance.now()));
        else resolve();
      };
      tick();
    });
    await w.until(() => w.complete >= lat.end - 1, DRAIN_TIMEOUT_MS, "fixed-rate phase");
    check();
    const ls = stats(lat.latencies);
    const latency: PhaseFigures = {
      deltas: latCount,
      ms: lat.doneAt - firstSend,
      p50: ls.p50,
      p99: ls.p99,
      offeredPerS: latCount > 1 ? ((latCount - 1) * 1000) / (lastSend - firstSend) : NaN,
    };

    // throughput: at most WINDOW deltas not yet received by every watcher
    const thr: Phase = { first: seq + 1, end: Number.MAX_SAFE_INTEGER, latencies: [], doneAt: 0 };
    w.phase = thr;
    const start = performance.now();
    let stop = false;
    await w.until(
      () => {
        while (!stop && seq - w.complete < WINDOW) {
          send();
          if (performance.now() - start >= maxMs) stop = true;
        }
        if (stop && thr.end === Number.MAX_SAFE_INTEGER) thr.end = seq + 1;
        return stop && w.complete >= seq;
      },
      maxMs + DRAIN_TIMEOUT_MS,
      "maximum-rate phase",
    );
    check();
    const count = thr.end - thr.first;
    const ts = stats(thr.latencies);
    const throughput: PhaseFigures = {
      deltas: count,
      ms: thr.doneAt - start,
      p50: ts.p50,
      p99: ts.p99,
      offeredPerS: NaN,
    };
    await hooks.measured?.();
    return { latency, throughput, deltaBytes };
  } finally {
    await w.close();
    await producer.close();
    if (client && id) await client.deleteEpisode(id);
  }
}

/** One run of a cell: the bare ws server's (b), the bare workerd broadcast's (w), then the relay's (r). */
type Pair = { b: MeasuredCell; w: MeasuredCell; r: MeasuredCell };

/** A cell with the CPU its server and this process (the clients) spent in the measured phases. */
interface MeasuredCell extends CellFigures {
  serverCpuMs: number;
  clientCpuMs: number;
  /** Deliveries in the measured phases (deltas × watchers). */
  delivered: number;
}

/**
 * `run` (a runCell with the hooks given) with the CPU time `serverPids` and this process spent
 * between its hooks; `n` watchers.
 */
async function measuredCell(
  serverPids: readonly number[],
  n: number,
  run: (hooks: CellHooks) => Promise<CellFigures>,
): Promise<MeasuredCell> {
  const at = () => ({ server: cpuMsOf(serverPids), client: cpuMsOf([process.pid]) });
  let t0 = at();
  let t1 = t0;
  const f = await run({
    measuring: async () => {
      t0 = at();
    },
    measured: async () => {
      t1 = at();
    },
  });
  return {
    ...f,
    serverCpuMs: t1.server - t0.server,
    clientCpuMs: t1.client - t0.client,
    delivered: n * (WINDOW + f.latency.deltas + f.throughput.deltas),
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
}

// ---- the section ----

function latCountFor(n: number, sizeKiB: number): number {
  return Math.max(LAT_MIN, Math.min(LAT_COUNT, Math.floor(LAT_BUDGET / (n * sizeKiB * 1024))));
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  opts.log(
    "fanout: starting the relay in two tiers (storage on tmpfs), the bare ws server and the bare workerd broadcast (each its own process)",
  );
  const relay = await startBenchRelay("tmpfs", {}, { tiers: true });
  const client = new HttpClient(relay.url);
  let bare: BareServer | null = null;
  let bareWorkerd: BareWorkerd | null = null;
  let load0 = 0;
  const out: Record<string, unknown> = {};
  const rows: string[][] = [];
  try {
    bare = await startBareServer();
    const relayPids = descendantPids("workerd");
    bareWorkerd = await startBareWorkerd(await relayCompat());
    // warm-up (JIT of workerd, of the bare servers and of this process), not reported
    await runCell("ws", bare.url, null, 10, 1, 20, 500);
    await runCell("workerd", bareWorkerd.url, null, 10, 1, 20, 500);
    await runCell("relay", relay.url, client, 10, 1, 20, 500, {}, relay.watchUrl);
    load0 = loadavg()[0]!;
    for (const n of WATCHERS) {
      for (const sizeKiB of SIZES_KIB) {
        const key = `${n}x${sizeKiB}KiB`;
        if (opts.cases && !opts.cases.includes(key)) continue; // --cases 1000x16KiB: only that cell
        const latCount = latCountFor(n, sizeKiB);
        const started = performance.now();
        const foreign = new ForeignCpu();
        foreign.start();
        // bare server first, then the relay: same clients, sizes, rate and window; the target cell
        // TARGET_RUNS times (its ratios are the runs' medians: one pair at the clients' bound is noisy)
        const runs: Pair[] = [];
        for (let k = 0; k < (key === TARGET_CELL ? TARGET_RUNS : 1); k++) {
          const b = await measuredCell([bare.pid], n, (hooks) =>
            runCell("ws", bare!.url, null, n, sizeKiB, latCount, MAX_MS, hooks),
          );
          const w = await measuredCell(bareWorkerd.pids, n, (hooks) =>
            runCell("workerd", bareWorkerd!.url, null, n, sizeKiB, latCount, MAX_MS, hooks),
          );
          const r = await measuredCell(relayPids, n, (hooks) =>
            runCell("relay", relay.url, client, n, sizeKiB, latCount, MAX_MS, hooks, relay.watchUrl),
          );
          runs.push({ b, w, r });
        }
        const otherCpu = foreign.stop();
        const perW = (f: PhaseFigures) => (f.deltas * 1000) / f.ms;
        const mbps = (f: PhaseFigures, bytes: number) => (n * f.deltas * bytes) / 1e3 / f.ms;
        const m = (pick: (x: Pair) => number) => median(runs.map(pick));
        const spread = (pick: (x: Pair) => number) => (runs.length > 1 ? runs.map((x) => sig(pick(x), 3)) : undefined);
        const thrRatio = (x: Pair) => perW(x.r.throughput) / perW(x.b.throughput);
        const p99Ratio = (x: Pair) => x.r.latency.p99 / x.b.latency.p99;
        const thrVsWorkerd = (x: Pair) => perW(x.r.throughput) / perW(x.w.throughput);
        const p99VsWorkerd = (x: Pair) => x.r.latency.p99 / x.w.latency.p99;
        const usPer = (c: MeasuredCell, ms: number) => (ms * 1000) / c.delivered;
        const deltaBytes = runs[0]!.r.deltaBytes;
        /** A figure's median over the runs, for the relay and for ws. */
        const both = (pick: (c: MeasuredCell) => number, digits?: number) =>
          [
            sig(
              m((x) => pick(x.r)),
              digits,
            ),
            sig(
              m((x) => pick(x.b)),
              digits,
            ),
          ] as const;
        const [perWatcher, wsPerWatcher] = both((c) => perW(c.throughput));
        const [p50, wsP50] = both((c) => c.latency.p50, 3);
        const [p99, wsP99] = both((c) => c.latency.p99, 3);
        // CPU per delivery (one delta to one watcher) over the measured phases: the servers' own cost,
        // apart from the clients' bound (relay: both workerd tiers; ws: its process)
        const [serverCpu, wsServerCpu] = both((c) => usPer(c, c.serverCpuMs), 3);
        const [clientCpu, wsClientCpu] = both((c) => usPer(c, c.clientCpuMs), 3);
        const [mbPerS, wsMbPerS] = both((c) => mbps(c.throughput, deltaBytes));
        const [maxP50, wsMaxP50] = both((c) => c.throughput.p50, 3);
        const [maxP99, wsMaxP99] = both((c) => c.throughput.p99, 3);
        const [offered, wsOffered] = both((c) => c.latency.offeredPerS, 3);
        const [thrDeltas, wsThrDeltas] = both((c) => c.throughput.deltas);
        /** A figure's median over the runs, for the bare workerd broadcast. */
        const onWorkerd = (pick: (c: MeasuredCell) => number, digits?: number) =>
          sig(
            m((x) => pick(x.w)),
            digits,
          );
        const fig = {
          deltas_per_s_per_watcher: perWatcher,
          ws_deltas_per_s_per_watcher: wsPerWatcher,
          ratio_throughput_vs_ws: sig(m(thrRatio), 3),
          p50_ms: p50,
          p99_ms: p99,
          ws_p50_ms: wsP50,
          ws_p99_ms: wsP99,
          ratio_p99_vs_ws: sig(m(p99Ratio), 3),
          workerd_deltas_per_s_per_watcher: onWorkerd((c) => perW(c.throughput)),
          workerd_p99_ms: onWorkerd((c) => c.latency.p99, 3),
          workerd_server_cpu_us_per_delivery: onWorkerd((c) => usPer(c, c.serverCpuMs), 3),
          ratio_throughput_vs_workerd: sig(m(thrVsWorkerd), 3),
          ratio_p99_vs_workerd: sig(m(p99VsWorkerd), 3),
          /** The bare workerd broadcast against the bare ws server: what the runtime alone costs. */
          ratio_workerd_throughput_vs_ws: sig(
            m((x) => perW(x.w.throughput) / perW(x.b.throughput)),
            3,
          ),
          ...(runs.length > 1
            ? {
                runs: runs.length,
                ratio_throughput_runs: spread(thrRatio),
                ratio_p99_runs: spread(p99Ratio),
                ratio_throughput_vs_workerd_runs: spread(thrVsWorkerd),
              }
            : {}),
          server_cpu_us_per_delivery: serverCpu,
          ws_server_cpu_us_per_delivery: wsServerCpu,
          ratio_server_cpu_vs_ws: sig(
            m((x) => usPer(x.r, x.r.serverCpuMs) / usPer(x.b, x.b.serverCpuMs)),
            3,
          ),
          client_cpu_us_per_delivery: clientCpu,
          ws_client_cpu_us_per_delivery: wsClientCpu,
          mb_per_s: mbPerS,
          ws_mb_per_s: wsMbPerS,
          max_rate_p50_ms: maxP50,
          max_rate_p99_ms: maxP99,
          ws_max_rate_p50_ms: wsMaxP50,
          ws_max_rate_p99_ms: wsMaxP99,
          offered_per_s: offered,
          ws_offered_per_s: wsOffered,
          latency_deltas: latCount,
          throughput_deltas: thrDeltas,
          ws_throughput_deltas: wsThrDeltas,
          delta_bytes: deltaBytes,
          ...(otherCpu === undefined ? {} : { other_cpu_pct: otherCpu }),
        };
        out[key] = fig;
        opts.log(
          `fanout: ${key}: ${fig.deltas_per_s_per_watcher} deltas/s/watcher (ws ${fig.ws_deltas_per_s_per_watcher}, ×${fig.ratio_throughput_vs_ws}); ` +
            `at ${RATE}/s p50 ${fig.p50_ms} p99 ${fig.p99_ms} ms (ws ${fig.ws_p50_ms} / ${fig.ws_p99_ms}, ×${fig.ratio_p99_vs_ws}); ` +
            `server CPU ${fig.server_cpu_us_per_delivery} µs/delivery (ws ${fig.ws_server_cpu_us_per_delivery}, ×${fig.ratio_server_cpu_vs_ws}); ` +
            `bare workerd ${fig.workerd_deltas_per_s_per_watcher} d/s/w (× ws ${fig.ratio_workerd_throughput_vs_ws}; relay × workerd ${fig.ratio_throughput_vs_workerd}, p99 × ${fig.ratio_p99_vs_workerd}), ${fig.workerd_server_cpu_us_per_delivery} µs/delivery` +
            (runs.length > 1
              ? `; ${runs.length} runs, × ws ${fig.ratio_throughput_runs!.join("/")}, p99 × ${fig.ratio_p99_runs!.join("/")}`
              : "") +
            ` [${((performance.now() - started) / 1000).toFixed(1)} s]`,
        );
        let check = "";
        if (key === TARGET_CELL) {
          const okT = fig.ratio_throughput_vs_ws >= TARGETS.minThroughputRatio;
          const okL = fig.ratio_p99_vs_ws <= TARGETS.maxP99Ratio;
          check = `thr ${okT ? "ok" : "MISSED"} (≥ ${TARGETS.minThroughputRatio}×), p99 ${okL ? "ok" : "MISSED"} (≤ ${TARGETS.maxP99Ratio}×)`;
        }
        rows.push([
          key,
          String(fig.delta_bytes),
          fmt(fig.deltas_per_s_per_watcher),
          fmt(fig.ws_deltas_per_s_per_watcher),
          fmt(fig.ratio_throughput_vs_ws),
          fmt(fig.mb_per_s),
          fmt(fig.ws_mb_per_s),
          fmt(fig.p50_ms),
          fmt(fig.p99_ms),
          fmt(fig.ws_p50_ms),
          fmt(fig.ws_p99_ms),
          fmt(fig.ratio_p99_vs_ws),
          fmt(fig.workerd_deltas_per_s_per_watcher),
          fmt(fig.ratio_throughput_vs_workerd),
          fmt(fig.ratio_p99_vs_workerd),
          fmt(fig.server_cpu_us_per_delivery),
          fmt(fig.ws_server_cpu_us_per_delivery),
          fmt(fig.workerd_server_cpu_us_per_delivery),
          fmt(fig.client_cpu_us_per_delivery),
          fmt(fig.ws_client_cpu_us_per_delivery),
          `${fig.latency_deltas}`,
          fig.other_cpu_pct === undefined ? "" : String(fig.other_cpu_pct),
          check,
        ]);
      }
    }
  } finally {
    client.close();
    await Promise.all([relay.stop(), bare?.stop(), bareWorkerd?.stop()]);
  }
  out.settings = {
    rate_per_s: RATE,
    window: WINDOW,
    max_rate_ms: MAX_MS,
    latency_deltas_max: LAT_COUNT,
    latency_bytes_budget: LAT_BUDGET,
    storage: "tmpfs",
    mb: 1e6,
    variant: "routing=1",
    loadavg_1min_start_end: [sig(load0, 2), sig(loadavg()[0]!, 2)],
  };
  out.notes =
    "client-side bound: all watchers are ws clients in one Node process (the bare ws server is the baseline under the same clients)";
  opts.table({
    title: `fanout: 1 producer (socket) → N watchers of one episode; relay vs bare Node ws broadcast server, same clients`,
    columns: [
      "",
      "delta B",
      "d/s/watcher",
      "ws d/s/w",
      "× ws",
      "MB/s",
      "ws MB/s",
      "p50 ms",
      "p99 ms",
      "ws p50",
      "ws p99",
      "p99 × ws",
      "wd d/s/w",
      "× wd",
      "p99 × wd",
      "srv µs/d",
      "ws srv µs/d",
      "wd srv µs/d",
      "cli µs/d",
      "ws cli µs/d",
      "lat n",
      "other CPU %",
      "target",
    ],
    rows,
    notes: [
      `Throughput (d/s/watcher, MB/s = all watchers, 10^6 B of delta): maximum rate, ≤ ${WINDOW} deltas not yet received by every watcher, ~${MAX_MS / 1000} s.`,
      `Latency (p50/p99, send → each watcher's receipt, same clock): offered ${RATE} deltas/s for "lat n" deltas (fewer for large N × size).`,
      `All watchers are ws clients in this one Node process (2-core machine): at 100-1000 watchers the client side is likely`,
      `the bottleneck, which is why the bare ws server (own process, no logic) under the same clients is the baseline.`,
      `"wd": a bare broadcast on workerd (bench/bare-workerd.ts: one Durable Object, hibernatable sockets, no relay logic, its own`,
      `process), the same clients: what the runtime costs alone; "× wd" and "p99 × wd", the relay against it.`,
      `"srv µs/d": server CPU (user + system) per delivery, one delta to one watcher, over the measured phases: the relay's two`,
      `workerd tiers against the bare server's process (what each costs, apart from the clients' bound); "cli µs/d": the same`,
      `for this process, the clients (and the producer), fed by each server.`,
      `${TARGET_CELL}: ${TARGET_RUNS} runs (ws, workerd, relay, in turn); its figures are the runs' medians (the JSON lists each run's ratios).`,
      `"other CPU %": CPU used during the cell by processes other than this bench and its workerd (% of one core; 2 cores here).`,
      `Relay storage on tmpfs; watchers ping every 5 s and after 8 MiB; every watcher's seqs are checked (each delta once, in order).`,
    ],
  });
  return out;
}

// Bench section `memory`: what the relay's runtime holds while a routing-heavy episode is written,
// read, caught up by many watchers and finished, against the same runtime idle (same run).
//
// The relay is what `npm run start:tiers` runs (scripts/relay.mjs --tiers: the episode tier and the hub tier,
// two workerd processes, behind the router's process; local SQLite on a temporary directory). Memory is read
// two ways: as Cloudflare counts it, each of our isolates' JS heap plus ArrayBuffer backing stores
// (bench/inspector.ts, the runtimes' inspectors, ~every 50 ms; its peak, against the 128 MB an
// isolate has; after a forced GC; and the sum of its rises, a lower bound of what was allocated,
// per byte delivered to watchers), and as the machine sees it, the resident memory (VmRSS) of every workerd process,
// read from /proc about every 50 ms, as growth over the idle runtime after start-up.
//
// Per episode size (default 50 and 200 MiB; --sizes adds more, e.g. 800):
//   write    the episode: large_routing's first frame, then its 13 turn frames repeated until the
//            size is reached (ordinary routing-heavy deltas: ~600 KB of routing per turn), over the
//            producer socket, one envelope at a time (as verifiers' streamer sends);
//   read     GET of the live episode, streamed to the end;
//   catch-up 1 watcher alone, then 10 at once, from the start (snapshot, then the log): time until
//            each has `caught_up`, the delivery rate (bytes to all of them per second) against
//            the one alone, and the largest message any watcher received;
//   finish   the reply, then GET of the finished episode, streamed.
// Then the relay is restarted on the same storage: the first request to the large episode against
// the first request to a small one (waking reads the index back, not the episode).
// Storm (on large_routing, 7 MB): a producer sends a turn every 250 ms; acks are timed 20 s without
// watchers, then while 150 watchers (protocol 2: they ack the hello and every message) reconnect
// about every 20 ms for 40 s, honouring a 1013's retry hint as the TypeScript client does, then 20
// s of the same clients ignoring it (a hostile storm); /v1/health every 250 ms. The producer and the
// health probe run in a process of their own (bench/storm-producer.ts), as on another machine.
// Every client offers permessage-deflate (ws defaults), as browsers do.

import { type ChildProcess, fork, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Decoder } from "@msgpack/msgpack";
import { WebSocket } from "ws";
import { QUIET_ENV } from "../scripts/quiet-env.mjs";
import {
  ackMessage,
  decodeLossless,
  encodeEnvelope,
  encodeLossless,
  type LMap,
  type LValue,
  ProducerCursor,
  parseDelta,
  retryHintMs,
} from "../src/protocol/index.js";
import { fixturePath, loadCase } from "../tools/conformance/cases.js";
import { freePort } from "../tools/free-port.js";
import type { BenchOptions } from "./harness.js";
import { closeSocket, machineBusyTicks, openSocket, procStat, sleep, stats, wsUrl } from "./helpers.js";
import { type HeapFigure, HeapSampler, isolatesOf } from "./inspector.js";

export const name = "memory";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const MiB = 1024 * 1024;

/** What the issue asks (reported as checks, not asserted). */
export const TARGETS = {
  maxGrowthMiB: 96,
  maxMessageMiB: 8,
  maxCatchUpRatio: 3,
  stormAckP99Ratio: 2,
  stormMaxAckMs: 30_000,
  stormGrowthMiB: 256,
  /** Each isolate's heap (JS + ArrayBuffers) at its peak, MiB, of the 128 MB Cloudflare gives it. */
  maxHeapMiB: 64,
  /** Ten watchers catching up together get at least this share of one alone's delivery rate, each... all together. */
  minCatchUpRateRatio: 0.7,
  healthMs: 1000,
  wakeRatio: 2,
} as const;

// ---- the relay as npm run start:tiers runs it ----

/** Pids of `pid`'s descendants whose command is workerd. */
function workerdPids(pid: number): number[] {
  const children = new Map<number, number[]>();
  const comm = new Map<number, string>();
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = procStat(e);
      const ppid = Number(stat.fields[1]);
      comm.set(Number(e), stat.comm);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(e)]);
    } catch {
      // gone
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      if (comm.get(c) === "workerd") out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

/** Resident memory of `pids`, KiB: all of it (VmRSS), and the anonymous part (RssAnon: heaps and
 * buffers, not the pages of files such as the SQLite database mapped in). */
function residentKiB(pids: number[]): { rss: number; anon: number } {
  let rss = 0;
  let anon = 0;
  for (const p of pids) {
    try {
      const status = readFileSync(`/proc/${p}/status`, "utf8");
      rss += Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
      anon += Number(/RssAnon:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
    } catch {
      // gone
    }
  }
  return { rss, anon };
}

class DevRelay {
  url = "";
  private child: ChildProcess | null = null;
  private pids: number[] = [];
  private sampler: NodeJS.Timeout | null = null;
  /** Peak RSS and peak anonymous RSS (KiB) since the last `mark`. */
  peak = 0;
  peakAnon = 0;
  /** Peak RSS (KiB) since the last `mark` of each tier's runtime, and of wrangler's own front processes. */
  peakBy = { episodes: 0, hubs: 0, fronts: 0 };
  /** Our isolates' heaps (the Worker's isolate in each tier's runtime, and the dev registry's proxies). */
  heap: HeapSampler = new HeapSampler([]);
  /** The router's process. */
  private routerPid = 0;
  /** The runtime process of each tier. */
  tierPids = { episodes: 0, hubs: 0 };

  constructor(readonly state: string) {}

  async start(): Promise<void> {
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    const child = spawn(process.execPath, [join(root, "scripts", "relay.mjs"), "--tiers", "--persist-to", this.state], {
      cwd: root,
      env: { ...process.env, ...QUIET_ENV, PORT: String(port) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    let log = "";
    child.stdout!.on("data", (d) => (log += d));
    child.stderr!.on("data", (d) => (log += d));
    const end = Date.now() + 60_000;
    while (!/Ready on/.test(log)) {
      if (Date.now() > end || child.exitCode !== null)
        throw new Error(`npm run start:tiers did not get ready:\n${log}`);
      await sleep(50);
    }
    this.pids = workerdPids(child.pid!);
    this.routerPid = Number(
      readdirSync("/proc").find((e) => {
        try {
          if (!/^\d+$/.test(e) || Number(procStat(e).fields[1]) !== child.pid) return false;
          return readFileSync(`/proc/${e}/cmdline`, "utf8").includes("scripts/router.mjs");
        } catch {
          return false;
        }
      }),
    );
    if (this.pids.length === 0) throw new Error("no workerd process under npm run start:tiers");
    this.heap.stop();
    const ours = (await isolatesOf(this.pids)).filter((t) => /core:user:/.test(t.name));
    this.heap = new HeapSampler(ours);
    // the tiers by their isolates' names: the hub tier's script is the episode tier's name + "-hubs"
    // (scripts/relay.mjs; the name is whatever it read from wrangler.toml, "undefined" with wrangler 4.86)
    const tierOf = (t: { name: string }) => t.name.replace(/^.*core:user:/, "");
    const hubTier = ours.find((t) => /-hubs$/.test(tierOf(t)));
    const episodeTier = ours.find((t) => hubTier && tierOf(t) === tierOf(hubTier).replace(/-hubs$/, ""));
    const pidOf = (t: { name: string } | undefined) => Number(t?.name.split(":")[0]);
    this.tierPids = { episodes: pidOf(episodeTier), hubs: pidOf(hubTier) };
    if (!this.tierPids.episodes || !this.tierPids.hubs)
      throw new Error(`expected the two tiers' isolates, found ${this.heap.names.join(", ") || "none"}`);
    this.heap.start(50);
    this.sampler = setInterval(() => {
      const m = residentKiB(this.pids);
      this.peak = Math.max(this.peak, m.rss);
      this.peakAnon = Math.max(this.peakAnon, m.anon);
      const by = this.rssBy();
      this.peakBy = {
        episodes: Math.max(this.peakBy.episodes, by.episodes),
        hubs: Math.max(this.peakBy.hubs, by.hubs),
        fronts: Math.max(this.peakBy.fronts, by.fronts),
      };
    }, 50);
  }

  rss(): number {
    return residentKiB(this.pids).rss;
  }

  anon(): number {
    return residentKiB(this.pids).anon;
  }

  /** CPU time the workerd processes (or one of them) used so far (user + system), ms. */
  cpuMs(only?: number): number {
    let ticks = 0;
    for (const p of only ? [only] : this.pids) {
      try {
        const { fields } = procStat(p);
        ticks += Number(fields[11]) + Number(fields[12]);
      } catch {
        // gone
      }
    }
    return ticks * 10; // USER_HZ is 100 on Linux
  }

  /** CPU time of the router (the launcher's child process running scripts/router.mjs), ms. */
  routerCpuMs(): number {
    try {
      const { fields } = procStat(this.routerPid);
      return (Number(fields[11]) + Number(fields[12])) * 10;
    } catch {
      return 0;
    }
  }

  /** RSS (KiB) of each tier's runtime process and of the rest (other workerd processes of the launcher: none today). */
  rssBy(): { episodes: number; hubs: number; fronts: number } {
    const one = (p: number) => (p ? residentKiB([p]).rss : 0);
    const episodes = one(this.tierPids.episodes);
    const hubs = one(this.tierPids.hubs);
    return {
      episodes,
      hubs,
      fronts: residentKiB(this.pids.filter((p) => p !== this.tierPids.episodes && p !== this.tierPids.hubs)).rss,
    };
  }

  /** Start a new peak from now. */
  mark(): number {
    this.peakAnon = this.anon();
    this.peak = this.rss();
    this.peakBy = this.rssBy();
    return this.peak;
  }

  async stop(): Promise<void> {
    if (this.sampler) clearInterval(this.sampler);
    this.heap.stop();
    const c = this.child;
    if (!c || c.exitCode !== null) return;
    c.kill("SIGINT");
    await new Promise((r) => c.once("exit", r));
  }
}

// ---- the episode ----

/** Frames of a routing-heavy episode of about `bytes`, and its reply with matching counts. */
function episode(bytes: number): { frames: Uint8Array[]; reply: Uint8Array; frameBytes: number } {
  const c = loadCase(fixturePath("large_routing"));
  const frames = [c.frames[0]!];
  let total = frames[0]!.length;
  for (let i = 1; total < bytes; i = i === c.frames.length - 1 ? 1 : i + 1) {
    frames.push(c.frames[i]!);
    total += c.frames[i]!.length;
  }
  const counts = new Map<string, { nodes: number; calls: number }>();
  for (const f of frames) {
    const d = parseDelta(f);
    const n = counts.get(d.trace) ?? { nodes: 0, calls: 0 };
    n.nodes += d.nodes?.length ?? 0;
    n.calls += d.lists.calls?.length ?? 0;
    counts.set(d.trace, n);
  }
  const reply = decodeLossless(c.reply) as LMap;
  for (const t of reply.get("traces") as LMap[]) {
    const n = counts.get(t.get("id") as string)!;
    t.entries.forEach((e) => {
      if (e[0] === "nodes") e[1] = n.nodes;
      if (e[0] === "calls") e[1] = n.calls;
    });
  }
  return { frames, reply: encodeLossless(reply as LValue), frameBytes: total };
}

/** Send every frame over the producer socket, one envelope at a time. */
async function write(
  url: string,
  id: string,
  frames: Uint8Array[],
  producer = new ProducerCursor("bench"),
): Promise<void> {
  const ws = await openSocket(wsUrl(url, `/v1/episodes/${id}/ingest`));
  try {
    for (const f of frames) {
      const ack = new Promise<string>((resolve, reject) => {
        ws.once("message", (d) => resolve(String(d)));
        ws.once("close", (code) => reject(new Error(`ingest socket closed ${code}`)));
      });
      ws.send(encodeEnvelope(producer.envelope(f)));
      const a = JSON.parse(await ack) as { ok: boolean };
      if (!a.ok) throw new Error(`refused: ${JSON.stringify(a)}`);
      producer.acknowledge();
      ws.removeAllListeners("close");
    }
  } finally {
    await closeSocket(ws);
  }
}

/** GET the episode, streamed; its size. */
async function read(url: string, id: string): Promise<number> {
  const res = await fetch(`${url}/v1/episodes/${id}`);
  if (!res.ok || !res.body) throw new Error(`GET ${id}: ${res.status}`);
  let n = 0;
  for await (const chunk of res.body) n += (chunk as Uint8Array).length;
  return n;
}

/**
 * A watcher from the start until `caught_up`: its time, bytes received and largest message (it offers
 * permessage-deflate, as browsers do).
 */
function catchUp(url: string, id: string): Promise<{ ms: number; bytes: number; largest: number }> {
  const t0 = performance.now();
  const decoder = new Decoder();
  return new Promise((resolve, reject) => {
    let largest = 0;
    let received = 0;
    const ws = new WebSocket(wsUrl(url, `/v1/episodes/${id}/watch`), { maxPayload: 1 << 30 });
    ws.on("message", (data: Buffer, binary) => {
      if (!binary) return;
      largest = Math.max(largest, data.length);
      received += data.length;
      // catching up: ack every message (the relay paces the catch-up by these acks)
      ws.send(ackMessage(received));
      const m = decoder.decode(data) as { type: string };
      if (m.type === "caught_up") {
        const ms = performance.now() - t0;
        ws.close(1000);
        resolve({ ms, bytes: received, largest });
      }
    });
    ws.on("close", (code) => reject(new Error(`watcher closed ${code} before caught_up`)));
    ws.on("error", reject);
  });
}

interface SizeFigures {
  episode_mib: number;
  frames: number;
  growth_mib: { write: number; read: number; catch_up: number; finish: number; peak: number };
  /** The anonymous part of the growth (heaps, buffers), at the same points. */
  anon_growth_mib: { write: number; read: number; catch_up: number; finish: number };
  /** Each isolate's heap peak (JS + ArrayBuffers), MiB, over all of it (garbage not yet collected included). */
  heap_peak_mib: Record<string, { used: number; backing: number; total: number }>;
  /** Each isolate's heap peak in each stage (write, read, 1 + 10 catch-ups), MiB. */
  heap_peak_by_stage_mib: Record<string, Record<string, number>>;
  /** What each isolate allocated during the 1 + 10 catch-ups, per byte delivered to the watchers. */
  catch_up_alloc: AllocFigures;
  /** Each isolate's heap after it, once garbage is collected: what it holds. */
  heap_retained_mib: Record<string, { used: number; backing: number; total: number }>;
  catch_up_ms: { one: number; ten_max: number; ratio: number };
  /** Bytes delivered per second: to the one alone, and to all ten together; their ratio. */
  catch_up_mib_per_s: { one: number; ten: number; ratio: number };
  /** CPU the relay's workerd processes spent on the catch-ups (the clients share this machine's cores). */
  catch_up_relay_cpu_ms: { one: number; ten: number; ratio: number };
  largest_message_mib: number;
  write_mib_per_s: number;
}

async function onSize(
  relay: DevRelay,
  mib: number,
  idleKiB: number,
  idleAnonKiB: number,
  log: (m: string) => void,
): Promise<SizeFigures & { id: string }> {
  const id = `mem-${mib}-${Date.now().toString(36)}`;
  const ep = episode(mib * MiB);
  log(`memory: ${mib} MiB episode: ${ep.frames.length} frames`);
  relay.mark();
  await relay.heap.mark();
  const base = idleKiB; // growth over the idle runtime, whatever ran before
  const growth = () => (relay.peak - base) / 1024;
  const anon = () => (relay.peakAnon - idleAnonKiB) / 1024;
  // each stage's peak apart (the peaks start over at each), the whole one their largest
  const stagePeaks: Record<string, Record<string, HeapFigure>> = {};
  const stage = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    await relay.heap.mark();
    await relay.heap.startProfiles();
    const out = await work();
    stagePeaks[name] = relay.heap.peak();
    await relay.heap.stopProfiles(`${mib}MiB-${name}`);
    return out;
  };
  const t0 = performance.now();
  await stage("write", () => write(relay.url, id, ep.frames));
  const writeSecs = (performance.now() - t0) / 1000;
  const afterWrite = growth();
  const anonWrite = anon();
  const size = await stage("read", () => read(relay.url, id));
  const afterRead = growth();
  const anonRead = anon();
  const cpu0 = relay.cpuMs();
  relay.heap.markAllocated();
  const { one, ten, tenSecs, cpu1 } = await stage("catch_up", async () => {
    const one = await catchUp(relay.url, id);
    const cpu1 = relay.cpuMs();
    const tenStart = performance.now();
    const ten = await Promise.all(Array.from({ length: 10 }, () => catchUp(relay.url, id)));
    return { one, ten, tenSecs: (performance.now() - tenStart) / 1000, cpu1 };
  });
  const cpu2 = relay.cpuMs();
  const afterCatchUp = growth();
  const anonCatchUp = anon();
  const heapPeak: Record<string, HeapFigure> = {};
  for (const peaks of Object.values(stagePeaks))
    for (const [k, f] of Object.entries(peaks)) if (!heapPeak[k] || f.total > heapPeak[k].total) heapPeak[k] = f;
  const catchUpAlloc = perDelivered(relay.heap.allocated(), one.bytes + ten.reduce((n, t) => n + t.bytes, 0));
  const res = await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: ep.reply });
  if (res.status !== 200) throw new Error(`reply: ${res.status} ${await res.text()}`);
  const finished = await read(relay.url, id);
  const afterFinish = growth();
  const anonFinish = anon();
  const tenMax = Math.max(...ten.map((t) => t.ms));
  const oneRate = one.bytes / MiB / (one.ms / 1000);
  const tenRate = ten.reduce((n, t) => n + t.bytes, 0) / MiB / tenSecs;
  log(
    `memory: ${mib} MiB: live GET ${size} B, finished GET ${finished} B, growth ${afterFinish.toFixed(0)} MiB, heap peak ${Math.max(0, ...Object.values(heapPeak).map((f) => f.total)).toFixed(1)} MiB (${Object.entries(
      stagePeaks,
    )
      .map(([k, p]) => `${k} ${Math.max(0, ...Object.values(p).map((f) => f.total)).toFixed(1)}`)
      .join(", ")}); catch-up ${oneRate.toFixed(0)} MiB/s alone, ${tenRate.toFixed(0)} MiB/s to ten`,
  );
  return {
    id,
    episode_mib: Math.round(ep.frameBytes / MiB),
    frames: ep.frames.length,
    growth_mib: {
      write: round(afterWrite),
      read: round(afterRead),
      catch_up: round(afterCatchUp),
      finish: round(afterFinish),
      peak: round(growth()),
    },
    anon_growth_mib: {
      write: round(anonWrite),
      read: round(anonRead),
      catch_up: round(anonCatchUp),
      finish: round(anonFinish),
    },
    heap_peak_mib: heapPeak,
    heap_peak_by_stage_mib: Object.fromEntries(
      Object.entries(stagePeaks).map(([k, peaks]) => [
        k,
        Object.fromEntries(Object.entries(peaks).map(([i, f]) => [i, f.total])),
      ]),
    ),
    heap_retained_mib: await relay.heap.retained(),
    catch_up_alloc: catchUpAlloc,
    catch_up_ms: { one: Math.round(one.ms), ten_max: Math.round(tenMax), ratio: round(tenMax / one.ms, 2) },
    catch_up_mib_per_s: { one: round(oneRate), ten: round(tenRate), ratio: round(tenRate / oneRate, 2) },
    catch_up_relay_cpu_ms: {
      one: cpu1 - cpu0,
      ten: cpu2 - cpu1,
      ratio: round((cpu2 - cpu1) / Math.max(cpu1 - cpu0, 1), 2),
    },
    largest_message_mib: round(Math.max(one.largest, ...ten.map((t) => t.largest)) / MiB, 2),
    write_mib_per_s: round(ep.frameBytes / MiB / writeSecs),
  };
}

const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/**
 * What each tier's isolate allocated (at least: bench/inspector.ts `allocated`), MiB, and per byte delivered to
 * watchers.
 */
interface AllocFigures {
  delivered_mib: number;
  allocated_mib: Record<string, number>;
  per_delivered_byte: Record<string, number>;
}

function perDelivered(allocated: Record<string, number>, delivered: number): AllocFigures {
  const short = (n: string) => n.replace(/^.*core:user:/, "");
  return {
    delivered_mib: round(delivered / MiB),
    allocated_mib: Object.fromEntries(Object.entries(allocated).map(([k, v]) => [short(k), v])),
    per_delivered_byte: Object.fromEntries(
      Object.entries(allocated).map(([k, v]) => [short(k), round((v * MiB) / Math.max(delivered, 1), 3)]),
    ),
  };
}

/**
 * What a storm phase allocated beyond the producer's turns: per isolate, its allocation less the quiet phase's rate
 * times the phase's seconds, MiB (negative: less than the quiet rate), and that per byte delivered to watchers, clamped
 * at 0. The raw figure (AllocFigures) divides the producer's own allocation by bytes it had no part in.
 */
interface AllocBeyondQuiet {
  over_quiet_mib: Record<string, number>;
  per_delivered_byte: Record<string, number>;
}

function beyondQuiet(
  allocatedMiB: Record<string, number>,
  quietMiBPerS: Record<string, number>,
  secs: number,
  delivered: number,
): AllocBeyondQuiet {
  const over = Object.entries(allocatedMiB).map(([k, v]) => [k, round(v - (quietMiBPerS[k] ?? 0) * secs)] as const);
  return {
    over_quiet_mib: Object.fromEntries(over),
    per_delivered_byte: Object.fromEntries(
      over.map(([k, v]) => [k, round((Math.max(0, v) * MiB) / Math.max(delivered, 1), 3)]),
    ),
  };
}

const allocNote = (a: AllocFigures) =>
  `delivered ${a.delivered_mib} MiB; allocated per byte delivered (≥): ${Object.entries(a.per_delivered_byte)
    .map(([n, v]) => `${n} ${v}`)
    .join(", ")}`;

/** The first request after a restart, to a large and to a small episode. */
async function wake(
  relay: DevRelay,
  large: string,
  small: string,
): Promise<{ large_ms: number; small_ms: number; ratio: number }> {
  const first = async (id: string) => {
    await relay.stop();
    await relay.start();
    const t0 = performance.now();
    const res = await fetch(`${relay.url}/v1/episodes/${id}/status`);
    await res.text();
    return performance.now() - t0;
  };
  // each measured on a fresh start, small first then large, twice; the better of two
  const s = Math.min(await first(small), await first(small));
  const l = Math.min(await first(large), await first(large));
  return { large_ms: round(l), small_ms: round(s), ratio: round(l / s, 2) };
}

/** What a storm phase measured. */
interface StormPhase {
  /** RSS growth at its peak of each tier's runtime and of any other workerd of the launcher (fronts), MiB. */
  growth_by_mib: { episodes: number; hubs: number; fronts: number };
  /** CPU each tier's runtime and the router (the start:tiers process) used per second of the phase, ms/s. */
  cpu_ms_per_s: { episodes: number; hubs: number; router: number };
  /** The whole machine's CPU in use (all cores, this bench's clients included), %. */
  machine_busy_pct: number;
  heap_retained_mib: Record<string, { used: number; backing: number; total: number }>;
  connects: number;
  refused_1013: number;
  ack_p50_ms: number;
  ack_p99_ms: number;
  ack_max_ms: number;
  health_max_ms: number;
  growth_mib: number;
  heap_peak_mib: Record<string, { used: number; backing: number; total: number }>;
  /** What each isolate allocated during the phase, per byte delivered to the watchers. */
  alloc: AllocFigures;
  /** The same less what the quiet phase's rate (the producer's turns) accounts for over the phase. */
  alloc_beyond_quiet: AllocBeyondQuiet;
  /** The same per second of the phase, MiB (the quiet phase's is the producer's own). */
  alloc_mib_per_s: Record<string, number>;
  /**
   * The episode's and its hubs' own counts over the phase (its /usage): requests (the producer's turns, feeds, catch-up
   * streams, membership calls), ms busy, rows read. Where the episode's thread went, beside the producer's turns.
   */
  usage: { episode: UsageDelta; hubs: UsageDelta };
}

type UsageDelta = { requests: number; busy_ms: number; rows_read: number };

/** The episode's and its hubs' usage now (GET /v1/episodes/{id}/usage), summed over the hubs. */
async function usageOf(url: string, id: string): Promise<{ episode: UsageDelta; hubs: UsageDelta }> {
  const res = await fetch(`${url}/v1/episodes/${id}/usage`);
  if (!res.ok) throw new Error(`usage: ${res.status}`);
  type U = { requests: number; busyMs: number; rowsRead: number };
  const u = (await res.json()) as { episode: U; hubs: U[] };
  const of = (xs: U[]) => ({
    requests: xs.reduce((n, x) => n + x.requests, 0),
    busy_ms: xs.reduce((n, x) => n + x.busyMs, 0),
    rows_read: xs.reduce((n, x) => n + x.rowsRead, 0),
  });
  return { episode: of([u.episode]), hubs: of(u.hubs) };
}

const minus = (a: UsageDelta, b: UsageDelta): UsageDelta => ({
  requests: a.requests - b.requests,
  busy_ms: round(a.busy_ms - b.busy_ms),
  rows_read: a.rows_read - b.rows_read,
});

/**
 * 150 watchers reconnecting every ~20 ms while a producer sends a turn every 250 ms: first 10 s
 * quiet, then 40 s of watchers that honour a 1013's retry hint (as the TypeScript client and the
 * dashboard do), then 20 s of the same ignoring it. Each watcher follows protocol 2: it acks the
 * hello and every message, and offers permessage-deflate.
 */
async function storm(relay: DevRelay, log: (m: string) => void) {
  const c = loadCase(fixturePath("large_routing"));
  const id = `storm-${Date.now().toString(36)}`;
  await write(relay.url, id, c.frames, new ProducerCursor("storm"));
  // the producer and the health probe in a process of their own (bench/storm-producer.ts)
  const child = fork(join(root, "bench", "storm-producer.ts"), [], {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const next = <T>(pick: (m: Record<string, unknown>) => boolean) =>
    new Promise<T>((resolve, reject) => {
      const on = (m: Record<string, unknown>) => {
        if (m.error) reject(new Error(String(m.error)));
        else if (pick(m)) {
          child.off("message", on);
          resolve(m as T);
        }
      };
      child.on("message", on);
    });
  const ready = next<unknown>((m) => m.ready === true);
  child.send({ url: relay.url, id, turnMs: 250 });
  await ready;
  const take = async () => {
    const got = next<{ acks: number[]; health: number[] }>((m) => Array.isArray(m.acks));
    child.send("take");
    return got;
  };
  /** 150 watchers, each connecting, acking what it gets, leaving ~20 ms later, again; for `ms`. */
  const watchers = async (ms: number, honourHints: boolean) => {
    let on = true;
    let connects = 0;
    let refused = 0;
    let delivered = 0;
    const one = async () => {
      while (on) {
        const w = new WebSocket(wsUrl(relay.url, `/v1/episodes/${id}/watch`), { maxPayload: 1 << 30 });
        let received = 0;
        w.on("message", (data: Buffer, binary) => {
          if (!binary) return;
          received += data.length;
          delivered += data.length;
          w.send(ackMessage(received));
        });
        w.on("error", () => {});
        const closed = new Promise<{ code: number; reason: string }>((r) =>
          w.once("close", (code, reason) => r({ code, reason: String(reason) })),
        );
        await Promise.race([new Promise((r) => w.once("open", r).once("unexpected-response", r)), closed]);
        connects++;
        const end = await Promise.race([sleep(20).then(() => null), closed]);
        if (end === null) w.terminate();
        else if (end.code === 1013) {
          refused++;
          const hint = retryHintMs(end.reason);
          if (honourHints && hint !== null) await sleep(hint * (1 + Math.random() / 2));
        }
      }
    };
    const all = Array.from({ length: 150 }, one);
    await sleep(ms);
    on = false;
    await Promise.all(all);
    return { connects, refused, delivered };
  };
  const phase = async (ms: number, honourHints: boolean, quietAlloc: Record<string, number>): Promise<StormPhase> => {
    await take();
    const mark = relay.mark();
    const markBy = relay.rssBy();
    await relay.heap.mark();
    relay.heap.markAllocated();
    await relay.heap.startProfiles();
    const cpu0 = {
      e: relay.cpuMs(relay.tierPids.episodes),
      h: relay.cpuMs(relay.tierPids.hubs),
      r: relay.routerCpuMs(),
      m: machineBusyTicks(),
      t: performance.now(),
    };
    const usage0 = await usageOf(relay.url, id);
    const { connects, refused, delivered } = await watchers(ms, honourHints);
    const alloc = perDelivered(relay.heap.allocated(), delivered);
    const usage1 = await usageOf(relay.url, id);
    const secs = (performance.now() - cpu0.t) / 1000;
    const cpu = {
      episodes: round((relay.cpuMs(relay.tierPids.episodes) - cpu0.e) / secs),
      hubs: round((relay.cpuMs(relay.tierPids.hubs) - cpu0.h) / secs),
      router: round((relay.routerCpuMs() - cpu0.r) / secs),
    };
    const busyPct = round(((machineBusyTicks() - cpu0.m) * 10) / secs / cpus().length / 10);
    const { acks, health } = await take();
    const during = acks.sort((a, b) => a - b);
    const d = stats(during);
    const peak = relay.heap.peak();
    // after every figure of the phase is read (serialising a profile allocates and takes CPU)
    await relay.heap.stopProfiles(`storm-${honourHints ? "honouring" : "ignoring"}`);
    return {
      growth_by_mib: {
        episodes: round((relay.peakBy.episodes - markBy.episodes) / 1024),
        hubs: round((relay.peakBy.hubs - markBy.hubs) / 1024),
        fronts: round((relay.peakBy.fronts - markBy.fronts) / 1024),
      },
      cpu_ms_per_s: cpu,
      machine_busy_pct: busyPct,
      heap_retained_mib: await relay.heap.retained(),
      connects,
      refused_1013: refused,
      ack_p50_ms: round(d.p50),
      ack_p99_ms: round(d.p99),
      ack_max_ms: round(Math.max(...during)),
      health_max_ms: round(Math.max(...health)),
      growth_mib: round((relay.peak - mark) / 1024),
      heap_peak_mib: peak,
      alloc,
      alloc_beyond_quiet: beyondQuiet(alloc.allocated_mib, quietAlloc, secs, delivered),
      alloc_mib_per_s: Object.fromEntries(Object.entries(alloc.allocated_mib).map(([k, v]) => [k, round(v / secs, 2)])),
      usage: { episode: minus(usage1.episode, usage0.episode), hubs: minus(usage1.hubs, usage0.hubs) },
    };
  };
  await sleep(2000);
  await take();
  const quietCpu0 = { e: relay.cpuMs(relay.tierPids.episodes), h: relay.cpuMs(relay.tierPids.hubs) };
  const quietUsage0 = await usageOf(relay.url, id);
  relay.heap.markAllocated();
  await sleep(20_000);
  // what the producer's turns alone allocate, per second: a storm phase's own allocation is what it adds
  const quietAlloc = Object.fromEntries(
    Object.entries(relay.heap.allocated()).map(([k, v]) => [k.replace(/^.*core:user:/, ""), round(v / 20, 2)]),
  );
  const quietUsage = minus((await usageOf(relay.url, id)).episode, quietUsage0.episode);
  const quietCpu = {
    episodes: round((relay.cpuMs(relay.tierPids.episodes) - quietCpu0.e) / 20),
    hubs: round((relay.cpuMs(relay.tierPids.hubs) - quietCpu0.h) / 20),
  };
  const q = await take();
  const quiet = stats(q.acks.sort((a, b) => a - b));
  const quietHealth = Math.max(...q.health);
  const polite = await phase(40_000, true, quietAlloc);
  const hostile = await phase(20_000, false, quietAlloc);
  const stopped = next<unknown>((m) => m.stopped === true);
  child.send("stop");
  await stopped;
  // idle again (streams kept for joiners have lapsed): what each isolate still holds
  await sleep(12_000);
  const idleAfter = await relay.heap.retained();
  log(
    `memory: storm: ack p99 ${quiet.p99.toFixed(1)} ms quiet; ${polite.ack_p99_ms} ms under ${polite.connects} watcher connects (${polite.refused_1013} refused 1013, hints honoured); ${hostile.ack_p99_ms} ms under ${hostile.connects} (hints ignored)`,
  );
  return {
    quiet: {
      ack_p50_ms: round(quiet.p50),
      ack_p99_ms: round(quiet.p99),
      health_max_ms: round(quietHealth),
      cpu_ms_per_s: quietCpu,
      episode_usage: quietUsage,
      alloc_mib_per_s: quietAlloc,
    },
    honouring_hints: polite,
    ignoring_hints: hostile,
    ack_p99_ratio: {
      honouring_hints: round(polite.ack_p99_ms / quiet.p99, 2),
      ignoring_hints: round(hostile.ack_p99_ms / quiet.p99, 2),
    },
    idle_after_mib: idleAfter,
  };
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  const sizes = opts.memorySizes ?? [50, 200];
  const state = mkdtempSync(join(tmpdir(), "episode-relay-memory-"));
  const relay = new DevRelay(state);
  try {
    await relay.start();
    // warm the runtime up (the first requests compile the Worker and create an object)
    const small = `mem-small-${Date.now().toString(36)}`;
    const chat = loadCase(fixturePath("chat_basic"));
    await write(relay.url, small, chat.frames);
    await read(relay.url, small);
    const idle = relay.rss() / 1024;
    const idleAnon = relay.anon();
    const idleHeap = new Map(await relay.heap.sample());
    const bySize: Record<string, SizeFigures> = {};
    let largest = "";
    for (const mib of sizes) {
      const { id, ...f } = await onSize(relay, mib, idle * 1024, idleAnon, opts.log);
      bySize[`${mib}MiB`] = f;
      largest = id;
    }
    const woke = await wake(relay, largest, small);
    const stormFigures = await storm(relay, opts.log);
    const rows = Object.entries(bySize).map(([k, f]) => [
      k,
      String(f.frames),
      `${f.growth_mib.write}`,
      `${f.growth_mib.read}`,
      `${f.growth_mib.catch_up}`,
      `${f.growth_mib.finish}`,
      `${f.anon_growth_mib.write} / ${f.anon_growth_mib.catch_up} / ${f.anon_growth_mib.finish}`,
      `${f.catch_up_ms.one} / ${f.catch_up_ms.ten_max} (${f.catch_up_ms.ratio}×)`,
      `${f.catch_up_mib_per_s.one} / ${f.catch_up_mib_per_s.ten} (${f.catch_up_mib_per_s.ratio}×)`,
      `${Math.max(...Object.values(f.heap_peak_mib).map((h) => h.total))} / ${Math.max(...Object.values(f.heap_retained_mib).map((h) => h.total))}`,
      `${f.catch_up_relay_cpu_ms.one} / ${f.catch_up_relay_cpu_ms.ten} (${f.catch_up_relay_cpu_ms.ratio}×)`,
      `${f.largest_message_mib}`,
    ]);
    opts.table({
      title: `memory: workerd RSS growth over the idle runtime (${round(idle)} MiB after start-up), MiB`,
      columns: [
        "episode",
        "frames",
        "write",
        "+read",
        "+10 catch-ups",
        "+finish",
        "anon: write / catch-ups / finish",
        "catch-up 1 / 10 ms",
        "MiB/s to 1 / to 10",
        "heap peak / after GC MiB",
        "relay CPU 1 / 10 ms",
        "largest msg MiB",
      ],
      rows,
      notes: [
        `anon: the anonymous part of the same peaks (RssAnon: heaps, buffers); the rest is file pages mapped in (the SQLite database), which the kernel can drop`,
        `heap: the largest of our isolates' (episode tier, hub tier, and the dev registry's proxies between them) JS heap + ArrayBuffer backing stores, read through the runtime inspector ~every 50 ms: its peak (garbage V8 has not yet collected included: it collects ArrayBuffers once ~64 MB more are held), and after the phase once a heap snapshot made it collect (what is really held); target ≤ ${TARGETS.maxHeapMiB} MiB of 128`,
        `targets: growth ≤ ${TARGETS.maxGrowthMiB} MiB and flat in size; ten catch-ups together get ≥ ${TARGETS.minCatchUpRateRatio}× one's delivery rate; messages ≤ ${TARGETS.maxMessageMiB} MiB`,
        ...Object.entries(bySize).map(([k, f]) => `${k} catch-ups: ${allocNote(f.catch_up_alloc)}`),
        `wake on ${Object.keys(bySize).at(-1)}: first request ${woke.large_ms} ms vs ${woke.small_ms} ms on a small episode (${woke.ratio}×; target ≤ ${TARGETS.wakeRatio}×)`,
        `storm (turn every 250 ms; 150 protocol-2 watchers offering permessage-deflate reconnect every ~20 ms): producer ack p50/p99 quiet ${stormFigures.quiet.ack_p50_ms}/${stormFigures.quiet.ack_p99_ms} ms`,
        ...(["honouring_hints", "ignoring_hints"] as const).map((k) => {
          const p = stormFigures[k];
          const heap = Object.entries(p.heap_peak_mib)
            .map(([n, h]) => `${n.replace(/^.*core:user:/, "")} ${h.total}`)
            .join(", ");
          const kept = Object.entries(p.heap_retained_mib)
            .map(([n, h]) => `${n.replace(/^.*core:user:/, "")} ${h.total}`)
            .join(", ");
          return `  ${k.replace("_", " ")} (${p.connects} connects, ${p.refused_1013} refused 1013): ack p50/p99 ${p.ack_p50_ms}/${p.ack_p99_ms} ms (p99 ${stormFigures.ack_p99_ratio[k]}×; target ≤ ${TARGETS.stormAckP99Ratio}×), slowest ${p.ack_max_ms} ms, /v1/health ≤ ${p.health_max_ms} ms, RSS +${p.growth_mib} MiB (episode tier +${p.growth_by_mib.episodes}, hub tier +${p.growth_by_mib.hubs}, wrangler's fronts +${p.growth_by_mib.fronts}); CPU ms/s episode tier ${p.cpu_ms_per_s.episodes} (quiet ${stormFigures.quiet.cpu_ms_per_s.episodes}); the episode object ${p.usage.episode.requests} requests, ${p.usage.episode.busy_ms} ms busy (quiet 20 s: ${stormFigures.quiet.episode_usage.requests}, ${stormFigures.quiet.episode_usage.busy_ms} ms), its hubs ${p.usage.hubs.requests} requests, ${p.usage.hubs.busy_ms} ms busy; hub tier ${p.cpu_ms_per_s.hubs}, router ${p.cpu_ms_per_s.router}, machine ${p.machine_busy_pct}% busy; heap peak MiB: ${heap}; after GC: ${kept}; ${allocNote(p.alloc)}; beyond the quiet rate: ${Object.entries(
            p.alloc_beyond_quiet.per_delivered_byte,
          )
            .map(
              ([n, v]) =>
                `${n} ${v} (${p.alloc_beyond_quiet.over_quiet_mib[n]} MiB over quiet; raw ${p.alloc.per_delivered_byte[n]})`,
            )
            .join(", ")}; allocated MiB/s: ${Object.entries(p.alloc_mib_per_s)
            .map(([n, v]) => `${n} ${v} (quiet ${stormFigures.quiet.alloc_mib_per_s[n] ?? "?"})`)
            .join(", ")}`;
        }),
        `  idle 12 s after the storm, after GC, MiB: ${Object.entries(stormFigures.idle_after_mib)
          .map(([n, h]) => `${n.replace(/^.*core:user:/, "")} ${h.total}`)
          .join(", ")}`,
      ],
    });
    return {
      idle_mib: round(idle),
      idle_heap_mib: Object.fromEntries([...idleHeap].map(([k, v]) => [k, round(v.total)])),
      sizes: bySize,
      wake: woke,
      storm: stormFigures,
    };
  } finally {
    await relay.stop();
    rmSync(state, { recursive: true, force: true });
  }
}

// Memory as Cloudflare counts it: each isolate's V8 heap in use plus its ArrayBuffer backing
// stores (what the 128 MB limit is about), read from the runtime's inspector with
// `Runtime.getHeapUsage`. A workerd process lists its isolates at `/json` on its inspector port
// (ids `core:user:<worker>` for ours); `wrangler dev`'s own inspector proxy lists the user
// isolate as "Cloudflare Worker". The first session may get no answers: it is opened again.
// V8 collects lazily without a limit, so a peak includes garbage not yet collected.

import { appendFileSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { WebSocket } from "ws";

export interface HeapFigure {
  /** JS heap in use, MiB. */
  used: number;
  /** ArrayBuffer backing stores, MiB. */
  backing: number;
  /** Their sum: what counts against an isolate's 128 MB. */
  total: number;
}

interface Target {
  name: string;
  url: string;
}

const MiB = 1024 * 1024;

/** Loopback TCP ports `pid` listens on (from /proc: its socket inodes in LISTEN state). */
export function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1]!);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    return [];
  }
  const ports: number[] = [];
  for (const table of ["tcp", "tcp6"]) {
    let text = "";
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[3] !== "0A" || !inodes.has(f[9]!)) continue; // 0A: LISTEN
      ports.push(Number.parseInt(f[1]!.split(":")[1]!, 16));
    }
  }
  return ports;
}

/** The isolates the inspectors of these processes list (`/json`), by name. */
export async function isolatesOf(pids: number[]): Promise<Target[]> {
  const out: Target[] = [];
  for (const pid of pids) {
    for (const port of listeningPorts(pid)) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/json`, { signal: AbortSignal.timeout(1000) });
        if (!res.ok) continue;
        const list = (await res.json()) as Array<{ id?: string; title?: string; webSocketDebuggerUrl?: string }>;
        for (const t of list) {
          if (!t.webSocketDebuggerUrl) continue;
          out.push({
            name: `${pid}:${t.id === undefined || /^[0-9a-f-]{36}$/.test(t.id) ? (t.title ?? "?") : t.id}`,
            url: t.webSocketDebuggerUrl.replace("localhost", "127.0.0.1"),
          });
        }
      } catch {
        // not an inspector
      }
    }
  }
  return out;
}

/** The isolates a Miniflare's inspector lists. */
export async function isolatesAt(inspector: URL, label: string): Promise<Target[]> {
  const res = await fetch(new URL("/json", inspector.href.replace(/^ws/, "http")));
  const list = (await res.json()) as Array<{ id: string; webSocketDebuggerUrl: string }>;
  return list.map((t) => ({ name: `${label}:${t.id}`, url: t.webSocketDebuggerUrl.replace("localhost", "127.0.0.1") }));
}

/** Heap snapshots written so far (their files are numbered in order). */
let snapshots = 0;

/** A new, empty file `name` in `dir` (made if missing), or null when no directory is named. */
function keptFile(dir: string | undefined, name: string): string | null {
  if (!dir) return null;
  mkdirSync(dir, { recursive: true });
  const file = join(dir, name);
  writeFileSync(file, "");
  return file;
}

/** One inspector session that answers `Runtime.getHeapUsage`. */
class Session {
  private ws: WebSocket | null = null;
  private id = 0;
  private readonly waiting = new Map<number, (v: unknown) => void>();

  /** Where the snapshot being taken is written (BENCH_HEAP_SNAPSHOTS set), else null. */
  private snapshot: string | null = null;

  constructor(
    private readonly url: string,
    /** The isolate's name as a file name (its snapshots' and profiles'). */
    readonly fileName: string,
  ) {}

  private open(): Promise<WebSocket> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      ws.on("open", () => resolve(ws));
      ws.on("error", reject);
      ws.on("message", (data) => {
        const m = JSON.parse(String(data)) as {
          id?: number;
          method?: string;
          params?: { chunk?: string };
          result?: unknown;
        };
        if (m.method === "HeapProfiler.addHeapSnapshotChunk" && this.snapshot !== null)
          appendFileSync(this.snapshot, m.params?.chunk ?? "");
        if (m.id !== undefined) this.waiting.get(m.id)?.(m.result ?? null);
      });
      ws.on("close", () => {
        if (this.ws === ws) this.ws = null;
      });
    });
  }

  /** One inspector call and its answer (null: no session, or no answer in `ms`). */
  async call(method: string, params: Record<string, unknown> = {}, ms = 30_000): Promise<unknown> {
    try {
      this.ws ??= await this.open();
    } catch {
      return null;
    }
    const id = ++this.id;
    const ws = this.ws;
    const answer = new Promise<unknown>((resolve) => {
      const t = setTimeout(() => resolve(null), ms);
      this.waiting.set(id, (v) => {
        clearTimeout(t);
        resolve(v);
      });
    });
    ws.send(JSON.stringify({ id, method, params }));
    const v = await answer;
    this.waiting.delete(id);
    return v;
  }

  /**
   * Collect garbage (a heap snapshot collects first: the inspector's collectGarbage does not answer here), then read.
   */
  async retained(): Promise<HeapFigure | null> {
    // its chunks (addHeapSnapshotChunk events) are dropped, or written where BENCH_HEAP_SNAPSHOTS says
    this.snapshot = keptFile(process.env.BENCH_HEAP_SNAPSHOTS, `${this.fileName}-${++snapshots}.heapsnapshot`);
    await this.call("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
    this.snapshot = null;
    return this.usage();
  }

  async usage(): Promise<HeapFigure | null> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = (await this.call("Runtime.getHeapUsage", {}, 1000)) as {
        usedSize: number;
        backingStorageSize: number;
      } | null;
      if (answer) {
        const used = answer.usedSize / MiB;
        const backing = answer.backingStorageSize / MiB;
        return { used, backing, total: used + backing };
      }
      this.ws?.terminate(); // no answer: a new session
      this.ws = null;
    }
    return null;
  }

  close(): void {
    this.ws?.terminate();
  }
}

/** Samples every isolate's heap while work runs; keeps each one's peak since `mark`. */
export class HeapSampler {
  private readonly sessions: Array<{ name: string; s: Session }>;
  private timer: NodeJS.Timeout | null = null;
  private busy = false;
  private peaks = new Map<string, HeapFigure>();
  private last = new Map<string, HeapFigure>();
  /** Per isolate, MiB: the rises of its heap between consecutive samples, summed since `markAllocated`. */
  private rises = new Map<string, number>();

  constructor(targets: Target[]) {
    this.sessions = targets.map((t) => ({ name: t.name, s: new Session(t.url, t.name.replace(/[^\w.-]+/g, "_")) }));
  }

  get names(): string[] {
    return this.sessions.map((x) => x.name);
  }

  /** Read every isolate once now. */
  async sample(): Promise<Map<string, HeapFigure>> {
    const figs = await Promise.all(this.sessions.map(async (x) => [x.name, await x.s.usage()] as const));
    for (const [name, f] of figs) {
      if (!f) continue;
      const prev = this.last.get(name);
      if (prev && f.total > prev.total) this.rises.set(name, (this.rises.get(name) ?? 0) + f.total - prev.total);
      this.last.set(name, f);
      const p = this.peaks.get(name);
      if (!p || f.total > p.total) this.peaks.set(name, f);
    }
    return this.last;
  }

  start(everyMs = 100): void {
    this.timer = setInterval(() => {
      if (this.busy) return;
      this.busy = true;
      void this.sample().finally(() => (this.busy = false));
    }, everyMs);
  }

  /** Peaks start over from the current readings. */
  async mark(): Promise<void> {
    this.peaks = new Map();
    await this.sample();
  }

  /** The allocation count starts over (see `allocated`). */
  markAllocated(): void {
    this.rises = new Map();
  }

  /**
   * Bytes each isolate allocated since `markAllocated`, at least: the sum of its heap's rises
   * between samples (JS heap + ArrayBuffer backing stores), MiB. What was allocated and collected
   * between two samples is missed, so this is a lower bound, comparable between runs sampled at
   * the same rate.
   */
  allocated(): Record<string, number> {
    return Object.fromEntries([...this.rises].map(([k, v]) => [k, Math.round(v * 10) / 10]));
  }

  peak(): Record<string, HeapFigure> {
    return Object.fromEntries([...this.peaks].map(([k, v]) => [k, round(v)]));
  }

  current(): Record<string, HeapFigure> {
    return Object.fromEntries([...this.last].map(([k, v]) => [k, round(v)]));
  }

  /**
   * Where each isolate allocates (V8's sampling heap profiler, objects collected since included),
   * from now until `stopProfiles`; only when BENCH_HEAP_PROFILES names a directory.
   */
  async startProfiles(): Promise<void> {
    if (!process.env.BENCH_HEAP_PROFILES) return;
    await Promise.all(
      this.sessions.map((x) =>
        x.s.call("HeapProfiler.startSampling", {
          samplingInterval: 16 * 1024,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: true,
        }),
      ),
    );
  }

  /** The profiles since `startProfiles`, written as DIR/<isolate>-<label>.heapprofile (DevTools opens them). */
  async stopProfiles(label: string): Promise<void> {
    const dir = process.env.BENCH_HEAP_PROFILES;
    if (!dir) return;
    await Promise.all(
      this.sessions.map(async (x) => {
        const r = (await x.s.call("HeapProfiler.stopSampling")) as { profile?: unknown } | null;
        const file = keptFile(dir, `${x.s.fileName}-${label}.heapprofile`);
        if (r?.profile && file) writeFileSync(file, JSON.stringify(r.profile));
      }),
    );
  }

  /** Each isolate's heap once its garbage is collected (what it really holds), MiB. */
  async retained(): Promise<Record<string, HeapFigure>> {
    const figs = await Promise.all(this.sessions.map(async (x) => [x.name, await x.s.retained()] as const));
    return Object.fromEntries(figs.filter(([, f]) => f !== null).map(([k, f]) => [k, round(f!)]));
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const x of this.sessions) x.s.close();
  }
}

function round(f: HeapFigure): HeapFigure {
  const r = (x: number) => Math.round(x * 10) / 10;
  return { used: r(f.used), backing: r(f.backing), total: r(f.total) };
}

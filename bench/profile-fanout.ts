// `npx tsx bench/profile-fanout.ts [N] [KiB]`: one fan-out cell (default 1000 × 16 KiB) against the
// relay in two tiers, with the V8 CPU profiler on each tier's isolate (their inspectors) and on
// this process (the watcher clients) while the cell's measured phases run; prints the functions
// with the most self time in each, and writes the profiles (.cpuprofile, for DevTools) to $TMPDIR.
// For finding what a fan-out costs; the figures the issue asks for come from `--only fanout`.

import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WebSocket } from "ws";
import { runCell } from "./fanout.js";
import { HttpClient, startBenchRelay } from "./helpers.js";
import { isolatesAt } from "./inspector.js";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples?: number[];
  startTime: number;
  endTime: number;
}

/** One inspector session on a workerd isolate, for the CPU profiler. */
class Remote {
  private id = 0;
  private readonly waiting = new Map<number, (v: unknown) => void>();
  private constructor(private readonly ws: WebSocket) {
    ws.on("message", (d) => {
      const m = JSON.parse(String(d)) as { id?: number; result?: unknown };
      if (m.id !== undefined) this.waiting.get(m.id)?.(m.result);
    });
  }
  static open(url: string): Promise<Remote> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.once("open", () => resolve(new Remote(ws)));
      ws.once("error", reject);
    });
  }
  call<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = ++this.id;
    return new Promise<T>((resolve) => {
      this.waiting.set(id, (v) => resolve(v as T));
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }
  close(): void {
    this.ws.terminate();
  }
}

function top(p: Profile, n = 25): string[] {
  const self = new Map<string, number>();
  let total = 0;
  for (const node of p.nodes) {
    const hits = node.hitCount ?? 0;
    total += hits;
    const f = node.callFrame;
    const key = `${f.functionName || "(anonymous)"} ${f.url.split("/").slice(-2).join("/")}:${f.lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + hits);
  }
  return [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k, v]) => `${((100 * v) / Math.max(total, 1)).toFixed(1).padStart(5)}%  ${k}`);
}

const n = Number(process.argv[2] ?? 1000);
const kib = Number(process.argv[3] ?? 16);
const relay = await startBenchRelay("tmpfs", {}, { tiers: true });
const client = new HttpClient(relay.url);
const targets = (
  await Promise.all(
    relay.runtimes.map(async (r, i) => isolatesAt(await r.getInspectorURL(), i === 0 ? "episodes" : "hubs")),
  )
).flat();
const ours = targets.filter((t) => /core:user:/.test(t.name));
const remotes = await Promise.all(ours.map(async (t) => ({ name: t.name, r: await Remote.open(t.url) })));
const local = new Session();
local.connect();
try {
  await runCell("relay", relay.url, client, 10, 1, 20, 500, {}, relay.watchUrl); // warm-up
  await runCell(
    "relay",
    relay.url,
    client,
    n,
    kib,
    50,
    2000,
    {
      measuring: async () => {
        await local.post("Profiler.enable");
        await local.post("Profiler.start");
        for (const { r } of remotes) {
          await r.call("Profiler.enable");
          await r.call("Profiler.start");
        }
      },
      measured: async () => {
        const { profile } = (await local.post("Profiler.stop")) as { profile: Profile };
        const out = join(tmpdir(), `fanout-clients-${process.pid}.cpuprofile`);
        writeFileSync(out, JSON.stringify(profile));
        console.log(`\n== clients (this process), ${out}\n${top(profile).join("\n")}`);
        for (const { name, r } of remotes) {
          const { profile: p } = await r.call<{ profile: Profile }>("Profiler.stop");
          const file = join(tmpdir(), `fanout-${name.replace(/[^a-z0-9-]+/gi, "_")}-${process.pid}.cpuprofile`);
          writeFileSync(file, JSON.stringify(p));
          console.log(`\n== ${name}, ${file}\n${top(p).join("\n")}`);
        }
      },
    },
    relay.watchUrl,
  );
} finally {
  for (const { r } of remotes) r.close();
  local.disconnect();
  client.close();
  await relay.stop();
}

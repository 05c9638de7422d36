// Export bench (run alone, once: `npx tsx bench/export-rss.ts [N]`, default 10,000): the client's
// memory while a run of N finished rollouts is exported, against the same export's first 1,000.
//
// A local relay (scripts/relay.mjs) gets N rollouts of chat_basic (its frames as bare deltas,
// then its reply) with a dispatch identity each, in run `bench-export`. Then:
//   cli     `episode-relay export --format parquet --batch 1000` (dist/, so `npm run -s build`
//           first): its resident memory (VmRSS from /proc, every 20 ms) when its state file says
//           1,000 rollouts are written, and at the end (and VmHWM, its peak);
//   python  `iter_rollouts` + `rollout_record` a batch of 1,000 rows at a time, written as JSONL
//           rows (pyarrow is not installable here, so not export_parquet): its VmRSS after 1,000
//           rollouts and after N, and its peak (VmHWM: getrusage's ru_maxrss would carry the
//           spawning Node process's peak across exec).
// "Flat in the run's size" means the figure at N is within noise of the one at 1,000.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRelay } from "../scripts/relay.mjs";
import { encodeLossless, F64, LMap } from "../src/protocol/index.js";
import { fixturePath, loadCase } from "../tools/conformance/cases.js";

const N = Number(process.argv[2] ?? 10_000);
const RUN = "bench-export";
const root = join(import.meta.dirname, "..");

const mib = (v: number | null | undefined) => (v === null || v === undefined ? "-" : v.toFixed(1));

function rssOf(pid: number): { rss: number; hwm: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)?.[1] ?? 0);
    return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
  } catch {
    return null;
  }
}

async function post(url: string, body: Uint8Array): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      const r = await fetch(url, { method: "POST", body, headers: { "content-type": "application/msgpack" } });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`${url}: ${r.status}`);
      return;
    } catch (e) {
      if (attempt >= 4) throw e;
      await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
    }
  }
}

async function main(): Promise<void> {
  const relay = await startRelay();
  const c = loadCase(fixturePath("chat_basic"));
  const dir = mkdtempSync(join(tmpdir(), "bench-export-"));
  try {
    const t0 = Date.now();
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < N; i = next++) {
        const id = `${RUN}:r${String(i).padStart(5, "0")}`;
        const step = Math.floor(i / 100);
        const identity = new LMap([
          ["id", `d${i}`],
          ["kind", i % 10 === 0 ? "eval" : "train"],
          ["env", "bench"],
          ["group", `g${Math.floor(i / 8)}`],
          ["task", `idx=${i % 50}`],
          ["policy_version", step],
          ["step", step],
          ["started", new F64(1.5)],
        ]);
        await post(`${relay.url}/v1/episodes/${id}/dispatch`, encodeLossless(identity));
        for (const f of c.frames) await post(`${relay.url}/v1/episodes/${id}/deltas`, f);
        await post(`${relay.url}/v1/episodes/${id}/reply`, c.reply);
        if (i % 1000 === 999) console.error(`pushed ${i + 1} rollouts (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
      }
    };
    await Promise.all(Array.from({ length: 12 }, worker));
    for (;;) {
      const r = (await (await fetch(`${relay.url}/v1/runs/${RUN}`)).json()) as {
        aggregates: { counts: { finished: number } } | null;
      };
      if ((r.aggregates?.counts.finished ?? 0) >= N) break;
      await new Promise((res) => setTimeout(res, 500));
    }
    console.error(`run of ${N} rollouts ready in ${((Date.now() - t0) / 1000).toFixed(0)} s`);

    // the CLI, to Parquet
    const out = join(dir, "run.parquet");
    const state = join(out, "_export.json");
    const cli = spawn(
      process.execPath,
      [
        join(root, "dist", "tools", "cli", "main.js"),
        "export",
        "--run",
        RUN,
        "--format",
        "parquet",
        "--batch",
        "1000",
        "--out",
        out,
        relay.url,
      ],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    let at1k = null as number | null;
    let last = null as { rss: number; hwm: number } | null;
    const started = Date.now();
    const sampler = setInterval(() => {
      const m = rssOf(cli.pid!);
      if (m && m.rss > 0) last = m; // (a process that has exited shows no VmRSS)
      if (at1k === null && existsSync(state)) {
        try {
          if ((JSON.parse(readFileSync(state, "utf8")) as { rollouts: number }).rollouts >= 1000 && m) at1k = m.rss;
        } catch {}
      }
    }, 20);
    let cliOut = "";
    cli.stdout.on("data", (d) => (cliOut += d));
    const code = await new Promise<number>((res) => cli.on("close", (c) => res(c ?? 1)));
    clearInterval(sampler);
    const cliSecs = (Date.now() - started) / 1000;
    if (code !== 0) throw new Error(`export failed: ${cliOut}`);
    const written = (JSON.parse(readFileSync(state, "utf8")) as { rollouts: number }).rollouts;

    // the Python client, rows a batch at a time
    const py = spawn(
      "/usr/bin/python3",
      [
        "-c",
        `
import json, sys
from episode_relay import iter_rollouts, rollout_record
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'): return int(line.split()[1]) / 1024
def rss(): return status('VmRSS')
out = open(sys.argv[2], 'w'); buf = []; n = 0; at1k = None
for r in iter_rollouts(sys.argv[1], '${RUN}'):
    buf.append(rollout_record(r.row, r.decoded())); n += 1
    if len(buf) >= 1000:
        for x in buf: out.write(json.dumps(x, default=str) + '\\n')
        buf = []
    if n == 1000: at1k = rss()
print(json.dumps({"n": n, "at1k": at1k, "atN": rss(), "peak": status('VmHWM')}))
`,
        relay.url,
        join(dir, "rows.jsonl"),
      ],
      { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, PYTHONPATH: join(root, "clients", "python") } },
    );
    let pyOut = "";
    py.stdout.on("data", (d) => (pyOut += d));
    const pyStart = Date.now();
    if ((await new Promise<number>((res) => py.on("close", (c) => res(c ?? 1)))) !== 0)
      throw new Error("python export failed");
    const pySecs = (Date.now() - pyStart) / 1000;
    const p = JSON.parse(pyOut) as { n: number; at1k: number | null; atN: number; peak: number };

    const l = last as { rss: number; hwm: number } | null;
    console.log(`export of a ${N}-rollout run (chat_basic each), client resident memory:`);
    console.log(
      `  cli parquet: ${written} rollouts in ${cliSecs.toFixed(1)} s; RSS at 1,000 ${mib(at1k)} MiB, at ${N} ${mib(l?.rss)} MiB, peak ${mib(l?.hwm)} MiB`,
    );
    console.log(
      `  python rows: ${p.n} rollouts in ${pySecs.toFixed(1)} s; RSS at 1,000 ${mib(p.at1k)} MiB, at ${N} ${mib(p.atN)} MiB, peak ${mib(p.peak)} MiB`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await relay.stop();
  }
}

await main();

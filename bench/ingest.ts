// Bench section `ingest`: deltas/s into one episode, each acknowledged only after the relay
// committed it (SQLite transaction), against the real relay (scripts/relay.mjs: the
// wrangler bundle in Miniflare on a loopback port). Durable Object storage on tmpfs (see
// `startBenchRelay` in bench/helpers.ts); the 1 KiB rows are repeated with Miniflare's default
// on-disk storage.
//
// Per delta size (~1 KiB: one node with a 1 KiB message; ~600 KiB: one node whose
// `routed_experts` is a uint8 ndarray of shape [1500, 50, 8], i.e. 600,000 bytes of routing):
//   http_single   sequential `POST /v1/episodes/{id}/deltas`, one envelope per request, each
//                 awaited (200 and `ok`) before the next;
//   http_batched  the same with a msgpack array of BATCH envelopes per request;
//   ws            the producer socket `GET /v1/episodes/{id}/ingest`: one envelope per binary
//                 message, one JSON ack per message in order, WINDOW messages in flight.
// Every measurement uses a fresh episode (the first delta, carrying `open`, and a short warm-up
// are sent before the clock starts) and is deleted afterwards. It runs for MEASURE_MS or a
// bounded number of deltas, whichever comes first. Latency: send → ack of one request / message
// (http_batched: of the whole batch request). MB/s counts upstream delta bytes (MB = 10^6 B).
// Baseline in the same run: sequential `GET /v1/health` (a Worker-only round trip, no Durable
// Object, no storage) with the same HTTP client: `ratio_vs_health` = http_single deltas/s ÷
// health requests/s.
//
// Envelopes: src/protocol/envelope/producer.ts `ProducerCursor`. With one request in flight the cursor
// is acknowledged after the relay's ack, as a producer does. With several in flight (a batch,
// the socket window) it is advanced as each envelope is built: an envelope's `acked` view must
// already count the deltas sent ahead of it on the same trace, or the relay reads the in-flight
// nodes as re-sends (see the `stale_ack_view` check in the section's notes).

import { loadavg } from "node:os";
import type { LocalRelay } from "../scripts/relay.mjs";
import { encodeEnvelope, ProducerCursor, parseAnswer } from "../src/protocol/index.js";
import { type BenchOptions, sig } from "./harness.js";
import {
  closeSocket,
  type DeltaFactory,
  episodeId,
  ForeignCpu,
  fmt,
  HttpClient,
  openSocket,
  routingDeltas,
  sizedDeltas,
  startBenchRelay,
  stats,
  wsUrl,
} from "./helpers.js";

export const name = "ingest";

/** What the project wants to meet (a check column in human output, not asserted). */
export const TARGETS = {
  http_single_1KiB: 500,
  http_batched_1KiB: 2000,
  ws_1KiB: 2000,
} as const;

const MEASURE_MS = 2000;
const BATCH = 32;
const WINDOW = 32;
const HEALTH_MS = 1000;

export interface IngestFigures {
  deltas_per_s: number;
  mb_per_s: number;
  p50_ms: number;
  p99_ms: number;
  deltas: number;
  delta_bytes: number;
  ratio_vs_health?: number;
  [k: string]: number | undefined;
}

/** A msgpack array of already-encoded items (a batch of envelope maps, not bins). */
export function msgpackArray(items: Uint8Array[]): Uint8Array {
  const n = items.length;
  const head =
    n < 16
      ? Uint8Array.of(0x90 | n)
      : n < 0x10000
        ? Uint8Array.of(0xdc, n >> 8, n & 0xff)
        : Uint8Array.of(0xdd, n >>> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
  const out = new Uint8Array(head.length + items.reduce((a, b) => a + b.length, 0));
  out.set(head);
  let at = head.length;
  for (const it of items) {
    out.set(it, at);
    at += it.length;
  }
  return out;
}

// ---- the three ingest paths ----

type Mode = "http_single" | "http_batched" | "ws";

interface Run {
  deltas: number;
  ms: number;
  bytes: number;
  latencies: number[];
}

interface Plan {
  make: DeltaFactory;
  /** Deltas sent before the clock starts (after the `open` one). */
  warmup: number;
  /** At most this many timed deltas ... */
  maxDeltas: number;
  /** ... for at most this long. */
  maxMs: number;
}

async function runHttpSingle(client: HttpClient, id: string, plan: Plan): Promise<Run> {
  const path = `/v1/episodes/${id}/deltas`;
  const cursor = new ProducerCursor("bench");
  const send = async (i: number) => {
    const d = plan.make(i);
    await client.post(path, encodeEnvelope(cursor.envelope(d)));
    cursor.acknowledge(); // one in flight: acknowledge after the relay's ack
    return d.length;
  };
  let i = 0;
  for (; i <= plan.warmup; i++) await send(i);
  const latencies: number[] = [];
  let bytes = 0;
  const start = performance.now();
  let now = start;
  for (let k = 0; k < plan.maxDeltas && now - start < plan.maxMs; k++, i++) {
    const t = performance.now();
    bytes += await send(i);
    now = performance.now();
    latencies.push(now - t);
  }
  return { deltas: latencies.length, ms: now - start, bytes, latencies };
}

async function runHttpBatched(client: HttpClient, id: string, plan: Plan): Promise<Run> {
  const path = `/v1/episodes/${id}/deltas`;
  const cursor = new ProducerCursor("bench");
  let i = 0;
  const batch = (n: number) => {
    const envs: Uint8Array[] = [];
    let bytes = 0;
    for (let k = 0; k < n; k++, i++) {
      const d = plan.make(i);
      envs.push(encodeEnvelope(cursor.envelope(d)));
      cursor.acknowledge(); // several in flight: advance as sent (see the file comment)
      bytes += d.length;
    }
    return { body: msgpackArray(envs), bytes };
  };
  await client.post(path, batch(1 + plan.warmup).body);
  const latencies: number[] = [];
  let bytes = 0;
  let deltas = 0;
  const start = performance.now();
  let now = start;
  while (deltas < plan.maxDeltas && now - start < plan.maxMs) {
    const n = Math.min(BATCH, plan.maxDeltas - deltas);
    const b = batch(n);
    const t = performance.now();
    const ack = await client.post(path, b.body);
    now = performance.now();
    if (ack.applied !== n) throw new Error(`batch of ${n}: the relay applied ${ack.applied}`);
    latencies.push(now - t);
    deltas += n;
    bytes += b.bytes;
  }
  return { deltas, ms: now - start, bytes, latencies };
}

async function runWs(base: string, id: string, plan: Plan): Promise<Run> {
  const ws = await openSocket(wsUrl(base, `/v1/episodes/${id}/ingest`));
  try {
    const cursor = new ProducerCursor("bench");
    const untimed = 1 + plan.warmup;
    const total = untimed + plan.maxDeltas;
    let acked = 0;
    let sent = 0;
    let start = 0;
    let lastAck = 0;
    let stop = false;
    let bytes = 0;
    const sentAt: number[] = [];
    const latencies: number[] = [];
    let fail: ((e: Error) => void) | null = null;
    let done: (() => void) | null = null;
    const pump = () => {
      while (!stop && sent - acked < WINDOW && sent < total) {
        if (sent === untimed) {
          if (acked < sent) return; // the warm-up drains before the clock starts
          start = performance.now();
        }
        const d = plan.make(sent);
        const msg = encodeEnvelope(cursor.envelope(d));
        cursor.acknowledge(); // several in flight: advance as sent (see the file comment)
        if (sent >= untimed) bytes += d.length;
        sentAt[sent] = performance.now();
        ws.send(msg);
        sent++;
        if (sent > untimed && performance.now() - start >= plan.maxMs) stop = true;
      }
      if ((stop || sent === total) && acked === sent) done?.();
    };
    ws.on("message", (data, isBinary) => {
      if (isBinary) return fail?.(new Error("binary message on the ingest socket"));
      const ack = parseAnswer(String(data));
      if (!ack.ok) return fail?.(new Error(`ingest refused: ${JSON.stringify(ack)}`));
      const now = performance.now();
      if (acked >= untimed) latencies.push(now - sentAt[acked]!);
      acked++;
      lastAck = now;
      pump();
    });
    ws.on("close", (code, reason) => fail?.(new Error(`ingest socket closed ${code} ${String(reason)}`)));
    await new Promise<void>((resolve, reject) => {
      fail = reject;
      done = resolve;
      pump();
    });
    fail = null;
    return { deltas: latencies.length, ms: lastAck - start, bytes, latencies };
  } finally {
    ws.removeAllListeners("close");
    await closeSocket(ws);
  }
}

async function measureMode(
  relay: LocalRelay,
  client: HttpClient,
  mode: Mode,
  tag: string,
  plan: Plan,
): Promise<IngestFigures> {
  const id = episodeId(`${mode}-${tag}`);
  const foreign = new ForeignCpu();
  foreign.start();
  const r =
    mode === "http_single"
      ? await runHttpSingle(client, id, plan)
      : mode === "http_batched"
        ? await runHttpBatched(client, id, plan)
        : await runWs(relay.url, id, plan);
  const otherCpu = foreign.stop();
  await client.deleteEpisode(id);
  const s = stats(r.latencies);
  return {
    ...(otherCpu === undefined ? {} : { other_cpu_pct: otherCpu }),
    deltas_per_s: sig((r.deltas * 1000) / r.ms),
    mb_per_s: sig(r.bytes / 1e3 / r.ms),
    p50_ms: sig(s.p50, 3),
    p99_ms: sig(s.p99, 3),
    deltas: r.deltas,
    delta_bytes: Math.round(r.bytes / Math.max(1, r.deltas)),
  };
}

async function measureHealth(client: HttpClient): Promise<{ rps: number; p50: number; p99: number }> {
  const get = async () => {
    const res = await client.request("GET", "/v1/health");
    if (res.status !== 200) throw new Error(`GET /v1/health: ${res.status}`);
    JSON.parse(res.body.toString());
  };
  for (let k = 0; k < 200; k++) await get();
  const latencies: number[] = [];
  const start = performance.now();
  let now = start;
  while (now - start < HEALTH_MS && latencies.length < 100_000) {
    const t = performance.now();
    await get();
    now = performance.now();
    latencies.push(now - t);
  }
  const s = stats(latencies);
  return { rps: (latencies.length * 1000) / (now - start), p50: s.p50, p99: s.p99 };
}

/**
 * What a pipelining producer meets if it keeps `ProducerCursor`'s "acknowledge after the ack"
 * rule: the second envelope of a batch, built while the first is unacknowledged, carries a
 * stale `acked` view. Returns the relay's answer (for the notes).
 */
async function staleAckCheck(client: HttpClient): Promise<string> {
  const id = episodeId("stale-ack");
  const make = sizedDeltas(256);
  const cursor = new ProducerCursor("bench");
  const body = msgpackArray([encodeEnvelope(cursor.envelope(make(0))), encodeEnvelope(cursor.envelope(make(1)))]);
  const res = await client.request("POST", `/v1/episodes/${id}/deltas`, body, {
    "content-type": "application/msgpack",
  });
  await client.deleteEpisode(id);
  return `${res.status} ${res.body.toString()}`;
}

const SIZES: Array<{ label: string; make: () => DeltaFactory; maxDeltas: number; warmup: number }> = [
  { label: "1KiB", make: () => sizedDeltas(1024), maxDeltas: 20_000, warmup: 64 },
  { label: "600KiB", make: routingDeltas, maxDeltas: 1000, warmup: 4 },
];

const MODES: Mode[] = ["http_single", "http_batched", "ws"];

/** Run every mode briefly on throwaway episodes (JIT warm-up of workerd and of this process). */
async function warmUp(relay: LocalRelay, client: HttpClient): Promise<void> {
  for (const size of SIZES) {
    for (const mode of MODES) {
      await measureMode(relay, client, mode, "warmup", {
        make: size.make(),
        warmup: 0,
        maxDeltas: size.label === "1KiB" ? 2000 : 8,
        maxMs: 300,
      });
    }
  }
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  const disk: Record<string, unknown> = {};
  let stale = "";
  for (const storage of ["tmpfs", "disk"] as const) {
    opts.log(`ingest: starting the relay (wrangler bundle in Miniflare, storage on ${storage})`);
    const relay = await startBenchRelay(storage);
    const client = new HttpClient(relay.url);
    try {
      await warmUp(relay, client);
      const health = await measureHealth(client);
      opts.log(`ingest (${storage}): GET /v1/health ${health.rps.toFixed(0)} req/s`);
      const into = storage === "tmpfs" ? out : disk;
      for (const size of storage === "tmpfs" ? SIZES : SIZES.slice(0, 1)) {
        for (const mode of MODES) {
          const key = `${mode}_${size.label}`;
          const f = await measureMode(relay, client, mode, size.label, {
            make: size.make(),
            warmup: size.warmup,
            maxDeltas: size.maxDeltas,
            maxMs: MEASURE_MS,
          });
          if (mode === "http_single") f.ratio_vs_health = sig(f.deltas_per_s / health.rps, 3);
          into[key] = f;
          opts.log(
            `ingest (${storage}): ${key} ${f.deltas_per_s} deltas/s, ${f.mb_per_s} MB/s, p50 ${f.p50_ms} ms, p99 ${f.p99_ms} ms`,
          );
        }
      }
      into.baseline_health_rps = sig(health.rps);
      into.baseline_health_p50_ms = sig(health.p50, 3);
      into.baseline_health_p99_ms = sig(health.p99, 3);
      if (storage === "tmpfs") stale = await staleAckCheck(client);
    } finally {
      client.close();
      await relay.stop();
    }
  }
  out.on_disk = disk;
  out.settings = {
    loadavg_1min_end: sig(loadavg()[0]!, 2),
    storage: "tmpfs (/dev/shm); on_disk: Miniflare's default os.tmpdir() on ext4",
    measure_ms: MEASURE_MS,
    batch: BATCH,
    window: WINDOW,
    mb: 1e6,
  };
  out.stale_ack_view = stale;

  const rows: string[][] = [];
  const row = (label: string, key: string, f: IngestFigures) => {
    const target = (TARGETS as Record<string, number>)[key];
    const check =
      target === undefined ? "" : `${f.deltas_per_s >= target ? "ok" : "MISSED"} (≥ ${target.toLocaleString("en-US")})`;
    rows.push([
      label,
      String(f.delta_bytes),
      fmt(f.deltas_per_s),
      fmt(f.mb_per_s),
      fmt(f.p50_ms),
      fmt(f.p99_ms),
      f.ratio_vs_health === undefined ? "" : fmt(f.ratio_vs_health),
      String(f.deltas),
      f.other_cpu_pct === undefined ? "" : String(f.other_cpu_pct),
      check,
    ]);
  };
  for (const size of SIZES)
    for (const mode of MODES)
      row(`${mode}_${size.label}`, `${mode}_${size.label}`, out[`${mode}_${size.label}`] as IngestFigures);
  const healthRow = (label: string, o: Record<string, unknown>) =>
    rows.push([
      label,
      "",
      fmt(o.baseline_health_rps as number),
      "",
      fmt(o.baseline_health_p50_ms as number),
      fmt(o.baseline_health_p99_ms as number),
      "",
      "",
      "",
      "",
    ]);
  healthRow("GET /v1/health (baseline)", out);
  for (const mode of MODES) row(`disk: ${mode}_1KiB`, `${mode}_1KiB`, disk[`${mode}_1KiB`] as IngestFigures);
  healthRow("disk: GET /v1/health", disk);
  opts.table({
    title:
      "ingest: deltas/s into one episode, each acked after commit (real relay: wrangler bundle in Miniflare, loopback)",
    columns: [
      "",
      "delta B",
      "deltas/s",
      "MB/s",
      "p50 ms",
      "p99 ms",
      "vs health",
      "deltas",
      "other CPU %",
      "target (1 KiB)",
    ],
    rows,
    notes: [
      `http_single: one envelope per POST, sequential; http_batched: ${BATCH} envelopes per POST (p50/p99 per request);`,
      `ws: producer socket, ${WINDOW} messages in flight (p50/p99 send → ack per message). ~${MEASURE_MS / 1000} s or a bounded count per row, fresh episode each.`,
      `GET /v1/health row: requests/s (Worker only, same keep-alive node:http client); "vs health" = deltas/s ÷ that. MB = 10^6 B of upstream delta.`,
      `"other CPU %": CPU used meanwhile by processes other than this bench and its workerd, in % of one core (2 cores here).`,
      `Storage: Durable Object SQLite on tmpfs. "disk:" rows: Miniflare's default (a dir under os.tmpdir() on this VM's ext4`,
      `disk), where each commit is synced to disk: that costs ms per acknowledged write and is a property of the local disk, not of the relay.`,
      `Batched/pipelined envelopes advance the producer's acked view as they are built. Advanced only on acks (ProducerCursor's`,
      `rule), the 2nd envelope of a batch of two fresh deltas is refused: ${stale.slice(0, 150)}`,
    ],
  });
  return out;
}

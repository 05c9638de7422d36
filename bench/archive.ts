// Bench section `archive`: what archiving one big finished episode does to live work on the same
// relay (src/objects/episode/archive.ts). A 96 MiB episode is written and finished; while its
// alarm puts it into R2, a small live episode gets a 1 KiB delta every 50 ms over HTTP (each POST's
// answer is its ack) and /v1/health is asked every 250 ms. Twice, each on a fresh relay (storage on
// tmpfs, ARCHIVE_SLOTS 1 as every local run): in parts (ARCHIVE_PART_BYTES 8 MiB, the default, with
// the rest after each part) and, the baseline, in one put (ARCHIVE_PART_BYTES past the episode, as before parts).
// Figures: the slowest ack and health answer while the archive ran, the ack p99, and how long the
// archive took; ratios are parts ÷ one put.

import { encodeEnvelope, ProducerCursor } from "../src/protocol/index.js";
import type { BenchOptions, Table } from "./harness.js";
import { sig } from "./harness.js";
import { episodeId, fmt, healthProbe, replyBody, sizedDeltas, sleep, startBenchRelay } from "./helpers.js";

export const name = "archive";

const EPISODE_MIB = 96;
const DELTA_BYTES = 4 * 1024 * 1024;
const LIVE_EVERY_MS = 50;

interface Run {
  mode: string;
  archiveMs: number;
  acks: number;
  ackP99Ms: number;
  ackMaxMs: number;
  healthMaxMs: number;
  healthFailures: number;
}

async function post(base: string, path: string, body: Uint8Array): Promise<void> {
  const r = await fetch(`${base}${path}`, { method: "POST", body, headers: { "content-type": "application/msgpack" } });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${text.slice(0, 300)}`);
}

async function once(mode: "parts" | "one put", log: (m: string) => void): Promise<Run> {
  const vars: Record<string, string> = { ARCHIVE_AFTER_SECONDS: "1" };
  if (mode === "one put") vars.ARCHIVE_PART_BYTES = String(1024 * 1024 * 1024);
  const relay = await startBenchRelay("tmpfs", vars);
  try {
    const big = episodeId("archive-big");
    const make = sizedDeltas(DELTA_BYTES);
    const producer = new ProducerCursor("bench");
    const count = Math.ceil((EPISODE_MIB * 1024 * 1024) / DELTA_BYTES);
    for (let k = 0; k < count; k++) {
      await post(relay.url, `/v1/episodes/${big}/deltas`, encodeEnvelope(producer.envelope(make(k))));
      producer.acknowledge();
    }
    const live = episodeId("archive-live");
    const small = sizedDeltas(1024);
    const liveProducer = new ProducerCursor("live");
    let k = 0;
    const sendLive = async () => {
      await post(relay.url, `/v1/episodes/${live}/deltas`, encodeEnvelope(liveProducer.envelope(small(k++))));
      liveProducer.acknowledge();
    };
    await sendLive(); // the live episode's open, before the clock starts
    log(`archive (${mode}): ${EPISODE_MIB} MiB written; finishing it, live work meanwhile`);
    const latencies: number[] = [];
    let stop = false;
    const liveLoop = (async () => {
      while (!stop) {
        const t = performance.now();
        await sendLive();
        latencies.push(performance.now() - t);
        await sleep(LIVE_EVERY_MS);
      }
    })();
    const health = healthProbe(relay.url);
    const t0 = performance.now();
    await post(relay.url, `/v1/episodes/${big}/reply`, replyBody({ success: true, nodes: count, calls: 0 }));
    for (;;) {
      const s = (await (await fetch(`${relay.url}/v1/episodes/${big}/status`)).json()) as { archived?: boolean };
      if (s.archived) break;
      if (performance.now() - t0 > 600_000) throw new Error(`archive (${mode}): not archived in 600 s`);
      await sleep(100);
    }
    const archiveMs = performance.now() - t0;
    stop = true;
    await liveLoop;
    const h = await health.stop();
    const sorted = latencies.sort((a, b) => a - b);
    return {
      mode,
      archiveMs,
      acks: sorted.length,
      ackP99Ms: sorted[Math.min(sorted.length - 1, Math.floor(0.99 * sorted.length))] ?? 0,
      ackMaxMs: sorted.at(-1) ?? 0,
      healthMaxMs: h.maxMs,
      healthFailures: h.failures,
    };
  } finally {
    await relay.stop();
  }
}

export async function run(opts: BenchOptions) {
  const parts = await once("parts", opts.log);
  const whole = await once("one put", opts.log);
  const ratio = (a: number, b: number) => sig(a / Math.max(b, 1e-9), 3);
  const table: Table = {
    title: `archive: one ${EPISODE_MIB} MiB episode to R2 while a live episode takes a 1 KiB delta every ${LIVE_EVERY_MS} ms`,
    columns: ["mode", "archive s", "acks", "ack p99 ms", "ack max ms", "health max ms", "health failed"],
    rows: [parts, whole].map((r) => [
      r.mode,
      fmt(r.archiveMs / 1000),
      String(r.acks),
      fmt(r.ackP99Ms),
      fmt(r.ackMaxMs),
      fmt(r.healthMaxMs),
      String(r.healthFailures),
    ]),
    notes: [
      `parts ÷ one put: ack max ${ratio(parts.ackMaxMs, whole.ackMaxMs)}×, ack p99 ${ratio(parts.ackP99Ms, whole.ackP99Ms)}×, health max ${ratio(parts.healthMaxMs, whole.healthMaxMs)}×, archive time ${ratio(parts.archiveMs, whole.archiveMs)}×`,
    ],
  };
  opts.table(table);
  return {
    parts,
    one_put: whole,
    ratios: {
      ack_max: ratio(parts.ackMaxMs, whole.ackMaxMs),
      ack_p99: ratio(parts.ackP99Ms, whole.ackP99Ms),
      health_max: ratio(parts.healthMaxMs, whole.healthMaxMs),
      archive_time: ratio(parts.archiveMs, whole.archiveMs),
    },
  };
}

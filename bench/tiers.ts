// Bench section `tiers`: the viewer tier at scale, on the relay as `npm run start:tiers` runs it (the
// episode tier and the hub tier in two workerd processes behind the router; storage on tmpfs).
//
// hop    what the extra hop costs (episode → hub feed across processes, and the router): delivery
//        latency to 10 watchers at 50 deltas/s of 1 KiB on the relay in one process (its hubs on
//        the same thread) against the two-tier relay; p50/p99 of send → receipt. Measured twice:
//        as browsers connect (offering permessage-deflate; what each relay grants is printed) and
//        without the offer. The one-process relay sits behind Miniflare's entry Worker, which
//        compresses for clients that offer (see scripts/router.mjs) where Cloudflare, with
//        `no_web_socket_compression`, does not: the cells without the offer isolate the hop.
// scale  N watchers (default 10,000; --tier-watchers) of one episode, spread by the Worker over
//        K hubs (WATCHERS_PER_HUB 2000 → K = 5), then 1 KiB deltas at 5/s for 10 s: delivery
//        p50/p99 over every (watcher, delta), every seq checked (each once, in order), and each
//        isolate's heap peak (bench/inspector.ts). Catch-ups start at up to 2,000/s per hub here
//        (CATCHUP_RATE; the default 20/s would take minutes to seat 10,000 new watchers).
// All watchers are ws clients in this one Node process (they offer permessage-deflate): at 10,000
// the client side and this 2-core machine are the bound, not the hubs; the figures say so. Past
// 9,000 they connect to the hub tier's own address (the hub tier's Worker, then its hubs): the
// local router holds two file descriptors per watcher, and this machine allows 20,000 a process.

import { Decoder } from "@msgpack/msgpack";
import type { WebSocket } from "ws";
import type { LocalRelay } from "../scripts/relay.mjs";
import { ACK_BYTES, ackMessage, encodeEnvelope, ProducerCursor } from "../src/protocol/index.js";
import type { BenchOptions } from "./harness.js";
import {
  closeSocket,
  episodeId,
  fmt,
  openSocket,
  sizedDeltas,
  sleep,
  startBenchRelay,
  stats,
  wsUrl,
} from "./helpers.js";
import { HeapSampler, isolatesAt } from "./inspector.js";

export const name = "tiers";

const CONNECT_PARALLEL = 100;

interface Delivery {
  p50: number;
  p99: number;
  receipts: number;
  errors: string[];
}

/** `n` watchers of `id` and a producer; `count` deltas at `perS`; delivery latency. */
async function deliver(
  relay: LocalRelay,
  n: number,
  perS: number,
  count: number,
  log: (m: string) => void,
  watchBase = relay.url,
  socketOptions?: Parameters<typeof openSocket>[2],
): Promise<Delivery & { connectMs: number; hubs: number; extensions: string }> {
  const id = episodeId(`tiers-${n}`);
  const make = sizedDeltas(1024);
  const producer = new ProducerCursor("bench");
  const ingest = await openSocket(wsUrl(relay.url, `/v1/episodes/${id}/ingest`));
  const acks: string[] = [];
  ingest.on("message", (d) => {
    const a = JSON.parse(String(d)) as { ok: boolean };
    if (!a.ok) acks.push(String(d).slice(0, 200));
  });
  const send = (k: number) => {
    ingest.send(encodeEnvelope(producer.envelope(make(k))));
    producer.acknowledge();
  };
  send(0); // the `open` delta, seq 1
  for (let i = 0; i < 200; i++) {
    const s = (await (await fetch(`${relay.url}/v1/episodes/${id}/status`)).json()) as { seq?: number };
    if (s.seq === 1) break;
    await sleep(10);
  }
  const sentAt = new Float64Array(count + 2);
  const latencies: number[] = [];
  const errors: string[] = [];
  const decoder = new Decoder();
  const sockets: WebSocket[] = [];
  const t0 = performance.now();
  const one = () =>
    new Promise<WebSocket>((resolve, reject) => {
      let last = 1;
      let received = 0;
      let ackedAt = 0;
      let live = false;
      openSocket(
        wsUrl(watchBase, `/v1/episodes/${id}/watch`),
        (ws) => {
          ws.on("message", (data: Buffer, binary: boolean) => {
            const now = performance.now();
            if (!binary) return;
            received += data.length;
            if (!live || received - ackedAt >= ACK_BYTES) {
              ackedAt = received;
              ws.send(ackMessage(received));
            }
            const m = decoder.decode(data) as { type: string; frames?: Array<[number, Uint8Array]> };
            if (m.type === "caught_up") {
              live = true;
              resolve(ws);
            } else if (m.type === "frames") {
              for (const [seq] of m.frames!) {
                if (seq !== last + 1 && errors.length < 5) errors.push(`seq ${seq} after ${last}`);
                last = seq;
                latencies.push(now - sentAt[seq - 1]!);
              }
            }
          });
          ws.on("close", (code, reason) => {
            if (!live) reject(new Error(`watcher closed ${code} ${String(reason)} before caught up`));
          });
        },
        socketOptions,
      ).catch(reject);
    });
  for (let k = 0; k < n; k += CONNECT_PARALLEL) {
    const batch = Array.from({ length: Math.min(CONNECT_PARALLEL, n - k) }, one);
    sockets.push(...(await Promise.all(batch)));
    if (k > 0 && k % 2000 === 0) log(`tiers: ${k} watchers live`);
  }
  const connectMs = performance.now() - t0;
  const hubs = ((await (await fetch(`${relay.url}/v1/episodes/${id}/status`)).json()) as { hubs: number }).hubs;
  const start = performance.now();
  for (let k = 1; k <= count; k++) {
    const due = start + ((k - 1) * 1000) / perS;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    sentAt[k] = performance.now();
    send(k);
  }
  const expected = n * count;
  for (let i = 0; i < 600 && latencies.length < expected; i++) await sleep(100);
  if (latencies.length < expected) errors.push(`${expected - latencies.length} receipts missing`);
  if (acks.length) errors.push(...acks);
  const s = stats(latencies.sort((a, b) => a - b));
  const extensions = sockets[0]?.extensions ?? ""; // what the relay granted the offer, if anything
  await Promise.all(sockets.map((ws) => closeSocket(ws, 5000)));
  await closeSocket(ingest);
  return { p50: s.p50, p99: s.p99, receipts: latencies.length, errors, connectMs, hubs, extensions };
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  const n = opts.tierWatchers ?? 10_000;
  const out: Record<string, unknown> = {};
  // hop: one process against two tiers, 10 watchers, offering deflate as browsers do and not
  type Hop = Record<"one_process" | "two_tiers", Record<"offered" | "plain", Delivery & { extensions: string }>>;
  const hop = { one_process: {}, two_tiers: {} } as Hop;
  for (const tiers of [false, true]) {
    const relay = await startBenchRelay("tmpfs", {}, { tiers });
    const mode = tiers ? "two_tiers" : "one_process";
    try {
      for (const offer of ["offered", "plain"] as const) {
        const options = offer === "plain" ? { perMessageDeflate: false } : undefined; // ws offers by default
        await deliver(relay, 10, 50, 50, opts.log, relay.url, options); // warm-up
        hop[mode][offer] = await deliver(relay, 10, 50, 200, opts.log, relay.url, options);
      }
    } finally {
      await relay.stop();
    }
  }
  const cell = (d: Delivery & { extensions: string }) => ({
    p50_ms: fmtn(d.p50),
    p99_ms: fmtn(d.p99),
    granted: d.extensions || "none",
  });
  out.hop = {
    one_process: cell(hop.one_process.plain),
    two_tiers: cell(hop.two_tiers.plain),
    added_p50_ms: fmtn(hop.two_tiers.plain.p50 - hop.one_process.plain.p50),
    offering_deflate: { one_process: cell(hop.one_process.offered), two_tiers: cell(hop.two_tiers.offered) },
  };
  opts.log(
    `tiers: hop: p50 ${fmt(hop.one_process.plain.p50)} ms in one process, ${fmt(hop.two_tiers.plain.p50)} ms in two tiers; offering deflate: ${fmt(hop.one_process.offered.p50)} ms (granted ${hop.one_process.offered.extensions || "none"}), ${fmt(hop.two_tiers.offered.p50)} ms (granted ${hop.two_tiers.offered.extensions || "none"})`,
  );
  // scale
  const relay = await startBenchRelay(
    "tmpfs",
    { WATCHERS_PER_HUB: "2000", MAX_WATCHERS: "6000", CATCHUP_RATE: "2000", MAX_WAITING: "20000", MAX_HUBS: "16" },
    { tiers: true },
  );
  const heap = new HeapSampler(
    (
      await Promise.all(
        relay.runtimes.map(async (r, i) =>
          isolatesAt(await r.getInspectorURL(), i === 0 ? "episode tier" : "hub tier"),
        ),
      )
    )
      .flat()
      .filter((t) => /core:user:/.test(t.name)),
  );
  heap.start();
  try {
    await heap.mark();
    // past ~9,000 watchers the router (two file descriptors per watcher, 20,000 here and not
    // raisable) is the bound: they connect to the hub tier's own address, its Worker and hubs
    const d = await deliver(relay, n, 5, 50, opts.log, n > 9000 ? relay.watchUrl : relay.url);
    out.scale = {
      watchers: n,
      hubs: d.hubs,
      connect_s: fmtn(d.connectMs / 1000),
      deltas: 50,
      rate_per_s: 5,
      receipts: d.receipts,
      p50_ms: fmtn(d.p50),
      p99_ms: fmtn(d.p99),
      errors: d.errors,
      heap_peak_mib: heap.peak(),
    };
    opts.log(
      `tiers: ${n} watchers over ${d.hubs} hubs: p50 ${fmt(d.p50)} ms, p99 ${fmt(d.p99)} ms${d.errors.length ? `; errors: ${d.errors.join("; ")}` : ""}`,
    );
  } finally {
    heap.stop();
    await relay.stop();
  }
  const s = out.scale as {
    hubs: number;
    p50_ms: number;
    p99_ms: number;
    connect_s: number;
    receipts: number;
    heap_peak_mib: Record<string, { total: number }>;
  };
  type Cell = { p50_ms: number; p99_ms: number; granted: string };
  const h = out.hop as {
    one_process: Cell;
    two_tiers: Cell;
    added_p50_ms: number;
    offering_deflate: { one_process: Cell; two_tiers: Cell };
  };
  const hopRow = (label: string, c: Cell, note: string) => [label, "10", "1", fmt(c.p50_ms), fmt(c.p99_ms), note];
  opts.table({
    title: "tiers: the viewer tier (episode tier and hub tier in two processes, as npm run start:tiers runs them)",
    columns: ["", "watchers", "hubs", "p50 ms", "p99 ms", "notes"],
    rows: [
      hopRow("hop: one process", h.one_process, "50 × 1 KiB deltas/s, 200 deltas; no deflate offer"),
      hopRow(
        "hop: two tiers",
        h.two_tiers,
        `+${fmt(h.added_p50_ms)} ms p50: the feed's hop and the router; no deflate offer`,
      ),
      hopRow(
        "hop: one process, offering deflate",
        h.offering_deflate.one_process,
        `granted: ${h.offering_deflate.one_process.granted} (Miniflare's entry)`,
      ),
      hopRow(
        "hop: two tiers, offering deflate",
        h.offering_deflate.two_tiers,
        `granted: ${h.offering_deflate.two_tiers.granted} (as on Cloudflare)`,
      ),
      [
        "scale",
        String(n),
        String(s.hubs),
        fmt(s.p50_ms),
        fmt(s.p99_ms),
        `5 × 1 KiB deltas/s for 10 s, ${s.receipts} receipts; seated in ${s.connect_s} s; heap peak MiB ${Object.entries(
          s.heap_peak_mib,
        )
          .map(([k, v]) => `${k.replace(/:core:user:.*/, "")} ${v.total}`)
          .join(", ")}`,
      ],
    ],
    notes: [
      "All watchers are ws clients in this one Node process on a 2-core machine also running both workerd processes and the router:",
      "at 10,000 watchers the clients and the cores bound the figures. On Cloudflare each hub has a thread of its own.",
    ],
  });
  return out;
}

function fmtn(x: number): number {
  return Math.round(x * 100) / 100;
}

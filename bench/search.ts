// Bench section `search`: a run's search (src/objects/registry/search-store.ts) on a run of ROLLOUTS
// rollouts written live through the Worker (each: a task, a user prompt, a tool call and its
// result, an assistant answer; words drawn from a Zipf-like vocabulary, so a query can be rare or
// common), then:
//   - each query of QUERIES over HTTP (`GET /v1/runs/{run}/search`), p50 and p95 per query class,
//     and its answer checked against a brute-force scan of the text the bench wrote (every
//     episode found, none invented);
//   - the same single words by a plain scan of the same rows in the same object (no index), against
//     the search, both timed inside the object (EpisodeIndex `searchAgainstScan`): the ratio is the
//     index's gain;
//   - freshness: a new turn with a word never seen, then the search polled until it finds it
//     (the row, and the text with it, goes out at most INDEX_FLUSH_MS after the turn);
//   - what the text costs: the index's rows written and stored bytes per rollout (its own billing
//     units), beside the segments and characters it holds.

import { encodeEnvelope, encodeLossless, ProducerCursor } from "../src/protocol/index.js";
import type { BenchOptions } from "./harness.js";
import { median, sig } from "./harness.js";
import { HttpClient, sleep, startBenchRelay } from "./helpers.js";
import { chatNode, m, rng } from "./rollout-builders.js";

export const name = "search";

const ROLLOUTS = 10_000;
const PARALLEL = 8;
const VOCABULARY = 4000;
const REPEATS = 5;

/** Word k of the vocabulary ("w0" is the commonest). */
const word = (k: number) => `w${k}x`;

function sentence(r: () => number, n: number): string {
  // Zipf-like: the k-th word about 1/(k+1) as often
  return Array.from({ length: n }, () => word(Math.floor(VOCABULARY ** r()) - 1)).join(" ");
}

interface Written {
  id: string;
  text: string[];
}

function rollout(r: () => number, i: number): { deltas: Uint8Array[]; reply: Uint8Array; text: string[] } {
  const trace = `t${i}`;
  const task = `task ${sentence(r, 6)}`;
  const prompt = sentence(r, 20);
  const args = JSON.stringify({ cmd: `grep ${word(Math.floor(r() * VOCABULARY))} data.txt` });
  const result = sentence(r, 30);
  const answer = `${sentence(r, 25)}${i % 997 === 0 ? " needle-in-the-haystack" : ""}`;
  const deltas = [
    encodeLossless(
      m({
        trace,
        open: m({
          version: 1,
          id: trace,
          verifiers: m({ version: "0" }),
          task: m({ type: "T", data: m({ prompt: task }) }),
        }),
      }),
    ),
    encodeLossless(
      m({
        trace,
        nodes: [
          chatNode(0, m({ role: "user", content: prompt })),
          chatNode(
            1,
            m({ role: "assistant", content: null, tool_calls: [m({ id: "c", name: "bash", arguments: args })] }),
          ),
        ],
      }),
    ),
    encodeLossless(
      m({
        trace,
        nodes: [
          chatNode(2, m({ role: "tool", content: result, name: "bash" })),
          chatNode(3, m({ role: "assistant", content: answer })),
        ],
      }),
    ),
  ];
  const reply = encodeLossless(
    m({ success: true, error: null, head: m({ id: `e${i}` }), traces: [m({ id: trace, nodes: 4, calls: 0 })] }),
  );
  return { deltas, reply, text: [task, prompt, `bash ${args}`, result, answer] };
}

const words = (s: string) =>
  s
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter(Boolean);

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  // rows every 2 s whether or not its searches attend the run (its freshness is INDEX_FLUSH_MS's)
  const relay = await startBenchRelay("tmpfs", { INDEX_FLUSH_MS: "2000", INDEX_IDLE_FLUSH_MS: "2000" });
  const runName = `bench-search-${process.pid}`;
  try {
    const written: Written[] = [];
    const r = rng(7);
    const plans = Array.from({ length: ROLLOUTS }, (_, i) => ({ i, ...rollout(r, i) }));
    // the run's index, woken before the first rollout: when its counts start (the same at the end, or they are partial)
    const before = await new ResilientClient(relay.url).request("GET", `/v1/runs/${runName}/usage`);
    const sinceAtStart =
      before.status === 200 ? (JSON.parse(before.body.toString()) as { index: { since: number } }).index.since : null;
    const t0 = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        // a kept-alive connection the relay closes as a POST goes out is opened again and the POST
        // sent once more (the episode takes a resent envelope as a duplicate, by its seq)
        const http = new ResilientClient(relay.url);
        while (next < plans.length) {
          const p = plans[next++]!;
          const id = `${runName}:e${p.i}`;
          const producer = new ProducerCursor("bench");
          for (const d of p.deltas) {
            await http.post(`/v1/episodes/${encodeURIComponent(id)}/deltas`, encodeEnvelope(producer.envelope(d)));
            producer.acknowledge();
          }
          const res = await http.request("POST", `/v1/episodes/${encodeURIComponent(id)}/reply`, p.reply, {
            "content-type": "application/msgpack",
          });
          if (res.status !== 200) throw new Error(`reply ${id}: ${res.status} ${res.body.toString().slice(0, 200)}`);
          written.push({ id, text: p.text });
          if (written.length % 1000 === 0) opts.log(`search: ${written.length} of ${ROLLOUTS} rollouts written`);
        }
      }),
    );
    const writeS = (performance.now() - t0) / 1000;
    // every finished row (and its text) has landed once the run counts them all
    const http = new ResilientClient(relay.url);
    for (;;) {
      const a = JSON.parse((await http.request("GET", `/v1/runs/${runName}`)).body.toString()) as {
        aggregates: { counts: { finished: number } } | null;
      };
      if ((a.aggregates?.counts.finished ?? 0) >= ROLLOUTS) break;
      await sleep(200);
    }

    const corpus = new Map(written.map((w) => [w.id, w.text.map(words)]));
    const bruteForce = (test: (ws: string[]) => boolean) =>
      new Set([...corpus].filter(([, segs]) => segs.some(test)).map(([id]) => id));
    type Q = { klass: string; q: string; test: (ws: string[]) => boolean };
    const queries: Q[] = [
      ...[0, 1, 5, 20].map((k) => ({ klass: "common word", q: word(k), test: (ws: string[]) => ws.includes(word(k)) })),
      ...[200, 700, 1500].map((k) => ({ klass: "mid word", q: word(k), test: (ws: string[]) => ws.includes(word(k)) })),
      ...[3000, 3500, 3990].map((k) => ({
        klass: "rare word",
        q: word(k),
        test: (ws: string[]) => ws.includes(word(k)),
      })),
      {
        klass: "rare word",
        q: "needle-in-the-haystack",
        test: (ws: string[]) => ws.join(" ").includes("needle in the haystack"),
      },
      {
        klass: "phrase",
        q: `"${word(0)} ${word(1)}"`,
        test: (ws: string[]) => ws.join(" ").includes(`${word(0)} ${word(1)}`),
      },
      { klass: "prefix", q: "w39*", test: (ws: string[]) => ws.some((w) => w.startsWith("w39")) },
      {
        klass: "two words",
        q: `${word(50)} ${word(60)}`,
        test: (ws: string[]) => ws.includes(word(50)) && ws.includes(word(60)),
      },
    ];
    const byClass = new Map<string, number[]>();
    let checked = 0;
    let mismatches = 0;
    for (const query of queries) {
      // the whole answer (every page), for the check; the first page, timed
      const want = bruteForce(query.test);
      const got = new Set<string>();
      let cursor: string | null = null;
      do {
        const res = await http.request(
          "GET",
          `/v1/runs/${runName}/search?q=${encodeURIComponent(query.q)}&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
        );
        const page = JSON.parse(res.body.toString()) as { episodes: Array<{ id: string }>; cursor: string | null };
        for (const e of page.episodes) got.add(e.id);
        cursor = page.cursor;
      } while (cursor);
      // a word in nearly every segment is ranked over its first SEARCH_MATCH_BUDGET matches only: checked as a subset
      const exact = want.size <= 5000;
      const ok = exact
        ? got.size === want.size && [...want].every((id) => got.has(id))
        : [...got].every((id) => want.has(id));
      checked++;
      if (!ok) mismatches++;
      for (let k = 0; k < REPEATS; k++) {
        const t = performance.now();
        const res = await http.request("GET", `/v1/runs/${runName}/search?q=${encodeURIComponent(query.q)}&limit=20`);
        const ms = performance.now() - t;
        if (res.status !== 200) throw new Error(`search ${query.q}: ${res.status}`);
        byClass.set(query.klass, [...(byClass.get(query.klass) ?? []), ms]);
      }
      opts.log(`search: ${query.q}: ${want.size} rollouts by brute force, ${got.size} found${ok ? "" : " (MISMATCH)"}`);
    }
    const all = [...byClass.values()].flat();
    const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.95))]!;

    // the index's gain: a single word by the index and by a plain scan of the same rows, timed in the object
    // (an RPC from this process costs more than either: timed from here, the RPC is what was measured)
    const ns = (await relay.mf.getDurableObjectNamespace("EPISODE_INDEX")) as unknown as {
      get(id: unknown): {
        searchAgainstScan(
          w: string,
          limit: number,
          repeats: number,
        ): Promise<{ indexMs: number; scanMs: number; indexFound: number; scanFound: number }>;
        searchSize(): Promise<{
          segments: number;
          chars: number;
          textBytes: number;
          ftsBytes: number;
          rowsWritten: number;
        }>;
      };
      idFromName(n: string): unknown;
    };
    const index = ns.get(ns.idFromName(`run:${runName}`));
    const rpc: Array<{ q: string; indexMs: number; scanMs: number; found: number }> = [];
    for (const k of [3000, 700, 20]) {
      const q = word(k);
      const r = await index.searchAgainstScan(q, 20, 50);
      if (r.indexFound !== r.scanFound)
        throw new Error(`${q}: the index found ${r.indexFound}, the scan ${r.scanFound}`);
      rpc.push({ q, indexMs: r.indexMs, scanMs: r.scanMs, found: r.indexFound });
    }

    // freshness: a turn with a word never written, on a live rollout
    const fresh = `${runName}:fresh`;
    const producer = new ProducerCursor("fresh");
    const plan = rollout(rng(99), 0);
    await http.post(
      `/v1/episodes/${encodeURIComponent(fresh)}/deltas`,
      encodeEnvelope(producer.envelope(plan.deltas[0]!)),
    );
    producer.acknowledge();
    const unseen = "zyzzyvaunseen";
    const turn = encodeLossless(
      m({
        trace: "t0",
        nodes: [
          m({
            parent: null,
            semantic_parents: [],
            message: m({ role: "assistant", content: `a new turn: ${unseen}` }),
            sampled: false,
            timestamp: null,
            token_ids: [],
            mask: [],
            logprobs: [],
            routed_experts: null,
          }),
        ],
      }),
    );
    await http.post(`/v1/episodes/${encodeURIComponent(fresh)}/deltas`, encodeEnvelope(producer.envelope(turn)));
    /** Ms from now until the run's search finds `unseen` (NaN: not within 30 s). */
    const foundAfter = async (): Promise<number> => {
      const since = performance.now();
      for (;;) {
        const res = await http.request("GET", `/v1/runs/${runName}/search?q=${unseen}`);
        if ((JSON.parse(res.body.toString()) as { episodes: unknown[] }).episodes.length > 0)
          return performance.now() - since;
        if (performance.now() - since > 30_000) return Number.NaN;
        await sleep(50);
      }
    };
    const foundMs = await foundAfter();
    // a live rollout's later text waits up to SEARCH_FLUSH_MS (300 s) in the index; a finished one's goes at once
    // its reply as assembled: the open and the one new node
    const reply = encodeLossless(
      m({ success: true, error: null, head: m({ id: "e-fresh" }), traces: [m({ id: "t0", nodes: 1, calls: 0 })] }),
    );
    const replied = await http.request("POST", `/v1/episodes/${encodeURIComponent(fresh)}/reply`, reply, {
      "content-type": "application/msgpack",
    });
    if (replied.status !== 200)
      throw new Error(`reply ${fresh}: ${replied.status} ${replied.body.toString().slice(0, 200)}`);
    const finishedFoundMs = await foundAfter();

    // what the text costs the index, per rollout
    const usage = JSON.parse((await http.request("GET", `/v1/runs/${runName}/usage`)).body.toString()) as {
      index: { rowsWritten: number; sqliteBytes: number; wakes: number; requests: number; since: number };
    };
    const size = await index.searchSize();
    const figures = {
      rollouts: ROLLOUTS,
      write_s: sig(writeS),
      // 503s the writers retried (a local relay out of memory for storage answers `overloaded`)
      retried_503: ResilientClient.retried503,
      queries: checked,
      mismatches,
      p50_ms: sig(median(all)),
      p95_ms: sig(p95(all)),
      by_class: Object.fromEntries([...byClass].map(([k, v]) => [k, { p50_ms: sig(median(v)), p95_ms: sig(p95(v)) }])),
      index_vs_scan: rpc.map((x) => ({
        ...x,
        indexMs: sig(x.indexMs),
        scanMs: sig(x.scanMs),
        ratio: sig(x.scanMs / x.indexMs),
      })),
      fresh_turn_found_ms: sig(foundMs),
      finished_text_found_ms: sig(finishedFoundMs),
      segments_per_rollout: sig(size.segments / ROLLOUTS),
      chars_per_rollout: sig(size.chars / ROLLOUTS),
      search_rows_written_per_rollout: sig(size.rowsWritten / ROLLOUTS),
      search_text_bytes_per_rollout: sig(size.textBytes / ROLLOUTS),
      search_fts_bytes_per_rollout: sig(size.ftsBytes / ROLLOUTS),
      index_rows_written_per_rollout: sig(usage.index.rowsWritten / ROLLOUTS),
      index_bytes_per_rollout: sig(usage.index.sqliteBytes / ROLLOUTS),
      // a count from zero after a wake would show here (the index's meter record kept through the run)
      index_wakes: usage.index.wakes,
      // false: the index's counts started again after the writes did (a new isolate: a restarted runtime), so its
      // per-rollout figures are partial
      index_counted_from_start: sinceAtStart === null ? null : usage.index.since === sinceAtStart,
      index_requests: usage.index.requests,
    };
    opts.table({
      title: `search: ${ROLLOUTS} rollouts written live in ${fmt(writeS)} s (${ResilientClient.retried503} answers 503, retried); ${checked} queries checked against a brute-force scan, ${mismatches} mismatches`,
      columns: ["query class", "p50 ms (HTTP)", "p95 ms (HTTP)"],
      rows: [...byClass].map(([k, v]) => [k, fmt(median(v)), fmt(p95(v))]),
      notes: [
        `all queries: p50 ${fmt(median(all))} ms, p95 ${fmt(p95(all))} ms over HTTP`,
        ...rpc.map(
          (x) =>
            `"${x.q}" (first ${x.found} found), in the object: the index ${fmt(x.indexMs)} ms, a plain scan of the same rows ${fmt(x.scanMs)} ms (${fmt(x.scanMs / x.indexMs)}×)`,
        ),
        Number.isFinite(foundMs)
          ? `a live rollout's new turn found ${fmt(foundMs)} ms after it was acknowledged (INDEX_FLUSH_MS 2000)`
          : "a live rollout's new turn not found within 30 s: its text waits up to SEARCH_FLUSH_MS (300 s)",
        `its text found ${fmt(finishedFoundMs)} ms after the rollout's reply was acknowledged (a finished rollout's text goes at once)`,
        `the index holds ${fmt(size.segments / ROLLOUTS)} segments, ${fmt(size.chars / ROLLOUTS)} characters per rollout; ${fmt(usage.index.rowsWritten / ROLLOUTS)} rows written and ${fmt(usage.index.sqliteBytes / ROLLOUTS)} B stored per rollout (its whole row, aggregates and text), counted over ${usage.index.requests} requests and ${usage.index.wakes} wake(s)`,
      ],
    });
    return figures;
  } finally {
    await relay.stop();
  }
}

/**
 * An HttpClient that retries as the producer clients do (clients/python/episode_relay/sink.py): a
 * kept-alive connection the relay reset is opened again, and a 503 (a local relay out of memory for
 * storage: `overloaded`, or a tier not up) is sent again after its Retry-After, for up to 30 s.
 * Every such retry is counted: the bench reports them.
 */
class ResilientClient {
  /** 503 answers retried, by every client of the bench. */
  static retried503 = 0;
  private client: HttpClient;
  constructor(private readonly base: string) {
    this.client = new HttpClient(base);
  }
  async request(
    method: string,
    path: string,
    body?: Uint8Array,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: Buffer; headers: Record<string, string | string[] | undefined> }> {
    const giveUp = performance.now() + 30_000;
    for (let attempt = 1; ; attempt++) {
      let res: Awaited<ReturnType<HttpClient["request"]>>;
      try {
        res = await this.client.request(method, path, body, headers);
      } catch (e) {
        // ECONNRESET: reset, or closed before an answer ("socket hang up")
        if ((e as NodeJS.ErrnoException).code !== "ECONNRESET" || attempt >= 3) throw e;
        this.client.close();
        this.client = new HttpClient(this.base);
        continue;
      }
      if (res.status !== 503 || performance.now() > giveUp) return res;
      ResilientClient.retried503++;
      const after = Number(res.headers["retry-after"] ?? 1);
      await sleep(1000 * (Number.isFinite(after) ? after : 1) * (0.5 + Math.random() / 2));
    }
  }
  async post(path: string, body: Uint8Array) {
    const res = await this.request("POST", path, body, { "content-type": "application/msgpack" });
    if (res.status !== 200) throw new Error(`POST ${path}: ${res.status} ${res.body.toString().slice(0, 300)}`);
    return res;
  }
}

function fmt(x: number): string {
  return Number.isFinite(x) ? (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)) : "-";
}

// Bench section `runscale`: one run of N episodes written at once, watched by dashboards, against
// the real relay (scripts/relay.mjs; Durable Object storage on tmpfs, see bench/helpers.ts
// `startBenchRelay`). What the run's index (src/objects/registry/episode-index.ts) costs the writers, how
// stale the dashboards' view is, and whether the index ends up exact.
//
// Per N (default 100, 500, 1000; --runscale-sizes), on two relays started side by side:
//   index     the relay as configured (wrangler.toml [vars]: an episode's row goes to its run's
//             index on creation, at most every INDEX_FLUSH_MS while turns arrive, or less often
//             when the run's live episodes would exceed INDEX_WRITES_PER_S together, and on finish);
//   no-index  the baseline, the same load on a relay started with INDEX_FLUSH_MS=86400000: rows go
//             to the index on creation and on finish only, nothing while turns arrive.
// The load: DASHBOARDS sockets on the run (`GET /v1/runs/{run}?limit=500` upgraded) connect, then
// N producer sockets (`/v1/episodes/{run}:{i}/ingest`) each open their trace; once every dashboard
// lists the N episodes, each episode sends one turn per second (a ~4 KB delta: one sampled node
// with token ids, mask, logprobs and a message, its model call, and `set` of a growing
// `num_total_tokens`), phases spread evenly over the second, for WINDOW_S seconds (measured).
// Then every episode finishes: a last delta `set`s its `rewards` and a reply finishes it (one in
// FAIL_EVERY fails instead, without rewards), and the index is polled until it settles.
// Figures per N and relay:
//   ack p50/p99      send → answer on the producer socket, turns of the window (index ÷ no-index
//                    is the index traffic's cost to the writers);
//   staleness        a turn's ack (the `num_total_tokens` it set) → each dashboard's receipt of an
//                    upsert of that episode with at least those tokens;
//   flush told/seen  the interval the run's index tells its episodes (max(INDEX_FLUSH_MS,
//                    ceil(N × 1000 / INDEX_WRITES_PER_S))), and the median gap between successive
//                    token changes of one episode on a dashboard;
//   rows/s, msg/s    row updates and messages one dashboard received per second of the window;
//   lost             after finishing and settling (polled up to SETTLE_MS): episodes whose listed
//                    row (`GET /v1/runs/{run}/episodes`) differs from what was written (status,
//                    tokens, seq, calls, reward), or is missing;
//   aggregates       `GET /v1/runs/{run}` against a recount of the listed rows (aggregates.ts
//                    `recount`, same formulas): counts, turns, tokens, per reward count, mean,
//                    histogram, extremes, throughput;
//   CPU              of this process (every producer and dashboard: the client) and of the
//                    relay's workerd, in % of one core over the window; sends/s achieved against
//                    the offered N/s tells whether the client held the rate.

import { cpus, loadavg, totalmem } from "node:os";
import type { WebSocket } from "ws";
import type { LocalRelay } from "../scripts/relay.mjs";
import type { IndexEntry, IndexRow } from "../src/protocol/index.js";
import {
  encodeEnvelope,
  F64,
  flushIntervalMs,
  HISTOGRAM_BINS,
  type IndexPacing,
  indexPacingFrom,
  LMap,
  type LValue,
  minuteOf,
  ProducerCursor,
  PUSH_MS,
  parseAnswer,
  parseRunMessage,
  type RunAggregates,
  recount,
  SCORE_UNIT,
} from "../src/protocol/index.js";
import { type BenchOptions, sig } from "./harness.js";
import {
  closeSocket,
  cpuMsOf,
  descendantPids,
  ForeignCpu,
  fmt,
  HttpClient,
  openSocket,
  replyBody,
  rolloutDelta,
  setDelta,
  sleep,
  startBenchRelay,
  stats,
  TURN_TOKENS,
  wranglerVars,
  wsUrl,
} from "./helpers.js";

export const name = "runscale";

const DEFAULT_SIZES = [100, 500, 1000];
/** Turns sent by every episode in the measured window (one per TURN_MS). */
const WINDOW_S = 20;
const TURN_MS = 1000;
const DASHBOARDS = 5;
/** One episode in this many fails (reply `success: false`) instead of finishing. */
const FAIL_EVERY = 7;
/** After finishing, the index is polled this long at most for the rows to match. */
const SETTLE_MS = 30_000;
const ACK_DRAIN_MS = 30_000;
const CONNECT_PARALLEL = 50;
const FINISH_PARALLEL = 32;
const HTTP_CLIENTS = 8;
/** The baseline relay's INDEX_FLUSH_MS: a day, i.e. no update while turns arrive. */
const NO_INDEX_FLUSH_MS = "86400000";
/** The offered rate counts as held when ≥ this share of N/s is sent and sends are late by ≤ LATE_MS (p99). */
const HELD_SHARE = 0.97;
const LATE_MS = 250;
/**
 * Acks of turns sent this long after the window opened are the steady state (the first turn of every episode flushes at
 * once).
 */
const START_MS = 5000;
/** Staleness p99 is within its bound when ≤ flush told + PUSH_MS + this (the alarm, the RPC, the push). */
const STALE_SLACK_MS = 250;
/**
 * Relay CPU (% of one core) from which the relay counts as saturated, other processes' CPU from which the machine
 * counts as busy.
 */
const SATURATED_PCT = 90;
const BUSY_PCT = 50;

// ---- one episode (a producer socket) ----

interface Sent {
  at: number;
  /** `num_total_tokens` this message set (0: none). */
  tokens: number;
  /** A turn of the measured window. */
  measured: boolean;
  done?: (ok: boolean) => void;
}

interface Episode {
  i: number;
  id: string;
  ws: WebSocket | null;
  cursor: ProducerCursor;
  inFlight: Sent[];
  /** Turns sent (each one node and one call). */
  turns: number;
  tokens: number;
  /** The episode's seq after the last acknowledged message (the reply's ack at the end). */
  seq: number;
  status: "live" | "finished" | "failed";
  reward: number | null;
}

const tokensAt = (i: number, turn: number) => turn * (TURN_TOKENS + 64) + (i % 50);
const failsAt = (i: number) => i % FAIL_EVERY === 3;
/** Scores 0, 0.025, ..., 1 (both ends and every histogram bin). */
const scoreOf = (i: number) => ((i * 37) % 41) / 40;

// ---- one dashboard (a run socket) ----

class Dashboard {
  ws: WebSocket | null = null;
  /** Per episode: the highest `tokens` seen, -1 before its first row. */
  readonly seen: Float64Array;
  readonly last: Array<IndexEntry | undefined>;
  /** Per episode: acked turns not seen yet, [tokens, ack time, send time], in order. */
  private readonly pending: Array<Array<[number, number, number]>>;
  pendingCount = 0;
  known = 0;
  messages = 0;
  windowMessages = 0;
  windowRows = 0;
  regressions = 0;
  early = 0;
  measuring = false;
  readonly staleness: number[] = [];
  /** The same from the turn's send (differs from `staleness` when acks are late). */
  readonly fromSend: number[] = [];
  /** Arrival times of row updates while measuring (the first dashboard only), and the most rows in one message. */
  readonly rowTimes: number[] = [];
  maxRowsPerMessage = 0;
  /** Gaps between successive token changes of one episode (recorded while measuring). */
  readonly gaps: number[] = [];
  private readonly lastChange: Float64Array;
  /** When `seen` last grew. */
  private readonly seenAt: Float64Array;
  aggregates: RunAggregates | null = null;
  closing = false;

  constructor(
    readonly run: string,
    readonly n: number,
    readonly errors: string[],
    private readonly recordGaps: boolean,
  ) {
    this.seen = new Float64Array(n).fill(-1);
    this.last = new Array<IndexEntry | undefined>(n);
    this.pending = Array.from({ length: n }, () => []);
    this.lastChange = new Float64Array(n);
    this.seenAt = new Float64Array(n);
  }

  async connect(base: string): Promise<void> {
    let snapshot: () => void = () => {};
    const got = new Promise<void>((r) => (snapshot = r));
    this.ws = await openSocket(wsUrl(base, `/v1/runs/${encodeURIComponent(this.run)}?limit=500`), (ws) => {
      ws.on("message", (data: Buffer, isBinary: boolean) => {
        const now = performance.now();
        if (isBinary) return this.fail("binary message on the run socket");
        let m: ReturnType<typeof parseRunMessage>;
        try {
          m = parseRunMessage(String(data));
        } catch (e) {
          return this.fail(String(e));
        }
        this.messages++;
        if (this.measuring) this.windowMessages++;
        this.aggregates = m.aggregates;
        if (m.type === "snapshot") {
          for (const e of m.episodes) this.absorb(e, now);
          snapshot();
        } else {
          for (const e of m.upserts) this.absorb(e, now);
          if (this.measuring) this.maxRowsPerMessage = Math.max(this.maxRowsPerMessage, m.upserts.length);
          if (m.deletes.length) this.fail(`deletes on the run socket: ${m.deletes.slice(0, 3).join(", ")}`);
        }
      });
      ws.on("close", (code, reason) => {
        if (!this.closing) this.fail(`run socket closed ${code} ${String(reason)}`);
      });
    });
    await got;
  }

  private fail(msg: string): void {
    if (this.errors.length < 20) this.errors.push(`dashboard: ${msg}`);
  }

  private absorb(e: IndexEntry, now: number): void {
    const colon = e.id.lastIndexOf(":");
    const i = Number(e.id.slice(colon + 1));
    if (e.id.slice(0, colon) !== this.run || !Number.isInteger(i) || i < 0 || i >= this.n)
      return this.fail(`a row of another run: ${e.id}`);
    if (this.last[i] === undefined) this.known++;
    this.last[i] = e;
    if (this.measuring) {
      this.windowRows++;
      if (this.recordGaps) this.rowTimes.push(now);
    }
    const seen = this.seen[i]!;
    if (e.tokens < seen) {
      this.regressions++;
      return;
    }
    if (e.tokens > seen && this.recordGaps && this.measuring) {
      if (this.lastChange[i]! > 0) this.gaps.push(now - this.lastChange[i]!);
      this.lastChange[i] = now;
    }
    if (e.tokens > seen) this.seenAt[i] = now;
    this.seen[i] = e.tokens;
    const q = this.pending[i]!;
    while (q.length && q[0]![0] <= e.tokens) {
      const [, ackAt, sentAt] = q.shift()!;
      this.staleness.push(now - ackAt);
      this.fromSend.push(now - sentAt);
      this.pendingCount--;
    }
  }

  /** Episode `i`'s turn setting `tokens`, sent at `sentAt`, was acked at `at`: time until this dashboard sees it. */
  expect(i: number, tokens: number, at: number, sentAt: number): void {
    if (this.seen[i]! >= tokens) {
      // the row arrived before the producer's ack was read (a late ack: the row was flushed meanwhile)
      this.staleness.push(0);
      this.fromSend.push(this.seenAt[i]! - sentAt);
      this.early++;
      return;
    }
    this.pending[i]!.push([tokens, at, sentAt]);
    this.pendingCount++;
  }

  startMeasuring(): void {
    this.measuring = true;
    this.lastChange.fill(0);
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.ws) await closeSocket(this.ws);
  }
}

// ---- one load: N episodes, the window, the finish, the checks ----

interface LoadFigures {
  episodes: number;
  offered_per_s: number;
  sends_per_s: number;
  send_late_p99_ms: number;
  rate_held: boolean;
  ack_p50_ms: number;
  ack_p99_ms: number;
  acks: number;
  /** Turns sent START_MS or more after the window opened. */
  steady_ack_p50_ms: number;
  steady_ack_p99_ms: number;
  /** Turns sent in the window's first START_MS. */
  start_ack_p99_ms: number;
  stale_p50_ms?: number;
  stale_p99_ms?: number;
  stale_from_send_p50_ms?: number;
  stale_from_send_p99_ms?: number;
  stale_early?: number;
  stale_within_bound?: boolean;
  stale_samples?: number;
  stale_unseen?: number;
  flush_told_ms?: number;
  flush_seen_ms?: number;
  rows_per_s_per_dashboard: number;
  /** The most row updates one dashboard received in one second of the window (the index's write peak). */
  rows_per_s_peak: number;
  rows_per_message_max: number;
  msgs_per_s_per_dashboard_max: number;
  row_regressions: number;
  lost: number;
  lost_examples: string[];
  dashboard_mismatches: number;
  settle_ms: number;
  aggregates: string[];
  client_cpu_pct: number;
  relay_cpu_pct: number;
  other_relay_cpu_pct: number;
  other_cpu_pct?: number;
  errors: string[];
}

interface Target {
  relay: LocalRelay;
  pids: number[];
  /** The other relay's workerd (idle meanwhile: its CPU shows interference). */
  others: number[];
  indexed: boolean;
  label: string;
}

interface LoadOptions {
  n: number;
  windowS: number;
  tag: string;
  /** INDEX_FLUSH_MS and INDEX_WRITES_PER_S as the indexed relay has them. */
  pacing: IndexPacing;
  log: (m: string) => void;
}

/** What the measured window gave: its length, the client's and relays' CPU, the sends and whether the rate was held. */
interface WindowFigures {
  windowMs: number;
  /** This process's CPU over the window (process.cpuUsage, µs). */
  cpu: NodeJS.CpuUsage;
  relayCpuMs: number;
  idleCpuMs: number;
  otherCpu: number | undefined;
  flushTold: number;
  /** (turn, dashboard) pairs not seen after the window. */
  unseen: number;
  sendLate: { p50: number; p99: number };
  sendsPerS: number;
  held: boolean;
}

/** After finishing and settling: the listed rows against what was written, the dashboards' and the aggregates'. */
interface SettleFigures {
  /** Episodes whose listed row differs from what was written. */
  wrong: string[];
  settleMs: number;
  dashWrong: number;
  aggDiffs: string[];
}

async function runLoad(t: Target, o: LoadOptions): Promise<LoadFigures> {
  const load = new Load(t, o);
  try {
    await load.open();
    const w = await load.measureWindow();
    await load.finishAll();
    const settled = await load.settle();
    return load.figures(w, settled);
  } finally {
    await load.close();
  }
}

/** One load's run, its episodes (producer sockets) and dashboards, and what they sent and received. */
class Load {
  readonly n: number;
  readonly base: string;
  readonly run: string;
  readonly errors: string[] = [];
  readonly clients: HttpClient[];
  readonly eps: Episode[];
  readonly dashboards: Dashboard[];
  readonly ackLatencies: number[] = [];
  readonly steadyAcks: number[] = [];
  readonly startAcks: number[] = [];
  /** When the measured window opened (turns acked before it are not measured). */
  t0 = Number.POSITIVE_INFINITY;
  /** The producer sockets are being closed: a close is no error. */
  closing = false;
  inFlight = 0;
  /** When the last reply was answered. */
  lastReply = 0;

  constructor(
    readonly t: Target,
    readonly o: LoadOptions,
  ) {
    this.n = o.n;
    this.base = t.relay.url;
    this.run = `bench-runscale-${o.tag}-${t.label}-${o.n}-${process.pid}-${Date.now().toString(36)}`;
    this.clients = Array.from({ length: HTTP_CLIENTS }, () => new HttpClient(this.base));
    this.eps = Array.from({ length: o.n }, (_, i) => ({
      i,
      id: `${this.run}:${i}`,
      ws: null,
      cursor: new ProducerCursor("bench"),
      inFlight: [],
      turns: 0,
      tokens: 0,
      seq: 0,
      status: "live",
      reward: null,
    }));
    this.dashboards = Array.from({ length: DASHBOARDS }, (_, k) => new Dashboard(this.run, o.n, this.errors, k === 0));
  }

  fail(m: string): void {
    if (this.errors.length < 20) this.errors.push(m);
  }

  send(ep: Episode, delta: Uint8Array, tokens: number, measured: boolean, done?: (ok: boolean) => void): void {
    const msg = encodeEnvelope(ep.cursor.envelope(delta));
    ep.cursor.acknowledge(); // pipelined (an ack may take longer than a turn): the acked view advances as sent
    ep.inFlight.push({ at: performance.now(), tokens, measured, ...(done ? { done } : {}) });
    this.inFlight++;
    ep.ws!.send(msg);
  }

  sendAndWait(ep: Episode, delta: Uint8Array, tokens: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      this.send(ep, delta, tokens, false, resolve);
    });
  }

  /** Episode `ep`'s producer socket: each answer is matched with the oldest message in flight. */
  async connect(ep: Episode): Promise<void> {
    ep.ws = await openSocket(wsUrl(this.base, `/v1/episodes/${ep.id}/ingest`), (ws) => {
      ws.on("message", (data: Buffer, isBinary: boolean) => this.answered(ep, data, isBinary));
      ws.on("close", (code, reason) => {
        if (!this.closing) this.fail(`${ep.id}: producer socket closed ${code} ${String(reason)}`);
      });
    });
  }

  private answered(ep: Episode, data: Buffer, isBinary: boolean): void {
    const now = performance.now();
    const s = ep.inFlight.shift();
    if (!s) return this.fail(`${ep.id}: an answer for nothing sent`);
    this.inFlight--;
    let ok = false;
    try {
      const a = isBinary ? null : parseAnswer(String(data));
      if (a?.ok) {
        ok = true;
        ep.seq = Math.max(ep.seq, a.seq);
      } else this.fail(`${ep.id}: refused: ${String(data).slice(0, 300)}`);
    } catch (e) {
      this.fail(`${ep.id}: ${String(e)}`);
    }
    if (ok && s.measured) {
      this.ackLatencies.push(now - s.at);
      (s.at >= this.t0 + START_MS ? this.steadyAcks : this.startAcks).push(now - s.at);
      if (this.t.indexed && s.tokens > 0) for (const d of this.dashboards) d.expect(ep.i, s.tokens, now, s.at);
    }
    s.done?.(ok);
  }

  /**
   * Dashboards first (an empty run's snapshot), then the producers, each opening its trace; until every dashboard lists
   * them.
   */
  async open(): Promise<void> {
    await Promise.all(this.dashboards.map((d) => d.connect(this.base)));
    for (let k = 0; k < this.n; k += CONNECT_PARALLEL) {
      await Promise.all(
        this.eps.slice(k, k + CONNECT_PARALLEL).map(async (ep) => {
          await this.connect(ep);
          this.send(ep, rolloutDelta(0, [["num_total_tokens", 0]]), 0, false);
        }),
      );
    }
    if (!(await until(() => this.inFlight === 0, ACK_DRAIN_MS)))
      throw new Error(`${this.run}: ${this.inFlight} creations unanswered after ${ACK_DRAIN_MS} ms`);
    if (!(await until(() => this.dashboards.every((d) => d.known === this.n), 60_000))) {
      throw new Error(
        `${this.run}: dashboards list ${this.dashboards.map((d) => d.known).join("/")} of ${this.n} episodes 60 s after creation`,
      );
    }
    if (this.errors.length) throw new Error(`${this.run}: ${this.errors.join("; ")}`);
    await sleep(1000);
  }

  /** The measured window: episode i sends turn k at t0 + k s + i/N s; then the acks and the dashboards catch up. */
  async measureWindow(): Promise<WindowFigures> {
    const { t, o, n, dashboards } = this;
    const cpu0 = process.cpuUsage();
    const relay0 = cpuMsOf(t.pids);
    const idle0 = cpuMsOf(t.others);
    const foreign = new ForeignCpu();
    foreign.start();
    for (const d of dashboards) d.startMeasuring();
    this.t0 = performance.now() + 20;
    const total = o.windowS * n;
    const { late, lastSend } = await this.sendTurns(total);
    const windowMs = Math.max(o.windowS * TURN_MS, lastSend - this.t0);
    const cpu = process.cpuUsage(cpu0);
    const relayCpuMs = cpuMsOf(t.pids) - relay0;
    const idleCpuMs = cpuMsOf(t.others) - idle0;
    const otherCpu = foreign.stop();
    for (const d of dashboards) d.measuring = false;
    const flushTold = flushIntervalMs(o.pacing, n, true); // its dashboards attend the run

    if (!(await until(() => this.inFlight === 0, ACK_DRAIN_MS)))
      this.fail(`${this.inFlight} turns unanswered ${ACK_DRAIN_MS} ms after the window`);
    if (t.indexed) await until(() => dashboards.every((d) => d.pendingCount === 0), flushTold + PUSH_MS + 5000);
    const unseen = dashboards.reduce((a, d) => a + d.pendingCount, 0);
    const sendLate = stats(late);
    const sendsPerS = (total * 1000) / windowMs;
    const held = sendsPerS >= HELD_SHARE * n && sendLate.p99 <= LATE_MS;
    o.log(
      `runscale: ${t.label} N=${n}: ${Math.round(sendsPerS)} sends/s (late p99 ${sendLate.p99.toFixed(0)} ms), client CPU ${Math.round((cpu.user + cpu.system) / 10 / windowMs)}%, relay CPU ${Math.round((relayCpuMs * 100) / windowMs)}% (pids ${t.pids.join(",")}; the other relay ${Math.round((idleCpuMs * 100) / windowMs)}%, other processes ${otherCpu ?? "?"}%)`,
    );
    return { windowMs, cpu, relayCpuMs, idleCpuMs, otherCpu, flushTold, unseen, sendLate, sendsPerS, held };
  }

  /** `total` turns on schedule from t0: how late each was sent, and when the last one went. */
  private sendTurns(total: number): Promise<{ late: number[]; lastSend: number }> {
    const { n, eps } = this;
    const late: number[] = [];
    let lastSend = this.t0;
    return new Promise((resolve) => {
      let p = 0;
      const tick = () => {
        let now = performance.now();
        while (p < total) {
          const turn = Math.floor(p / n) + 1;
          const ep = eps[p % n]!;
          const at = this.t0 + (turn - 1) * TURN_MS + (ep.i * TURN_MS) / n;
          if (at > now) break;
          ep.turns = turn;
          ep.tokens = tokensAt(ep.i, turn);
          this.send(ep, rolloutDelta(turn, [["num_total_tokens", ep.tokens]]), ep.tokens, true);
          late.push(now - at);
          p++;
          now = lastSend = performance.now();
        }
        if (p < total) {
          const turn = Math.floor(p / n) + 1;
          const at = this.t0 + (turn - 1) * TURN_MS + ((p % n) * TURN_MS) / n;
          setTimeout(tick, Math.max(0, at - performance.now()));
        } else resolve({ late, lastSend });
      };
      setTimeout(tick, Math.max(0, this.t0 - performance.now()));
    });
  }

  /**
   * Finish every episode: the last delta sets the rewards, then the reply (a few fail); then the producer sockets
   * close.
   */
  async finishAll(): Promise<void> {
    const finishStart = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: FINISH_PARALLEL }, async (_, w) => {
        const client = this.clients[w % HTTP_CLIENTS]!;
        while (next < this.n) await this.finishOne(this.eps[next++]!, client);
      }),
    );
    this.closing = true;
    await Promise.all(this.eps.map((ep) => (ep.ws ? closeSocket(ep.ws) : undefined)));
    this.o.log(
      `runscale: ${this.t.label} N=${this.n}: finished ${this.n} episodes in ${((performance.now() - finishStart) / 1000).toFixed(1)} s; settling`,
    );
  }

  private async finishOne(ep: Episode, client: HttpClient): Promise<void> {
    const failed = failsAt(ep.i);
    if (!failed) {
      const score = scoreOf(ep.i);
      const rewards = new LMap([
        [
          "correct",
          new LMap([
            ["score", new F64(score)],
            ["weight", 1],
          ]),
        ],
      ]);
      const set: Array<[string, LValue]> = [
        ["rewards", rewards],
        ["is_completed", true],
      ];
      if (!(await this.sendAndWait(ep, setDelta(set), 0))) return;
      ep.reward = score;
    }
    const body = failed
      ? replyBody({ success: false, error: "bench: the rollout failed" })
      : replyBody({ success: true, nodes: ep.turns, calls: ep.turns });
    const res = await client.request("POST", `/v1/episodes/${ep.id}/reply`, body, {
      "content-type": "application/msgpack",
    });
    this.lastReply = performance.now();
    if (res.status !== 200) return this.fail(`${ep.id}: reply: ${res.status} ${res.body.toString().slice(0, 300)}`);
    const a = JSON.parse(res.body.toString()) as { ok: boolean; status: string; seq: number };
    if (a.status !== (failed ? "failed" : "finished")) this.fail(`${ep.id}: reply answered status ${a.status}`);
    ep.status = failed ? "failed" : "finished";
    if (a.seq !== ep.seq) this.fail(`${ep.id}: reply answered seq ${a.seq}, the last ack said ${ep.seq}`);
    ep.seq = a.seq;
  }

  /**
   * Settle: the listed rows against what was written (polled up to SETTLE_MS), then the dashboards' last rows and the
   * aggregates.
   */
  async settle(): Promise<SettleFigures> {
    const { eps, dashboards, clients, run } = this;
    const settleStart = performance.now();
    let rows: IndexEntry[] = [];
    let wrong: string[] = [];
    for (;;) {
      rows = await listRows(clients[0]!, run);
      wrong = mismatches(eps, rows);
      if (wrong.length === 0 || performance.now() - settleStart > SETTLE_MS) break;
      await sleep(500);
    }
    const settleMs = wrong.length === 0 ? performance.now() - this.lastReply : NaN;
    // the dashboards' last rows (pushed within PUSH_MS of the index's last change)
    await sleep(2 * PUSH_MS + 200);
    let dashWrong = 0;
    for (const ep of eps) {
      if (dashboards.some((d) => rowDiff(ep, d.last[ep.i]) !== null)) dashWrong++;
    }
    const view = await clients[0]!.request("GET", `/v1/runs/${encodeURIComponent(run)}`);
    const agg = (JSON.parse(view.body.toString()) as { aggregates: RunAggregates | null }).aggregates;
    const aggDiffs = agg ? aggregateDiffs(agg, rows) : ["no aggregates (not covered?)"];
    const lastPushed = dashboards[0]!.aggregates;
    if (agg && lastPushed && JSON.stringify(stable(lastPushed)) !== JSON.stringify(stable(agg)))
      aggDiffs.push("the dashboards' last pushed aggregates differ from GET's");
    return { wrong, settleMs, dashWrong, aggDiffs };
  }

  /** The load's figures (and its summary line in the log). */
  figures(w: WindowFigures, s: SettleFigures): LoadFigures {
    const { t, n, dashboards, errors } = this;
    const ack = stats(this.ackLatencies);
    const f: LoadFigures = {
      episodes: n,
      offered_per_s: (n * 1000) / TURN_MS,
      sends_per_s: sig(w.sendsPerS, 4),
      send_late_p99_ms: sig(w.sendLate.p99, 3),
      rate_held: w.held,
      ack_p50_ms: sig(ack.p50, 3),
      ack_p99_ms: sig(ack.p99, 3),
      acks: this.ackLatencies.length,
      ...this.ackSplit(),
      ...(t.indexed ? this.staleness(w) : {}),
      ...this.dashboardRates(w.windowMs),
      row_regressions: dashboards.reduce((a, d) => a + d.regressions, 0),
      lost: s.wrong.length,
      lost_examples: s.wrong.slice(0, 5),
      dashboard_mismatches: s.dashWrong,
      settle_ms: Math.round(s.settleMs),
      aggregates: s.aggDiffs,
      client_cpu_pct: Math.round((w.cpu.user + w.cpu.system) / 10 / w.windowMs),
      relay_cpu_pct: Math.round((w.relayCpuMs * 100) / w.windowMs),
      other_relay_cpu_pct: Math.round((w.idleCpuMs * 100) / w.windowMs),
      ...(w.otherCpu === undefined ? {} : { other_cpu_pct: w.otherCpu }),
      errors,
    };
    this.o.log(
      `runscale: ${t.label} N=${n}: ack p50 ${fmt(ack.p50)} p99 ${fmt(ack.p99)} ms` +
        (t.indexed
          ? `, staleness p50 ${f.stale_p50_ms} p99 ${f.stale_p99_ms} ms (flush told ${w.flushTold}, seen ${f.flush_seen_ms} ms)`
          : "") +
        `, lost ${s.wrong.length}, aggregates ${s.aggDiffs.length ? "DIFFER" : "exact"}${errors.length ? `, ${errors.length} errors: ${errors[0]}` : ""}`,
    );
    return f;
  }

  /** Acks of the steady state (turns sent START_MS or more into the window) and of its start. */
  private ackSplit(): Pick<LoadFigures, "steady_ack_p50_ms" | "steady_ack_p99_ms" | "start_ack_p99_ms"> {
    const steady = stats(this.steadyAcks);
    return {
      steady_ack_p50_ms: sig(steady.p50, 3),
      steady_ack_p99_ms: sig(steady.p99, 3),
      start_ack_p99_ms: sig(stats(this.startAcks).p99, 3),
    };
  }

  /** A turn's ack → each dashboard's receipt of it, and the flush interval told and seen (the indexed relay only). */
  private staleness(w: WindowFigures): Partial<LoadFigures> {
    const { dashboards } = this;
    const stale = stats(dashboards.flatMap((d) => d.staleness));
    const fromSend = stats(dashboards.flatMap((d) => d.fromSend));
    const gaps = stats(dashboards[0]!.gaps);
    return {
      stale_p50_ms: Math.round(stale.p50),
      stale_p99_ms: Math.round(stale.p99),
      stale_from_send_p50_ms: Math.round(fromSend.p50),
      stale_from_send_p99_ms: Math.round(fromSend.p99),
      stale_samples: dashboards.reduce((a, d) => a + d.staleness.length, 0),
      stale_early: dashboards.reduce((a, d) => a + d.early, 0),
      stale_within_bound: stale.p99 <= w.flushTold + PUSH_MS + STALE_SLACK_MS,
      stale_unseen: w.unseen,
      flush_told_ms: w.flushTold,
      flush_seen_ms: Math.round(gaps.p50),
    };
  }

  /** Row updates and messages the dashboards received per second of the window. */
  private dashboardRates(
    windowMs: number,
  ): Pick<
    LoadFigures,
    "rows_per_s_per_dashboard" | "rows_per_s_peak" | "rows_per_message_max" | "msgs_per_s_per_dashboard_max"
  > {
    const { dashboards } = this;
    const perSecond = new Map<number, number>();
    for (const at of dashboards[0]!.rowTimes)
      perSecond.set(Math.floor((at - this.t0) / 1000), (perSecond.get(Math.floor((at - this.t0) / 1000)) ?? 0) + 1);
    return {
      rows_per_s_per_dashboard: sig((dashboards[0]!.windowRows * 1000) / windowMs, 3),
      rows_per_s_peak: Math.max(0, ...perSecond.values()),
      rows_per_message_max: dashboards[0]!.maxRowsPerMessage,
      msgs_per_s_per_dashboard_max: sig(Math.max(...dashboards.map((d) => (d.windowMessages * 1000) / windowMs)), 3),
    };
  }

  /** Every socket closed, every HTTP client too. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.all([
      ...this.eps.map((ep) => (ep.ws ? closeSocket(ep.ws) : undefined)),
      ...this.dashboards.map((d) => d.close()),
    ]);
    for (const c of this.clients) c.close();
  }
}

/** Poll `check` every `step` ms until it holds or `timeoutMs` passed; whether it holds. */
async function until(check: () => boolean, timeoutMs: number, step = 50): Promise<boolean> {
  const end = performance.now() + timeoutMs;
  while (!check() && performance.now() < end) await sleep(step);
  return check();
}

/** Every row of the run (pages of 500). */
async function listRows(client: HttpClient, run: string): Promise<IndexEntry[]> {
  const out = new Map<string, IndexEntry>();
  let cursor: string | null = null;
  do {
    const path: string = `/v1/runs/${encodeURIComponent(run)}/episodes?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
    const res = await client.request("GET", path);
    if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${res.body.toString().slice(0, 300)}`);
    const page = JSON.parse(res.body.toString()) as { episodes: IndexEntry[]; cursor: string | null };
    for (const e of page.episodes) out.set(e.id, e);
    cursor = page.cursor;
  } while (cursor);
  return [...out.values()];
}

/** How a row differs from what was written to the episode (null: it matches). */
function rowDiff(ep: Episode, e: IndexEntry | undefined): string | null {
  if (!e) return "no row";
  const d: string[] = [];
  if (e.status !== ep.status) d.push(`status ${e.status} ≠ ${ep.status}`);
  if (e.tokens !== ep.tokens) d.push(`tokens ${e.tokens} ≠ ${ep.tokens}`);
  if (e.seq !== ep.seq) d.push(`seq ${e.seq} ≠ ${ep.seq}`);
  if (e.calls !== ep.turns) d.push(`calls ${e.calls} ≠ ${ep.turns}`);
  if (e.reward !== ep.reward) d.push(`reward ${e.reward} ≠ ${ep.reward}`);
  return d.length ? d.join(", ") : null;
}

function mismatches(eps: Episode[], rows: IndexEntry[]): string[] {
  const byId = new Map(rows.map((e) => [e.id, e]));
  const out: string[] = [];
  for (const ep of eps) {
    const d = rowDiff(ep, byId.get(ep.id));
    if (d !== null) out.push(`${ep.id.slice(ep.id.lastIndexOf(":"))}: ${d}`);
  }
  if (rows.length !== eps.length) out.push(`${rows.length} rows listed for ${eps.length} episodes`);
  return out;
}

/** The aggregates without the parts that move with the clock. */
function stable(a: RunAggregates): unknown {
  const { throughput: _t, episodes_per_minute: _e, ...rest } = a;
  return rest;
}

/** The kept aggregates against a recount of the listed rows ([] when exact). */
function aggregateDiffs(agg: RunAggregates, entries: IndexEntry[]): string[] {
  const rows: IndexRow[] = entries.map((e) => ({
    ...e,
    created: Date.parse(e.created),
    updated: Date.parse(e.updated),
    ended: e.ended === null ? null : Date.parse(e.ended),
  }));
  const { counters: c, throughput } = recount(rows);
  const d: string[] = [];
  const eq = (what: string, kept: unknown, recounted: unknown) => {
    if (JSON.stringify(kept) !== JSON.stringify(recounted))
      d.push(`${what}: kept ${JSON.stringify(kept)}, recount ${JSON.stringify(recounted)}`);
  };
  const n = rows.length;
  eq("episodes", agg.episodes, n);
  eq("counts", agg.counts, { live: c.live, finished: c.finished, failed: c.failed, finish_refused: c.finish_refused });
  eq("mean_turns", agg.mean_turns, n ? c.calls / n : null);
  eq("mean_tokens", agg.mean_tokens, n ? c.tokens / n : null);
  eq("reward keys", Object.keys(agg.rewards).sort(), Object.keys(c.rewards).sort());
  for (const [key, r] of Object.entries(c.rewards)) {
    const a = agg.rewards[key];
    if (!a) continue;
    eq(`${key} count`, a.count, r.count);
    eq(`${key} mean`, a.mean, (r.units * SCORE_UNIT) / r.count);
    eq(
      `${key} histogram`,
      [a.histogram.below, ...a.histogram.counts, a.histogram.above],
      [r.bins[0], ...r.bins.slice(1, HISTOGRAM_BINS + 1), r.bins[HISTOGRAM_BINS + 1]],
    );
    const scores = rows.flatMap((x) => {
      const s = (x.rewards as Record<string, { score?: unknown }> | null)?.[key]?.score;
      return typeof s === "number" ? [s] : [];
    });
    eq(`${key} min/max`, [a.min, a.max], [Math.min(...scores), Math.max(...scores)]);
  }
  const start = minuteOf(Date.parse(agg.throughput.start));
  eq(
    "throughput",
    agg.throughput.per_minute,
    agg.throughput.per_minute.map((_, k) => throughput.get(start + k) ?? 0),
  );
  return d;
}

// ---- the section ----

async function startTarget(label: string, indexed: boolean, vars: Record<string, string>): Promise<Target> {
  const before = new Set(descendantPids("workerd"));
  const relay = await startBenchRelay("tmpfs", vars);
  const pids = descendantPids("workerd").filter((p) => !before.has(p));
  return { relay, pids, others: [], indexed, label };
}

/** One size's figures on both relays, and the ratios of their acks. */
interface SizeFigures {
  index: LoadFigures;
  no_index: LoadFigures;
  ack_p50_ratio: number;
  ack_p99_ratio: number;
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  const sizes = opts.runscaleSizes ?? DEFAULT_SIZES;
  const pacing = indexPacingFrom(wranglerVars());
  const cpu = cpus();
  const machine = `${cpu.length} × ${cpu[0]?.model.trim() ?? "unknown cpu"}, ${Math.round(totalmem() / 2 ** 30)} GiB`;
  opts.log(
    `runscale: starting two relays (storage on tmpfs): as configured (INDEX_FLUSH_MS ${pacing.flushMs}) and without index traffic (INDEX_FLUSH_MS ${NO_INDEX_FLUSH_MS})`,
  );
  const indexed = await startTarget("index", true, {});
  const bare = await startTarget("no-index", false, { INDEX_FLUSH_MS: NO_INDEX_FLUSH_MS });
  indexed.others = bare.pids;
  bare.others = indexed.pids;
  const out: Record<string, unknown> = {};
  const rows: string[][] = [];
  const notes: string[] = [];
  const load0 = loadavg()[0]!;
  try {
    // warm-up (JIT of workerd and of this process), not reported
    opts.log("runscale: warm-up (20 episodes, 3 s, each relay)");
    for (const t of [bare, indexed]) await runLoad(t, { n: 20, windowS: 3, tag: "warmup", pacing, log: () => {} });
    for (const n of sizes) {
      const fig = await runSize(n, bare, indexed, pacing, opts.log);
      out[`N${n}`] = fig;
      rows.push(tableRow(n, fig));
      for (const [label, f] of [
        ["index", fig.index],
        ["no-index", fig.no_index],
      ] as const) {
        notes.push(...loadNotes(n, label, f));
      }
    }
  } finally {
    await Promise.all([indexed.relay.stop(), bare.relay.stop()]);
  }
  const allLost = Object.values(out).reduce(
    (a: number, f) => a + (f as SizeFigures).index.lost + (f as SizeFigures).no_index.lost,
    0,
  );
  out.settings = {
    machine,
    window_s: WINDOW_S,
    turn_ms: TURN_MS,
    dashboards: DASHBOARDS,
    fail_every: FAIL_EVERY,
    index_flush_ms: pacing.flushMs,
    index_writes_per_s: pacing.writesPerS,
    push_ms: PUSH_MS,
    no_index_flush_ms: Number(NO_INDEX_FLUSH_MS),
    storage: "tmpfs",
    loadavg_1min_start_end: [sig(load0, 2), sig(loadavg()[0]!, 2)],
  };
  out.lost_total = allLost;
  report(opts, rows, notes, { allLost, machine, pacing });
  return out;
}

/** N episodes on the no-index relay, then on the indexed one. */
async function runSize(
  n: number,
  bare: Target,
  indexed: Target,
  pacing: IndexPacing,
  log: (m: string) => void,
): Promise<SizeFigures> {
  const started = performance.now();
  log(`runscale: N=${n}: ${n} episodes × 1 turn/s for ${WINDOW_S} s, ${DASHBOARDS} dashboards; no-index relay first`);
  const common = { n, windowS: WINDOW_S, tag: "m", pacing, log };
  const b = await runLoad(bare, common);
  const x = await runLoad(indexed, common);
  const fig = {
    index: x,
    no_index: b,
    ack_p50_ratio: sig(x.ack_p50_ms / b.ack_p50_ms, 3),
    ack_p99_ratio: sig(x.ack_p99_ms / b.ack_p99_ms, 3),
  };
  log(`runscale: N=${n} done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return fig;
}

/** One size's line of the table. */
function tableRow(n: number, fig: SizeFigures): string[] {
  const { index: x, no_index: b } = fig;
  const held = (f: LoadFigures) => `${fmt(f.sends_per_s)}${f.rate_held ? "" : "!"}`;
  const aggText = (f: LoadFigures) => (f.aggregates.length === 0 ? "exact" : `DIFF (${f.aggregates.length})`);
  const cpuText = (f: LoadFigures) => `${f.client_cpu_pct}/${f.relay_cpu_pct}/${f.other_cpu_pct ?? "?"}`;
  const dash = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "–" : fmt(v));
  return [
    String(n),
    `${held(x)} / ${held(b)}`,
    `${fmt(x.ack_p50_ms)} / ${fmt(x.ack_p99_ms)}`,
    `${fmt(b.ack_p50_ms)} / ${fmt(b.ack_p99_ms)}`,
    `${fmt(fig.ack_p50_ratio)} / ${fmt(fig.ack_p99_ratio)}`,
    `${fmt(x.steady_ack_p99_ms)} / ${fmt(b.steady_ack_p99_ms)}`,
    `${dash(x.stale_p50_ms)} / ${dash(x.stale_p99_ms)}${x.stale_within_bound ? "" : "!"}`,
    `${dash(x.flush_told_ms)} / ${dash(x.flush_seen_ms)}`,
    `${fmt(x.rows_per_s_per_dashboard)} / ${fmt(x.rows_per_s_peak)}`,
    fmt(x.msgs_per_s_per_dashboard_max),
    `${x.lost} / ${b.lost}`,
    `${aggText(x)} / ${aggText(b)}`,
    `${cpuText(x)} | ${cpuText(b)}`,
  ];
}

/** What the table's notes say about one load: a rate not held and why, saturation, losses, mismatches, errors. */
function loadNotes(n: number, label: string, f: LoadFigures): string[] {
  const notes: string[] = [];
  if (!f.rate_held) {
    const why =
      f.relay_cpu_pct >= SATURATED_PCT
        ? `the relay's workerd was saturated (${f.relay_cpu_pct}% of a core)`
        : (f.other_cpu_pct ?? 0) >= BUSY_PCT
          ? `other processes used ${f.other_cpu_pct}% of a core meanwhile: the machine was oversubscribed`
          : `client-bound (client CPU ${f.client_cpu_pct}%)`;
    notes.push(
      `N=${n} ${label}: the offered ${n} turns/s was not held (sent ${fmt(f.sends_per_s)}/s, sends late by ${fmt(f.send_late_p99_ms)} ms p99): ${why}.`,
    );
  }
  if (f.relay_cpu_pct >= SATURATED_PCT)
    notes.push(
      `N=${n} ${label}: relay-bound: workerd used ${f.relay_cpu_pct}% of a core (its Worker and objects run on one thread).`,
    );
  if (f.lost) notes.push(`N=${n} ${label}: LOST UPDATES ${f.lost}: ${f.lost_examples.join("; ")}`);
  if (f.dashboard_mismatches)
    notes.push(
      `N=${n} ${label}: ${f.dashboard_mismatches} episodes whose last row on some dashboard differs from what was written`,
    );
  if (f.row_regressions)
    notes.push(`N=${n} ${label}: ${f.row_regressions} upserts with fewer tokens than the dashboard had already seen`);
  if (f.stale_unseen)
    notes.push(
      `N=${n} ${label}: ${f.stale_unseen} (turn, dashboard) pairs not seen within the flush interval + 5 s after the window`,
    );
  if (f.stale_early) {
    notes.push(
      `N=${n} ${label}: ${f.stale_early} (turn, dashboard) pairs had the row before the producer had its ack (late acks); from the send: p50 ${f.stale_from_send_p50_ms} / p99 ${f.stale_from_send_p99_ms} ms`,
    );
  }
  for (const a of f.aggregates) notes.push(`N=${n} ${label}: aggregates: ${a}`);
  for (const e of f.errors.slice(0, 5)) notes.push(`N=${n} ${label}: error: ${e}`);
  return notes;
}

/** The section's table: a line per size, then what the columns mean and the notes. */
function report(
  opts: BenchOptions,
  rows: string[][],
  notes: string[],
  at: { allLost: number; machine: string; pacing: IndexPacing },
): void {
  const { allLost, machine } = at;
  const { flushMs: flushBase, writesPerS } = at.pacing;
  opts.table({
    title: `runscale: N episodes of one run, 1 turn/s each (~4 KB), ${DASHBOARDS} dashboards on the run socket, ${WINDOW_S} s; index (as configured) vs no-index (INDEX_FLUSH_MS=${NO_INDEX_FLUSH_MS})`,
    columns: [
      "N",
      "sends/s idx / no",
      "ack p50/p99 ms",
      "no-index p50/p99",
      "× p50/p99",
      "steady p99 idx/no",
      "stale p50/p99 ms",
      "flush told/seen",
      "rows/s avg/peak",
      "msg/s/dash",
      "LOST idx / no",
      "aggregates idx / no",
      "CPU % cl/relay/other idx | no",
    ],
    rows,
    notes: [
      `LOST UPDATES (rows ≠ what was written, after finishing and settling ≤ ${SETTLE_MS / 1000} s; every N, both relays): ${allLost}${allLost === 0 ? " (none)" : " — SEE BELOW"}`,
      `Machine: ${machine}. One Node process runs every producer and dashboard (the client); each relay is one workerd process.`,
      `sends/s: achieved vs the offered N/s ("!" = not held: < ${HELD_SHARE * 100}% of N/s or sends late by > ${LATE_MS} ms p99; the cause is in the lines below).`,
      `ack: send → answer on the producer socket, every turn of the window; × = index ÷ no-index (same run, same client). steady: turns sent`,
      `  ${START_MS / 1000} s or more into the window (the first turn of every episode after a pause is flushed to the index at once: a burst of N writes).`,
      `stale: a turn's ack → each dashboard's upsert of that episode with ≥ its num_total_tokens. Under the write budget it lies between 0 and`,
      `  the flush interval + PUSH_MS ${PUSH_MS} (p99 ≈ INDEX_FLUSH_MS ${flushBase} + ${PUSH_MS}; "!" = p99 above told + ${PUSH_MS} + ${STALE_SLACK_MS} ms).`,
      `flush: "told" = max(INDEX_FLUSH_MS ${flushBase}, ceil(N × 1000 / INDEX_WRITES_PER_S ${writesPerS})), the run index's backpressure interval;`,
      `  "seen" = median gap between successive token changes of one episode on a dashboard (turns come every ${TURN_MS} ms: it rounds up to whole turns).`,
      `rows/s: row updates one dashboard received per second, average and busiest second (the index's write rate; budget ${writesPerS}/s on average);`,
      `  msg/s: messages per dashboard per second, the busiest of ${DASHBOARDS} (coalescing bound ≤ ${1000 / PUSH_MS}/s).`,
      `aggregates: GET /v1/runs/{run} vs recount(listed rows): counts, mean turns, mean tokens, per reward count, mean, histogram, min/max, throughput.`,
      `CPU %: of one core over the window: this Node process (client), the relay's workerd, every other process on the machine (not this bench's).`,
      `Finish: a last delta sets rewards {correct: {score, weight: 1}}, then the reply; 1 in ${FAIL_EVERY} fails instead (no rewards). Storage on tmpfs.`,
      ...notes,
    ],
  });
}

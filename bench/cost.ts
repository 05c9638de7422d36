// Bench section `cost`: what a run costs on Cloudflare, from the billing units the relay's objects
// count themselves (src/protocol/billing/usage.ts, read through the admin usage routes) priced with
// Cloudflare's published prices (bench/prices.ts: marginal, included allowances taken as spent).
// The relay runs as `npm run start:tiers` does (scripts/relay.mjs `tiers`; storage on tmpfs).
//
//   (a) one episode: TURNS_A routing-heavy turns (bench/helpers.ts routingDeltas: one node with
//       ~600 KB of routing each) written live over the producer socket, DASHBOARDS dashboards
//       watching (`?routing=0`, as the dashboard does; acking as the watcher protocol asks;
//       offering permessage-deflate), then the reply; the episode is archived to R2 (its status
//       says so; skipped if this relay has no archive), kept KEEP_DAYS days (stored bytes ×
//       KEEP_DAYS/30 month × price, SQLite and R2 apart), fetched once in bulk
//       (`GET /v1/runs/{run}/finished`). Usage of the episode, its hubs, the run's index and the
//       run directory; Worker requests as the clients made them.
//   (b) one run of EPISODES_B episodes of TURNS_B such turns, no dashboards, measured the same way;
//       each carries a trainer's dispatch identity as prime-rl's rollouts do (groups of GROUP_B,
//       GROUP_B × 2 rollouts a step, one in eight groups eval), so the run's index keeps its groups
//       and steps as in training.
//   (c) one episode written at a real pace: TURNS_C turns GAP_C_MS apart (just over the 10 s an
//       idle object waits before it hibernates), DASHBOARDS dashboards watching: what each turn
//       adds to the episode, its hubs and the run's index (rows by table, requests), and whether
//       each object hibernated in every gap (a wake per turn). The index's work goes with the row
//       updates (at most one per interval the index tells), so the model takes it from (d).
//   (d) the run's index in steady state: two runs of EPISODES_D episodes written at the paced model's
//       pace with time scaled down by SCALE_D (a second relay whose INDEX_FLUSH_MS,
//       INDEX_IDLE_FLUSH_MS and SEARCH_FLUSH_MS are the defaults / SCALE_D, a turn every
//       TURN_GAP_S / SCALE_D), so a few minutes hold many row updates and search flushes of each
//       episode: the index's rows per paced turn, by table, and the episodes' rows that go with
//       the updates (their alarm, `search_sync`). Nobody attends the first run (its episodes are
//       told INDEX_IDLE_FLUSH_MS: src/objects/registry/attention.ts); a run socket is open on the
//       second throughout, as a run page would be (told INDEX_FLUSH_MS). (c)'s few turns hold at
//       most one row update, which writes what a steady one does not (the waiting text's index
//       entry, written once per SEARCH_FLUSH_MS).
//   1,000 episodes of (a)'s size in one run, computed: per episode (a)'s episode object, hubs, R2
//       and Worker requests; per episode of a run (b)'s index and directory. Then the same at a
//       real pace (a model, `pacedEpisode`: a turn every TURN_GAP_S, what (c) measured a paced
//       turn to add to the episode and hubs, and (d) to the index and to the episode's rows that go
//       with its row updates; its duration from (c)'s busy time and hibernation). Its run is
//       unattended (nobody has its run page open, no alert reads live rows), the common case of a
//       training run; the same model with (d)'s attended run is printed beside it.
// The bench's own status polls (each an RPC call on the episode) are subtracted; usage reads count
// nothing.
// Caveats, printed too: this bench writes at full speed, so an episode's wall time (and the
// duration billed for it) is compressed; the duration is a model (usage.ts); the Worker's own R2
// reads (archived GETs and bulk fetches) are not seen by any object and are counted here, one
// GetObject per archived episode read; the Worker's CPU is not metered (an upper bound is shown).

import { Decoder } from "@msgpack/msgpack";
import type { WebSocket } from "ws";
import type { LocalRelay } from "../scripts/relay.mjs";
import {
  ACK_BYTES,
  ackMessage,
  DEFAULT_INDEX_FLUSH_MS,
  DEFAULT_INDEX_IDLE_FLUSH_MS,
  DEFAULT_SEARCH_FLUSH_MS,
  dispatchFromJson,
  encodeEnvelope,
  IDLE_MS,
  ProducerCursor,
  type Usage,
} from "../src/protocol/index.js";
import { type BenchOptions, sig, type Table } from "./harness.js";
import {
  closeSocket,
  cpuMsOf,
  type DeltaFactory,
  descendantPids,
  fmt,
  HttpClient,
  healthProbe,
  openSocket,
  replyBody,
  routingDeltas,
  sleep,
  startBenchRelay,
  textDeltas,
  wsUrl,
} from "./helpers.js";
import * as P from "./prices.js";

export const name = "cost";

const TURNS_A = 200;
const DASHBOARDS = 3;
const EPISODES_B = 100;
const TURNS_B = 20;
/** Rollouts of one group in (b) (GRPO samples a group per task). */
const GROUP_B = 8;
const KEEP_DAYS = 7;
const SCALE_EPISODES = 1000;
/**
 * The paced model's turn interval: one routing-heavy turn (1,500 tokens, the routing's first
 * dimension) every 20 s, i.e. ~75 tokens/s of generation. An assumption, not a measurement.
 */
const TURN_GAP_S = 20;
/** (c): turns of one episode written at a real pace; the first creates it and is not counted. */
const TURNS_C = 4;
/**
 * (c)'s gap between turns: just over the 10 s an object idles, eligible to hibernate, before the
 * runtime hibernates it (durable-objects/concepts/durable-object-lifecycle). An object woken again
 * at every turn was held in memory (a timer, an outgoing call, a socket that cannot hibernate) at
 * most GAP_C_MS - 10 s after each: the paced model bills it that bound per turn, so the gap is as
 * tight as the measurement allows. bench/repro/paced-hold.ts found the episode and its hub woken at
 * every turn 10.1 s apart on a loaded machine (a hub's feed holds it for a zero-delay timer and its
 * watchers' acks); 11 s gave a bound of 1 s per turn and object, which no code held.
 */
const GAP_C_MS = 10_250;
/**
 * (d)'s time scale: its relay's INDEX_FLUSH_MS, INDEX_IDLE_FLUSH_MS and SEARCH_FLUSH_MS and its turn gap are the paced
 * model's / SCALE_D,
 * so a row update and a search flush come after as many turns as at the real pace (what the index writes per update
 * depends on those counts, not on the clock; DIRECTORY_MS, a constant, is the one time not scaled).
 */
const SCALE_D = 10;
/**
 * (d)'s episodes per run, their starts spread over one search flush interval and one row interval (`caseD`): their row
 * updates come at least FLUSH_D_MS / EPISODES_D apart, past DIRECTORY_MS (1 s), so each sends the run's row to the
 * directory itself and arms no alarm, as a run's updates at the real pace do (a run of 1,000 episodes arms about one a
 * second for ~33 updates: ~0.02 rows per turn, not in (d)). More episodes would crowd the updates under DIRECTORY_MS.
 */
const EPISODES_D = 2;
/** (d)'s turn gap, and its relay's row (attended, unattended) and search intervals. */
const GAP_D_MS = (TURN_GAP_S * 1000) / SCALE_D;
const FLUSH_D_MS = DEFAULT_INDEX_FLUSH_MS / SCALE_D;
const IDLE_D_MS = DEFAULT_INDEX_IDLE_FLUSH_MS / SCALE_D;
const SEARCH_D_MS = DEFAULT_SEARCH_FLUSH_MS / SCALE_D;
/**
 * (d) is measured over this many search flush intervals, after each episode has been through one: each episode's text
 * goes into the search about once per interval, so the window's edges may cut one flush more or less of the
 * EPISODES_D × SEARCH_CYCLES_D in it.
 */
const SEARCH_CYCLES_D = 4;
/** How long an idle object eligible for hibernation stays in memory before the runtime hibernates it (the lifecycle page). */
const HIBERNATES_AFTER_MS = 10_000;
/** Producer messages in flight on one socket. */
const WINDOW = 4;
/** Episodes of (b) written at once. */
const PARALLEL_B = 4;
/** How long an episode may take to be archived before R2 is left out (e.g. a relay without an R2 binding). */
const ARCHIVE_WAIT_MS = 30_000;

// ---- the units ----

/** Billing units of some objects and their clients, summed. */
interface Counts {
  workerRequests: number;
  doRequests: number;
  wsIn: number;
  /** Duration, ms (usage.ts's model). */
  activeMs: number;
  rowsRead: number;
  rowsWritten: number;
  sqliteBytes: number;
  r2ClassA: number;
  r2ClassB: number;
  r2Bytes: number;
}

const ZERO: Counts = {
  workerRequests: 0,
  doRequests: 0,
  wsIn: 0,
  activeMs: 0,
  rowsRead: 0,
  rowsWritten: 0,
  sqliteBytes: 0,
  r2ClassA: 0,
  r2ClassB: 0,
  r2Bytes: 0,
};

function ofUsage(us: readonly Usage[]): Counts {
  const c = { ...ZERO };
  for (const u of us) {
    c.doRequests += u.requests;
    c.wsIn += u.wsIn;
    c.activeMs += u.activeMs;
    c.rowsRead += u.rowsRead;
    c.rowsWritten += u.rowsWritten;
    c.sqliteBytes += u.sqliteBytes;
    c.r2ClassA += u.r2.classA;
    c.r2ClassB += u.r2.classB;
    c.r2Bytes += u.r2.bytesStored ?? 0;
  }
  return c;
}

function add(...cs: Counts[]): Counts {
  const out = { ...ZERO };
  for (const c of cs) for (const k of Object.keys(out) as Array<keyof Counts>) out[k] += c[k];
  return out;
}

function scale(c: Counts, f: number): Counts {
  const out = { ...ZERO };
  for (const k of Object.keys(out) as Array<keyof Counts>) out[k] = c[k] * f;
  return out;
}

/** `a - b` (a cumulative object read twice: the run directory is shared by the runs). */
function minus(a: Usage, b: Usage | null): Usage {
  if (!b) return a;
  return {
    ...a,
    requests: a.requests - b.requests,
    wsIn: a.wsIn - b.wsIn,
    rowsRead: a.rowsRead - b.rowsRead,
    rowsWritten: a.rowsWritten - b.rowsWritten,
    written: Object.fromEntries(
      Object.entries(a.written ?? {})
        .map(([t, n]) => [t, n - (b.written?.[t] ?? 0)] as const)
        .filter(([, n]) => n !== 0),
    ),
    activeMs: a.activeMs - b.activeMs,
    busyMs: a.busyMs - b.busyMs,
    wakes: a.wakes - b.wakes,
    r2: { ...a.r2, classA: a.r2.classA - b.r2.classA, classB: a.r2.classB - b.r2.classB },
  };
}

interface Line {
  unit: string;
  count: number;
  usd: number;
}

/** Each unit priced. */
function priced(c: Counts): Line[] {
  const gbS = (c.activeMs / 1000) * P.DO_MEMORY_GB;
  return [
    { unit: "Worker requests", count: c.workerRequests, usd: P.cost(P.WORKER_REQUEST, c.workerRequests) },
    { unit: "DO requests (fetch, RPC, alarms)", count: c.doRequests, usd: P.cost(P.DO_REQUEST, c.doRequests) },
    { unit: "DO WebSocket messages in (20:1)", count: c.wsIn, usd: P.cost(P.DO_REQUEST, c.wsIn / P.WS_IN_PER_REQUEST) },
    { unit: "DO duration, GB-s (model)", count: gbS, usd: P.cost(P.DO_GB_S, gbS) },
    { unit: "SQLite rows read", count: c.rowsRead, usd: P.cost(P.ROW_READ, c.rowsRead) },
    { unit: "SQLite rows written", count: c.rowsWritten, usd: P.cost(P.ROW_WRITTEN, c.rowsWritten) },
    {
      unit: `SQLite bytes kept ${KEEP_DAYS} d`,
      count: c.sqliteBytes,
      usd: P.storageCost(P.SQLITE_GB_MONTH, c.sqliteBytes, KEEP_DAYS),
    },
    { unit: "R2 class A ops", count: c.r2ClassA, usd: P.cost(P.R2_CLASS_A, c.r2ClassA) },
    { unit: "R2 class B ops", count: c.r2ClassB, usd: P.cost(P.R2_CLASS_B, c.r2ClassB) },
    { unit: `R2 bytes kept ${KEEP_DAYS} d`, count: c.r2Bytes, usd: P.storageCost(P.R2_GB_MONTH, c.r2Bytes, KEEP_DAYS) },
  ];
}

const total = (lines: Line[]) => lines.reduce((s, l) => s + l.usd, 0);

/** Rows written by table (usage.ts `written`: each statement's count, index entries included, under its table), over `per`. */
function writtenPer(us: readonly Usage[], per: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const u of us) for (const [t, n] of Object.entries(u.written ?? {})) out[t] = (out[t] ?? 0) + n;
  for (const t of Object.keys(out)) out[t] = per > 0 ? out[t]! / per : 0;
  return out;
}

/** The rows-written-per-turn table: one column per object measured, one row per table (largest first), and a total. */
function writtenTable(columns: Array<[string, Record<string, number>]>, notes: string[]): Table {
  const tables = new Map<string, number>();
  for (const [, col] of columns) for (const [t, n] of Object.entries(col)) tables.set(t, (tables.get(t) ?? 0) + n);
  const order = [...tables].sort((x, y) => y[1] - x[1]).map(([t]) => t);
  const sum = (col: Record<string, number>) => Object.values(col).reduce((s, n) => s + n, 0);
  return {
    title: "cost: rows written per turn, by table (rows and index entries, as Cloudflare bills them)",
    columns: ["table", ...columns.map(([name]) => name)],
    rows: [
      ...order.map((t) => [t, ...columns.map(([, col]) => (col[t] ? fmt(col[t]) : "-"))]),
      ["total", ...columns.map(([, col]) => fmt(sum(col)))],
    ],
    notes,
  };
}

function usdText(x: number): string {
  if (x === 0) return "0";
  if (x >= 1) return `$${x.toFixed(2)}`;
  return `$${x.toPrecision(3)}`;
}

function costTable(title: string, lines: Line[], notes: string[]): Table {
  const sum = total(lines);
  return {
    title,
    columns: ["unit", "count", "$", "share"],
    rows: [
      ...lines.map((l) => [
        l.unit,
        fmt(l.count),
        usdText(l.usd),
        sum > 0 ? `${((100 * l.usd) / sum).toFixed(1)}%` : "-",
      ]),
      ["total", "", usdText(sum), "100%"],
    ],
    notes,
  };
}

function unitsJson(lines: Line[]): Record<string, { count: number; usd: number }> {
  return Object.fromEntries(lines.map((l) => [l.unit, { count: sig(l.count), usd: sig(l.usd) }]));
}

// ---- the relay's answers ----

class Admin {
  /** Requests the bench made that count as the episode's own (status polls): subtracted. */
  statusCalls = new Map<string, number>();

  constructor(private readonly http: HttpClient) {}

  async json<T>(path: string): Promise<T> {
    const res = await this.http.request("GET", path);
    if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${res.body.toString().slice(0, 300)}`);
    return JSON.parse(res.body.toString()) as T;
  }

  episodeUsage(id: string): Promise<{ episode: Usage; hubs: Usage[] }> {
    return this.json(`/v1/episodes/${id}/usage`);
  }

  runUsage(run: string): Promise<{ index: Usage; directory: Usage }> {
    return this.json(`/v1/runs/${encodeURIComponent(run)}/usage`);
  }

  async status(id: string): Promise<{ status: string; archived?: boolean }> {
    this.statusCalls.set(id, (this.statusCalls.get(id) ?? 0) + 1);
    return this.json(`/v1/episodes/${id}/status`);
  }

  /**
   * Wait until the episode is archived: its usage shows the put (reading usage counts nothing),
   * then its status says so. False when this relay does not archive (no `archived` in status), or
   * not within `waitMs`.
   */
  async archived(id: string, waitMs = ARCHIVE_WAIT_MS): Promise<boolean> {
    const first = await this.status(id);
    if (first.archived === undefined) return false;
    if (first.archived) return true;
    const end = Date.now() + waitMs;
    while (Date.now() < end) {
      const u = await this.episodeUsage(id);
      if (u.episode.r2.classA >= 1 && (await this.status(id)).archived) return true;
      await sleep(250);
    }
    return false;
  }

  /** The episode's usage without the bench's status polls (each one RPC call). */
  ownUsage(id: string, u: Usage): Usage {
    return { ...u, requests: u.requests - (this.statusCalls.get(id) ?? 0) };
  }
}

// ---- clients ----

/**
 * Every acknowledgement of a case's producers: each message's latency (sent to answered) and the
 * longest time the relay acknowledged nothing while messages were in flight (issue 28: archive
 * storms stalled every ack for ~60 s).
 */
class AckClock {
  readonly latencies: number[] = [];
  private inFlight = 0;
  private last = 0;
  longestGapMs = 0;
  sent(): void {
    if (this.inFlight++ === 0) this.last = performance.now();
  }
  acked(latencyMs: number): void {
    const now = performance.now();
    this.latencies.push(latencyMs);
    this.longestGapMs = Math.max(this.longestGapMs, now - this.last);
    this.last = now;
    this.inFlight--;
  }
  summary(): { acks: number; p50Ms: number; p99Ms: number; maxMs: number; longestGapMs: number } {
    const l = [...this.latencies].sort((x, y) => x - y);
    const at = (q: number) => l[Math.min(l.length - 1, Math.floor(q * l.length))] ?? 0;
    return { acks: l.length, p50Ms: at(0.5), p99Ms: at(0.99), maxMs: l.at(-1) ?? 0, longestGapMs: this.longestGapMs };
  }
}

/** A producer socket (envelopes, one answer per message, in order). */
class Producer {
  private readonly cursor = new ProducerCursor("bench");
  private acked = 0;
  private sent = 0;
  /** When each unanswered message went out (answers come in order). */
  private readonly sentAt: number[] = [];
  clock: AckClock | null = null;
  private wake: (() => void) | null = null;
  private error: Error | null = null;

  private constructor(
    readonly ws: WebSocket,
    /** The rollout's dispatch identity, sent with the first envelope. */
    private readonly dispatch?: Uint8Array,
  ) {}

  static async open(base: string, id: string, dispatch?: Uint8Array): Promise<Producer> {
    let p: Producer | null = null;
    const ws = await openSocket(wsUrl(base, `/v1/episodes/${id}/ingest`), (s) =>
      s.on("message", (data: Buffer) => {
        const a = JSON.parse(String(data)) as { ok: boolean };
        if (!a.ok) p!.error ??= new Error(`ingest refused: ${String(data).slice(0, 300)}`);
        p!.acked++;
        const at = p!.sentAt.shift();
        if (at !== undefined) p!.clock?.acked(performance.now() - at);
        p!.wake?.();
      }),
    );
    p = new Producer(ws, dispatch);
    return p;
  }

  /** Deltas `from`..`to` - 1, WINDOW in flight; resolves when all are acknowledged. */
  send(make: DeltaFactory, from: number, to: number): Promise<void> {
    const target = this.sent + (to - from);
    let k = from;
    return new Promise<void>((resolve, reject) => {
      const pump = () => {
        if (this.error) return reject(this.error);
        while (this.sent - this.acked < WINDOW && k < to) {
          const env = this.cursor.envelope(make(k++));
          this.ws.send(encodeEnvelope(this.dispatch && env.seq === 1 ? { ...env, dispatch: this.dispatch } : env));
          this.cursor.acknowledge();
          this.sent++;
          this.sentAt.push(performance.now());
          this.clock?.sent();
        }
        if (this.acked >= target) {
          this.wake = null;
          resolve();
        }
      };
      this.wake = pump;
      pump();
    });
  }

  close(): Promise<void> {
    return closeSocket(this.ws);
  }
}

/** A dashboard on the episode: acks as the watcher protocol asks, tells when caught up and finished. */
class Dashboard {
  ws: WebSocket | null = null;
  received = 0;
  acks = 0;
  openedAt = 0;
  closedAt = 0;
  caughtUp: Promise<void>;
  finished: Promise<void>;
  private onCaughtUp!: () => void;
  private onFinished!: () => void;
  /** Closed by the relay before its finish: the waits fail with the close's code and reason (this dashboard does not resume). */
  private onDropped!: (e: Error) => void;
  private done = false;
  private readonly decoder = new Decoder();

  constructor() {
    const dropped = new Promise<never>((_r, reject) => (this.onDropped = reject));
    dropped.catch(() => undefined);
    this.caughtUp = Promise.race([new Promise<void>((r) => (this.onCaughtUp = r)), dropped]);
    this.finished = Promise.race([new Promise<void>((r) => (this.onFinished = r)), dropped]);
  }

  async open(base: string, id: string): Promise<void> {
    let live = false;
    let ackedAt = 0;
    this.ws = await openSocket(wsUrl(base, `/v1/episodes/${id}/watch?routing=0`), (ws) =>
      ws.on("message", (data: Buffer, isBinary: boolean) => {
        if (!isBinary) return;
        this.received += data.length;
        // catching up: every message; live: every ACK_BYTES
        if (!live || this.received - ackedAt >= ACK_BYTES) {
          ackedAt = this.received;
          ws.send(ackMessage(this.received));
          this.acks++;
        }
        const m = this.decoder.decode(data) as { type: string };
        if (m.type === "caught_up") {
          live = true;
          this.onCaughtUp();
        } else if (m.type === "finish") {
          this.done = true;
          this.onFinished();
        }
      }),
    );
    this.ws.on("close", (code: number, reason: Buffer) => {
      if (!this.done) this.onDropped(new Error(`a dashboard was closed before the finish: ${code} ${String(reason)}`));
    });
    this.openedAt = performance.now();
  }

  async close(): Promise<void> {
    this.done = true;
    if (this.ws) await closeSocket(this.ws);
    this.closedAt = performance.now();
  }

  get hours(): number {
    return (this.closedAt - this.openedAt) / 3_600_000;
  }
}

/** `GET /v1/runs/{run}/finished`, read to the end: its bytes. */
async function bulkFetch(http: HttpClient, run: string): Promise<number> {
  const res = await http.request("GET", `/v1/runs/${encodeURIComponent(run)}/finished`);
  if (res.status !== 200) throw new Error(`bulk fetch of ${run}: ${res.status}`);
  return res.body.length;
}

// ---- the cases ----

interface Measured {
  counts: Counts;
  /** Per part, for the model. */
  parts: { episodes: Counts; hubs: Counts; registry: Counts; clients: Counts };
  episodes: number;
  turns: number;
  watcherHours: number;
  archived: number;
  bulkBytes: number;
  /** For the fit: the episode objects' own usage, summed. */
  episodeUsage: Usage[];
  hubUsage: Usage[];
  /** The run's index, and the directory's part (its usage over the case). */
  indexUsage: Usage;
  directoryUsage: Usage;
  acks: number;
  wallS: number;
  /** Requests and wakes the episode objects saw while their archived episodes were read back ((a) only). */
  wokenByReads?: { requests: number; wakes: number };
  /** Live work while the case wrote and archived ((b) only): acks, /v1/health, R2 bytes written. */
  live?: {
    acks: ReturnType<AckClock["summary"]>;
    health: { probes: number; maxMs: number; failures: number };
    r2BytesWritten: number;
  };
}

async function caseA(
  relay: LocalRelay,
  http: HttpClient,
  admin: Admin,
  log: (m: string) => void,
  dirBefore: Usage | null,
): Promise<Measured> {
  const t0 = performance.now();
  const run = `bench-cost-a-${process.pid}-${Date.now().toString(36)}`;
  const id = `${run}:0`;
  const make = routingDeltas();
  let workerRequests = 0;
  log(`cost (a): ${TURNS_A} routing-heavy turns, ${DASHBOARDS} dashboards`);
  const producer = await Producer.open(relay.url, id);
  workerRequests++; // the ingest upgrade
  await producer.send(make, 0, 1);
  const dashboards = Array.from({ length: DASHBOARDS }, () => new Dashboard());
  for (const d of dashboards) await d.open(relay.watchUrl ?? relay.url, id);
  workerRequests += DASHBOARDS;
  await Promise.all(dashboards.map((d) => d.caughtUp));
  await producer.send(make, 1, TURNS_A);
  await producer.close();
  const reply = await http.request(
    "POST",
    `/v1/episodes/${id}/reply`,
    replyBody({ success: true, nodes: TURNS_A, calls: 0 }),
    {
      "content-type": "application/msgpack",
    },
  );
  workerRequests++;
  if (reply.status !== 200) throw new Error(`reply: ${reply.status} ${reply.body.toString().slice(0, 300)}`);
  await Promise.all(dashboards.map((d) => d.finished));
  for (const d of dashboards) await d.close();
  log("cost (a): written and watched; waiting for the archive");
  const archived = await admin.archived(id);
  if (!archived)
    log(`cost (a): not archived within ${ARCHIVE_WAIT_MS / 1000} s (or this relay does not archive): R2 left out`);
  // the archived episode read back (a GET and the run's bulk fetch): its object must see none of it
  const before = (await admin.episodeUsage(id)).episode;
  const got = await http.request("GET", `/v1/episodes/${id}`);
  if (got.status !== 200) throw new Error(`GET ${id}: ${got.status}`);
  const bulkBytes = await bulkFetch(http, run);
  workerRequests += 2;
  const after = (await admin.episodeUsage(id)).episode;
  const wokenByReads = { requests: after.requests - before.requests, wakes: after.wakes - before.wakes };
  await sleep(1500); // the run's counts reach the directory (DIRECTORY_MS)
  const u = await admin.episodeUsage(id);
  const r = await admin.runUsage(run);
  const episode = admin.ownUsage(id, u.episode);
  const workerR2 = archived ? 2 : 0; // the GET's and the bulk fetch's GetObject, by the Worker
  const parts = {
    episodes: ofUsage([episode]),
    hubs: ofUsage(u.hubs),
    registry: ofUsage([r.index, minus(r.directory, dirBefore)]),
    clients: { ...ZERO, workerRequests, r2ClassB: workerR2 },
  };
  return {
    counts: add(parts.episodes, parts.hubs, parts.registry, parts.clients),
    parts,
    episodes: 1,
    turns: TURNS_A,
    watcherHours: dashboards.reduce((s, d) => s + d.hours, 0),
    archived: archived ? 1 : 0,
    bulkBytes,
    episodeUsage: [episode],
    hubUsage: u.hubs,
    indexUsage: r.index,
    directoryUsage: minus(r.directory, dirBefore),
    acks: dashboards.reduce((s, d) => s + d.acks, 0),
    wallS: (performance.now() - t0) / 1000,
    wokenByReads,
  };
}

/** What one paced turn of (c) cost each object, on average over TURNS_C - 1 turns. */
interface PacedTurn {
  turns: number;
  gapMs: number;
  /** The episode's hubs. */
  hubCount: number;
  episode: Usage;
  hubs: Usage;
  index: Usage;
}

/** Usages summed into one (the hubs of an episode), as `minus` reads them. */
function summed(object: string, us: readonly Usage[]): Usage {
  const out: Usage = {
    object,
    id: "",
    since: 0,
    at: 0,
    wakes: 0,
    requests: 0,
    wsIn: 0,
    rowsRead: 0,
    rowsWritten: 0,
    written: {},
    sqliteBytes: 0,
    activeMs: 0,
    busyMs: 0,
    r2: { classA: 0, classB: 0, deletes: 0, bytesWritten: 0 },
  };
  for (const u of us) {
    for (const k of [
      "wakes",
      "requests",
      "wsIn",
      "rowsRead",
      "rowsWritten",
      "activeMs",
      "busyMs",
      "sqliteBytes",
    ] as const)
      out[k] += u[k];
    for (const [t, n] of Object.entries(u.written ?? {})) out.written[t] = (out.written[t] ?? 0) + n;
  }
  return out;
}

/**
 * (c) one episode at a real pace: a turn every GAP_C_MS, DASHBOARDS dashboards watching, the
 * producer's socket open throughout. What each turn after the first adds to the episode, its hubs
 * and the run's index: rows written by table, requests, and wakes (a wake per turn: the object
 * hibernated in the gap, so nothing held it in memory for long).
 */
async function caseC(relay: LocalRelay, http: HttpClient, admin: Admin, log: (m: string) => void): Promise<PacedTurn> {
  const run = `bench-cost-c-${process.pid}-${Date.now().toString(36)}`;
  const id = `${run}:0`;
  const make = routingDeltas();
  log(`cost (c): ${TURNS_C} routing-heavy turns ${GAP_C_MS / 1000} s apart, ${DASHBOARDS} dashboards`);
  const producer = await Producer.open(relay.url, id);
  await producer.send(make, 0, 1);
  const dashboards = Array.from({ length: DASHBOARDS }, () => new Dashboard());
  for (const d of dashboards) await d.open(relay.watchUrl ?? relay.url, id);
  await Promise.all(dashboards.map((d) => d.caughtUp));
  await sleep(GAP_C_MS);
  const read = async () => {
    const u = await admin.episodeUsage(id);
    return {
      episode: u.episode,
      hubs: summed("ViewerHub", u.hubs),
      hubCount: u.hubs.length,
      index: (await admin.runUsage(run)).index,
    };
  };
  const before = await read();
  for (let k = 1; k < TURNS_C; k++) {
    await producer.send(make, k, k + 1);
    await sleep(GAP_C_MS);
  }
  const after = await read();
  await producer.close();
  const reply = await http.request(
    "POST",
    `/v1/episodes/${id}/reply`,
    replyBody({ success: true, nodes: TURNS_C, calls: 0 }),
    {
      "content-type": "application/msgpack",
    },
  );
  if (reply.status !== 200) throw new Error(`reply ${id}: ${reply.status}`);
  for (const d of dashboards) await d.close();
  return {
    turns: TURNS_C - 1,
    gapMs: GAP_C_MS,
    hubCount: after.hubCount,
    episode: minus(after.episode, before.episode),
    hubs: minus(after.hubs, before.hubs),
    index: minus(after.index, before.index),
  };
}

/**
 * What (d) measured of one run: its index and its episodes over `turns` turns of them (each a paced turn, time scaled).
 */
interface SteadyIndex {
  /** Whether a run socket was open on the run throughout (a run page): its episodes were told INDEX_FLUSH_MS. */
  attended: boolean;
  /** The interval the run's index told its episodes (scaled), ms. */
  rowMs: number;
  turns: number;
  episodes: number;
  /** Turns each episode had written when the window opened. */
  warmTurns: number;
  /**
   * The window's turns over its schedule's: a loaded machine answers late and the turns fall behind, so fewer row
   * updates hold more turns each and a turn costs the index less than at the pace (below ~0.9 not the paced model).
   */
  scheduleKept: number;
  index: Usage;
  /** The run's episodes, summed (rows by table: their alarm and `search_sync` go with the row updates). */
  episodeUsage: Usage;
}

/** (d)'s two runs: nobody attends the first; a run socket is open on the second throughout. */
interface Steady {
  unattended: SteadyIndex;
  attended: SteadyIndex;
}

/**
 * (d) the run's index in steady state: two runs of EPISODES_D episodes side by side, each episode a turn every
 * GAP_D_MS on a relay whose index intervals are scaled as the turn gap is (SCALE_D), their starts spread over their
 * run's intervals (EPISODES_D). Nobody attends the first run; a run socket is open on the second from before its first
 * row to the end, as a run page open throughout. The window opens once every episode has been through a row update
 * and a search flush after its creation, and spans SEARCH_CYCLES_D search flush intervals: what each run's index and
 * episodes wrote in it, per turn written in it. The turns carry (a)'s text without its routing (no index column or
 * search text comes from the routing).
 */
async function caseD(log: (m: string) => void): Promise<Steady> {
  log(
    `cost (d): the index in steady state, two runs of ${EPISODES_D} episodes (one with a run socket open throughout), a turn every ${GAP_D_MS / 1000} s, INDEX_FLUSH_MS ${FLUSH_D_MS}, INDEX_IDLE_FLUSH_MS ${IDLE_D_MS}, SEARCH_FLUSH_MS ${SEARCH_D_MS} (time / ${SCALE_D})`,
  );
  const relay = await startBenchRelay(
    "tmpfs",
    {
      INDEX_FLUSH_MS: String(FLUSH_D_MS),
      INDEX_IDLE_FLUSH_MS: String(IDLE_D_MS),
      SEARCH_FLUSH_MS: String(SEARCH_D_MS),
    },
    { tiers: true },
  );
  const http = new HttpClient(relay.url);
  const admin = new Admin(http);
  const stamp = `${process.pid}-${Date.now().toString(36)}`;
  const runs = [
    { attended: false, run: `bench-cost-d-${stamp}`, rowMs: IDLE_D_MS },
    { attended: true, run: `bench-cost-d-attended-${stamp}`, rowMs: FLUSH_D_MS },
  ];
  const ids = (run: string) => Array.from({ length: EPISODES_D }, (_, e) => `${run}:${e}`);
  // the run page: its socket open before the run's first row (a run nobody wrote yet may be watched)
  const page = await openSocket(wsUrl(relay.url, `/v1/runs/${encodeURIComponent(runs[1]!.run)}`));
  const make = textDeltas();
  // one episode's start from the next: its search flushes and its row updates fall between the other's
  const spread = (rowMs: number) => (SEARCH_D_MS + rowMs) / EPISODES_D;
  const sent = runs.map(() => new Array<number>(EPISODES_D).fill(0));
  const count = (r: number) => sent[r]!.reduce((a, b) => a + b, 0);
  let stop = false;
  const writer = async (r: number, e: number, t0: number): Promise<void> => {
    const { run, rowMs } = runs[r]!;
    const producer = await Producer.open(relay.url, `${run}:${e}`);
    try {
      // on a schedule, not a sleep after each answer: a slow answer does not slow the pace
      for (let k = 0; !stop; k++) {
        await sleep(Math.max(0, t0 + e * spread(rowMs) + k * GAP_D_MS - performance.now()));
        if (stop) break;
        await producer.send(make, k, k + 1);
        sent[r]![e] = (sent[r]![e] ?? 0) + 1;
      }
    } finally {
      await producer.close();
    }
  };
  const usage = async (run: string) => {
    const episodes: Usage[] = [];
    for (const id of ids(run)) episodes.push((await admin.episodeUsage(id)).episode);
    return { index: (await admin.runUsage(run)).index, episodes: summed("Episode", episodes) };
  };
  try {
    const t0 = performance.now();
    const writers = runs.flatMap((_, r) => Array.from({ length: EPISODES_D }, (_, e) => writer(r, e, t0)));
    // a writer that fails fails the case (Promise.all rejects), one that ends before `stop` is a defect too
    const ended = Promise.all(writers).then(() => "ended" as const);
    const wait = async (ms: number) => {
      if ((await Promise.race([sleep(ms).then(() => "slept" as const), ended])) === "ended")
        throw new Error("cost (d): its writers stopped before the window closed");
    };
    // each run's last episode's creation, then a row interval and a search flush interval after it (and one more row
    // interval)
    await wait(Math.max(...runs.map((x) => spread(x.rowMs) * (EPISODES_D - 1) + SEARCH_D_MS + 2 * x.rowMs)));
    const warmTurns = sent.map((s) => Math.min(...s));
    const before = await Promise.all(runs.map((x) => usage(x.run)));
    const turns0 = runs.map((_, r) => count(r));
    await wait(SEARCH_CYCLES_D * SEARCH_D_MS);
    const after = await Promise.all(runs.map((x) => usage(x.run)));
    const turns = runs.map((_, r) => count(r) - turns0[r]!);
    stop = true;
    await Promise.all(writers);
    const steady = (r: number): SteadyIndex => {
      const scheduleKept = turns[r]! / ((EPISODES_D * SEARCH_CYCLES_D * SEARCH_D_MS) / GAP_D_MS);
      if (scheduleKept < 0.9)
        log(
          `cost (d): only ${(100 * scheduleKept).toFixed(0)}% of the scheduled turns went in ${runs[r]!.run} (answers late): not the pace`,
        );
      return {
        attended: runs[r]!.attended,
        rowMs: runs[r]!.rowMs,
        turns: turns[r]!,
        episodes: EPISODES_D,
        warmTurns: warmTurns[r]!,
        scheduleKept,
        index: minus(after[r]!.index, before[r]!.index),
        episodeUsage: minus(after[r]!.episodes, before[r]!.episodes),
      };
    };
    return { unattended: steady(0), attended: steady(1) };
  } finally {
    stop = true;
    await closeSocket(page);
    http.close();
    await relay.stop();
  }
}

async function caseB(
  relay: LocalRelay,
  http: HttpClient,
  admin: Admin,
  log: (m: string) => void,
  dirBefore: Usage,
  archives: boolean,
): Promise<Measured> {
  const t0 = performance.now();
  const run = `bench-cost-b-${process.pid}-${Date.now().toString(36)}`;
  const ids = Array.from({ length: EPISODES_B }, (_, i) => `${run}:${i}`);
  const make = routingDeltas();
  let workerRequests = 0;
  log(
    `cost (b): ${EPISODES_B} episodes of ${TURNS_B} turns in one run, ${PARALLEL_B} at a time, groups of ${GROUP_B} with their dispatch identity`,
  );
  let next = 0;
  const writer = async (client: HttpClient) => {
    while (next < ids.length) {
      const i = next++;
      const id = ids[i]!;
      const group = Math.floor(i / GROUP_B);
      const identity = dispatchFromJson({
        id: `d${i}`,
        kind: group % 8 === 7 ? "eval" : "train",
        env: "bench",
        group: `g${group}`,
        task: `idx=${group}`,
        policy_version: Math.max(0, Math.floor(group / 2) - (i % 2)),
        step: Math.floor(group / 2),
        started: Date.now() / 1000,
      });
      const producer = await Producer.open(relay.url, id, identity);
      producer.clock = clock;
      await producer.send(make, 0, TURNS_B);
      await producer.close();
      const reply = await client.request(
        "POST",
        `/v1/episodes/${id}/reply`,
        replyBody({ success: true, nodes: TURNS_B, calls: 0 }),
        {
          "content-type": "application/msgpack",
        },
      );
      if (reply.status !== 200) throw new Error(`reply ${id}: ${reply.status} ${reply.body.toString().slice(0, 300)}`);
      workerRequests += 2;
    }
  };
  const clock = new AckClock();
  const health = healthProbe(relay.url);
  // one HTTP connection per writer (HttpClient keeps one socket)
  const clients = Array.from({ length: PARALLEL_B }, () => new HttpClient(relay.url));
  try {
    await Promise.all(clients.map((c) => writer(c)));
  } finally {
    for (const c of clients) c.close();
  }
  let archived = 0;
  if (archives) {
    log("cost (b): written; waiting for the archives");
    for (const id of ids) if (await admin.archived(id)) archived++;
  }
  const healthSeen = await health.stop();
  const bulkBytes = await bulkFetch(http, run);
  workerRequests++;
  await sleep(1500);
  const episodes: Usage[] = [];
  for (const id of ids) episodes.push(admin.ownUsage(id, (await admin.episodeUsage(id)).episode));
  const r = await admin.runUsage(run);
  const parts = {
    episodes: ofUsage(episodes),
    hubs: { ...ZERO },
    registry: ofUsage([r.index, minus(r.directory, dirBefore)]),
    clients: { ...ZERO, workerRequests, r2ClassB: archived },
  };
  return {
    counts: add(parts.episodes, parts.hubs, parts.registry, parts.clients),
    parts,
    episodes: EPISODES_B,
    turns: TURNS_B,
    watcherHours: 0,
    archived,
    bulkBytes,
    episodeUsage: episodes,
    hubUsage: [],
    indexUsage: r.index,
    directoryUsage: minus(r.directory, dirBefore),
    acks: 0,
    wallS: (performance.now() - t0) / 1000,
    live: {
      acks: clock.summary(),
      health: healthSeen,
      r2BytesWritten: episodes.reduce((n, u) => n + u.r2.bytesWritten, 0),
    },
  };
}

// ---- the section ----

/**
 * The duration one paced turn bills an object, ms: its busy time in (c), and, if (c) saw it woken
 * again at every turn (it hibernated in each gap: nothing held it in memory past GAP_C_MS - 10 s),
 * at most that hold; idle time while eligible to hibernate is not billed
 * (durable-objects/platform/pricing: "Durable Objects that are idle and eligible for hibernation
 * are not billed for duration, even before the runtime has hibernated them"). An object (c) did not
 * see hibernate is billed min(TURN_GAP_S, IDLE_MS) per turn, as the usage model does. `alarms`: the
 * object's own alarm runs in (c) (the episode's, for its throttled row): a turn within 10 s of one
 * finds the object that alarm woke, so each alarm run stands for one wake.
 */
function pacedTurnMs(u: Usage, turns: number, objects: number, alarms = 0): { ms: number; hibernated: boolean } {
  const hibernated = objects > 0 && u.wakes + alarms >= turns * objects;
  const busy = u.busyMs / turns;
  if (hibernated) return { ms: busy + objects * Math.max(0, GAP_C_MS - HIBERNATES_AFTER_MS), hibernated };
  return { ms: busy + Math.max(1, objects) * Math.min(TURN_GAP_S * 1000, IDLE_MS), hibernated };
}

/**
 * Row updates an episode sends its run's index per turn, turns `gapMs` apart: each turn at once when turns are
 * further apart than the interval told (`rowMs`: the relay's defaults, wrangler.toml), else one per interval (the
 * episode's alarm sends what the turns since changed).
 */
function flushesPerTurn(gapMs: number, rowMs: number): number {
  return Math.min(1, gapMs / rowMs);
}

/**
 * The index's work per paced turn over (c)'s per turn: (c)'s turns come GAP_C_MS apart, the model's TURN_GAP_S; the
 * index's work goes with the row updates, not the turns (both runs unattended: INDEX_IDLE_FLUSH_MS). Printed beside
 * (d)'s (the model's) for comparison: (c)'s update or none is not a steady state.
 */
const INDEX_PACE =
  flushesPerTurn(TURN_GAP_S * 1000, DEFAULT_INDEX_IDLE_FLUSH_MS) /
  flushesPerTurn(GAP_C_MS, DEFAULT_INDEX_IDLE_FLUSH_MS);

/**
 * The episode's tables whose rows go with its row updates, not its turns: `alarm` (the alarm that sent an update is
 * armed for the next one's slot) and `search_sync` (what its text sent, written per update that carried text). (c)'s
 * few turns hold at most one update: the paced model bills these per turn from (d)'s episodes, whose run was told the
 * interval the model states.
 */
const UPDATE_TABLES = ["alarm", "search_sync"];

/** `u`'s billed counts per turn of (c) (requests, messages in, rows). */
function perTurnOf(u: Usage, turns: number): Counts {
  return scale({ ...ofUsage([u]), activeMs: 0, sqliteBytes: 0, r2Bytes: 0 }, 1 / turns);
}

/**
 * One (a)-sized episode at a real pace (a turn every TURN_GAP_S): (a)'s episode and hubs (created,
 * fed, finished, archived, read) plus, for every turn, what a paced turn of (c) added beyond (a)'s
 * mean turn (each turn committed alone: its own feed per hub, its own alarm and index row), and the
 * duration of `pacedTurnMs`; the run's index: (b)'s share per episode plus (d)'s index per turn,
 * the index and directory active the whole run (its episodes together send rows far more often than
 * every 10 s), shared by `episodesInRun`; watcher-hours are the dashboards × the turns' span.
 */
function pacedEpisode(
  a: Measured,
  b: Measured,
  c: PacedTurn,
  d: SteadyIndex,
  episodesInRun: number,
): { counts: Counts; watcherHours: number; episodeTurnMs: number; hubTurnMs: number; hibernated: string[] } {
  const turns = a.turns;
  const spanS = turns * TURN_GAP_S;
  // beyond (a): per turn, what (c) shows over (a)'s mean turn, never less than (a); rows written table by table (a
  // compressed turn writes what a paced one does not, checkpoints and their bodies, and the other way round the
  // alarms: compared in total, one hid the other)
  const beyond = (measured: Counts, perTurnC: Counts, tables: Record<string, number>): Counts => {
    const out = { ...measured };
    for (const k of ["doRequests", "wsIn", "rowsRead"] as const)
      out[k] = measured[k] + turns * Math.max(0, perTurnC[k] - measured[k] / TURNS_A);
    out.rowsWritten = turns * Object.values(tables).reduce((sum, n) => sum + n, 0);
    return out;
  };
  const episode = beyond(a.parts.episodes, perTurnOf(c.episode, c.turns), pacedEpisodeWritten(a, c, d));
  // the episode's requests in (c) are its alarm runs (the producer's messages are socket messages, hubs are fed by calls
  // it makes)
  const epTurn = pacedTurnMs(c.episode, c.turns, 1, c.episode.requests);
  episode.activeMs = a.parts.episodes.activeMs + turns * epTurn.ms;
  const hub = beyond(a.parts.hubs, perTurnOf(c.hubs, c.turns), pacedWritten(a.hubUsage, [c.hubs], c.turns));
  const hubTurn = pacedTurnMs(c.hubs, c.turns, c.hubCount);
  hub.activeMs = a.parts.hubs.activeMs + turns * hubTurn.ms;
  const registry = add(scale(ofUsage([b.indexUsage, b.directoryUsage]), 1 / b.episodes), {
    ...scale(perTurnOf(d.index, d.turns), turns),
    rowsWritten: turns * Object.values(pacedIndexWritten(d)).reduce((sum, n) => sum + n, 0),
    activeMs: 0,
  });
  registry.activeMs = (2 * spanS * 1000) / episodesInRun;
  return {
    counts: add(episode, hub, registry, a.parts.clients),
    watcherHours: (DASHBOARDS * spanS) / 3600,
    episodeTurnMs: epTurn.ms,
    hubTurnMs: hubTurn.ms,
    hibernated: [epTurn.hibernated ? "episode" : "", hubTurn.hibernated ? "hubs" : ""].filter((x) => x),
  };
}

/**
 * Rows written per paced turn by table: (a)'s per turn (what it paid once, its creation, reply and archive, spread
 * over its turns), or (c)'s per turn where that is more (what a turn at a real pace writes that a compressed one does
 * not: its alarm, its own row update). Whatever only (a) shows stays in: a checkpoint every CHECKPOINT_FRAMES frames
 * or 16 MiB, which (c)'s few turns never reach.
 */
function pacedWritten(a: readonly Usage[], c: readonly Usage[], cTurns: number): Record<string, number> {
  const perA = writtenPer(a, TURNS_A);
  const perC = writtenPer(c, cTurns);
  const out: Record<string, number> = {};
  for (const t of new Set([...Object.keys(perA), ...Object.keys(perC)])) out[t] = Math.max(perA[t] ?? 0, perC[t] ?? 0);
  return out;
}

/**
 * The episode's rows written per paced turn by table: `pacedWritten` of (a) and (c), but the tables that go with its
 * row updates (UPDATE_TABLES) from (d)'s episodes (the more of (a)'s per turn and (d)'s): at the interval `d`'s run
 * was told.
 */
function pacedEpisodeWritten(a: Measured, c: PacedTurn, d: SteadyIndex): Record<string, number> {
  const out = pacedWritten(a.episodeUsage, [c.episode], c.turns);
  const perA = writtenPer(a.episodeUsage, TURNS_A);
  const perD = writtenPer([d.episodeUsage], d.turns);
  for (const t of UPDATE_TABLES) {
    const n = Math.max(perA[t] ?? 0, perD[t] ?? 0);
    if (n > 0) out[t] = n;
    else delete out[t];
  }
  return out;
}

/**
 * The run's index's rows written per paced turn by table: (d)'s per turn (its turns are paced turns, time scaled),
 * its search's text with them (flushed every SEARCH_FLUSH_MS as at the real pace). (b)'s share per episode, its first
 * TURNS_B turns' text with it, is added apart: that much counted twice.
 */
function pacedIndexWritten(d: SteadyIndex): Record<string, number> {
  const out = writtenPer([d.index], d.turns);
  for (const t of Object.keys(out)) if (out[t] === 0) delete out[t];
  return out;
}

/** (c)'s index rows per turn scaled to the paced model's row updates (`INDEX_PACE`): the model before (d), compared. */
function indexOfCPaced(c: PacedTurn): Record<string, number> {
  return writtenPer([c.index], c.turns / INDEX_PACE);
}

/**
 * What grows with turns and what is paid once per episode: a line through (b)'s mean episode (TURNS_B) and (a)'s
 * (TURNS_A).
 */
function lineThrough(a: number, b: number): { fixed: number; perTurn: number } {
  const perTurn = (a - b) / (TURNS_A - TURNS_B);
  return { fixed: b - TURNS_B * perTurn, perTurn };
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  opts.log("cost: starting the relay in two tiers (storage on tmpfs)");
  const relay = await startBenchRelay("tmpfs", {}, { tiers: true });
  const http = new HttpClient(relay.url);
  const admin = new Admin(http);
  const workerd = descendantPids("workerd");
  const cpu0 = cpuMsOf(workerd);
  try {
    const dir0 = (await admin.runUsage("bench-cost-none")).directory;
    const a = await caseA(relay, http, admin, opts.log, dir0);
    const dirA = (await admin.runUsage("bench-cost-none")).directory;
    const b = await caseB(relay, http, admin, opts.log, dirA, a.archived === 1);
    const c = await caseC(relay, http, admin, opts.log);
    const cpuMs = cpuMsOf(workerd) - cpu0;
    const steady = await caseD(opts.log);
    // the paced model's run: nobody attends it (the run page open throughout: `attended`, printed beside)
    const d = steady.unattended;
    const dOpen = steady.attended;

    // (a)
    const linesA = priced(a.counts);
    const usdA = total(linesA);
    const keptR2 = a.parts.episodes.r2Bytes;
    const keptSqlite = a.counts.sqliteBytes;
    const r2Share = keptR2 + keptSqlite > 0 ? keptR2 / (keptR2 + keptSqlite) : 0;
    const hubsA = a.parts.hubs;
    const notesA = [
      `${TURNS_A} turns (${fmt(a.episodeUsage[0]!.rowsWritten / TURNS_A)} rows written per turn), ${DASHBOARDS} dashboards for ${fmt(a.watcherHours * 3600)} watcher-s (${a.acks} acks sent; their hubs counted ${hubsA.wsIn} messages in: acks and closes), ${a.archived ? "archived to R2" : `not archived within ${ARCHIVE_WAIT_MS / 1000} s (R2 left out)`}, bulk fetch ${fmt(a.bulkBytes / 1e6)} MB; ${fmt(a.wallS)} s`,
      `requests by object: episode ${a.parts.episodes.doRequests}, hubs ${hubsA.doRequests}, index ${a.indexUsage.requests}, directory ${a.directoryUsage.requests}; messages in: episode ${a.parts.episodes.wsIn} (the producer's), hubs ${hubsA.wsIn} (acks)`,
      `reading the archived episode back (a GET, the run's bulk fetch): ${a.wokenByReads?.requests ?? "?"} requests and ${a.wokenByReads?.wakes ?? "?"} wakes of its object`,
      `bytes kept ${KEEP_DAYS} days: SQLite ${fmt(keptSqlite / 1e6)} MB, R2 ${fmt(keptR2 / 1e6)} MB (R2's share of the bytes: ${(100 * r2Share).toFixed(1)}%)`,
      `duration model: ${fmt(a.counts.activeMs / 1000)} s active (events + 10 s idle each), ${fmt((a.episodeUsage[0]!.busyMs + a.hubUsage.reduce((s, u) => s + u.busyMs, 0)) / 1000)} s busy (the lower bound) for the episode and its hubs`,
      `$ per episode: ${usdText(usdA)}; Worker CPU (not in the total: every workerd's CPU, objects included, an upper bound): ${fmt(cpuMs)} ms = ${usdText(P.cost(P.WORKER_CPU_MS, cpuMs))} for (a) and (b)`,
    ];
    opts.table(
      costTable(
        `cost (a): one episode, ${TURNS_A} routing-heavy turns, ${DASHBOARDS} dashboards (prices read ${P.READ_ON}, marginal)`,
        linesA,
        notesA,
      ),
    );

    // (b)
    const linesB = priced(b.counts);
    const usdB = total(linesB);
    opts.table(
      costTable(`cost (b): one run of ${EPISODES_B} episodes of ${TURNS_B} turns, no dashboards`, linesB, [
        `${b.archived} of ${EPISODES_B} archived; bulk fetch ${fmt(b.bulkBytes / 1e6)} MB; ${fmt(b.wallS)} s`,
        `live work meanwhile: ${b.live!.acks.acks} acks, latency p50 ${fmt(b.live!.acks.p50Ms)} ms, p99 ${fmt(b.live!.acks.p99Ms)} ms, max ${fmt(b.live!.acks.maxMs)} ms; longest time with no ack while messages were in flight ${fmt(b.live!.acks.longestGapMs)} ms; /v1/health slowest ${fmt(b.live!.health.maxMs)} ms of ${b.live!.health.probes} probes (${b.live!.health.failures} failed); R2 bytes written ${fmt(b.live!.r2BytesWritten / 1e6)} MB`,
        `$ per run: ${usdText(usdB)}; $ per episode: ${usdText(usdB / EPISODES_B)}`,
      ]),
    );

    // 1,000 episodes of (a)'s size in one run
    const perEpisodeA = add(a.parts.episodes, a.parts.hubs, a.parts.clients);
    const registryPerEpisode = scale(b.parts.registry, 1 / EPISODES_B);
    const bulk = { ...ZERO, workerRequests: 1 };
    const counts1000 = add(scale(perEpisodeA, SCALE_EPISODES), scale(registryPerEpisode, SCALE_EPISODES), bulk);
    const lines1000 = priced(counts1000);
    const usd1000 = total(lines1000);
    const watcherHours1000 = a.watcherHours * SCALE_EPISODES;
    const hubUsd1000 = total(priced(scale(a.parts.hubs, SCALE_EPISODES)));
    const meanB = (k: keyof Counts) => b.parts.episodes[k] / EPISODES_B;
    const grows = (label: string, k: keyof Counts, unit = "") => {
      const f = lineThrough(a.parts.episodes[k], meanB(k));
      return `${label}: ${fmt(f.fixed)}${unit} per episode + ${fmt(f.perTurn)}${unit} per turn`;
    };
    const perTurnWatcher = (k: keyof Counts) => hubsA[k] / (TURNS_A * DASHBOARDS);
    const notes1000 = [
      "computed: per episode, (a)'s episode object, hubs, R2 and Worker requests; per episode of the run, (b)'s index and directory; one bulk fetch",
      "what grows with what (episode objects, a line through (b)'s mean episode and (a)'s):",
      `  ${grows("requests", "doRequests")}; ${grows("rows written", "rowsWritten")}; ${grows("rows read", "rowsRead")}`,
      `  ${grows("SQLite bytes kept", "sqliteBytes", " B")}; ${grows("R2 bytes kept", "r2Bytes", " B")}; R2 class A: ${fmt(a.parts.episodes.r2ClassA)} per episode`,
      `  hubs, per turn and watcher: ${fmt(perTurnWatcher("doRequests"))} requests, ${fmt(perTurnWatcher("wsIn"))} messages in; their duration grows with the time turns arrive while watched (per watcher-hour here: ${fmt(a.watcherHours > 0 ? hubsA.activeMs / 1000 / a.watcherHours : 0)} s active)`,
      `  index + directory, per episode: ${fmt(registryPerEpisode.doRequests)} requests, ${fmt(registryPerEpisode.rowsWritten)} rows written, ${fmt(registryPerEpisode.sqliteBytes)} B kept`,
      `$ per run: ${usdText(usd1000)}; per episode ${usdText(usd1000 / SCALE_EPISODES)}; per 1,000 watcher-hours: ${usdText((usd1000 / watcherHours1000) * 1000)} all in, ${usdText((hubUsd1000 / watcherHours1000) * 1000)} the hubs alone`,
      `(watcher-hours as connected here: ${fmt(a.watcherHours * 3600)} s per episode, written at full speed; at a real pace the same turns span more watcher-hours, so these per-watcher-hour figures are upper bounds, and durations grow toward wall time)`,
    ];
    opts.table(costTable(`cost: ${SCALE_EPISODES} episodes of (a)'s size in one run (computed)`, lines1000, notes1000));

    const pace = pacedEpisode(a, b, c, d, SCALE_EPISODES);
    const linesPaced = priced(add(scale(pace.counts, SCALE_EPISODES), bulk));
    const usdPaced = total(linesPaced);
    const paceOpen = pacedEpisode(a, b, c, dOpen, SCALE_EPISODES);
    const linesOpen = priced(add(scale(paceOpen.counts, SCALE_EPISODES), bulk));
    const usdOpen = total(linesOpen);
    const watcherHoursPaced = pace.watcherHours * SCALE_EPISODES;
    const turnC = (u: Usage) =>
      `${fmt(u.requests / c.turns)} requests, ${fmt(u.wsIn / c.turns)} messages in, ${fmt(u.rowsWritten / c.turns)} rows written, ${fmt(u.wakes / c.turns)} wakes, ${fmt(u.busyMs / c.turns)} ms busy`;
    const turnD = (u: Usage, x: SteadyIndex) =>
      `${fmt(u.requests / x.turns)} requests, ${fmt(u.rowsWritten / x.turns)} rows written, ${fmt(u.rowsRead / x.turns)} rows read`;
    const steadyD = (x: SteadyIndex) =>
      `${x.turns} turns of ${x.episodes} episodes (each past ${x.warmTurns} turns; ${(100 * x.scheduleKept).toFixed(0)}% of the schedule's turns went, below ~90% not the pace), told ${(x.rowMs * SCALE_D) / 1000} s / ${SCALE_D}: index ${turnD(x.index, x)}; the episodes' ${UPDATE_TABLES.join(" and ")} ${fmt(UPDATE_TABLES.reduce((n, t) => n + (x.episodeUsage.written?.[t] ?? 0), 0) / x.turns)} rows`;
    const pacedLine = (what: string, p: typeof pace, usd: number) =>
      `${what}: ${usdText(usd / SCALE_EPISODES)} per episode, ${fmt(p.counts.rowsWritten)} rows written per episode`;
    opts.table(
      costTable(
        `cost: the same ${SCALE_EPISODES} episodes at a real pace, one turn every ${TURN_GAP_S} s (a model on (c) and (d))`,
        linesPaced,
        [
          `(c) measured, per turn ${c.gapMs / 1000} s apart (${c.turns} turns): episode ${turnC(c.episode)}; ${c.hubCount} hub(s) ${turnC(c.hubs)}; index ${turnC(c.index)}`,
          `the run is unattended (nobody has its run page open, no flag alert: its episodes are told INDEX_IDLE_FLUSH_MS ${DEFAULT_INDEX_IDLE_FLUSH_MS / 1000} s, src/objects/registry/attention.ts); the index per paced turn, and the episode's ${UPDATE_TABLES.join(" and ")} rows: (d)'s per turn at ${TURN_GAP_S} s / ${SCALE_D} with the intervals / ${SCALE_D}, unattended: ${steadyD(d)}; attended (a run socket open throughout, told INDEX_FLUSH_MS ${DEFAULT_INDEX_FLUSH_MS / 1000} s): ${steadyD(dOpen)}; (c)'s index × ${fmt(INDEX_PACE)} for comparison (row updates per turn at ${DEFAULT_INDEX_IDLE_FLUSH_MS / 1000} s: ${fmt(flushesPerTurn(TURN_GAP_S * 1000, DEFAULT_INDEX_IDLE_FLUSH_MS))} a turn ${TURN_GAP_S} s apart, ${fmt(flushesPerTurn(GAP_C_MS, DEFAULT_INDEX_IDLE_FLUSH_MS))} in (c)); all by table below`,
          `per paced turn, beyond (a)'s mean turn: what (c) adds; duration per turn: episode ${fmt(pace.episodeTurnMs / 1000)} s, hubs ${fmt(pace.hubTurnMs / 1000)} s (${pace.hibernated.length ? `${pace.hibernated.join(" and ")} hibernated at every gap of (c): busy time plus at most ${(GAP_C_MS - HIBERNATES_AFTER_MS) / 1000} s held; idle while eligible to hibernate is not billed` : "none hibernated in (c)"}; otherwise min(${TURN_GAP_S}, ${IDLE_MS / 1000}) s); the index and directory active for the whole run`,
          `$ per run: ${usdText(usdPaced)}; per episode ${usdText(usdPaced / SCALE_EPISODES)}; per 1,000 watcher-hours (${fmt(pace.watcherHours)} per episode): ${usdText((usdPaced / watcherHoursPaced) * 1000)}`,
          pacedLine("paced episode, run unattended", pace, usdPaced),
          `${pacedLine("paced episode, run page open throughout", paceOpen, usdOpen)} (the same model with (d)'s attended run; $ per run ${usdText(usdOpen)})`,
        ],
      ),
    );

    // rows written per turn by table: (a)'s episode, hubs and index per turn; (b)'s index per upsert and per turn
    const turnsB = EPISODES_B * TURNS_B;
    const upsertsB = b.indexUsage.requests;
    const written = {
      episode_a_per_turn: writtenPer(a.episodeUsage, TURNS_A),
      hubs_a_per_turn: writtenPer(a.hubUsage, TURNS_A),
      index_a_per_turn: writtenPer([a.indexUsage], TURNS_A),
      episodes_b_per_turn: writtenPer(b.episodeUsage, turnsB),
      index_b_per_upsert: writtenPer([b.indexUsage], upsertsB),
      index_b_per_turn: writtenPer([b.indexUsage], turnsB),
      episode_c_per_turn: writtenPer([c.episode], c.turns),
      hubs_c_per_turn: writtenPer([c.hubs], c.turns),
      index_c_per_turn: writtenPer([c.index], c.turns),
      index_c_paced_per_turn: indexOfCPaced(c),
      index_d_per_turn: writtenPer([d.index], d.turns),
      index_d_attended_per_turn: writtenPer([dOpen.index], dOpen.turns),
      episodes_d_per_turn: writtenPer([d.episodeUsage], d.turns),
      episodes_d_attended_per_turn: writtenPer([dOpen.episodeUsage], dOpen.turns),
      index_paced_per_turn: pacedIndexWritten(d),
      episode_paced_per_turn: pacedEpisodeWritten(a, c, d),
      hubs_paced_per_turn: pacedWritten(a.hubUsage, [c.hubs], c.turns),
      index_paced_attended_per_turn: pacedIndexWritten(dOpen),
      episode_paced_attended_per_turn: pacedEpisodeWritten(a, c, dOpen),
    };
    opts.table(
      writtenTable(
        [
          ["episode (a)", written.episode_a_per_turn],
          ["hubs (a)", written.hubs_a_per_turn],
          ["index (a)", written.index_a_per_turn],
          ["episodes (b)", written.episodes_b_per_turn],
          ["index (b) per upsert", written.index_b_per_upsert],
          ["index (b)", written.index_b_per_turn],
          ["episode (c)", written.episode_c_per_turn],
          ["hubs (c)", written.hubs_c_per_turn],
          ["index (c)", written.index_c_per_turn],
          ["index (c) × pace", written.index_c_paced_per_turn],
          ["index (d)", written.index_d_per_turn],
          ["episodes (d)", written.episodes_d_per_turn],
          ["index (d), attended", written.index_d_attended_per_turn],
          ["episodes (d), attended", written.episodes_d_attended_per_turn],
          ["index, paced (model)", written.index_paced_per_turn],
          ["episode, paced (model)", written.episode_paced_per_turn],
          ["hubs, paced (model)", written.hubs_paced_per_turn],
          ["index, paced, attended", written.index_paced_attended_per_turn],
          ["episode, paced, attended", written.episode_paced_attended_per_turn],
        ],
        [
          `per turn: (a) ${TURNS_A} turns of one episode, (b) ${turnsB} turns of ${EPISODES_B} episodes; (b)'s index took ${upsertsB} requests (upserts, and the directory's alarms) for them`,
          'each statement\'s rowsWritten as workerd counts it (its index entries too) under the table it writes; "alarm": setAlarm (billed as a row); "search (FTS5 shadow)": the rows FTS5 wrote to its own tables (SQLite\'s total_changes(), counted by the index)',
          `(c): ${c.turns} turns ${c.gapMs / 1000} s apart, each committed and fed alone, its run unattended (its row sent at most every INDEX_IDLE_FLUSH_MS): the paced model's turn for the episode and hubs; "index (c) × pace": (c)'s index × ${fmt(INDEX_PACE)} (its updates at ${TURN_GAP_S} s apart; an update or none, not a steady state)`,
          `(d): ${d.turns} and ${dOpen.turns} turns of two runs of ${d.episodes} episodes, time / ${SCALE_D} (a turn every ${GAP_D_MS / 1000} s, INDEX_FLUSH_MS ${FLUSH_D_MS / 1000} s, INDEX_IDLE_FLUSH_MS ${IDLE_D_MS / 1000} s, SEARCH_FLUSH_MS ${SEARCH_D_MS / 1000} s), over ${SEARCH_CYCLES_D} search flush intervals; the second with a run socket open throughout ("attended"): "index, paced" is (d)'s per turn, its text flushed into the search as at the real pace`,
          `"episode, paced" and "hubs, paced": per table the more of (a)'s per turn and (c)'s (what the paced model bills per turn), but the episode's ${UPDATE_TABLES.join(" and ")} (rows that go with its row updates) the more of (a)'s and (d)'s; "…, attended": the same with (d)'s attended run`,
        ],
      ),
    );

    return {
      rows_written_per_turn: Object.fromEntries(
        Object.entries(written).map(([k, v]) => [
          k,
          Object.fromEntries(Object.entries(v).map(([t, n]) => [t, sig(n)])),
        ]),
      ),
      prices: {
        read_on: P.READ_ON,
        marginal: true,
        sources: [P.WORKER_REQUEST.source, P.DO_REQUEST.source, P.R2_GB_MONTH.source],
      },
      episode: {
        usd: sig(usdA),
        stored_r2_share: sig(r2Share),
        turns: TURNS_A,
        dashboards: DASHBOARDS,
        watcher_hours: sig(a.watcherHours),
        archived: a.archived === 1,
        kept_bytes: { sqlite: keptSqlite, r2: keptR2 },
        units: unitsJson(linesA),
        acks: a.acks,
        hub_ws_in: hubsA.wsIn,
        object_requests_for_archived_reads: a.wokenByReads?.requests ?? null,
        wall_s: sig(a.wallS),
      },
      run100: {
        episodes: EPISODES_B,
        turns: TURNS_B,
        usd: sig(usdB),
        usd_per_episode: sig(usdB / EPISODES_B),
        archived: b.archived,
        units: unitsJson(linesB),
        wall_s: sig(b.wallS),
        ack_ms: {
          p50: sig(b.live!.acks.p50Ms),
          p99: sig(b.live!.acks.p99Ms),
          max: sig(b.live!.acks.maxMs),
          longest_gap: sig(b.live!.acks.longestGapMs),
        },
        health_ms: { max: sig(b.live!.health.maxMs), probes: b.live!.health.probes, failures: b.live!.health.failures },
        r2_bytes_written: b.live!.r2BytesWritten,
      },
      run1000: {
        episodes: SCALE_EPISODES,
        usd: sig(usd1000),
        usd_per_episode: sig(usd1000 / SCALE_EPISODES),
        usd_per_1000_watcher_hours: sig((usd1000 / watcherHours1000) * 1000),
        hubs_usd_per_1000_watcher_hours: sig((hubUsd1000 / watcherHours1000) * 1000),
        units: unitsJson(lines1000),
        paced: {
          turn_gap_s: TURN_GAP_S,
          index_flush_ms: DEFAULT_INDEX_FLUSH_MS,
          index_idle_flush_ms: DEFAULT_INDEX_IDLE_FLUSH_MS,
          run: "unattended",
          index_per_turn_over_c: sig(INDEX_PACE),
          index_steady: {
            turns: d.turns,
            episodes: d.episodes,
            warm_turns: d.warmTurns,
            schedule_kept: sig(d.scheduleKept),
            time_scale: SCALE_D,
            requests_per_turn: sig(d.index.requests / d.turns),
          },
          measured_gap_s: c.gapMs / 1000,
          hibernated_every_gap: pace.hibernated,
          duration_per_turn_s: { episode: sig(pace.episodeTurnMs / 1000), hubs: sig(pace.hubTurnMs / 1000) },
          requests_per_turn: { episode: sig(c.episode.requests / c.turns) },
          wakes_per_turn: {
            episode: sig(c.episode.wakes / c.turns),
            hubs: sig(c.hubs.wakes / c.turns),
            index: sig(c.index.wakes / c.turns),
          },
          usd: sig(usdPaced),
          usd_per_episode: sig(usdPaced / SCALE_EPISODES),
          usd_per_1000_watcher_hours: sig((usdPaced / watcherHoursPaced) * 1000),
          rows_written_per_episode: sig(pace.counts.rowsWritten),
          units: unitsJson(linesPaced),
        },
        paced_attended: {
          run: "run page open throughout",
          index_steady: {
            turns: dOpen.turns,
            episodes: dOpen.episodes,
            warm_turns: dOpen.warmTurns,
            schedule_kept: sig(dOpen.scheduleKept),
            requests_per_turn: sig(dOpen.index.requests / dOpen.turns),
          },
          usd: sig(usdOpen),
          usd_per_episode: sig(usdOpen / SCALE_EPISODES),
          rows_written_per_episode: sig(paceOpen.counts.rowsWritten),
          units: unitsJson(linesOpen),
        },
      },
      worker_cpu_ms_upper_bound: cpuMs,
    };
  } finally {
    http.close();
    await relay.stop();
  }
}

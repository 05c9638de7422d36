// Relay mode of the conformance CLI (`npm run conformance -- --relay URL [--ingest http|ws]
// [--watchers K] [--token T] PATH...`): push one golden case through a running relay as a real
// producer would (envelopes; frames listed in `ack_lost` reach the relay but their ack is
// "lost", so the next envelope re-sends from the same acked view), post the reply, and compare
// the fetched episode with the golden bytes (finish-error cases: the 409 and the reference
// text). With K watchers, each follows the episode with the TypeScript client and must end with
// the golden bytes too: one from before the first frame, one joining midway, one dropping
// midway and resuming with `?after=`, round robin.

import WebSocket from "ws";
import { type EpisodeWatch, watchEpisode } from "../../clients/typescript/watch.js";
import { dispatchJson, encodeEnvelope, ProducerCursor } from "../../src/protocol/index.js";
import type { RelayOptions } from "./args.js";
import type { GoldenCase } from "./cases.js";
import { compareBytes } from "./compare.js";
import { CONFORMANCE_DISPATCH, frameWithDispatch, type WithDispatch } from "./local.js";

export type { RelayOptions } from "./args.js";

/** Thrown by a relay-mode feature that does not exist yet; the CLI turns it into exit 2. */
export class NotImplementedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotImplementedError";
  }
}

const WAIT_MS = 30_000;

/** Undefined when the case passes on the relay, else the first difference as one line. */
export async function runCaseOnRelay(c: GoldenCase, opts: RelayOptions): Promise<string | undefined> {
  const id = `conformance-${c.name}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const base = `${opts.relay}/v1/episodes/${id}`;
  const auth: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
  const watchers: EpisodeWatch[] = [];
  const watch = (drop = false) => {
    const w = watchEpisode(opts.relay, id, { token: opts.token, WebSocket, backoffMs: [50, 500] });
    (w as EpisodeWatch & { dropMidway?: boolean }).dropMidway = drop;
    watchers.push(w);
    return w;
  };
  const roles = Array.from({ length: opts.watchers }, (_, i) => i % 3);
  for (const role of roles) if (role !== 1) watch(role === 2);
  const send = opts.ingest === "ws" ? await socketSender(opts, id) : httpSender(base, auth);
  const dispatch: WithDispatch | undefined =
    opts.dispatch && opts.dispatch !== "none" ? { identity: CONFORMANCE_DISPATCH, via: opts.dispatch } : undefined;
  try {
    const producer = new ProducerCursor("conformance");
    const lost = new Set(c.ack_lost);
    const half = Math.floor(c.frames.length / 2);
    for (let i = 0; i < c.frames.length; i++) {
      if (i === half) {
        for (const role of roles) if (role === 1) watch();
        for (const w of watchers) if ((w as EpisodeWatch & { dropMidway?: boolean }).dropMidway) w.reconnectNow();
      }
      const env = producer.envelope(frameWithDispatch(c.frames[i]!, dispatch));
      const err = await send(
        encodeEnvelope(dispatch?.via === "envelope" ? { ...env, dispatch: dispatch.identity } : env),
      );
      if (err) return `frames[${i}]: relay refused: ${err}`;
      if (!lost.has(i)) producer.acknowledge(); // a lost ack: the cursor stays, the relay retracts it later
    }
    const res = await fetch(`${base}/reply`, {
      method: "POST",
      body: c.reply,
      headers: { "content-type": "application/msgpack", ...auth },
    });
    const text = await res.text();
    if (c.finish_error !== null) {
      if (res.status !== 409)
        return `finish_error: expected 409 with ${JSON.stringify(c.finish_error)}, got ${res.status} ${text.slice(0, 200)}`;
      const message = (JSON.parse(text) as { message?: string }).message;
      if (message !== c.finish_error)
        return `finish_error: expected ${JSON.stringify(c.finish_error)} got ${JSON.stringify(message)}`;
      // the run stays live: every watcher must hold the last checkpoint's traces
      const last = c.checkpoints.at(-1);
      for (const [i, w] of watchers.entries()) {
        await until(() => w.seq >= c.frames.length, `watcher ${i} reaching seq ${c.frames.length}`);
        if (last) {
          const d = compareBytes(last.traces, w.assembly.tracesBytes(), `watcher ${i} live traces`);
          if (d) return d;
        }
      }
      return undefined;
    }
    if (res.status !== 200) return `reply: ${res.status} ${text.slice(0, 300)}`;
    if (dispatch) {
      const st = (await (await fetch(`${base}/status`, { headers: auth })).json()) as { dispatch?: unknown };
      if (JSON.stringify(st.dispatch) !== JSON.stringify(dispatchJson(dispatch.identity)))
        return `dispatch: the relay holds ${JSON.stringify(st.dispatch)}`;
    }
    const got = await fetch(base, { headers: { accept: "application/msgpack", ...auth } });
    if (got.status !== 200) return `GET episode: ${got.status} ${(await got.text()).slice(0, 300)}`;
    const diff = compareBytes(c.episode!, new Uint8Array(await got.arrayBuffer()), "episode");
    if (diff) return diff;
    for (const [i, w] of watchers.entries()) {
      // a refused or unreachable watch rejects: its state and error say why
      const done = await within(
        w.finished().catch(() => w),
        WAIT_MS,
      );
      if (!done || !w.episode)
        return `watcher ${i} (${["from the start", "joined midway", "resumed"][roles[i] ?? 0]}): ${done ? `finished without an episode: ${w.error}` : `no finish within ${WAIT_MS} ms (state ${w.state}, seq ${w.seq})`}`;
      const d = compareBytes(c.episode!, w.episode, `watcher ${i} episode`);
      if (d) return d;
    }
    return undefined;
  } finally {
    for (const w of watchers) w.close();
    await send.close?.();
  }
}

type Sender = ((body: Uint8Array) => Promise<string | null>) & { close?: () => Promise<void> };

function httpSender(base: string, auth: Record<string, string>): Sender {
  return async (body) => {
    const res = await fetch(`${base}/deltas`, {
      method: "POST",
      body,
      headers: { "content-type": "application/msgpack", ...auth },
    });
    const text = await res.text();
    return res.status === 200 ? null : `${res.status} ${text.slice(0, 300)}`;
  };
}

/** One producer socket; each message's ack (JSON text) comes back in order. */
async function socketSender(opts: RelayOptions, id: string): Promise<Sender> {
  const u = new URL(`${opts.relay}/v1/episodes/${id}/ingest`);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  // the token in a header, never in the URL (URLs end up in logs)
  const headers: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
  const ws = new WebSocket(u, { maxPayload: 64 * 1024 * 1024, headers });
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`ingest socket refused: ${res.statusCode}`)));
  });
  const waiting: Array<(s: string) => void> = [];
  ws.on("message", (data, isBinary) => {
    if (!isBinary) waiting.shift()?.(data.toString());
  });
  ws.on("close", (code, reason) => {
    for (const w of waiting.splice(0))
      w(JSON.stringify({ ok: false, message: `socket closed ${code} ${reason.toString()}` }));
  });
  const send: Sender = (body) =>
    new Promise((resolve) => {
      waiting.push((text) => {
        const ack = JSON.parse(text) as { ok: boolean; status?: number; message?: string };
        resolve(ack.ok ? null : `${ack.status ?? "closed"} ${ack.message ?? text}`);
      });
      ws.send(body);
    });
  send.close = () =>
    new Promise<void>((resolve) => {
      if (ws.readyState === WebSocket.CLOSED) return resolve();
      ws.once("close", () => resolve());
      ws.close(1000, "done");
    });
  return send;
}

/** `p`, or null if it has not settled within `ms` (the timer never outlives the race). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<null>((r) => (timer = setTimeout(() => r(null), ms)));
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const end = Date.now() + WAIT_MS;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

// Helpers for workerd-side tests: golden cases through the GOLDEN binding, requests to the Worker.
import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { expect } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import type { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { type GoldenCase, parseCase } from "../../tools/conformance/case-format.js";

export async function goldenNames(): Promise<string[]> {
  const res = await fromNode(env.GOLDEN, "http://golden/");
  return ((await res.json()) as string[]).map((f) => f.replace(/\.msgpack$/, ""));
}

/**
 * Each case's bytes, fetched from Node once per runtime: large_routing is 27 MB, and some files
 * ask for it seven times.
 */
const goldenBytes = new Map<string, Promise<Uint8Array>>();

export async function golden(name: string): Promise<GoldenCase> {
  let bytes = goldenBytes.get(name);
  if (bytes === undefined) {
    bytes = fetchGolden(name);
    goldenBytes.set(name, bytes);
    bytes.catch(() => goldenBytes.delete(name)); // a failed fetch is not kept
  }
  // parsed from a copy each time: the case's byte arrays are views of it, and a test that
  // changes one must not change what the next caller gets
  return parseCase((await bytes).slice(), name);
}

async function fetchGolden(name: string): Promise<Uint8Array> {
  const res = await fromNode(env.GOLDEN, `http://golden/${name}.msgpack`);
  if (!res.ok) throw new Error(`golden case ${name}: ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

/**
 * A fetch of a binding served by Node (GOLDEN, STORAGE_FIXTURES): once again after "Network connection lost",
 * which is what workerd reports when it reuses a pooled connection that Node's server closed
 * after its keep-alive timeout (5 s: a test that ran longer than that between two fetches).
 */
export async function fromNode(binding: Fetcher, url: string): Promise<Response> {
  try {
    return await binding.fetch(url);
  } catch (e) {
    if (!(e instanceof Error) || !/Network connection lost/.test(e.message)) throw e;
    return binding.fetch(url);
  }
}

let counter = 0;
/** A fresh episode id per call (tests share storage). */
export function freshId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}`;
}

export const base = "http://relay.test/v1/episodes";

export function relay(path: string, init?: RequestInit): Promise<Response> {
  return exports.default.fetch(`${base}/${path}`, init);
}

export function post(path: string, body: Uint8Array, headers: Record<string, string> = {}): Promise<Response> {
  return relay(path, { method: "POST", body, headers: { "content-type": "application/msgpack", ...headers } });
}

export async function getBytes(id: string): Promise<Uint8Array> {
  const res = await relay(id);
  if (res.status !== 200) throw new Error(`GET ${id}: ${res.status} ${await res.text()}`);
  return new Uint8Array(await res.arrayBuffer());
}

export function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Open a WebSocket to the Worker (fetch with Upgrade), accepted, binary as ArrayBuffer. */
export async function openSocket(path: string, protocols?: string): Promise<WebSocket> {
  const headers: Record<string, string> = { upgrade: "websocket" };
  if (protocols) headers["sec-websocket-protocol"] = protocols;
  const res = await relay(path, { headers });
  if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade ${path}: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  ws.binaryType = "arraybuffer";
  ws.accept();
  return ws;
}

/** Messages of a socket, awaited one by one; `closed` resolves with the close event. */
export function inbox(ws: WebSocket) {
  const queue: Array<string | ArrayBuffer> = [];
  const waiters: Array<(m: string | ArrayBuffer) => void> = [];
  let closeEvent: { code: number; reason: string } | null = null;
  const closeWaiters: Array<(c: { code: number; reason: string }) => void> = [];
  ws.addEventListener("message", (e) => {
    const w = waiters.shift();
    if (w) w(e.data as string | ArrayBuffer);
    else queue.push(e.data as string | ArrayBuffer);
  });
  ws.addEventListener("close", (e) => {
    closeEvent = { code: e.code, reason: e.reason };
    for (const w of closeWaiters.splice(0)) w(closeEvent);
  });
  return {
    next(timeoutMs = 10_000): Promise<string | ArrayBuffer> {
      const m = queue.shift();
      if (m !== undefined) return Promise.resolve(m);
      return new Promise((resolve, reject) => {
        const waiter = (x: string | ArrayBuffer) => {
          clearTimeout(t);
          resolve(x);
        };
        const t = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1); // a later message must not go to a waiter that gave up
          reject(new Error("timed out waiting for a message"));
        }, timeoutMs);
        waiters.push(waiter);
      });
    },
    closed(timeoutMs = 10_000): Promise<{ code: number; reason: string }> {
      if (closeEvent) return Promise.resolve(closeEvent);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error("timed out waiting for close")), timeoutMs);
        closeWaiters.push((c) => {
          clearTimeout(t);
          resolve(c);
        });
      });
    },
    pending: () => queue.length,
  };
}

/** Frames `from`..`to` of `c` as envelopes over HTTP; frames the case lists in `ack_lost` are not acknowledged (the relay retracts them later). */
export async function pushFrames(
  id: string,
  c: GoldenCase,
  from: number,
  to: number,
  producer: ProducerCursor,
): Promise<void> {
  const lost = new Set(c.ack_lost);
  for (let i = from; i < to; i++) {
    const res = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(c.frames[i]!)));
    expect(res.status, await res.clone().text()).toBe(200);
    await res.arrayBuffer();
    if (!lost.has(i)) producer.acknowledge();
  }
}

/**
 * Run `fn` over the storage of an episode object nobody has written (a fresh id), inside that
 * object: the storage modules of src/objects/episode tested on a real SqlStorage, the object itself idle.
 */
export function withFreshStorage<R>(
  fn: (storage: DurableObjectStorage, ctx: DurableObjectState) => R | Promise<R>,
): Promise<R> {
  return runInDurableObject(env.EPISODES.getByName(freshId("storage")), (_instance, ctx) => fn(ctx.storage, ctx));
}

/**
 * Sets an episode's last update time in its storage, as a test of retention needs it: in the meta
 * row and on the turn that a live episode's last frame carries (record-store.ts `Turn`), which is
 * read over the meta row.
 */
export function setUpdated(sql: SqlStorage, updated: number): void {
  sql.exec("UPDATE meta SET updated = ?", updated);
  sql.exec("UPDATE frames SET turn = json_set(turn, '$.updated', ?) WHERE turn IS NOT NULL", updated);
}

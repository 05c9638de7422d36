// The TypeScript watcher through trouble between it and the relay (test/support/flaky-proxy.ts
// in front of a real relay): a gateway's 502/503/500 or a proxy's 401 without the relay's header,
// refused connections, a connection cut mid-stream are all retried with backoff and resumed by seq,
// and the watch ends with the golden episode; only a definite refusal ends it (a page or a 404
// that is not the relay; the relay's own 400, 404). The same for one-shot calls: a gateway's answer
// is the relay not answering (RelayUnreachable `gateway`), a page is not the relay. The local
// router answers 503 as the relay, with Retry-After, while its tier is not up.

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import {
  type EpisodeWatch,
  fetchEpisode,
  type SocketFactory,
  type WatchEvent,
  watchEpisode,
} from "../../clients/typescript/watch.js";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { startRouter } from "../../scripts/router.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { fixturePath, type GoldenCase, loadCase } from "../../tools/conformance/cases.js";
import { freePort } from "../../tools/free-port.js";
import {
  type Fault,
  type FlakyProxy,
  GATEWAY_500_EMPTY,
  GATEWAY_502,
  GATEWAY_503_PAGE,
  PAGE_200,
  PAGE_404,
  PAGE_405,
  PROXY_401,
  resetAfter,
  startFlakyProxy,
} from "../support/flaky-proxy.js";
import { until, useRelay } from "../support/relay.js";

const relay = useRelay();
let proxy: FlakyProxy;
beforeAll(async () => {
  proxy = await startFlakyProxy(() => relay.url);
});
afterAll(() => proxy?.close());

const WS: SocketFactory = WebSocket;
const golden = (name: string) => loadCase(fixturePath(name));
const fresh = (p: string) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 5)}`;

/** Push frames [from, to) straight to the relay (not through the proxy). */
async function push(id: string, c: GoldenCase, from: number, to: number, producer: ProducerCursor): Promise<void> {
  for (let i = from; i < to; i++) {
    const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(c.frames[i]!)),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    await res.arrayBuffer();
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
}

const reply = async (id: string, c: GoldenCase) =>
  (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();

/** A watch through the proxy, with what it went through. */
function watch(id: string, base = proxy.url): { w: EpisodeWatch; events: WatchEvent[] } {
  const w = watchEpisode(base, id, { WebSocket: WS, backoffMs: [20, 200] });
  const events: WatchEvent[] = [];
  w.on((e) => events.push(e));
  return { w, events };
}

const count = (events: WatchEvent[], type: WatchEvent["type"]) => events.filter((e) => e.type === type).length;

/** It ended with the golden bytes, never refused, each delta applied once in seq order. */
function expectExact(w: EpisodeWatch, events: WatchEvent[], c: GoldenCase): void {
  expect(w.state).toBe("finished");
  expect(count(events, "refused")).toBe(0);
  expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!)), "golden bytes").toBe(0);
  const seqs = events.flatMap((e) => (e.type === "delta" ? [e.seq] : []));
  for (let i = 1; i < seqs.length; i++)
    expect(seqs[i]!, "no delta twice, none out of order").toBeGreaterThan(seqs[i - 1]!);
}

/** The transient troubles, each as the proxy makes it happen to the next `n` attempts. */
const TRANSIENT: Array<[string, Fault]> = [
  ["a gateway's 502 (JSON, no relay header)", GATEWAY_502],
  ["a gateway's 503 page (no relay header)", GATEWAY_503_PAGE],
  ["an empty 500 (no relay header)", GATEWAY_500_EMPTY],
  ["a proxy's own 401 page (no relay header)", PROXY_401],
  ["a connection cut mid-stream", resetAfter(600)],
];

describe("a watch through transient trouble resumes by seq and ends exact", () => {
  for (const [name, fault] of TRANSIENT) {
    it(`${name}, while live`, async () => {
      const c = golden("multi_trace_links");
      const id = fresh("transient-live");
      const producer = new ProducerCursor("p");
      const half = Math.floor(c.frames.length / 2);
      await push(id, c, 0, half, producer);
      const { w, events } = watch(id);
      await until(() => w.state === "live", 20_000, "live");
      const before = proxy.faulted;
      proxy.fail(fault, 4); // cuts the live socket; the next four attempts (upgrades, probes) get the fault
      await push(id, c, half, c.frames.length, producer);
      await reply(id, c);
      await w.finished();
      expect(proxy.faulted - before, "every planned fault was met").toBe(4);
      expect(count(events, "reconnecting")).toBeGreaterThanOrEqual(2);
      expect(events.some((e) => e.type === "state" && e.state === "resuming")).toBe(true);
      expectExact(w, events, c);
    });

    it(`${name}, before the first connection`, async () => {
      const c = golden("multi_trace_links");
      const id = fresh("transient-first");
      const producer = new ProducerCursor("p");
      await push(id, c, 0, c.frames.length - 2, producer);
      const before = proxy.faulted;
      proxy.fail(fault, 4);
      const { w, events } = watch(id);
      await until(() => proxy.faulted - before === 4, 20_000, "the faults met");
      await push(id, c, c.frames.length - 2, c.frames.length, producer);
      await reply(id, c);
      await w.finished();
      expect(count(events, "reconnecting")).toBeGreaterThanOrEqual(2);
      expectExact(w, events, c);
    });
  }

  it("connections refused (the relay restarting), while live: retried until it listens again", async () => {
    const c = golden("tool_calls_pending");
    const id = fresh("transient-refused");
    const producer = new ProducerCursor("p");
    await push(id, c, 0, 3, producer);
    const { w, events } = watch(id);
    await until(() => w.state === "live", 20_000, "live");
    await proxy.down();
    await push(id, c, 3, c.frames.length, producer);
    await reply(id, c);
    // several attempts meet nothing listening, then it comes back
    await until(() => count(events, "reconnecting") >= 3, 20_000, "three attempts refused");
    expect(w.state).toBe("resuming");
    await proxy.up();
    await w.finished();
    expectExact(w, events, c);
  });

  it("a cut mid-catch-up starts the catch-up over and still ends exact", async () => {
    const c = golden("multi_trace_links");
    const id = fresh("transient-catchup");
    const producer = new ProducerCursor("p");
    await push(id, c, 0, c.frames.length, producer);
    const before = proxy.faulted;
    proxy.fail(resetAfter(400), 2); // the first two connections are cut past the hello, inside the snapshot
    const { w, events } = watch(id);
    await until(() => w.state === "live", 20_000, "live after two cuts");
    expect(proxy.faulted - before).toBe(2);
    await reply(id, c);
    await w.finished();
    expect(count(events, "reconnecting")).toBeGreaterThanOrEqual(2);
    expect(count(events, "hello"), "a hello on each connection").toBeGreaterThanOrEqual(3);
    expect(count(events, "snapshot"), "only the last snapshot was whole").toBe(1);
    expectExact(w, events, c);
  });
});

describe("a definite refusal ends the watch at once", () => {
  async function refused(id: string, base?: string) {
    const { w, events } = watch(id, base);
    const ended = await w.finished().then(
      () => null,
      (e: unknown) => e,
    );
    expect(ended).toBe(w.refusal);
    expect(w.state).toBe("refused");
    expect(count(events, "reconnecting"), "never retried").toBe(0);
    return w.refusal!;
  }

  it("a page (200) without the relay's header: not the relay", async () => {
    proxy.fail(PAGE_200, 2);
    const r = await refused(fresh("page"));
    expect(r).toMatchObject({ status: 200, code: "not_the_relay" });
  });

  it("a 404 or 405 page without the relay's header: not the relay", async () => {
    proxy.fail(PAGE_404, 2);
    expect(await refused(fresh("page404"))).toMatchObject({ status: 404, code: "not_the_relay" });
    proxy.fail(PAGE_405, 2);
    expect(await refused(fresh("page405"))).toMatchObject({ status: 405, code: "not_the_relay" });
  });

  it("the relay's own 404 (a wrong base URL), through the proxy", async () => {
    expect(await refused(fresh("base"), `${proxy.url}/v1/nope`)).toMatchObject({ status: 404, code: "not_found" });
  });

  it("a 400 or a 503 auth_not_configured carrying the relay's header", async () => {
    const relays = { "x-episode-relay": "1" };
    proxy.fail(
      {
        kind: "answer",
        status: 400,
        type: "application/json",
        body: '{"error":"malformed","message":"bad"}',
        headers: relays,
      },
      2,
    );
    expect(await refused(fresh("400"))).toMatchObject({ status: 400, code: "malformed" });
    const closed = '{"error":"auth_not_configured","message":"no RELAY_SECRET"}';
    proxy.fail({ kind: "answer", status: 503, type: "application/json", body: closed, headers: relays }, 2);
    expect(await refused(fresh("503"))).toMatchObject({ status: 503, code: "auth_not_configured" });
  });
});

describe("the relay's own transient answers", () => {
  it("503 unavailable with Retry-After (the local router while a tier starts) is waited out", async () => {
    const c = golden("tool_calls_pending");
    const id = fresh("router-503");
    const producer = new ProducerCursor("p");
    await push(id, c, 0, c.frames.length, producer);
    const before = proxy.faulted;
    const body = '{"error":"unavailable","message":"local relay: the hub tier is not up"}';
    proxy.fail(
      {
        kind: "answer",
        status: 503,
        type: "application/json",
        body,
        headers: { "x-episode-relay": "1", "retry-after": "1" },
      },
      4,
    );
    const { w, events } = watch(id);
    await until(() => proxy.faulted - before === 4, 20_000, "the faults met");
    await reply(id, c);
    await w.finished();
    expectExact(w, events, c);
  });
});

describe("one-shot calls through a gateway", () => {
  it("a gateway's 502 is the relay not answering (transient); a page is not the relay", async () => {
    proxy.fail(GATEWAY_502, 1);
    await expect(fetchEpisode(proxy.url, "any")).rejects.toMatchObject({
      name: "RelayUnreachable",
      kind: "gateway",
      message: expect.stringMatching(/answered 502 \(application\/json\) in the relay's place/),
    });
    proxy.fail(PAGE_200, 1);
    await expect(fetchEpisode(proxy.url, "any")).rejects.toMatchObject({ name: "RelayRefusal", code: "not_the_relay" });
  });

  it("the relay's own 503 (overloaded, with Retry-After) is sent again after it: the call ends with the episode", async () => {
    const c = golden("chat_basic");
    const id = fresh("overloaded");
    await push(id, c, 0, c.frames.length, new ProducerCursor("p"));
    proxy.fail(
      {
        kind: "answer",
        status: 503,
        type: "application/json",
        body: '{"error":"overloaded","message":"the relay is out of memory for storage for now"}',
        headers: { "x-episode-relay": "1", "retry-after": "1" },
      },
      2,
    );
    const before = proxy.faulted;
    const t = Date.now();
    const got = (await fetchEpisode(proxy.url, id)) as Uint8Array;
    expect(proxy.faulted - before, "both 503s were met").toBe(2);
    expect(Date.now() - t, "each waited about its Retry-After (half to all of it)").toBeGreaterThanOrEqual(1000);
    const direct = (await fetchEpisode(relay.url, id)) as Uint8Array;
    expect(Buffer.from(got).equals(Buffer.from(direct)), "the same bytes as straight from the relay").toBe(true);
  });
});

describe("the local router (scripts/router.mjs) while its tier is not up", () => {
  it("answers 503 unavailable as the relay, with Retry-After, and a watch started then ends exact once the tier is up", async () => {
    const port = await freePort();
    const target = { host: "127.0.0.1", port };
    const router = await startRouter({ rest: target, watch: target });
    let late: LocalRelay | undefined;
    try {
      const base = `http://127.0.0.1:${router.port}`;
      const res = await fetch(`${base}/v1/health`);
      expect(res.status).toBe(503);
      expect(res.headers.get("x-episode-relay")).toBe("1");
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
      expect(await res.json()).toMatchObject({
        error: "unavailable",
        message: expect.stringMatching(/the episode tier did not answer/),
      });
      const upgrade = await new Promise<{ status: number; relay: string | undefined; retry: string | undefined }>(
        (resolve, reject) => {
          const ws = new WebSocket(`${base.replace("http", "ws")}/v1/episodes/x/watch`);
          ws.on("unexpected-response", (_req, r) =>
            resolve({
              status: r.statusCode ?? 0,
              relay: r.headers["x-episode-relay"] as string,
              retry: r.headers["retry-after"] as string,
            }),
          );
          ws.on("open", () => reject(new Error("opened")));
          ws.on("error", () => {});
        },
      );
      expect(upgrade).toEqual({ status: 503, relay: "1", retry: "1" });
      // a watch started while nothing is up waits (connecting), then follows the relay once it is
      const c = golden("tool_calls_pending");
      const id = fresh("router-late");
      const { w, events } = watch(id, base);
      await until(() => count(events, "reconnecting") >= 2, 20_000, "two attempts met the 503");
      expect(w.state).toBe("connecting");
      late = await startRelay({ port });
      const producer = new ProducerCursor("p");
      for (let i = 0; i < c.frames.length; i++) {
        const r = await fetch(`${late.url}/v1/episodes/${id}/deltas`, {
          method: "POST",
          body: encodeEnvelope(producer.envelope(c.frames[i]!)),
        });
        expect(r.status).toBe(200);
        await r.arrayBuffer();
        if (!c.ack_lost.includes(i)) producer.acknowledge();
      }
      await (await fetch(`${late.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();
      await w.finished();
      expectExact(w, events, c);
    } finally {
      await router.close();
      await late?.stop();
    }
  }, 120_000);
});

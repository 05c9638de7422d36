// The TypeScript watcher client against a relay the test starts: events, assembly, JSON view,
// variants, reconnect and resume (including the relay's slow-watcher close), fetchEpisode.

import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import {
  fetchEpisode,
  RelayRefusal,
  RelayUnreachable,
  type SocketFactory,
  type WatchEvent,
  watchEpisode,
} from "../../clients/typescript/watch.js";
import { startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { fixturePath, type GoldenCase, loadCase } from "../../tools/conformance/cases.js";
import { freePort } from "../../tools/free-port.js";
import { until, useAuthedRelay, useRelay } from "../support/relay.js";

// a small lag budget so the slow-watcher path (close 4008 → resume) is reachable
const relay = useRelay({ WATCHER_LAG_BYTES: String(1024 * 1024) });
/** The suite's relay with a secret, for every test of tokens (fresh episode ids keep them apart). */
const authed = useAuthedRelay();
const secret = authed.secret;

const WS: SocketFactory = WebSocket;
const golden = (name: string) => loadCase(fixturePath(name));
const fresh = (p: string) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 5)}`;

async function push(id: string, c: GoldenCase, from = 0, to = c.frames.length, producer = new ProducerCursor("t")) {
  for (let i = from; i < to; i++) {
    const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(c.frames[i]!)),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
  return producer;
}
const reply = async (id: string, c: GoldenCase) =>
  (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();

describe("watchEpisode", () => {
  it("emits hello, snapshot, caught_up, deltas in order, finish; ends with the golden episode", async () => {
    const c = golden("multi_trace_links");
    const id = fresh("client");
    const producer = await push(id, c, 0, 5);
    const w = watchEpisode(relay.url, id, { WebSocket: WS });
    const events: WatchEvent[] = [];
    w.on((e) => events.push(e));
    await until(() => w.state === "live");
    await push(id, c, 5, c.frames.length, producer);
    await reply(id, c);
    await w.finished();
    const types = events.map((e) => e.type).filter((t) => t !== "state");
    expect(types.slice(0, 3)).toEqual(["hello", "snapshot", "caught_up"]);
    expect(types.at(-1)).toBe("finish");
    const seqs = events.flatMap((e) => (e.type === "delta" ? [e.seq] : []));
    expect(seqs).toEqual(Array.from({ length: c.frames.length - 5 }, (_, i) => i + 6));
    expect(w.state).toBe("finished");
    expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!))).toBe(0);
    const json = w.json() as Array<{ id: string }>;
    expect(json.length).toBe(3);
  });

  it("reconnectNow resumes after the last seq without gaps or duplicates", async () => {
    const c = golden("tool_calls_pending");
    const id = fresh("resume");
    const w = watchEpisode(relay.url, id, { WebSocket: WS, backoffMs: [20, 100] });
    const deltas: number[] = [];
    const reconnects: number[] = [];
    w.on((e) => {
      if (e.type === "delta") deltas.push(e.seq);
      if (e.type === "reconnecting") reconnects.push(e.code);
    });
    await until(() => w.state === "live");
    const producer = await push(id, c, 0, 4);
    await until(() => w.seq === 4);
    w.reconnectNow();
    await push(id, c, 4, c.frames.length, producer);
    await reply(id, c);
    await w.finished();
    expect(reconnects).toEqual([4001]);
    expect(deltas).toEqual(Array.from({ length: c.frames.length }, (_, i) => i + 1)); // the empty snapshot at 0, then every frame once
    expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!))).toBe(0);
  });

  it("a watcher that falls behind is closed 4008 by the relay and resumes by itself", async () => {
    const c = golden("large_routing");
    const id = fresh("slow");
    // never acknowledges: the relay's 1 MiB budget runs out after two ~600 KB frames
    const w = watchEpisode(relay.url, id, { WebSocket: WS, ackEveryBytes: 1 << 30, backoffMs: [20, 100] });
    const codes: number[] = [];
    const t0 = Date.now();
    w.on((e) => {
      if (e.type === "reconnecting") codes.push(e.code);
      if (process.env.DEBUG_CLIENT)
        console.log(Date.now() - t0, e.type, "seq" in e ? e.seq : "", "code" in e ? e.code : "");
    });
    await until(() => w.state === "live");
    await push(id, c);
    await reply(id, c);
    await w.finished();
    expect(codes).toContain(4008);
    expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!))).toBe(0);
  }, 60_000);

  it("routing: false leaves routed_experts out; fetchEpisode returns bytes or JSON", async () => {
    const c = golden("routing_repair_u8");
    const id = fresh("variant");
    await push(id, c);
    await reply(id, c);
    const w = watchEpisode(relay.url, id, { WebSocket: WS, routing: false });
    await w.finished();
    const nodes = (w.json() as Array<{ nodes: Array<{ routed_experts: unknown }> }>)[0]!.nodes;
    expect(nodes.every((n) => n.routed_experts === null)).toBe(true);
    const bytes = (await fetchEpisode(relay.url, id)) as Uint8Array;
    expect(Buffer.compare(Buffer.from(bytes), Buffer.from(c.episode!))).toBe(0);
    const json = (await fetchEpisode(relay.url, id, { json: true })) as { traces: unknown[] };
    expect(json.traces.length).toBe(1);
  });
});

describe("watchEpisode refusals and retries", () => {
  /** Watch until the watch ends by itself; the states it went through and its events. */
  async function refusedWatch(url: string, id: string, token?: string) {
    const w = watchEpisode(url, id, { WebSocket: WS, backoffMs: [20, 100], ...(token ? { token } : {}) });
    const states: string[] = [w.state];
    const types: string[] = [];
    w.on((e) => {
      types.push(e.type);
      if (e.type === "state") states.push(e.state);
    });
    const ended = await w.finished().then(
      () => null,
      (e: unknown) => e,
    );
    expect(ended, "finished() rejects with the refusal").toBe(w.refusal);
    return { w, states, types };
  }

  it("401 without a token: the watch ends refused, with what to do, and never retries", async () => {
    const { w, states, types } = await refusedWatch(authed.url, fresh("noauth"));
    expect(w.state).toBe("refused");
    expect(w.refusal).toBeInstanceOf(RelayRefusal);
    expect(w.refusal).toMatchObject({ status: 401, code: "unauthorized" });
    expect(w.refusal!.message).toMatch(/token/);
    expect(states).toEqual(["connecting", "refused"]);
    expect(types).not.toContain("reconnecting");
    expect(types.at(-1)).toBe("refused");
  });

  it("403 with a token for other episodes; 401 with a badly signed one", async () => {
    const other = await mintToken(secret, { role: "watcher", episodes: ["someone-else:*"], ttl: 600 });
    const forbidden = await refusedWatch(authed.url, fresh("scope"), other);
    expect(forbidden.w.refusal).toMatchObject({ status: 403, code: "forbidden" });
    expect(forbidden.w.refusal!.message).toMatch(/episodes/);
    const forged = await mintToken(`${secret}-not-it`, { role: "watcher", episodes: ["*"], ttl: 600 });
    expect((await refusedWatch(authed.url, fresh("forged"), forged)).w.refusal).toMatchObject({ status: 401 });
  });

  it("a wrong base URL (a 404, or a page that is not the relay) and a bad id end the watch too", async () => {
    const token = await mintToken(secret, { role: "watcher", episodes: ["*"], ttl: 600 });
    const notFound = await refusedWatch(`${authed.url}/v1/nope`, fresh("base"), token);
    expect(notFound.w.refusal).toMatchObject({ status: 404, code: "not_found" });
    expect(notFound.w.refusal!.message).toMatch(/base URL/);
    const page = await refusedWatch(`${authed.url}/not-the-relay`, fresh("page"), token);
    expect(page.w.refusal).toMatchObject({ status: 200, code: "not_the_relay" });
    expect(page.w.refusal!.message).toMatch(
      /answered 200 \(text\/html.*not as an Episode Relay: check the relay's base URL/,
    );
  });

  it("an id the relay cannot take, or a URL without http(s)://, is refused at once, with the rule; nothing is sent", () => {
    for (const bad of ["watch", "run:a#b", "run:a?b=1", "a/b", "", "x".repeat(129)]) {
      expect(() => watchEpisode(authed.url, bad, { WebSocket: WS }), bad).toThrow(RelayRefusal);
      try {
        watchEpisode(authed.url, bad, { WebSocket: WS });
      } catch (e) {
        expect((e as RelayRefusal).code).toBe("bad_episode_id");
        expect((e as RelayRefusal).message).toMatch(/\[A-Za-z0-9\._:-\]|reserved/);
      }
    }
    expect(() => watchEpisode("127.0.0.1:8787", "ok", { WebSocket: WS })).toThrow(
      /must start with http:\/\/ or https:\/\//,
    );
  });

  it("fetchEpisode names what it got at an address that is not the relay (the dashboard's page), and refuses bad ids and URLs", async () => {
    await expect(fetchEpisode(`${authed.url}/episodes`, "run:1")).rejects.toMatchObject({
      name: "RelayRefusal",
      code: "not_the_relay",
    });
    await expect(fetchEpisode(authed.url, "a/b")).rejects.toMatchObject({ code: "bad_episode_id" });
    await expect(fetchEpisode("localhost:8787", "ok")).rejects.toMatchObject({ code: "bad_url" });
  });

  it("network failures name their cause and the URL: refused, DNS, https against an http relay", async () => {
    const port = await freePort();
    await expect(fetchEpisode(`http://127.0.0.1:${port}`, "ep")).rejects.toMatchObject({
      name: "RelayUnreachable",
      kind: "refused",
      message: expect.stringMatching(
        new RegExp(`connection refused by 127\\.0\\.0\\.1:${port}.*http://127\\.0\\.0\\.1:${port}/v1/episodes/ep`),
      ),
    });
    await expect(fetchEpisode("http://no-such-relay.invalid", "ep")).rejects.toMatchObject({
      kind: "dns",
      message: expect.stringMatching(/does not resolve/),
    });
    // a plain-HTTP server waits on a TLS hello rather than refusing it: named once fetchEpisode stops
    // waiting (10 s by default; the same path after 1 s here)
    await expect(
      fetchEpisode(authed.url.replace("http://", "https://"), "ep", { timeoutMs: 1_000 }),
    ).rejects.toMatchObject({
      name: "RelayUnreachable",
      message: expect.stringMatching(/https:\/\/ URL for a relay that speaks http:\/\//),
    });
  }, 30_000);

  it("a watch of a relay that never answers gives up after giveUpMs, naming why; finished() rejects", async () => {
    const port = await freePort();
    const w = watchEpisode(`http://127.0.0.1:${port}`, fresh("never"), {
      WebSocket: WS,
      backoffMs: [20, 100],
      giveUpMs: 500,
    });
    const e = await w.finished().then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(RelayUnreachable);
    expect((e as RelayUnreachable).kind).toBe("refused");
    expect((e as RelayUnreachable).message).toMatch(/gave up after 1 s: connection refused/);
    expect(w.state).toBe("unreachable");
  });

  it("a relay that is not up yet is retried with backoff, as connecting (not resuming)", async () => {
    const port = await freePort();
    const id = fresh("later");
    const w = watchEpisode(`http://127.0.0.1:${port}`, id, { WebSocket: WS, backoffMs: [20, 200] });
    const states = new Set<string>();
    let retries = 0;
    w.on((e) => {
      if (e.type === "state") states.add(e.state);
      if (e.type === "reconnecting") retries++;
    });
    await until(() => retries >= 2);
    expect(w.state).toBe("connecting");
    // the relay comes up where the watcher looks: it connects, and only later drops count as resuming
    const late = await startRelay({ port });
    try {
      await until(() => w.state === "live");
      expect(states.has("resuming")).toBe(false);
      w.reconnectNow();
      await until(() => states.has("resuming") && w.state === "live");
    } finally {
      w.close();
      await late.stop();
    }
  }, 60_000);

  it("fetchEpisode throws a RelayRefusal for 401 and 404", async () => {
    await expect(fetchEpisode(authed.url, fresh("nofetch"))).rejects.toMatchObject({
      name: "RelayRefusal",
      status: 401,
    });
    const token = await mintToken(secret, { role: "watcher", episodes: ["*"], ttl: 600 });
    await expect(fetchEpisode(authed.url, fresh("missing"), { token })).rejects.toMatchObject({
      status: 404,
      code: "not_found",
    });
  });
});

describe("where the token goes", () => {
  it("the watch offers its token as a subprotocol entry, never in the URL", async () => {
    const { WebSocketServer } = await import("ws");
    const server = new WebSocketServer({
      port: 0,
      host: "127.0.0.1",
      handleProtocols: (p) => (p.has("episode-relay") ? "episode-relay" : false),
    });
    const seen: Array<{ url: string; protocol: string }> = [];
    server.on("connection", (socket, req) => {
      seen.push({ url: req.url ?? "", protocol: String(req.headers["sec-websocket-protocol"] ?? "") });
      socket.close(1000, "seen");
    });
    await new Promise((r) => server.once("listening", r));
    const port = (server.address() as { port: number }).port;
    const w = watchEpisode(`http://127.0.0.1:${port}`, "run-1:e", {
      WebSocket: WS,
      token: "tok.en.sig",
      after: 3,
      routing: false,
      backoffMs: [20, 50],
    });
    try {
      await until(() => seen.length >= 1);
    } finally {
      w.close();
      server.close();
    }
    expect(seen[0]!.url).toBe("/v1/episodes/run-1%3Ae/watch?after=3&routing=0&annotations=1");
    expect(seen[0]!.url).not.toMatch(/token/);
    expect(seen[0]!.protocol.split(/,\s*/)).toEqual(["episode-relay", "bearer.tok.en.sig"]);
  });

  it("a watch with a token on a relay with a secret: accepted by its subprotocol entry, to the end of the run", async () => {
    // in a run of its own: the suite's authed relay is shared, and bulk.test.ts counts run "~" (ids without one)
    const id = `client:${fresh("sub")}`;
    const c = golden("chat_basic");
    const producer = await mintToken(secret, { role: "producer", episodes: [id], ttl: 600 });
    const producerCursor = new ProducerCursor("t");
    for (const f of c.frames) {
      const r = await fetch(`${authed.url}/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: encodeEnvelope(producerCursor.envelope(f)),
        headers: { authorization: `Bearer ${producer}` },
      });
      expect(r.status).toBe(200);
      await r.arrayBuffer();
      producerCursor.acknowledge();
    }
    const token = await mintToken(secret, { role: "watcher", episodes: [id], ttl: 600 });
    const w = watchEpisode(authed.url, id, { WebSocket: WS, token });
    await until(() => w.state === "live");
    await (
      await fetch(`${authed.url}/v1/episodes/${id}/reply`, {
        method: "POST",
        body: c.reply,
        headers: { authorization: `Bearer ${producer}` },
      })
    ).arrayBuffer();
    const done = await w.finished();
    expect(Buffer.compare(Buffer.from(done.episode!), Buffer.from(c.episode!))).toBe(0);
  }, 60_000);

  it("a token is refused over plain http:// to another machine, before anything is sent, unless allowed", async () => {
    const { checkTokenTransport } = await import("../../clients/typescript/relay-fetch.js");
    const { fetchRun, listEpisodes, fetchGroupsPage } = await import("../../clients/typescript/watch.js");
    const sent: string[] = [];
    const original = globalThis.fetch;
    globalThis.fetch = (async (url: string | URL) => {
      sent.push(String(url));
      return new Response("{}", {
        status: 404,
        headers: { "x-episode-relay": "1", "content-type": "application/json" },
      });
    }) as typeof fetch;
    delete process.env.EPISODE_RELAY_ALLOW_HTTP;
    try {
      for (const base of ["http://relay.example.com", "http://10.1.2.3:8787", "http://relay.test"]) {
        const insecure = {
          name: "RelayRefusal",
          code: "insecure_url",
          message: expect.stringMatching(/plain http:\/\/.*use https:\/\//),
        };
        expect(() => watchEpisode(base, "run:1", { WebSocket: WS, token: "t" })).toThrow(
          /refusing to send a bearer token over plain http/,
        );
        await expect(fetchEpisode(base, "run:1", { token: "t" })).rejects.toMatchObject(insecure);
        await expect(
          (async () => {
            for await (const _ of fetchRun(base, "run", { token: "t" }));
          })(),
        ).rejects.toMatchObject(insecure);
        await expect(
          (async () => {
            for await (const _ of listEpisodes(base, "run", { token: "t" }));
          })(),
        ).rejects.toMatchObject(insecure);
        await expect(fetchGroupsPage(base, "run", { token: "t" })).rejects.toMatchObject(insecure);
      }
      expect(sent).toEqual([]);
      // https, this machine, no token, or told to: it goes
      for (const ok of [
        "https://relay.example.com",
        "http://127.0.0.1:8787",
        "http://localhost:1",
        "http://[::1]:1",
        "ws://a.localhost",
      ]) {
        expect(() => checkTokenTransport(ok, { token: "t" }), ok).not.toThrow();
      }
      expect(() => checkTokenTransport("http://relay.example.com", {})).not.toThrow();
      await expect(
        fetchEpisode("http://relay.example.com", "run:1", { token: "t", allowHttp: true }),
      ).rejects.toMatchObject({ status: 404 });
      process.env.EPISODE_RELAY_ALLOW_HTTP = "1";
      await expect(fetchGroupsPage("http://relay.example.com", "run", { token: "t" })).rejects.toMatchObject({
        status: 404,
      });
      expect(sent).toEqual([
        "http://relay.example.com/v1/episodes/run%3A1",
        "http://relay.example.com/v1/runs/run/groups",
      ]);
    } finally {
      globalThis.fetch = original;
      delete process.env.EPISODE_RELAY_ALLOW_HTTP;
    }
  });
});

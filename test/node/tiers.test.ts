// The relay as `npm run start:tiers` and the benches run it: the hub tier in a runtime process of its own
// behind the router (scripts/relay.mjs `tiers`). Watchers spread over several hubs (one hub per
// watcher here), joining late, resuming, through a retraction, across a restart of every hub
// (the hub tier's process restarted mid-catch-up), all end with the golden bytes; a client that
// offers permessage-deflate (as `ws` and every browser do) gets none; a watcher refused 1013
// waits the relay's retry hint.
import type { IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import {
  type EpisodeWatch,
  type SocketFactory,
  type WatchEvent,
  watchEpisode,
} from "../../clients/typescript/watch.js";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeWatchMessage, retryHintMs, type WatchMessage } from "../../src/protocol/watch/protocol.js";
import { fixturePath, type GoldenCase, loadCase } from "../../tools/conformance/cases.js";
import { until } from "../support/relay.js";

const WS: SocketFactory = WebSocket;
const golden = (name: string) => loadCase(fixturePath(name));
const fresh = (p: string) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 5)}`;

let relay: LocalRelay;
beforeAll(async () => {
  relay = await startRelay({ vars: { WATCHERS_PER_HUB: "1", MAX_HUBS: "4" }, tiers: true });
}, 120_000);
afterAll(() => relay?.stop());

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

const status = async (id: string) =>
  (await (await fetch(`${relay.url}/v1/episodes/${id}/status`)).json()) as { watchers: number; hubs: number };

function watch(id: string): EpisodeWatch {
  return watchEpisode(relay.url, id, { WebSocket: WS, backoffMs: [50, 500] });
}

/** A watcher's link that holds what arrives after the first message `hold` matches, until released (once). */
interface SlowLink {
  held: boolean;
  release(): void;
}

function slowLinks(links: SlowLink[], hold: (m: WatchMessage) => boolean): SocketFactory {
  return class {
    private readonly ws: WebSocket;
    private queue: Array<{ data: unknown }> = [];
    private closeEvent: { code: number; reason: string } | null = null;
    private state: "passing" | "holding" | "released" = "passing";
    binaryType = "arraybuffer";
    onopen: ((ev: unknown) => void) | null = null;
    onmessage: ((ev: { data: unknown }) => void) | null = null;
    onclose: ((ev: { code: number; reason: string }) => void) | null = null;
    onerror: ((ev: unknown) => void) | null = null;

    constructor(url: string) {
      this.ws = new WebSocket(url);
      this.ws.binaryType = "arraybuffer";
      const link: SlowLink = {
        held: false,
        release: () => {
          this.state = "released";
          link.held = false;
          for (const m of this.queue.splice(0)) this.onmessage?.(m);
          if (this.closeEvent) this.onclose?.(this.closeEvent);
        },
      };
      if (links.length < 3) links.push(link);
      else this.state = "released"; // a reconnect: pass everything
      this.ws.onopen = (e) => this.onopen?.(e);
      this.ws.onerror = (e) => this.onerror?.(e);
      this.ws.onmessage = (e) => {
        if (this.state === "holding") return void this.queue.push({ data: e.data });
        this.onmessage?.({ data: e.data });
        if (
          this.state === "passing" &&
          typeof e.data !== "string" &&
          hold(decodeWatchMessage(new Uint8Array(e.data as ArrayBuffer)))
        ) {
          this.state = "holding";
          link.held = true;
        }
      };
      this.ws.onclose = (e) => {
        if (this.state === "holding") this.closeEvent = { code: e.code, reason: e.reason };
        else this.onclose?.({ code: e.code, reason: e.reason });
      };
    }

    get readyState(): number {
      return this.ws.readyState;
    }

    send(data: string): void {
      if (this.state !== "holding" && this.ws.readyState === WebSocket.OPEN) this.ws.send(data);
    }

    close(code?: number, reason?: string): void {
      this.ws.close(code, reason);
    }
  } as unknown as SocketFactory;
}

describe("the relay in two tiers", () => {
  for (const name of ["large_routing", "ack_lost", "multi_trace_links"]) {
    it(`${name}: watchers over several hubs (early, late, resuming) end with the golden episode`, async () => {
      const c = golden(name);
      const id = fresh(`tiers-${name}`);
      const producer = new ProducerCursor("p");
      const early = [watch(id), watch(id), watch(id)];
      for (const w of early) await until(() => w.state === "live", 20_000, "early watchers live");
      const half = Math.floor(c.frames.length / 2);
      await push(id, c, 0, half, producer);
      const late = [watch(id), watch(id)];
      early[2]!.reconnectNow();
      const all = [...early, ...late];
      await until(() => all.every((w) => w.state === "live"), 20_000, "all live");
      // the Worker spreads newcomers at random over the count the hubs last reported: more join
      // until they are on two hubs at least (one hub per watcher here)
      while ((await status(id)).hubs < 2 && all.length < 16) {
        const w = watch(id);
        all.push(w);
        await until(() => w.state === "live", 20_000, "a late watcher live");
      }
      const spread = await status(id);
      expect(spread.watchers).toBe(all.length);
      expect(spread.hubs, "they spread over hubs").toBeGreaterThanOrEqual(2);
      await push(id, c, half, c.frames.length, producer);
      await (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();
      for (const w of all) {
        await w.finished();
        expect(w.state).toBe("finished");
        expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!)), "golden bytes").toBe(0);
      }
    }, 90_000);
  }

  it("every hub restarted mid-catch-up: the watchers reconnect, resume, and end with the golden episode", async () => {
    const c = golden("large_routing");
    const id = fresh("tiers-restart");
    const producer = new ProducerCursor("p");
    await push(id, c, 0, c.frames.length - 3, producer);
    // slow links: each watcher reads its hello and first snapshot message, then nothing until let go
    const links: SlowLink[] = [];
    const watchers = [0, 1, 2].map(() =>
      watchEpisode(relay.url, id, { WebSocket: slowLinks(links, (m) => m.type === "snapshot"), backoffMs: [50, 500] }),
    );
    const events: WatchEvent[] = [];
    for (const w of watchers) w.on((e) => events.push(e));
    await until(() => links.length === 3 && links.every((l) => l.held), 20_000, "every watcher mid-snapshot");
    expect(watchers.every((w) => w.state === "catching_up")).toBe(true);
    await relay.restartHubs!();
    for (const l of links) l.release();
    await push(id, c, c.frames.length - 3, c.frames.length, producer);
    await (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();
    for (const w of watchers) {
      await w.finished();
      expect(Buffer.compare(Buffer.from(w.episode!), Buffer.from(c.episode!))).toBe(0);
    }
    expect(
      events.filter((e) => e.type === "reconnecting").length,
      "the restart dropped every socket",
    ).toBeGreaterThanOrEqual(3);
  }, 90_000);

  it("a client offering permessage-deflate (ws defaults) gets none: each message crosses the wire as encoded", async () => {
    const c = golden("large_routing");
    const id = fresh("tiers-deflate");
    await push(id, c, 0, c.frames.length, new ProducerCursor("p"));
    const ws = new WebSocket(`${relay.url.replace("http", "ws")}/v1/episodes/${id}/watch`); // offers permessage-deflate
    const upgraded = new Promise<IncomingMessage>((resolve) => ws.once("upgrade", resolve));
    let payload = 0;
    await new Promise<void>((resolve, reject) => {
      ws.on("message", (m: Buffer) => {
        payload += m.length;
        ws.send(JSON.stringify({ type: "ack", bytes: payload }));
        if (payload > 5_000_000) resolve();
      });
      ws.on("error", reject);
    });
    const res = await upgraded;
    expect(res.headers["sec-websocket-extensions"]).toBeUndefined();
    expect(ws.extensions).toBe("");
    const wire = res.socket.bytesRead; // the connection the WebSocket went on using
    expect(wire, "no compression: the wire carries at least the payload").toBeGreaterThanOrEqual(payload);
    ws.close();
  }, 60_000);
});

describe("a watcher refused 1013", () => {
  let small: LocalRelay;
  beforeAll(async () => {
    small = await startRelay({ vars: { MAX_WATCHERS: "1" }, tiers: true });
  }, 120_000);
  afterAll(() => small?.stop());

  it("waits the relay's retry hint before it connects again", async () => {
    const id = fresh("tiers-hint");
    const first = watchEpisode(small.url, id, { WebSocket: WS });
    await until(() => first.state === "live", 20_000, "the first watcher live");
    const second = watchEpisode(small.url, id, { WebSocket: WS, backoffMs: [10, 20] });
    const retry = await new Promise<Extract<WatchEvent, { type: "reconnecting" }>>((resolve) =>
      second.on((e) => {
        if (e.type === "reconnecting") resolve(e);
      }),
    );
    expect(retry.code).toBe(1013);
    const hint = retryHintMs(retry.reason)!;
    expect(retry.reason).toMatch(/too many watchers on this hub/);
    expect(hint).toBeGreaterThanOrEqual(1000);
    expect(retry.delayMs, "the hint, not the 10-20 ms backoff").toBeGreaterThanOrEqual(hint);
    second.close();
    first.close();
  }, 60_000);
});

// Fan-out coalescing on the real bundle (Miniflare): a producer pipelining over its socket gets
// every ack in order, and watchers get every frame once, in order, in fewer messages than frames.
// (Runs Node-side: vitest-pool-workers' Durable Object wrapper adds awaits before each socket
// handler and can reorder back-to-back socket messages, which the runtime itself never does.)

import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { ackMessage, decodeWatchMessage, type WatchMessage } from "../../src/protocol/watch/protocol.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { until, useRelay } from "../support/relay.js";

const relay = useRelay();

describe("fan-out coalescing", () => {
  it("a pipelining producer's deltas share watcher messages; none lost, none repeated, acks in order", async () => {
    const c = loadCase(fixturePath("multi_trace_links"));
    const ws = relay.url.replace(/^http/, "ws");
    const id = `coalesce-${Date.now().toString(36)}`;
    const watchers = [0, 1].map(() => new WebSocket(`${ws}/v1/episodes/${id}/watch`));
    const got: WatchMessage[][] = watchers.map(() => []);
    watchers.forEach((w, i) => {
      let received = 0;
      w.on("message", (d: Buffer) => {
        const m = decodeWatchMessage(d);
        got[i]!.push(m);
        received += d.length;
        // the watcher protocol: acknowledge each message until caught up (the relay waits for it)
        if (!got[i]!.some((x) => x.type === "caught_up")) w.send(ackMessage(received));
      });
    });
    await until(() => got.every((g) => g.some((m) => m.type === "caught_up")));
    const producer = new WebSocket(`${ws}/v1/episodes/${id}/ingest`);
    const acks: Array<{ ok: boolean; seq: number }> = [];
    producer.on("message", (d: Buffer) => acks.push(JSON.parse(d.toString())));
    await new Promise((r) => producer.on("open", r));
    const cursor = new ProducerCursor("p");
    for (const f of c.frames) {
      producer.send(encodeEnvelope(cursor.envelope(f)));
      cursor.acknowledge(); // pipelining: the view advances as deltas are sent (see docs/protocol.md, "Pipelining")
    }
    await until(() => acks.length === c.frames.length);
    expect(acks.map((a) => a.seq)).toEqual(c.frames.map((_, i) => i + 1));
    const framesOf = (g: WatchMessage[]) => g.filter((m) => m.type === "frames");
    await until(() => got.every((g) => framesOf(g).flatMap((m) => m.frames).length >= c.frames.length));
    for (const g of got) {
      expect(framesOf(g).flatMap((m) => m.frames.map(([s]) => s))).toEqual(c.frames.map((_, i) => i + 1));
      expect(framesOf(g).length).toBeLessThan(c.frames.length);
    }
    for (const w of [...watchers, producer]) w.close();
  });
});

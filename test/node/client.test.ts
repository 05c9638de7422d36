// The TypeScript watcher client against a relay the test starts: events, assembly, JSON view,
// variants, reconnect and resume (including the relay's slow-watcher close), fetchEpisode.
import WebSocket from "ws";
import { describe, expect, it } from "vitest";
import { fetchEpisode, watchEpisode, type SocketFactory, type WatchEvent } from "../../clients/typescript/watch";
import { encodeEnvelope } from "../../src/envelope/envelope";
import { ProducerCursor } from "../../src/envelope/producer";
import { goldenDir, loadCase, type GoldenCase } from "../../tools/conformance/cases";
import { useRelay, until } from "../support/relay";
import { join } from "node:path";

// a small lag budget so the slow-watcher path (close 4008 → resume) is reachable
const relay = useRelay({ WATCHER_LAG_BYTES: String(1024 * 1024) });

const WS = WebSocket as unknown as SocketFactory;
const golden = (name: string) => loadCase(join(goldenDir(), `${name}.msgpack`));
const fresh = (p: string) => `${p}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 5)}`;

async function push(id: string, c: GoldenCase, from = 0, to = c.frames.length, producer = new ProducerCursor("t")) {
  for (let i = from; i < to; i++) {
    const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, { method: "POST", body: encodeEnvelope(producer.envelope(c.frames[i]!)) });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    if (!c.ack_lost.includes(i)) producer.acknowledge(c.frames[i]!);
  }
  return producer;
}
const reply = async (id: string, c: GoldenCase) => (await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply })).arrayBuffer();

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
    // never pings on its own: the relay's 1 MiB budget runs out after two ~600 KB frames
    const w = watchEpisode(relay.url, id, { WebSocket: WS, pingIntervalMs: 3_600_000, pingEveryBytes: 1 << 30, backoffMs: [20, 100] });
    const codes: number[] = [];
    const t0 = Date.now();
    w.on((e) => {
      if (e.type === "reconnecting") codes.push(e.code);
      if (process.env.DEBUG_CLIENT) console.log(Date.now() - t0, e.type, "seq" in e ? e.seq : "", "code" in e ? e.code : "");
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
    const nodes = ((w.json() as Array<{ nodes: Array<{ routed_experts: unknown }> }>)[0]!).nodes;
    expect(nodes.every((n) => n.routed_experts === null)).toBe(true);
    const bytes = (await fetchEpisode(relay.url, id)) as Uint8Array;
    expect(Buffer.compare(Buffer.from(bytes), Buffer.from(c.episode!))).toBe(0);
    const json = (await fetchEpisode(relay.url, id, { json: true })) as { traces: unknown[] };
    expect(json.traces.length).toBe(1);
  });
});


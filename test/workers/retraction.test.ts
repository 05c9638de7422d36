// Exactly-once by cursor position, through the relay: issue 11's three scenarios (rebuilt from the
// public cases in test/support/retractions.ts) over HTTP and over the producer socket, with three
// watchers (from the start, joining midway, dropping before the retraction and resuming after
// it), and with the object restarted at every frame boundary: each ends byte-equal to the
// reference over the acknowledged frames.
import { abortAllDurableObjects } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { lateOpen, narrowerResend, orphanAttempt, type Scenario } from "../support/retractions.js";
import { equal, freshId, getBytes, golden, inbox, openSocket, post, relay } from "./support.js";
import { Watcher } from "./watcher.js";

async function scenarios(): Promise<Scenario[]> {
  return [
    orphanAttempt(await golden("discard_retry")),
    narrowerResend(await golden("routing_repair_widen")),
    lateOpen(await golden("multi_trace_links")),
  ];
}

type Send = (body: Uint8Array) => Promise<{ ok: boolean; retracted?: number }>;

const overHttp =
  (id: string): Send =>
  async (body) => {
    const res = await post(`${id}/deltas`, body);
    const json = (await res.json()) as { ok: boolean };
    expect(res.status, JSON.stringify(json)).toBe(200);
    return json;
  };

async function overSocket(id: string): Promise<Send & { close(): void }> {
  const ws = await openSocket(`${id}/ingest`);
  const box = inbox(ws);
  const send = (async (body: Uint8Array) => {
    ws.send(body);
    const ack = JSON.parse((await box.next()) as string) as { ok: boolean };
    expect(ack.ok, JSON.stringify(ack)).toBe(true);
    return ack;
  }) as Send & { close(): void };
  send.close = () => ws.close(1000, "done");
  return send;
}

/** Play the scenario as the worker: a lost ack leaves the cursor where it was. */
async function play(s: Scenario, send: Send, between?: (i: number) => Promise<void>): Promise<void> {
  const producer = new ProducerCursor("worker");
  for (let i = 0; i < s.frames.length; i++) {
    await send(encodeEnvelope(producer.envelope(s.frames[i]!)));
    if (!s.lost.includes(i)) producer.acknowledge();
    await between?.(i);
  }
}

describe("retraction through the relay", async () => {
  for (const s of await scenarios()) {
    for (const transport of ["http", "socket"] as const) {
      it(`${s.name} over ${transport}: the relay and three watchers end with the reference bytes`, async () => {
        const id = freshId(`retract-${transport}`);
        const early = await Watcher.open(id);
        await early.read((w) => w.caughtUp);
        // one that drops right after the lost frame (it may hold it) and resumes once retracted
        const dropper = await Watcher.open(id);
        await dropper.read((w) => w.caughtUp);
        let late: Watcher | null = null;
        let resumed: Watcher | null = null;
        const lostAt = s.lost[0]!;
        const send = transport === "http" ? overHttp(id) : await overSocket(id);
        await play(s, send, async (i) => {
          if (i === lostAt) {
            await dropper.read((w) => w.lastSeq >= i + 1);
            dropper.close();
          }
          if (i === lostAt + 1) {
            resumed = await Watcher.open(id, `?after=${dropper.lastSeq}`);
            resumed.asm = dropper.asm; // its state as it dropped: with the lost frame in it
            resumed.lastSeq = dropper.lastSeq;
            await resumed.read((w) => w.caughtUp);
            expect(
              resumed.messages.find((m) => m.type === "snapshot")?.reason,
              "never the retracted frame: a rewind snapshot",
            ).toBe("rewind");
          }
          if (i === Math.floor(s.frames.length / 2)) {
            late = await Watcher.open(id);
            await late.read((w) => w.caughtUp);
          }
        });
        if (transport === "socket") (send as Send & { close(): void }).close();
        expect(
          equal((await getBytes(id)).subarray(-s.traces.length), s.traces),
          "the live state is the reference's",
        ).toBe(true);
        await (await post(`${id}/reply`, s.reply)).arrayBuffer();
        expect(equal(await getBytes(id), s.episode)).toBe(true);
        for (const w of [early, late!, resumed!]) {
          await w.read((x) => x.finished !== null);
          expect(equal(w.episodeBytes(), s.episode), `${s.name}: a watcher's episode`).toBe(true);
          w.close();
        }
        expect(
          early.messages.some((m) => m.type === "snapshot" && m.reason === "rewind"),
          "watchers got the new state as a rewind snapshot",
        ).toBe(true);
      });
    }

    it(`${s.name}: the object restarted at every frame boundary ends with the same bytes`, async () => {
      const id = freshId("retract-restart");
      await play(s, overHttp(id), () => abortAllDurableObjects());
      expect(equal((await getBytes(id)).subarray(-s.traces.length), s.traces)).toBe(true);
      await (await post(`${id}/reply`, s.reply)).arrayBuffer();
      await abortAllDurableObjects();
      expect(equal(await getBytes(id), s.episode)).toBe(true);
    });
  }

  it("two producers on one episode: one's lost ack is retracted, the other's frame after it stays", async () => {
    const c = await golden("multi_trace_links");
    const id = freshId("two-producers");
    const [a, b] = [new ProducerCursor("a"), new ProducerCursor("b")];
    const byB = new Set([3, 6, 8, 14]); // sub-agent X's frames go through producer b
    const send = overHttp(id);
    const go = async (i: number, ackLost = false) => {
      const p = byB.has(i) ? b : a;
      const r = (await send(encodeEnvelope(p.envelope(c.frames[i]!)))) as { ok: boolean };
      if (!ackLost) p.acknowledge();
      return r;
    };
    for (const i of [0, 1, 2, 3]) await go(i);
    await go(4, true); // a's frame 4 reaches the relay, its ack is lost
    await go(6); // b's frame goes in meanwhile
    await go(4); // a re-diffs: frame 4 again, with its old cursor: the first one is retracted, b's frame 6 re-applied
    for (const i of [5, 7, 8, 9, 10, 11, 12, 13, 14]) await go(i);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    expect(equal(await getBytes(id), c.episode!)).toBe(true);
    const status = (await (await relay(`${id}/status`)).json()) as { frame_bytes: number };
    expect(status.frame_bytes, "the retracted frame left the log").toBe(c.frames.reduce((n, f) => n + f.length, 0));
  });
});

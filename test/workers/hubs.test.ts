// The viewer tier inside workerd: watchers are on hub objects, never on the episode. Several hubs
// of one episode all get every frame, the finish and a retraction's restart; a hub joins with its
// first watcher and leaves with its last (its streams and storage let go, the episode stops
// feeding it); status sums the hubs; a newcomer past a hub's bounds is refused 1013 with a retry
// hint; an offered permessage-deflate is declined.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { traceOf } from "../../src/protocol/assembly/delta.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import type { FeedFrame } from "../../src/protocol/hub/feed.js";
import { framed } from "../../src/protocol/hub/frames.js";
import { hubName } from "../../src/protocol/hub/shards.js";
import { retryHintMs } from "../../src/protocol/watch/protocol.js";
import { base, equal, freshId, golden, inbox, openSocket, post, pushFrames, relay } from "./support.js";
import { Watcher } from "./watcher.js";

const hub = (id: string, shard: number) => env.HUBS.getByName(hubName(id, shard));

/** A watcher on a given shard, as the Worker would forward it there. */
async function watcherOn(id: string, shard: number): Promise<Watcher> {
  const res = await hub(id, shard).fetch(`http://relay.test/v1/episodes/${id}/watch`, {
    headers: { upgrade: "websocket", "x-episode-id": id, "x-hub-shard": String(shard) },
  });
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.binaryType = "arraybuffer";
  ws.accept();
  return new Watcher(ws, inbox(ws));
}

async function status(id: string): Promise<{ watchers: number; hubs: number }> {
  return (await relay(`${id}/status`)).json();
}

async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const v = await read();
    if (ok(v)) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out: ${what}`);
}

describe("viewer hubs", () => {
  it("watchers on two hubs of one episode each get every frame, a retraction's restart and the finish; status sums them", async () => {
    const c = await golden("ack_lost");
    const id = freshId("two-hubs");
    const producer = new ProducerCursor("p");
    await pushFrames(id, c, 0, 1, producer);
    const a = await Watcher.open(id); // through the Worker: shard 0
    const b = await watcherOn(id, 1);
    for (const w of [a, b]) await w.read((x) => x.caughtUp);
    expect(await status(id)).toMatchObject({ watchers: 2, hubs: 2 });
    await pushFrames(id, c, 1, c.frames.length, producer);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    for (const w of [a, b]) {
      await w.read((x) => x.finished !== null);
      expect(equal(w.episodeBytes(), c.episode!), "each ends with the golden episode").toBe(true);
      expect(
        w.messages.some((m) => m.type === "snapshot" && m.reason === "rewind"),
        "the retraction restarted it",
      ).toBe(true);
      w.close();
    }
  });

  it("mixed releases in a deploy: frames fed in an older episode's shape (no message) and in this one's reach the watchers exact; this one's are passed through", async () => {
    const c = await golden("chat_basic");
    expect(c.ack_lost, "a case without retractions").toEqual([]);
    const id = freshId("feed-shapes");
    await pushFrames(id, c, 0, 1, new ProducerCursor("p"));
    const w = await Watcher.open(id);
    await w.read((x) => x.caughtUp);
    const before = await hub(id, 0).stats();
    expect(before.view?.head).toBe(1);
    // the hub fed as the episode would feed it: seq k + 1 is the case's frame k
    const frames: FeedFrame[] = c.frames.slice(1).map((delta, i) => {
      const f = { seq: i + 2, trace: traceOf(delta), delta };
      return i % 2 === 0 ? f : framed(f); // older episodes: no message; this release: the frame as its message
    });
    const last = frames.at(-1)!.seq;
    const answer = await hub(id, 0).feed(before.session!, {
      session: before.session!,
      after: 1,
      restart: null,
      frames,
      view: { ...before.view!, head: last },
      reply: null,
      hubs: 1,
    });
    expect(answer.applied).toBe(true);
    await w.read((x) => x.lastSeq === last);
    const got = w.messages.flatMap((m) => (m.type === "frames" ? m.frames : []));
    expect(got.map(([seq]) => seq)).toEqual(frames.map((f) => f.seq));
    for (const [k, [, d]] of got.entries())
      expect(equal(d, c.frames[k + 1]!), `frame ${k + 1} byte for byte`).toBe(true);
    const after = await hub(id, 0).stats();
    expect(
      after.fedFrames,
      "messages built by the episode cross the RPC with their delta in one buffer, and go out as they are",
    ).toEqual({
      passed: Math.floor(frames.length / 2),
      built: Math.ceil(frames.length / 2),
    });
    w.close();
  });

  it("a hub leaves with its last watcher: streams and storage let go, the episode stops feeding it; the others go on", async () => {
    const c = await golden("chat_basic");
    const id = freshId("leave");
    const producer = new ProducerCursor("p");
    await pushFrames(id, c, 0, 2, producer);
    const stay = await Watcher.open(id);
    const go = await watcherOn(id, 1);
    for (const w of [stay, go]) await w.read((x) => x.caughtUp);
    go.close();
    await eventually(
      () => status(id),
      (s) => s.hubs === 1 && s.watchers === 1,
      "the episode dropped hub 1",
    );
    const left = await hub(id, 1).stats();
    expect(left).toMatchObject({ session: null, view: null, watchers: { catchingUp: 0, cohorts: 0, waiting: 0 } });
    await pushFrames(id, c, 2, c.frames.length, producer);
    await (await post(`${id}/reply`, c.reply)).arrayBuffer();
    await stay.read((x) => x.finished !== null);
    expect(equal(stay.episodeBytes(), c.episode!)).toBe(true);
    expect(
      (await hub(id, 0).stats()).fedFrames.passed,
      "frames committed while it watched came as their messages, passed through",
    ).toBeGreaterThan(0);
    expect((await hub(id, 1).stats()).view, "no feed reached the hub that left").toBeNull();
    stay.close();
    await eventually(
      () => status(id),
      (s) => s.hubs === 0 && s.watchers === 0,
      "the last hub left",
    );
    expect(await hub(id, 0).stats()).toMatchObject({ session: null, watchers: { cohorts: 0, catchingUp: 0 } });
  });

  it("watchers arriving one after another while nothing is fed share one stream from the episode (it lingers after each leaves)", async () => {
    // an episode whose whole stream fits the hubs' buffers here (HUB_POOL_BYTES, 4 MiB): a stream that does not
    // gives up its first messages to go on, and a later watcher gets a stream of its own
    const c = await golden("odd_values");
    const id = freshId("linger");
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    const keep = await Watcher.open(id); // keeps the hub a member meanwhile
    await keep.read((x) => x.caughtUp);
    const firsts: Uint8Array[] = [];
    for (let i = 0; i < 3; i++) {
      // each reads its hello and first snapshot message, then leaves
      const w = await Watcher.open(id, "", "never");
      await w.read((x) => x.messages.length >= 1);
      w.ack();
      const raw = await w.box.next();
      firsts.push(new Uint8Array(raw as ArrayBuffer));
      w.close();
      await eventually(
        () => hub(id, 0).stats(),
        (s) => s.watchers.catchingUp === 0,
        "it left",
      );
    }
    const s = await hub(id, 0).stats();
    expect(s.watchers.streamsOpened, "one stream from the episode for all four").toBe(1);
    expect(s.watchers.cohorts).toBe(1);
    expect(firsts[1]).toEqual(firsts[0]);
    expect(firsts[2]).toEqual(firsts[0]);
    keep.close();
  });

  it("a hub writes no row for a feed that only moves its head, one (an UPDATE) when the run ends; every frame delivered once", async () => {
    const c = await golden("chat_basic");
    const id = freshId("hub-row");
    const producer = new ProducerCursor("p");
    await pushFrames(id, c, 0, 1, producer);
    const w = await Watcher.open(id);
    await w.read((x) => x.caughtUp);
    const before = (await hub(id, 0).usage()).written.hub ?? 0;
    for (let i = 1; i < c.frames.length; i++) {
      await pushFrames(id, c, i, i + 1, producer);
      await w.read((x) => x.lastSeq === i + 1);
    }
    // where its watchers stand rides in their attachments (test/workers/hub-wake.test.ts: across a wake)
    expect((await hub(id, 0).usage()).written.hub ?? 0, "no row per feed").toBe(before);
    expect(w.seqs, "every frame once, in order").toEqual(Array.from({ length: c.frames.length - 1 }, (_, i) => i + 2));
    expect((await post(`${id}/reply`, c.reply)).status).toBe(200);
    await w.read((x) => x.finished !== null);
    const ended = await hub(id, 0).usage();
    expect(ended.written.hub! - before, "the status moved: one row (an UPDATE, not a DELETE and an INSERT)").toBe(1);
    expect(ended.written.reply, "and the reply").toBeGreaterThan(0);
    w.close();
  });

  it("past MAX_WAITING (8 here) a newcomer is closed 1013 with a retry hint; the waiting ones are not", async () => {
    const c = await golden("chat_basic");
    const id = freshId("admission");
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    // watchers that never acknowledge their hello wait for a catch-up slot
    const waiting = [];
    for (let i = 0; i < 8; i++) waiting.push(await Watcher.open(id, "", "never"));
    const extra = await openSocket(`${id}/watch`);
    const closed = await inbox(extra).closed();
    expect(closed.code).toBe(1013);
    expect(closed.reason).toMatch(/busy: 8 catch-ups waiting; retry in \d+ ms/);
    const hint = retryHintMs(closed.reason)!;
    expect(hint).toBeGreaterThanOrEqual(1000);
    expect(hint).toBeLessThanOrEqual(60_000);
    expect((await hub(id, 0).stats()).watchers).toMatchObject({ watchers: 8, waiting: 8 });
    for (const w of waiting) w.close();
  });

  it("a hub names the hub count on its 101 only when the Worker's differs; it names the subprotocol offered", async () => {
    const id = freshId("count");
    const upgrade = (hubs: string, protocols?: string) =>
      hub(id, 0).fetch(`${base}/${id}/watch`, {
        headers: {
          upgrade: "websocket",
          "x-episode-id": id,
          "x-hub-shard": "0",
          "x-relay-hubs": hubs,
          ...(protocols ? { "sec-websocket-protocol": protocols } : {}),
        },
      });
    const same = await upgrade("1", "episode-relay");
    expect(same.status).toBe(101);
    expect(same.headers.get("x-relay-hubs"), "the Worker's count holds: the 101 passes through").toBeNull();
    expect(same.headers.get("sec-websocket-protocol")).toBe("episode-relay");
    const other = await upgrade("3");
    expect(other.status).toBe(101);
    expect(other.headers.get("x-relay-hubs"), "the Worker's count is stale: the hub says its own").toBe("1");
    expect(other.headers.get("sec-websocket-protocol")).toBeNull();
    for (const res of [same, other]) {
      res.webSocket!.accept();
      res.webSocket!.close(1000, "done");
    }
    // through the Worker: the client sees neither
    const res = await relay(`${id}/watch`, {
      headers: { upgrade: "websocket", "sec-websocket-protocol": "episode-relay" },
    });
    expect(res.status).toBe(101);
    expect(res.headers.get("x-relay-hubs")).toBeNull();
    expect(res.headers.get("sec-websocket-protocol")).toBe("episode-relay");
    res.webSocket!.accept();
    res.webSocket!.close(1000, "done");
  });

  it("a watch upgrade that offers permessage-deflate gets none: one encoding on the wire", async () => {
    const id = freshId("deflate");
    const res = await relay(`${id}/watch`, {
      headers: { upgrade: "websocket", "sec-websocket-extensions": "permessage-deflate; client_max_window_bits" },
    });
    expect(res.status).toBe(101);
    expect(res.headers.get("sec-websocket-extensions")).toBeNull();
    expect(res.headers.get("x-relay-hubs"), "the hub count stays inside").toBeNull();
    res.webSocket!.accept();
    res.webSocket!.close(1000, "done");
  });
});

// The Episode Durable Object through the Worker: ingest (HTTP and producer socket), finish,
// fetch, durability across restarts, refusals, retention, limits.
import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeLossless, LMap, same } from "../../src/protocol/wire/lossless.js";
import { delta, node, openDelta } from "../support/deltas.js";
import {
  equal,
  freshId,
  getBytes,
  golden,
  goldenNames,
  inbox,
  openSocket,
  post,
  relay,
  setUpdated,
} from "./support.js";

/** Push a case's frames as a real producer would: envelopes, ack_lost frames left unacknowledged. */
async function pushCase(id: string, name: string, opts: { bare?: boolean; restartEachFrame?: boolean } = {}) {
  const c = await golden(name);
  const producer = new ProducerCursor("test");
  const lost = new Set(c.ack_lost);
  for (let i = 0; i < c.frames.length; i++) {
    const frame = c.frames[i]!;
    const body = opts.bare ? frame : encodeEnvelope(producer.envelope(frame));
    const res = await post(`${id}/deltas`, body);
    expect(res.status, `frame ${i}: ${await res.clone().text()}`).toBe(200);
    await res.arrayBuffer();
    if (!lost.has(i)) producer.acknowledge();
    if (opts.restartEachFrame) await abortAllDurableObjects();
  }
  return c;
}

async function finishAndCheck(id: string, name: string) {
  const c = await golden(name);
  const res = await post(`${id}/reply`, c.reply);
  if (c.finish_error !== null) {
    expect(res.status).toBe(409);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe("finish_mismatch");
    expect(body.message).toBe(c.finish_error);
    return;
  }
  expect(res.status, await res.clone().text()).toBe(200);
  await res.arrayBuffer();
  expect(equal(await getBytes(id), c.episode!)).toBe(true);
}

describe("golden cases through the relay", async () => {
  const names = await goldenNames();
  it("finds the golden cases", () => expect(names.length).toBeGreaterThanOrEqual(12));
  for (const name of names) {
    it(`${name}: envelopes over HTTP, then the reply, give the golden episode`, async () => {
      const id = freshId(name);
      await pushCase(id, name);
      await finishAndCheck(id, name);
    });
  }
  for (const name of names.filter((n) => n !== "ack_lost")) {
    it(`${name}: bare frames POSTed one by one give the golden episode`, async () => {
      const id = freshId(`bare-${name}`);
      await pushCase(id, name, { bare: true });
      await finishAndCheck(id, name);
    });
  }
  for (const name of [
    "multi_trace_links",
    "routing_repair_widen",
    "routing_repair_u8",
    "large_routing",
    "ack_lost",
    "failed_sends",
  ]) {
    it(`${name}: the object restarted at every frame boundary still ends with the golden bytes`, async () => {
      const id = freshId(`restart-${name}`);
      await pushCase(id, name, { restartEachFrame: true });
      await abortAllDurableObjects();
      await finishAndCheck(id, name);
      await abortAllDurableObjects();
      expect(equal(await getBytes(id), (await golden(name)).episode!)).toBe(true);
    });
  }
  it("the live view after every frame matches the golden checkpoint", async () => {
    const c = await golden("tool_calls_pending");
    const id = freshId("live");
    for (let i = 0; i < c.frames.length; i++) {
      (await post(`${id}/deltas`, c.frames[i]!)).body?.cancel();
      const live = new Uint8Array(await (await relay(id)).arrayBuffer());
      const cp = c.checkpoints.find((x) => x.after === i + 1)!;
      // {status, seq, error, traces}: the traces are the last value; compare their bytes
      expect(equal(live.subarray(live.length - cp.traces.length), cp.traces)).toBe(true);
    }
  });
});

describe("ingest, finish, fetch", () => {
  it("answers with the episode seq and producer seqs after commit; duplicates are no-ops", async () => {
    const id = freshId("dup");
    const producer = new ProducerCursor("w1");
    const open = openDelta();
    const e1 = encodeEnvelope(producer.envelope(open));
    const r1 = await post(`${id}/deltas`, e1);
    expect(await r1.json()).toEqual({ ok: true, seq: 1, applied: 1, duplicates: 0, producers: { w1: 1 } });
    const r2 = await post(`${id}/deltas`, e1);
    expect(await r2.json()).toEqual({ ok: true, seq: 1, applied: 0, duplicates: 1, producers: { w1: 1 } });
    const status = (await (await relay(`${id}/status`)).json()) as Record<string, unknown>;
    expect(status).toMatchObject({ id, status: "live", seq: 1, traces: 1, nodes: 0, calls: 0, watchers: 0 });
  });

  it("a batch of envelopes is applied in order, all or nothing", async () => {
    const id = freshId("batch");
    const producer = new ProducerCursor("w");
    // within a batch the producer's cursor advances per delta (the batch lands whole or not at all)
    const envs = [openDelta(), delta({ nodes: [node(0)] }), delta({ nodes: [node(1)] })].map((d) => {
      const env = encodeEnvelope(producer.envelope(d));
      producer.acknowledge();
      return env;
    });
    const bad = encodeEnvelope(producer.envelope(delta({ links: new LMap([[7, []]]) })));
    const batch = (xs: Uint8Array[]) => {
      const head = xs.length < 16 ? Uint8Array.of(0x90 | xs.length) : Uint8Array.of(0xdc, 0, xs.length);
      return Uint8Array.from([...head, ...xs.flatMap((x) => [...x])]);
    };
    const refused = await post(`${id}/deltas`, batch([...envs, bad]));
    expect(refused.status).toBe(422);
    expect(await refused.json()).toMatchObject({ error: "index_out_of_range", field: "batch[3].links[7]" });
    expect((await relay(id)).status).toBe(404); // nothing was created
    const ok = await post(`${id}/deltas`, batch(envs));
    expect(await ok.json()).toMatchObject({ ok: true, seq: 3, applied: 3 });
  });

  it("reply: a count mismatch is a 409 with the reference text and leaves the episode open, shown as finish_refused", async () => {
    const c = await golden("gap_detected");
    const id = freshId("mismatch");
    for (const f of c.frames) (await post(`${id}/deltas`, f)).body?.cancel();
    const before = await getBytes(id);
    const res = await post(`${id}/reply`, c.reply);
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ error: "finish_mismatch", message: c.finish_error });
    expect(await (await relay(`${id}/status`)).json()).toMatchObject({
      status: "finish_refused",
      seq: c.frames.length,
      error: c.finish_error,
    });
    // GET agrees with status (msgpack and JSON); the assembly itself is unchanged
    const after = decodeLossless(await getBytes(id)) as LMap;
    expect(after.get("status")).toBe("finish_refused");
    expect(after.get("error")).toBe(c.finish_error);
    expect((decodeLossless(before) as LMap).get("status")).toBe("live");
    expect(same(after.get("traces")!, (decodeLossless(before) as LMap).get("traces")!)).toBe(true);
    const json = (await (await relay(id, { headers: { accept: "application/json" } })).json()) as Record<
      string,
      unknown
    >;
    expect(json).toMatchObject({ status: "finish_refused", seq: c.frames.length, error: c.finish_error });
    // more deltas are still taken while it waits for a corrected reply
    expect(
      (
        await post(
          `${id}/deltas`,
          delta({ set: new LMap([["ok", true]]) }, (decodeLossless(c.frames[0]!) as LMap).get("trace") as string),
        )
      ).status,
    ).toBe(200);
  });

  it("after the reply: the same reply is idempotent, another is 409, deltas are 409", async () => {
    const id = freshId("done");
    const c = await pushCase(id, "empty_trace");
    const first = await post(`${id}/reply`, c.reply);
    const again = await post(`${id}/reply`, c.reply);
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual(await first.json());
    const other = encodeReply({ success: false, error: "boom" });
    expect((await post(`${id}/reply`, other)).status).toBe(409);
    const more = await post(`${id}/deltas`, c.frames[0]!);
    expect(more.status).toBe(409);
    expect(await more.json()).toMatchObject({ error: "episode_finished" });
  });

  it("a failed run records its error", async () => {
    const id = freshId("failed");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    const reply = encodeReply({ success: false, error: "sandbox crashed" });
    expect(await (await post(`${id}/reply`, reply)).json()).toMatchObject({ ok: true, status: "failed" });
    expect(await (await relay(`${id}/status`)).json()).toMatchObject({ status: "failed", error: "sandbox crashed" });
    const json = (await (await relay(id, { headers: { accept: "application/json" } })).json()) as Record<
      string,
      unknown
    >;
    expect(json).toMatchObject({ status: "failed", error: "sandbox crashed" });
  });

  it("ETag and If-None-Match on a finished episode", async () => {
    const id = freshId("etag");
    const c = await pushCase(id, "empty_trace");
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    const res = await relay(id);
    const etag = res.headers.get("etag")!;
    expect(etag).toMatch(/^".+"$/);
    await res.arrayBuffer();
    const cached = await relay(id, { headers: { "if-none-match": etag } });
    expect(cached.status).toBe(304);
    expect((await relay(id, { headers: { "if-none-match": '"other"' } })).status).toBe(200);
  });

  it("the msgpack and JSON forms have their own ETags and vary on Accept", async () => {
    const id = freshId("etag-json");
    const c = await pushCase(id, "chat_basic");
    const live = await relay(id);
    expect(live.headers.get("vary")).toMatch(/Accept/);
    await live.arrayBuffer();
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    const packed = await relay(id);
    const asJson = await relay(id, { headers: { accept: "application/json" } });
    await packed.arrayBuffer();
    await asJson.text();
    for (const r of [packed, asJson]) expect(r.headers.get("vary")).toMatch(/Accept/);
    const [e1, e2] = [packed.headers.get("etag")!, asJson.headers.get("etag")!];
    expect(e1).not.toBe(e2);
    // each validates only its own representation
    expect((await relay(id, { headers: { "if-none-match": e1 } })).status).toBe(304);
    const cross = await relay(id, { headers: { "if-none-match": e1, accept: "application/json" } });
    expect(cross.status).toBe(200);
    expect(cross.headers.get("content-type")).toMatch(/json/);
    await cross.text();
    expect((await relay(id, { headers: { "if-none-match": e2, accept: "application/json" } })).status).toBe(304);
  });

  it("status names its byte counts: frame_bytes (the log) and episode_bytes (what GET answers)", async () => {
    const id = freshId("status-bytes");
    const c = await pushCase(id, "routing_repair_u8");
    const frames = c.frames.reduce((n, f) => n + f.length, 0);
    const live = (await (await relay(`${id}/status`)).json()) as Record<string, number>;
    expect(live.frame_bytes).toBe(frames);
    expect(live.episode_bytes).toBe((await getBytes(id)).length);
    expect(live).not.toHaveProperty("bytes");
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    const done = (await (await relay(`${id}/status`)).json()) as Record<string, number>;
    expect(done.episode_bytes).toBe(c.episode!.length);
    expect(done.frame_bytes).toBe(frames);
  });

  it("JSON view: bin and ndarray data as base64, big ints and non-finite floats as strings", async () => {
    const id = freshId("json");
    const c = await pushCase(id, "odd_values");
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    const res = await relay(id, { headers: { accept: "application/json" } });
    expect(res.headers.get("content-type")).toBe("application/json");
    const text = await res.text();
    expect(text).toContain('"18446744073709551615"');
    expect(text).toContain('"NaN"');
    expect(text).toContain('"-Infinity"');
    expect(text).toContain('"$bin":');
  });

  it("DELETE removes the episode and its storage", async () => {
    const id = freshId("del");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    expect((await relay(id)).status).toBe(404);
    const stub = env.EPISODES.getByName(id);
    // the tombstone stays until the run's index dropped the row (a moment), then nothing is kept
    const tables = () =>
      runInDurableObject(stub, (_i, state) =>
        state.storage.sql
          .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%'")
          .toArray(),
      );
    await expect.poll(tables).toEqual([]);
    expect((await relay(id, { method: "DELETE" })).status).toBe(404);
  });

  it("retention: the alarm deletes an episode idle past its retention, and not before", async () => {
    const id = freshId("expire");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    const stub = env.EPISODES.getByName(id);
    expect(await runDurableObjectAlarm(stub)).toBe(true); // early: reschedules
    expect((await relay(`${id}/status`)).status).toBe(200);
    await runInDurableObject(stub, (_i, state) => {
      const idle = Date.now() - 8 * 24 * 3600 * 1000;
      setUpdated(state.storage.sql, idle);
    });
    await abortAllDurableObjects(); // the object keeps the row in memory: evicted, it reads it again
    expect(await runDurableObjectAlarm(env.EPISODES.getByName(id))).toBe(true);
    expect((await relay(`${id}/status`)).status).toBe(404);
  });
});

describe("refusals leave the stored state exactly as it was", () => {
  async function seeded(): Promise<{ id: string; before: Uint8Array }> {
    const id = freshId("bad");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    (await post(`${id}/deltas`, delta({ nodes: [node(0), node(1)] }))).body?.cancel();
    return { id, before: await getBytes(id) };
  }
  const cases: Array<[string, () => Uint8Array, number, string]> = [
    ["garbage", () => Uint8Array.of(0xc1, 0xff), 400, "malformed"],
    ["truncated", () => delta({ nodes: [node(2)] }).subarray(0, 20), 400, "malformed"],
    ["wrong type", () => delta({ nodes: "x" }), 400, "wrong_type"],
    ["unknown trace", () => delta({ nodes: [node(0)] }, "ghost"), 422, "unknown_trace"],
    ["index out of range", () => delta({ links: new LMap([[9, []]]) }), 422, "index_out_of_range"],
    [
      "repair without routing",
      () =>
        delta({
          routing_repairs: new LMap([
            [
              0,
              new LMap([
                ["__nd__", true],
                ["dtype", "uint8"],
                ["shape", [1, 1, 1]],
                ["data", Uint8Array.of(1)],
              ]),
            ],
          ]),
        }),
      422,
      "no_routing",
    ],
    ["oversized", () => new Uint8Array(4 * 1024 * 1024 + 1), 413, "message_too_large"],
  ];
  for (const [name, body, status, code] of cases) {
    it(`${name} → ${status} ${code}`, async () => {
      const { id, before } = await seeded();
      const res = await post(`${id}/deltas`, body());
      expect(res.status).toBe(status);
      expect(await res.json()).toMatchObject({ error: code });
      expect(equal(await getBytes(id), before)).toBe(true);
      expect(await (await relay(`${id}/status`)).json()).toMatchObject({ seq: 2 });
    });
  }

  it("the episode size cap → 413 episode_too_large", async () => {
    const id = freshId("cap");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    const big = delta({ set: new LMap([["info", new Uint8Array(3 * 1024 * 1024)]]) });
    for (let i = 0; i < 3; i++) expect((await post(`${id}/deltas`, big)).status).toBe(200);
    const before = await getBytes(id);
    const res = await post(`${id}/deltas`, big);
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ error: "episode_too_large" });
    expect(equal(await getBytes(id), before)).toBe(true);
  });

  it("bad episode ids → 400, unknown episodes → 404, wrong methods → 405", async () => {
    expect((await relay("bad%20id")).status).toBe(400);
    expect((await relay("x".repeat(129))).status).toBe(400);
    expect((await relay(freshId("nobody"))).status).toBe(404);
    expect((await relay(`${freshId("nobody")}/status`)).status).toBe(404);
    expect((await relay(`${freshId("m")}/deltas`)).status).toBe(405);
  });
});

describe("producer WebSocket", () => {
  it("acks each message after commit, in order; errors are messages; text closes 1008", async () => {
    const id = freshId("ws");
    const c = await golden("ack_lost");
    const ws = await openSocket(`${id}/ingest`);
    const box = inbox(ws);
    const producer = new ProducerCursor("ws");
    const lost = new Set(c.ack_lost);
    for (let i = 0; i < c.frames.length; i++) {
      ws.send(encodeEnvelope(producer.envelope(c.frames[i]!)));
      const ack = JSON.parse((await box.next()) as string);
      expect(ack).toMatchObject({ ok: true, producers: { ws: i + 1 } });
      if (!lost.has(i)) producer.acknowledge();
    }
    ws.send(Uint8Array.of(0xc1));
    expect(JSON.parse((await box.next()) as string)).toMatchObject({ ok: false, status: 400, error: "malformed" });
    ws.send("hello");
    expect(await box.closed()).toMatchObject({ code: 1008 });
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    expect(equal(await getBytes(id), c.episode!)).toBe(true);
  });
});

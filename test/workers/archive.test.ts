// Finished episodes in R2 (src/objects/episode/archive.ts): after the reply the object's alarm writes the
// episode's msgpack to R2 (the only copy: the JSON view is rendered from it as it is read), then
// drops its bodies and log. GET (msgpack and JSON), HEAD, a run's bulk fetch and a late watcher read
// the archive with the same bytes and ETags; the Worker answers GET without waking the object; a
// crash at any point repeats the step and loses nothing; a JSON copy an older release wrote is
// never read and goes; a delete and the end of retention remove the copy; an episode past
// ARCHIVE_PART_BYTES goes up in parts (a failed or erased upload is aborted; the step rests between parts).

import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { decode, decodeMulti } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import { type ArchiveSlots, EpisodeArchive, legacyJsonKey } from "../../src/objects/episode/archive.js";
import { EpisodeState } from "../../src/objects/episode/state.js";
import { armAlarm } from "../../src/objects/storage/alarm-window.js";
import { ARCHIVE_HEADER, archiveKey } from "../../src/protocol/archive/archive-read.js";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { UsageMeter } from "../../src/protocol/billing/usage.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeLossless, LMap } from "../../src/protocol/wire/lossless.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { delta, openDelta, TRACE } from "../support/deltas.js";
import { jsonKeysInOrder, mapKeysInOrder } from "../support/json-keys.js";
import { equal, freshId, getBytes, golden, goldenNames, post, pushFrames, relay, setUpdated } from "./support.js";
import { Watcher } from "./watcher.js";

function stub(id: string) {
  return env.EPISODES.getByName(id);
}

/** The archive step as the object runs it, over the object's storage, writing to `bucket`. */
function archiveOf(
  state: DurableObjectState,
  bucket: R2Bucket = env.ARCHIVE,
): { episode: EpisodeState; archive: EpisodeArchive } {
  const episode = new EpisodeState(state.storage);
  return { episode, archive: new EpisodeArchive(episode, bucket, () => undefined) };
}

/** The archive bucket, except that writing the msgpack of `id` fails (R2 down, or a crash). */
function failingPut(id: string): R2Bucket {
  return new Proxy(env.ARCHIVE, {
    get(bucket, name) {
      if (name === "put") {
        return async (key: string, value: ReadableStream, options?: R2PutOptions) => {
          if (key !== archiveKey(id)) return bucket.put(key, value, options);
          await value.cancel();
          throw new Error("R2 is down");
        };
      }
      const v = Reflect.get(bucket, name);
      return typeof v === "function" ? v.bind(bucket) : v;
    },
  });
}

async function finish(id: string, c: GoldenCase): Promise<void> {
  await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
  const r = await post(`${id}/reply`, c.reply);
  expect(r.status, await r.clone().text()).toBe(200);
  await r.arrayBuffer();
}

async function status(id: string): Promise<{ archived: boolean; status: string }> {
  return (await (await relay(`${id}/status`)).json()) as { archived: boolean; status: string };
}

/**
 * Run the object's alarm until the episode is archived. A step put off to a later time (a reader just
 * ended still held the bodies: 5 s; the gate's slot still leased: up to its lease) is not tried
 * before that time, however often the alarm runs, so the alarm runs again as time passes, for at
 * most ARCHIVED_WITHIN_MS.
 */
async function archived(id: string): Promise<void> {
  const until = Date.now() + ARCHIVED_WITHIN_MS;
  for (let i = 0; !(await status(id)).archived && Date.now() < until; i++) {
    await runDurableObjectAlarm(stub(id));
    if (i >= 20) await scheduler.wait(250);
  }
  expect((await status(id)).archived, `${id} archived`).toBe(true);
}

/** Longer than a lease (LEASE_MS) and a busy retry: the longest a step is put off here. */
const ARCHIVED_WITHIN_MS = 45_000;

async function json(id: string): Promise<Response> {
  return relay(id, { headers: { accept: "application/json" } });
}

/** Rows left in the tables that hold the episode's bodies and log. */
async function bodyRows(id: string): Promise<number> {
  return runInDurableObject(stub(id), (_i, state) => {
    let n = 0;
    for (const t of ["body_runs", "body_parts", "pending", "frames"])
      n += state.storage.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM ${t}`).one().n;
    return n;
  });
}

/** Whether R2 holds the episode's msgpack, and a JSON copy (only older releases wrote one). */
async function inR2(id: string): Promise<[boolean, boolean]> {
  return [(await env.ARCHIVE.head(archiveKey(id))) !== null, (await env.ARCHIVE.head(legacyJsonKey(id))) !== null];
}

/** A JSON copy as an older release wrote it beside the msgpack (stale text here: reading it would show). */
async function plantLegacyJson(id: string, etag: string): Promise<void> {
  await env.ARCHIVE.put(legacyJsonKey(id), '{"stale":"an older release wrote this"}', {
    httpMetadata: { contentType: "application/json" },
    customMetadata: { etag, seq: "1" },
  });
}

describe("a finished episode is archived in R2, byte for byte", () => {
  // every case archived in turn, one of which may be put off (archived)
  it("every golden case: GET (msgpack, JSON), HEAD, ETags and If-None-Match the same after archiving; bodies and log gone", {
    timeout: 180_000,
  }, async () => {
    for (const name of await goldenNames()) {
      const c = await golden(name);
      if (!c.episode) continue; // a failed finish has nothing to archive
      const id = freshId(`arch-${name}`);
      await finish(id, c);
      const beforeJson = await json(id);
      const jsonText = await beforeJson.text();
      const msgpack = await relay(id);
      await msgpack.arrayBuffer(); // a reader still streaming holds the bodies (the archive waits for it)
      const etags = [msgpack.headers.get("etag"), beforeJson.headers.get("etag")];
      await archived(id);
      expect(await bodyRows(id), name).toBe(0);
      expect(await inR2(id), "R2 keeps the msgpack only").toEqual([true, false]);

      const res = await relay(id);
      expect(res.headers.get(ARCHIVE_HEADER), "answered from the archive").toBe("1");
      expect(res.headers.get("etag")).toBe(etags[0]);
      expect(res.headers.get("content-length")).toBe(String(c.episode.length));
      expect(equal(new Uint8Array(await res.arrayBuffer()), c.episode), name).toBe(true);
      const j = await json(id);
      expect(j.headers.get(ARCHIVE_HEADER), "JSON answered from the archive").toBe("1");
      expect([j.headers.get("etag"), j.headers.get("content-type")]).toEqual([etags[1], "application/json"]);
      expect(await j.text(), `${name} JSON rendered from the archived msgpack`).toBe(jsonText);
      const head = await relay(id, { method: "HEAD" });
      expect([head.status, head.headers.get("etag"), head.headers.get("content-length")]).toEqual([
        200,
        etags[0],
        String(c.episode.length),
      ]);
      const jsonHead = await relay(id, { method: "HEAD", headers: { accept: "application/json" } });
      expect([jsonHead.status, jsonHead.headers.get("etag")]).toEqual([200, etags[1]]);
      const again = await relay(id, { headers: { "if-none-match": etags[0]! } });
      expect(again.status).toBe(304);
      const jsonAgain = await relay(id, { headers: { accept: "application/json", "if-none-match": etags[1]! } });
      expect(jsonAgain.status).toBe(304);
    }
  });

  it("GET and a run's bulk fetch read R2 without waking the episode's object (its usage: no request)", async () => {
    const run = `archrun-${Date.now().toString(36)}`;
    const c = await golden("multi_trace_links");
    const ids = [`${run}:a`, `${run}:b`];
    for (const id of ids) await finish(id, c);
    for (const id of ids) await archived(id);
    const requests = async (id: string) =>
      ((await (await relay(`${id}/usage`)).json()) as { episode: { requests: number } }).episode.requests;
    const before = await Promise.all(ids.map(requests));
    for (const id of ids) expect(equal(await getBytes(id), c.episode!)).toBe(true);
    const bulk = await relay(`../runs/${run}/finished`);
    expect(bulk.status).toBe(200);
    // the body is a sequence of {id, cursor, episode} maps, the episode embedded as its msgpack
    const items = [...decodeMulti(new Uint8Array(await bulk.arrayBuffer()))] as Array<{ id: string; episode: unknown }>;
    expect(items.map((i) => i.id).sort()).toEqual([...ids].sort());
    const after = await Promise.all(ids.map(requests));
    expect(after, "no request reached the episode objects").toEqual(before);
    expect(decode(c.episode!)).toEqual(items[0]!.episode);
  });
});

describe("the JSON view keeps every key, through GET and the R2 copy", () => {
  it("odd_values and a crafted __proto__ key: every map key in order, before and after archiving", async () => {
    // a map key named __proto__ (a plain object would take it as its prototype and drop it), integer-like keys
    const info = new LMap([
      ["__proto__", new LMap([["polluted", true]])],
      ["151655", 1],
      ["2", new LMap([["__proto__", "inner"]])],
    ]);
    const crafted: GoldenCase = {
      name: "proto",
      description: "a map key named __proto__",
      frames: [
        openDelta(TRACE, {
          set: new LMap([
            ["info", info],
            ["is_completed", true],
          ]),
        }),
      ],
      reply: encodeReply({ success: true, traces: [{ id: TRACE, nodes: 0, calls: 0 }] }),
      episode: null,
      finish_error: null,
      checkpoints: [],
      ack_lost: [],
    };
    for (const c of [await golden("odd_values"), crafted]) {
      const id = freshId(`json-keys-${c.name}`);
      await finish(id, c);
      const episode = decodeLossless(await getBytes(id));
      const keys = mapKeysInOrder(episode);
      const before = await (await json(id)).text();
      expect(jsonKeysInOrder(before), c.name).toEqual(keys);
      await archived(id);
      const after = await json(id);
      expect(after.headers.get(ARCHIVE_HEADER)).toBe("1");
      const text = await after.text();
      expect(text).toBe(before);
      expect(jsonKeysInOrder(text), c.name).toEqual(keys);
      if (c === crafted) {
        expect(keys).toContain("__proto__");
        expect(text).toContain('"__proto__":{"polluted":true},"151655":1,"2":{"__proto__":"inner"}');
      }
    }
  });
});

describe("a crash at any point of the archive step loses nothing and repeats the step", () => {
  it("the msgpack put fails: GET still exact (msgpack and JSON from SQLite), the next alarm finishes the step", async () => {
    const id = freshId("arch-crash1");
    const c = await golden("routing_repair_widen");
    // the alarm waits (ARCHIVE_AFTER_SECONDS is an hour here): the test runs the step by hand, and its put fails
    await finish(id, c);
    const before = await (await json(id)).text();
    await runInDurableObject(stub(id), async (_i, state) => {
      const { episode, archive } = archiveOf(state, failingPut(id));
      expect(episode.meta()!.archived).toBeNull();
      await expect(archive.run()).rejects.toThrow("R2 is down");
      expect(episode.meta()!.archived).toBeNull();
    });
    expect(await inR2(id)).toEqual([false, false]);
    await abortAllDurableObjects();
    expect(equal(await getBytes(id), c.episode!)).toBe(true);
    expect(await (await json(id)).text()).toBe(before);
    await archived(id);
    expect(await inR2(id)).toEqual([true, false]);
    expect(equal(await getBytes(id), c.episode!)).toBe(true);
    expect(await (await json(id)).text()).toBe(before);
    expect(await bodyRows(id)).toBe(0);
  });

  it("after the put, before the drop (a reader held the bodies): a restart, then the alarm drops them", async () => {
    const id = freshId("arch-crash2");
    const c = await golden("chat_basic");
    await finish(id, c);
    const seen = await runInDurableObject(stub(id), async (_i, state) => {
      const { episode, archive } = archiveOf(state);
      const pin = episode.store.pin(episode.meta()!.seq); // as a GET streaming from SQLite would
      const outcome = await archive.run();
      const rows = state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM body_parts").one().n;
      pin.release();
      return { outcome, rows };
    });
    expect(seen.outcome).toBe("busy");
    expect(seen.rows, "the bodies stay while a reader holds them").toBeGreaterThan(0);
    expect(await inR2(id)).toEqual([true, false]);
    await abortAllDurableObjects(); // the crash: the alarm stays stored
    await archived(id);
    expect(await bodyRows(id)).toBe(0);
    expect(equal(await getBytes(id), c.episode!)).toBe(true);
  });

  it("after the drop, a restart: nothing is repeated, the object answers from the archive", async () => {
    const id = freshId("arch-crash3");
    const c = await golden("discard_retry");
    await finish(id, c);
    await archived(id);
    await abortAllDurableObjects();
    // the object itself (not the Worker's R2 read) serves the archive when asked
    const res = await runInDurableObject(stub(id), async (instance) => {
      const r = await instance.read(id, { json: false, head: false, ifNoneMatch: null });
      return new Uint8Array(await r.arrayBuffer());
    });
    expect(equal(res, c.episode!)).toBe(true);
    expect((await status(id)).status).toBe("finished");
  });
});

describe("a JSON copy an older release wrote beside the msgpack", () => {
  it("is never read, and the archive step removes it", async () => {
    const id = freshId("arch-legacy1");
    const c = await golden("multi_trace_links");
    await finish(id, c);
    const live = await json(id);
    const before = await live.text();
    await plantLegacyJson(id, (await relay(id, { method: "HEAD" })).headers.get("etag")!.replaceAll('"', ""));
    await archived(id);
    expect(await inR2(id)).toEqual([true, false]);
    const after = await json(id);
    expect(after.headers.get(ARCHIVE_HEADER)).toBe("1");
    expect(after.headers.get("etag")).toBe(live.headers.get("etag"));
    expect(await after.text()).toBe(before);
  });

  it("of an episode archived by an older release: ignored by GET, removed when its alarm next runs", async () => {
    const id = freshId("arch-legacy2");
    const c = await golden("chat_basic");
    await finish(id, c);
    const before = await (await json(id)).text();
    await archived(id);
    await plantLegacyJson(id, "x"); // as the older release left it
    await abortAllDurableObjects(); // a new object (a new release) runs the alarm
    expect(await (await json(id)).text()).toBe(before);
    expect(await inR2(id)).toEqual([true, true]);
    // armed far ahead (it must not fire by itself while the test runs it): runDurableObjectAlarm runs it now
    await runInDurableObject(stub(id), (_i, state) => armAlarm(state.storage, Date.now() + 3_600_000));
    await runDurableObjectAlarm(stub(id));
    expect(await inR2(id)).toEqual([true, false]);
    expect(await (await json(id)).text()).toBe(before);
  });
});

describe("watchers of an archived episode", () => {
  it("a late watcher is caught up from the archive: the finished episode, exact; routing=0 as before archiving", async () => {
    const id = freshId("arch-watch");
    const c = await golden("routing_repair_u8");
    await finish(id, c);
    const early = await Watcher.open(id, "?routing=0");
    await early.read((w) => w.finished !== null);
    const stripped = early.episodeBytes();
    early.close();
    await archived(id);
    const w = await Watcher.open(id);
    await w.read((x) => x.finished !== null);
    expect(equal(w.episodeBytes(), c.episode!)).toBe(true);
    w.close();
    const late = await Watcher.open(id, "?routing=0");
    await late.read((x) => x.finished !== null);
    expect(equal(late.episodeBytes(), stripped)).toBe(true);
    late.close();
  });
});

describe("both copies go", () => {
  it("a DELETE while the archive step writes to R2 waits for it, then removes both: no copy outlives the episode", async () => {
    const id = freshId("arch-delrace");
    await finish(id, await golden("multi_trace_links"));
    await runInDurableObject(stub(id), async (_i, state) => {
      const { archive } = archiveOf(state);
      const step = archive.run(); // under way: its puts are in flight
      await archive.remove(id); // what a delete does first
      expect(await step).toBe("none"); // stopped: the bodies were not dropped
    });
    expect(await inR2(id)).toEqual([false, false]);
    const res = await relay(id, { method: "DELETE" });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(await inR2(id)).toEqual([false, false]);
    expect((await relay(id)).status).toBe(404);
  });

  it("DELETE removes the archive and the object's storage", async () => {
    const id = freshId("arch-del");
    await finish(id, await golden("chat_basic"));
    await archived(id);
    const res = await relay(id, { method: "DELETE" });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(await inR2(id)).toEqual([false, false]);
    expect((await relay(id)).status).toBe(404);
  });

  it("the end of retention removes the archive and the object's storage", async () => {
    const id = freshId("arch-exp");
    await finish(id, await golden("chat_basic"));
    await archived(id);
    await runInDurableObject(stub(id), (_i, state) => {
      setUpdated(state.storage.sql, 0); // long ago
    });
    await abortAllDurableObjects(); // the object keeps the row in memory: evicted, it reads it again
    await runDurableObjectAlarm(stub(id));
    expect(await inR2(id)).toEqual([false, false]);
    expect((await relay(id)).status).toBe(404);
  });
});

/** A finished episode of about 9 MiB (three 3 MiB fields): past the 5 MiB parts, two parts. */
async function bigEpisode(id: string): Promise<Uint8Array> {
  const field = (seed: number) => {
    const b = new Uint8Array(3 * 1024 * 1024);
    for (let i = 0; i < b.length; i += 4096) b[i] = (i / 4096 + seed) & 0xff;
    return b;
  };
  const c: GoldenCase = {
    name: "big",
    description: "three 3 MiB fields",
    frames: [openDelta(TRACE), ...[1, 2, 3].map((n) => delta({ set: new LMap([[`blob_${n}`, field(n)]]) }))],
    reply: encodeReply({ success: true, traces: [{ id: TRACE, nodes: 0, calls: 0 }] }),
    episode: null,
    finish_error: null,
    checkpoints: [],
    ack_lost: [],
  };
  await finish(id, c);
  return getBytes(id);
}

/** What a multipart upload did: each part's size and when it was sent and landed; which uploads were aborted. */
interface Recorded {
  parts: { n: number; bytes: number; sent: number; landed: number }[];
  aborted: string[];
  uploads: string[];
  resumed: string[];
}

/**
 * The archive bucket, recording its multipart uploads (created or resumed); `failPart`: that part
 * number fails (once); `hangPart`: that part never lands (a step a restart cuts).
 */
function recordingBucket(rec: Recorded, failPart = 0, hangPart = 0): R2Bucket {
  let failed = false;
  const wrap = (upload: R2MultipartUpload): R2MultipartUpload =>
    ({
      key: upload.key,
      uploadId: upload.uploadId,
      complete: (parts: R2UploadedPart[]) => upload.complete(parts),
      abort: async () => {
        rec.aborted.push(upload.uploadId);
        await upload.abort();
      },
      uploadPart: async (n: number, value: ReadableStream<Uint8Array>) => {
        const sent = Date.now();
        if (n === hangPart) return new Promise<never>(() => undefined);
        if (n === failPart && !failed) {
          failed = true;
          await value.cancel();
          throw new Error("R2 refused the part");
        }
        // read whole here to count it (a test's 5 MiB), then sent as it came
        const bytes = new Uint8Array(await new Response(value).arrayBuffer());
        const part = await upload.uploadPart(n, bytes);
        rec.parts.push({ n, bytes: bytes.byteLength, sent, landed: Date.now() });
        return part;
      },
    }) as unknown as R2MultipartUpload;
  return new Proxy(env.ARCHIVE, {
    get(bucket, name) {
      if (name === "createMultipartUpload") {
        return async (key: string, options?: R2MultipartOptions) => {
          const upload = await bucket.createMultipartUpload(key, options);
          rec.uploads.push(upload.uploadId);
          return wrap(upload);
        };
      }
      if (name === "resumeMultipartUpload") {
        return (key: string, uploadId: string) => {
          rec.resumed.push(uploadId);
          return wrap(bucket.resumeMultipartUpload(key, uploadId));
        };
      }
      const v = Reflect.get(bucket, name);
      return typeof v === "function" ? v.bind(bucket) : v;
    },
  });
}

/** ARCHIVE_PART_BYTES in vitest.workers.config.ts (R2's least part). */
const PART = 5 * 1024 * 1024;
const fresh = (): Recorded => ({ parts: [], aborted: [], uploads: [], resumed: [] });
/** Archive slots that always grant (the step runs under a lease, with its rests between parts). */
const grantingSlots = (onRelease?: (tookMs: number) => void): ArchiveSlots => ({
  acquire: async () => ({ granted: true, until: Date.now() + 60_000 }),
  release: async (_holder, tookMs = 0) => void onRelease?.(tookMs),
});

describe("an episode past ARCHIVE_PART_BYTES goes to R2 in parts", () => {
  it("two parts, the first ARCHIVE_PART_BYTES: the archive exact, the same ETag, bodies gone", async () => {
    const id = freshId("arch-parts");
    const before = await bigEpisode(id);
    expect(before.byteLength).toBeGreaterThan(PART);
    const head = await relay(id, { method: "HEAD" });
    const etag = head.headers.get("etag");
    expect(etag).not.toBeNull();
    const rec = fresh();
    const outcome = await runInDurableObject(stub(id), (_i, state) => {
      const episode = new EpisodeState(state.storage);
      return new EpisodeArchive(episode, recordingBucket(rec), () => undefined, null, PART).run();
    });
    expect(outcome).toBe("archived");
    expect(rec.parts.map((p) => [p.n, p.bytes])).toEqual([
      [1, PART],
      [2, before.byteLength - PART],
    ]);
    expect(rec.aborted).toEqual([]);
    const res = await relay(id);
    expect(res.headers.get(ARCHIVE_HEADER)).toBe("1");
    expect(res.headers.get("etag")).toBe(etag);
    expect(equal(new Uint8Array(await res.arrayBuffer()), before)).toBe(true);
    expect((await env.ARCHIVE.head(archiveKey(id)))!.size).toBe(before.byteLength);
    expect(await bodyRows(id)).toBe(0);
  });

  it("a part R2 refuses aborts the upload and leaves no copy; the next alarm uploads it again, exact", async () => {
    const id = freshId("arch-part-fails");
    const before = await bigEpisode(id);
    const json0 = await (await json(id)).text();
    const rec = fresh();
    await runInDurableObject(stub(id), async (_i, state) => {
      const episode = new EpisodeState(state.storage);
      const archive = new EpisodeArchive(episode, recordingBucket(rec, 2), () => undefined, null, PART);
      await expect(archive.run()).rejects.toThrow("R2 refused the part");
      expect(episode.meta()!.archived).toBeNull();
    });
    expect(rec.uploads).toHaveLength(1);
    expect(rec.aborted, "the failed upload is aborted").toEqual(rec.uploads);
    await expect(
      env.ARCHIVE.resumeMultipartUpload(archiveKey(id), rec.uploads[0]!).complete([]),
      "an aborted upload cannot be completed",
    ).rejects.toThrow();
    expect(await inR2(id)).toEqual([false, false]);
    expect(equal(await getBytes(id), before)).toBe(true);
    await archived(id); // the object's own alarm, with its limits' parts
    expect(equal(await getBytes(id), before)).toBe(true);
    expect(await (await json(id)).text()).toBe(json0);
    expect(await bodyRows(id)).toBe(0);
  });

  it("erased between parts: the step stops, the upload is aborted, no copy is left", async () => {
    const id = freshId("arch-part-erase");
    await bigEpisode(id);
    const rec = fresh();
    const slots = grantingSlots();
    await runInDurableObject(stub(id), async (_i, state) => {
      const episode = new EpisodeState(state.storage);
      const archive = new EpisodeArchive(episode, recordingBucket(rec), () => undefined, slots, PART);
      const step = archive.attempt();
      while (rec.parts.length === 0) await scheduler.wait(5);
      await archive.remove(id); // as DELETE does, before it erases SQLite: waits for the step
      await step;
      expect(episode.meta()!.archived).toBeNull();
    });
    expect(
      rec.parts.map((p) => p.n),
      "no part after the erase began",
    ).toEqual([1]);
    expect(rec.aborted).toEqual(rec.uploads);
    expect(await inR2(id)).toEqual([false, false]);
  });

  it("under archive slots the step rests after each part as long as the part took", async () => {
    const id = freshId("arch-part-rest");
    const before = await bigEpisode(id);
    const rec = fresh();
    const released: number[] = [];
    const slots = grantingSlots((tookMs) => released.push(tookMs));
    await runInDurableObject(stub(id), async (_i, state) => {
      const episode = new EpisodeState(state.storage);
      await new EpisodeArchive(episode, recordingBucket(rec), () => undefined, slots, PART).attempt();
      expect(episode.meta()!.archived).not.toBeNull();
    });
    const [first, second] = rec.parts;
    expect(rec.parts).toHaveLength(2);
    expect(second!.sent - first!.landed, "the rest after part 1").toBeGreaterThanOrEqual(first!.landed - first!.sent);
    expect(released).toHaveLength(1);
    expect(equal(await getBytes(id), before)).toBe(true);
  });

  it("the alarm and the gate's wake asking at once (a slot granted to both): one step, one upload", async () => {
    const id = freshId("arch-part-twice");
    const before = await bigEpisode(id);
    const rec = fresh();
    const slots = grantingSlots();
    await runInDurableObject(stub(id), async (_i, state) => {
      const episode = new EpisodeState(state.storage);
      const archive = new EpisodeArchive(episode, recordingBucket(rec), () => undefined, slots, PART);
      await Promise.all([archive.attempt(), archive.attempt(), archive.run()]);
      expect(episode.meta()!.archived).not.toBeNull();
    });
    expect(rec.uploads).toHaveLength(1);
    expect(rec.parts.map((p) => p.n)).toEqual([1, 2]);
    expect(equal(await getBytes(id), before)).toBe(true);
  });

  /** The big episode's archive step cut after part 1 landed (part 2 never does): the object as a restart leaves it. */
  async function cutAfterPart1(id: string, rec: Recorded): Promise<void> {
    await runInDurableObject(stub(id), async (_i, state) => {
      const archive = new EpisodeArchive(
        new EpisodeState(state.storage),
        recordingBucket(rec, 0, 2),
        () => undefined,
        null,
        PART,
      );
      void archive.run();
      while (rec.parts.length === 0) await scheduler.wait(5);
      await scheduler.wait(20); // part 1's record is written in the turn it landed
    });
    expect(rec.uploads).toHaveLength(1);
    await abortAllDurableObjects(); // the restart: the step with part 2 in flight dies with the object
  }

  /** The upload the episode's SQLite records as under way, if any. */
  async function recorded(id: string): Promise<{ upload_id: string; part_bytes: number; parts: number } | null> {
    return await runInDurableObject(stub(id), (_i, state) => {
      const u = state.storage.sql
        .exec<{ upload_id: string; part_bytes: number }>("SELECT upload_id, part_bytes FROM archive_upload")
        .toArray()[0];
      const parts = state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM archive_parts").one().n;
      return u ? { ...u, parts } : null;
    });
  }

  it("a step cut by a restart after part 1: the next resumes the upload and sends only part 2; exact, nothing left recorded", async () => {
    const id = freshId("arch-part-cut");
    const before = await bigEpisode(id);
    const cut = fresh();
    await cutAfterPart1(id, cut);
    expect(await recorded(id)).toEqual({ upload_id: cut.uploads[0], part_bytes: PART, parts: 1 });
    const rec = fresh();
    const usage = new UsageMeter("Episode", id, 0);
    const outcome = await runInDurableObject(stub(id), (_i, state) =>
      new EpisodeArchive(new EpisodeState(state.storage), recordingBucket(rec), () => usage, null, PART).run(),
    );
    expect(outcome).toBe("archived");
    expect(rec.uploads, "no new upload").toEqual([]);
    expect(rec.resumed).toEqual(cut.uploads);
    expect(rec.parts.map((p) => [p.n, p.bytes])).toEqual([[2, before.byteLength - PART]]);
    expect(rec.aborted).toEqual([]);
    expect(usage.snapshot(0, 0).r2, "part 2 and the complete, class A; what was stored").toMatchObject({
      classA: 2,
      bytesWritten: before.byteLength - PART,
      bytesStored: before.byteLength,
    });
    expect(equal(await getBytes(id), before)).toBe(true);
    expect((await relay(id)).headers.get(ARCHIVE_HEADER)).toBe("1");
    expect(await recorded(id)).toBeNull();
  });

  it("a cut upload recorded with another part size is aborted and the episode sent anew (in parts, or in one put); a DELETE aborts one still recorded", async () => {
    const id = freshId("arch-part-resize");
    const before = await bigEpisode(id);
    const cut = fresh();
    await cutAfterPart1(id, cut);
    // ARCHIVE_PART_BYTES changed across the restart (a deploy with another setting): parts of
    // another size cannot make up this upload
    await runInDurableObject(
      stub(id),
      (_i, state) => void state.storage.sql.exec("UPDATE archive_upload SET part_bytes = ?", PART * 2),
    );
    const rec = fresh();
    await runInDurableObject(stub(id), (_i, state) =>
      new EpisodeArchive(new EpisodeState(state.storage), recordingBucket(rec), () => undefined, null, PART).run(),
    );
    expect(rec.aborted).toEqual(cut.uploads);
    expect(rec.uploads).toHaveLength(1);
    expect(rec.parts.map((p) => p.n)).toEqual([1, 2]);
    expect(equal(await getBytes(id), before)).toBe(true);
    expect(await recorded(id)).toBeNull();

    // ARCHIVE_PART_BYTES grown past the episode across the restart: one put, and the cut upload aborted
    const grown = freshId("arch-part-grown");
    const grownBytes = await bigEpisode(grown);
    const cut3 = fresh();
    await cutAfterPart1(grown, cut3);
    const rec3 = fresh();
    const big = 16 * 1024 * 1024;
    await runInDurableObject(stub(grown), (_i, state) =>
      new EpisodeArchive(new EpisodeState(state.storage), recordingBucket(rec3), () => undefined, null, big).run(),
    );
    expect(rec3.aborted).toEqual(cut3.uploads);
    expect(rec3.uploads, "one put, no upload").toEqual([]);
    expect(equal(await getBytes(grown), grownBytes)).toBe(true);
    expect(await recorded(grown)).toBeNull();

    const other = freshId("arch-part-cut-delete");
    await bigEpisode(other);
    const cut2 = fresh();
    await cutAfterPart1(other, cut2);
    const rec2 = fresh();
    await runInDurableObject(stub(other), (_i, state) =>
      new EpisodeArchive(new EpisodeState(state.storage), recordingBucket(rec2), () => undefined, null, PART).remove(
        other,
      ),
    );
    expect(rec2.aborted, "the cut upload is aborted by the erase").toEqual(cut2.uploads);
    await expect(env.ARCHIVE.resumeMultipartUpload(archiveKey(other), cut2.uploads[0]!).complete([])).rejects.toThrow();
    expect(await inR2(other)).toEqual([false, false]);
  });
});

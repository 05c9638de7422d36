// The episode index through the real Worker and the real Durable Objects: rows appear on the
// first write, follow turns (throttled, flushed by the Episode's alarm) and the finish, go on
// DELETE and expiry; the listing filters and pages; the index socket streams snapshot, upserts and
// deletes; tokens see only their scope. The index is shared by every test file (one object named
// "global"), so each test works under its own id prefix.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import worker from "../../src/index.js";
import { encodeEnvelope } from "../../src/envelope/envelope.js";
import { ProducerCursor } from "../../src/envelope/producer.js";
import { LMap, encodeLossless } from "../../src/wire/lossless.js";
import type { IndexEntry } from "../../src/registry/entry.js";
import { openDelta } from "../support/deltas.js";
import { freshId, golden, inbox, openSocket, post, relay } from "./support.js";

type Entry = IndexEntry;
interface Page {
  episodes: Entry[];
  cursor: string | null;
}

async function list(query: string, init?: RequestInit): Promise<Page> {
  const res = await exports.default.fetch(`http://relay.test/v1/episodes?${query}`, init);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Page;
}

async function row(id: string): Promise<Entry | undefined> {
  return (await list(`prefix=${encodeURIComponent(id)}`)).episodes.find((e) => e.id === id);
}

/** Poll `check` until it stops throwing (index updates travel in the background). */
async function eventually<T>(check: () => Promise<T>, timeoutMs = 5000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > end) throw e;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

const failedReply = (error: string) =>
  encodeLossless(
    new LMap([
      ["success", false],
      ["error", error],
      ["head", null],
      ["traces", []],
    ]),
  );

describe("rows follow the episode", () => {
  it("appear on the first write, follow turns after the throttled flush, and the finish", async () => {
    const c = await golden("tool_calls_pending");
    const id = freshId("idx-life");
    const producer = new ProducerCursor("w");
    const send = async (i: number) => {
      const res = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(c.frames[i]!)));
      expect(res.status, await res.clone().text()).toBe(200);
      producer.acknowledge();
    };
    await send(0);
    const first = await eventually(async () => {
      const r = await row(id);
      expect(r).toBeDefined();
      return r!;
    });
    expect(first).toMatchObject({ id, status: "live", traces: 1, nodes: 0, calls: 0, rewards: {}, error: null, seq: 1 });
    expect(Date.parse(first.created)).toBeGreaterThan(Date.now() - 60_000);

    // a turn: the row is not rewritten at once; the Episode's alarm is set within the throttle
    const started = Date.now();
    await send(1);
    const stub = env.EPISODES.getByName(id);
    const alarm = await runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    // tests set INDEX_FLUSH_MS to an hour: the flush waits for the alarm, which runs on demand here
    const flushMs = Number((env as unknown as Env).INDEX_FLUSH_MS);
    expect(alarm!).toBeGreaterThan(started + flushMs - 60_000);
    expect(alarm!).toBeLessThanOrEqual(Date.now() + flushMs);
    expect((await row(id))!.nodes).toBe(0);
    for (let i = 2; i < c.frames.length; i++) await send(i);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const turned = (await row(id))!;
    expect(turned).toMatchObject({ status: "live", nodes: 9, calls: 4, seq: c.frames.length, rewards: { correct: { score: 1, weight: 1 } } });
    // after the flush the alarm is back on retention (7 days away)
    const next = await runInDurableObject(stub, (_o, state) => state.storage.getAlarm());
    expect(next!).toBeGreaterThan(Date.now() + 24 * 3600 * 1000);

    const res = await post(`${id}/reply`, c.reply);
    expect(res.status).toBe(200);
    const done = await eventually(async () => {
      const r = (await row(id))!;
      expect(r.status).toBe("finished");
      return r;
    });
    expect(done).toMatchObject({ nodes: 9, calls: 4, rewards: { correct: { score: 1, weight: 1 } } });
    expect(Date.parse(done.updated)).toBeGreaterThanOrEqual(Date.parse(turned.updated));
  });

  it("a refused reply shows as finish_refused with the reference's message, until a reply finishes the run", async () => {
    const c = await golden("gap_detected");
    const id = freshId("idx-refused");
    for (const f of c.frames) (await post(`${id}/deltas`, f)).body?.cancel();
    expect((await post(`${id}/reply`, c.reply)).status).toBe(409);
    await eventually(async () => expect(await row(id)).toMatchObject({ status: "finish_refused", error: c.finish_error }));
    const listed = (await (await relay("?status=finish_refused")).json()) as { episodes: Array<{ id: string }> };
    expect(listed.episodes.some((e) => e.id === id)).toBe(true);
    (await post(`${id}/reply`, failedReply("gave up"))).body?.cancel();
    await eventually(async () => expect(await row(id)).toMatchObject({ status: "failed", error: "gave up" }));
  });

  it("a failed run shows its error", async () => {
    const id = freshId("idx-fail");
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    expect((await post(`${id}/reply`, failedReply("sandbox crashed"))).status).toBe(200);
    await eventually(async () => expect(await row(id)).toMatchObject({ status: "failed", error: "sandbox crashed", traces: 1 }));
  });

  it("DELETE removes the row", async () => {
    const id = freshId("idx-del");
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect(await row(id)).toBeDefined());
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    await eventually(async () => expect(await row(id)).toBeUndefined());
  });

  it("expiry removes the row", async () => {
    const id = freshId("idx-exp");
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect(await row(id)).toBeDefined());
    const stub = env.EPISODES.getByName(id);
    // the last write was long ago: the retention alarm deletes the episode
    await runInDurableObject(stub, (instance, state) => {
      state.storage.sql.exec("UPDATE meta SET updated = 1");
      (instance as unknown as { state: { forget(): void } }).state.forget(); // it keeps the row in memory
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await relay(`${id}/status`)).status).toBe(404);
    await eventually(async () => expect(await row(id)).toBeUndefined());
  });
});

describe("GET /v1/episodes", () => {
  it("filters by status and prefix, pages newest-updated first with an opaque cursor", async () => {
    const run = freshId("idx-page");
    const ids = Array.from({ length: 5 }, (_, i) => `${run}:${i}`);
    for (const id of ids) {
      expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
      await new Promise((r) => setTimeout(r, 3)); // distinct `updated`
    }
    for (const id of [ids[1]!, ids[3]!]) expect((await post(`${id}/reply`, failedReply("x"))).status).toBe(200);
    await eventually(async () => {
      const all = await list(`prefix=${run}:&limit=500`);
      expect(all.episodes.length).toBe(5);
      expect(all.episodes.filter((e) => e.status === "failed").length).toBe(2);
    });

    const all = (await list(`prefix=${run}:`)).episodes;
    for (let i = 1; i < all.length; i++) expect(all[i - 1]!.updated >= all[i]!.updated).toBe(true);
    // the failed ones were written last: they come first
    expect(new Set(all.slice(0, 2).map((e) => e.id))).toEqual(new Set([ids[1], ids[3]]));

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Page = await list(`prefix=${run}:&limit=2${cursor ? `&cursor=${cursor}` : ""}`);
      expect(page.episodes.length).toBeLessThanOrEqual(2);
      seen.push(...page.episodes.map((e) => e.id));
      cursor = page.cursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual(all.map((e) => e.id));

    const failed = await list(`prefix=${run}:&status=failed`);
    expect(failed.episodes.map((e) => e.id).sort()).toEqual([ids[1], ids[3]].sort());
    expect((await list(`prefix=${run}:&status=live`)).episodes.length).toBe(3);
    expect((await list(`prefix=${ids[2]}`)).episodes.map((e) => e.id)).toEqual([ids[2]]);
  });

  it("refuses bad parameters with 400, caps limit at 500", async () => {
    for (const [q, code] of [
      ["status=done", "bad_status"],
      ["limit=0", "bad_limit"],
      ["limit=x", "bad_limit"],
      ["prefix=a/b", "bad_prefix"],
      ["cursor=%%%", "bad_cursor"],
      ["cursor=WzEsMl0", "bad_cursor"],
    ] as const) {
      const res = await exports.default.fetch(`http://relay.test/v1/episodes?${q}`);
      expect(res.status, q).toBe(400);
      expect(await res.json()).toMatchObject({ error: code });
    }
    const res = await exports.default.fetch("http://relay.test/v1/episodes?limit=100000&prefix=no-such-prefix-");
    expect(await res.json()).toEqual({ episodes: [], cursor: null });
  });

  it('"watch" is reserved: not an episode id; the index socket needs an upgrade', async () => {
    expect((await relay("watch/status")).status).toBe(400);
    expect((await relay("watch/deltas", { method: "POST", body: openDelta() })).status).toBe(400);
    const res = await relay("watch");
    expect(res.status).toBe(426);
    expect((await exports.default.fetch("http://relay.test/v1/episodes", { method: "POST" })).status).toBe(405);
  });
});

describe("GET /v1/episodes/watch", () => {
  it("streams a snapshot, then upserts and deletes; ping is answered", async () => {
    const run = freshId("idx-sock");
    const before = `${run}:0`;
    expect((await post(`${before}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect(await row(before)).toBeDefined());

    const ws = await openSocket(`watch?prefix=${run}:`);
    const box = inbox(ws);
    const next = async () => JSON.parse((await box.next()) as string) as { type: string; episodes?: Entry[]; episode?: Entry; id?: string };
    const snap = await next();
    expect(snap.type).toBe("snapshot");
    expect(snap.episodes!.map((e) => e.id)).toEqual([before]);

    const id = `${run}:1`;
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    const up = await next();
    expect(up).toMatchObject({ type: "upsert", episode: { id, status: "live", traces: 1 } });
    expect((await post(`${id}/reply`, failedReply("boom"))).status).toBe(200);
    expect(await next()).toMatchObject({ type: "upsert", episode: { id, status: "failed", error: "boom" } });
    // another prefix is not this socket's business
    expect((await post(`${freshId("idx-other")}/deltas`, openDelta())).status).toBe(200);
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    expect(await next()).toEqual({ type: "delete", id });

    ws.send("ping");
    expect(await box.next()).toBe("pong");
    ws.close(1000, "done");
  });
});

describe("scope", () => {
  const SECRET = "index-test-secret-6d1f0c3b9a8e47f2b5c4d3e2f1a09b8c";
  const AUTH_ENV: Env = { ...(env as unknown as Env), RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
  const HOST = "https://relay.example.com";
  const token = (role: string, episodes: string[]) =>
    new SignJWT({ role, episodes }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("1h").sign(new TextEncoder().encode(SECRET));
  const call = (path: string, headers: Record<string, string> = {}) => worker.fetch(new Request(`${HOST}${path}`, { headers }), AUTH_ENV);
  const ids = async (res: Response) => {
    expect(res.status, await res.clone().text()).toBe(200);
    return ((await res.json()) as Page).episodes.map((e) => e.id).sort();
  };

  it("any valid token lists, filtered to its episodes; none is 401", async () => {
    const run = freshId("idx-scope");
    const [a1, a2, b1] = [`${run}-a:1`, `${run}-a:2`, `${run}-b:1`];
    for (const id of [a1, a2, b1]) expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    await eventually(async () => expect((await list(`prefix=${run}`)).episodes.length).toBe(3));

    const q = `/v1/episodes?prefix=${run}`;
    expect((await call(q)).status).toBe(401);
    expect(await ids(await call(q, { authorization: `Bearer ${await token("watcher", [`${run}-a:*`])}` }))).toEqual([a1, a2]);
    expect(await ids(await call(q, { authorization: `Bearer ${await token("producer", [b1])}` }))).toEqual([b1]);
    expect(await ids(await call(q, { authorization: `Bearer ${await token("watcher", [`${run}-a:2`, `${run}-b:*`])}` }))).toEqual([a2, b1]);
    expect(await ids(await call(q, { authorization: `Bearer ${await token("admin", ["*"])}` }))).toEqual([a1, a2, b1]);
    expect(await ids(await call(q, { authorization: `Bearer ${await token("admin", [`${run}-b*`])}` }))).toEqual([b1]);
    expect(await ids(await call(q, { authorization: `Bearer ${await token("watcher", [])}` }))).toEqual([]);
    // a client cannot widen its scope with the internal header
    expect(await ids(await call(q, { authorization: `Bearer ${await token("watcher", [b1])}`, "x-episode-scope": '["*"]' }))).toEqual([b1]);
  });

  it("the index socket sees only its scope (token as a subprotocol entry, also when large)", async () => {
    const run = freshId("idx-sscope");
    const mine = `${run}-a:1`;
    const theirs = `${run}-b:1`;
    // many patterns: the scope no longer fits a socket attachment and is stored by hash
    const padding = Array.from({ length: 80 }, (_, i) => `${run}-pad-${i}-xxxxxxxxxxxxxxxxxxxx`);
    const t = await token("watcher", [...padding, `${run}-a:*`]);
    const res = await worker.fetch(
      new Request(`${HOST}/v1/episodes/watch?prefix=${run}`, { headers: { upgrade: "websocket", "sec-websocket-protocol": `episode-relay, bearer.${t}` } }),
      AUTH_ENV,
    );
    expect(res.status).toBe(101);
    expect(res.headers.get("sec-websocket-protocol")).toBe("episode-relay");
    const ws = res.webSocket!;
    ws.accept();
    const box = inbox(ws);
    const next = async () => JSON.parse((await box.next()) as string) as { type: string; episodes?: Entry[]; episode?: Entry };
    expect(await next()).toMatchObject({ type: "snapshot", episodes: [] });
    expect((await post(`${theirs}/deltas`, openDelta())).status).toBe(200);
    expect((await post(`${mine}/deltas`, openDelta())).status).toBe(200);
    const m = await next();
    expect(m).toMatchObject({ type: "upsert", episode: { id: mine } });
    await new Promise((r) => setTimeout(r, 100));
    expect(box.pending()).toBe(0);
    ws.close(1000, "done");
  });
});

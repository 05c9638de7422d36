// A hub writes its row when its session or the run's status moves, not per feed; where its
// caught-up watchers stand rides in their sockets' attachments (src/objects/hub/fan-out.ts). So a
// hub that hibernates between feeds, its sockets kept, must take its head from them when it wakes:
// from its row alone it would send its watchers frames they have. Here it hibernates for real
// (idle past the runtime's 10 s) between two feeds, on sockets it accepted and on sockets as the
// previous release left them (no seq in their attachments, the exact head in the row), and every
// watcher gets every frame once, in order.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ViewerHub } from "../../src/objects/hub/hub.js";
import type { Usage } from "../../src/protocol/billing/usage.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { hubName } from "../../src/protocol/hub/shards.js";
import { equal, freshId, golden, post, pushFrames, relay } from "./support.js";
import { Watcher } from "./watcher.js";

const hub = (id: string) => env.HUBS.getByName(hubName(id, 0)) as unknown as DurableObjectStub<ViewerHub>;

async function hubUsage(id: string): Promise<Usage> {
  const res = await relay(`${id}/usage`);
  expect(res.status, await res.clone().text()).toBe(200);
  const u = (await res.json()) as { hubs: Usage[] };
  expect(u.hubs.length, "one hub").toBe(1);
  return u.hubs[0]!;
}

/** The head the hub's row holds in storage. */
async function storedHead(id: string): Promise<number> {
  return runInDurableObject(
    hub(id),
    (_i, state) => state.storage.sql.exec<{ head: number }>("SELECT head FROM hub").one().head,
  );
}

const FED = 3;

describe("a hub woken between feeds", () => {
  it("writes no row per feed, and after hibernating takes its head from its sockets: every frame once, in order", async () => {
    const c = await golden("multi_trace_links");
    expect(c.ack_lost).toEqual([]); // seqs 1..n, no retraction
    // `new`: sockets this release accepted; `old`: as the previous release left them
    const ids = { new: freshId("hub-wake"), old: freshId("hub-wake-old") };
    const producers = { new: new ProducerCursor("p"), old: new ProducerCursor("p") };
    const watchers: Record<keyof typeof ids, Watcher[]> = { new: [], old: [] };
    for (const k of ["new", "old"] as const) {
      // from seq 0 on an empty episode: the hub's window serves them (no catch-up stream, whose cohort would linger
      // and hold the hub awake past the wait below)
      watchers[k] = [await Watcher.open(ids[k], "?after=0"), await Watcher.open(ids[k], "?after=0&routing=0")];
      for (const w of watchers[k]) await w.read((x) => x.caughtUp);
      await pushFrames(ids[k], c, 0, 1, producers[k]); // the run goes live: a status the row keeps
      for (const w of watchers[k]) await w.read((x) => x.lastSeq >= 1);
    }

    const rowsBefore = (await hubUsage(ids.new)).written.hub ?? 0;
    for (const k of ["new", "old"] as const) {
      await pushFrames(ids[k], c, 1, FED, producers[k]);
      for (const w of watchers[k]) await w.read((x) => x.lastSeq >= FED);
    }
    const fed = await hubUsage(ids.new);
    expect(fed.written.hub ?? 0, "feeds that only move the head write no hub row").toBe(rowsBefore);
    expect(await storedHead(ids.new), "the row's head is a floor, behind the watchers").toBeLessThan(FED);

    // the previous release wrote the head with every feed, and its attachments had no seq
    await runInDurableObject(hub(ids.old), (_i, state) => {
      for (const ws of state.getWebSockets()) {
        const { seq: _s, epoch: _e, ...att } = ws.deserializeAttachment() as Record<string, unknown>;
        expect(att.live).toBe(true);
        ws.serializeAttachment(att);
      }
      state.storage.sql.exec("UPDATE hub SET head = ?", FED);
    });

    const instances = await Promise.all([ids.new, ids.old].map((id) => runInDurableObject(hub(id), (i) => i)));
    await new Promise((r) => setTimeout(r, 12_000)); // idle past 10 s, nothing pending: the hubs hibernate
    for (const [i, id] of [ids.new, ids.old].entries())
      expect(await runInDurableObject(hub(id), (x) => x), `${id}: a new instance`).not.toBe(instances[i]);
    expect((await hubUsage(ids.new)).wakes, "woken again").toBeGreaterThan(fed.wakes);

    for (const k of ["new", "old"] as const) {
      await pushFrames(ids[k], c, FED, c.frames.length, producers[k]);
      (await post(`${ids[k]}/reply`, c.reply)).body?.cancel();
      for (const w of watchers[k]) {
        // Watcher.read fails on a seq at or below the last one (a duplicate)
        await w.read((x) => x.finished !== null);
        expect(w.seqs, `${k}: every frame once, in order`).toEqual(c.frames.map((_f, i) => i + 1));
        w.close();
      }
      expect(equal(watchers[k][0]!.episodeBytes(), c.episode!), `${k}: the golden episode`).toBe(true);
    }
  }, 60_000);
});

/** The hub's sockets with what their attachments say (role, variant, whether caught up, and where they stand). */
async function attachments(id: string): Promise<Array<{ routing: boolean; annotations: boolean; seq?: number }>> {
  return runInDurableObject(hub(id), (_i, state) =>
    state.getWebSockets().flatMap((ws) => {
      if (ws.readyState !== WebSocket.OPEN) return [];
      const a = ws.deserializeAttachment() as {
        live: boolean;
        variant: { routing: boolean };
        annotations?: boolean;
        seq?: number;
      };
      return a.live ? [{ routing: a.variant.routing, annotations: a.annotations === true, seq: a.seq }] : [];
    }),
  );
}

/** Which of the three watchers (by its query) a socket's attachment belongs to. */
const queryOf = (a: { routing: boolean; annotations: boolean }) =>
  !a.routing ? "?after=0&routing=0" : a.annotations ? "?after=0&annotations=1" : "?after=0";

describe("where a hub's caught-up watchers stand", () => {
  it("is written once per flush, in one socket's attachment, which hands it on when it goes, awake or woken by its close", async () => {
    const c = await golden("multi_trace_links");
    const id = freshId("hub-keeper");
    const producer = new ProducerCursor("p");
    const queries = ["?after=0", "?after=0&routing=0", "?after=0&annotations=1"];
    const watchers = new Map<string, Watcher>();
    for (const q of queries) {
      const w = await Watcher.open(id, q);
      await w.read((x) => x.caughtUp);
      watchers.set(q, w);
    }
    await pushFrames(id, c, 0, 1, producer);
    for (const w of watchers.values()) await w.read((x) => x.lastSeq >= 1);

    const written0 = (await hub(id).stats()).watchers.attachmentsWritten;
    const feeds = 4;
    for (let k = 1; k <= feeds; k++) {
      await pushFrames(id, c, k, k + 1, producer);
      for (const w of watchers.values()) await w.read((x) => x.lastSeq >= k + 1);
    }
    let head = feeds + 1;
    const written = (await hub(id).stats()).watchers.attachmentsWritten - written0;
    // a write per socket per flush, as before, would be 3 per feed
    expect(written, "at most one attachment written per feed").toBeLessThanOrEqual(feeds);
    expect(written, "the standing is written").toBeGreaterThan(0);
    const at = await attachments(id);
    expect(at).toHaveLength(3);
    const keepers = at.filter((a) => a.seq === head);
    expect(keepers, "one socket says where they all stand").toHaveLength(1);

    // the keeper leaves while the hub is awake: another says it
    const first = queryOf(keepers[0]!);
    watchers.get(first)!.close();
    watchers.delete(first);
    await until(async () => (await hub(id).stats()).watchers.watchers === 2, "the keeper's close reached the hub");
    const after = await attachments(id);
    expect(after).toHaveLength(2);
    expect(
      after.filter((a) => a.seq === head),
      "the standing was handed on",
    ).toHaveLength(1);

    // the hub hibernates; the new keeper's close wakes it: the last socket is told where they stand
    const second = queryOf(after.find((a) => a.seq === head)!);
    const instance = await runInDurableObject(hub(id), (i) => i);
    await new Promise((r) => setTimeout(r, 12_000)); // idle past 10 s, nothing pending: the hub hibernates
    const keeper = watchers.get(second)!;
    keeper.close();
    watchers.delete(second);
    await keeper.box.closed(); // the hub echoed it: the close, not a call of ours, woke it
    await until(async () => (await hub(id).stats()).watchers.watchers === 1, "the keeper's close reached the hub");
    expect(await runInDurableObject(hub(id), (x) => x), "a new instance").not.toBe(instance);
    expect(await attachments(id), "the standing was handed on by the woken hub").toEqual([
      expect.objectContaining({ seq: head }),
    ]);

    // and the one left gets every frame once, in order, to the end
    const [last] = [...watchers.values()];
    await pushFrames(id, c, head, c.frames.length, producer);
    head = c.frames.length;
    (await post(`${id}/reply`, c.reply)).body?.cancel();
    await last!.read((x) => x.finished !== null);
    expect(last!.seqs, "every frame once, in order").toEqual(c.frames.map((_f, i) => i + 1));
    last!.close();
  }, 60_000);
});

async function until(check: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

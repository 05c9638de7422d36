// Attention-scaled freshness of live rows (src/objects/registry/attention.ts): a run's index answers its episodes'
// updates with INDEX_FLUSH_MS while someone attends the run (a run socket open, a read of its rows within
// ATTENTION_MS, a `flag` alert set), else with INDEX_IDLE_FLUSH_MS; the episode's next throttled send
// follows the latest answer, both ways. What the episode was told is read from its `index_sync`, when it sends next
// from its alarm and its last send's time (intervals, not clocks), what the index heard from the row's `seq`
// (read in the index's storage: a read over HTTP would attend the run). This config: INDEX_FLUSH_MS half an hour,
// INDEX_IDLE_FLUSH_MS 40 minutes, INDEX_WRITES_PER_S 0.001 (one live episode asks for less than either).
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ATTENTION_MS, Attention } from "../../src/objects/registry/attention.js";
import { runIndexName } from "../../src/protocol/registry/run.js";
import { delta, m, openDelta } from "../support/deltas.js";
import { freshId, inbox, post } from "./support.js";

const FLUSH = Number(env.INDEX_FLUSH_MS);
const IDLE = Number(env.INDEX_IDLE_FLUSH_MS);

const api = (path: string, init?: RequestInit) => exports.default.fetch(`http://relay.test/v1/${path}`, init);

/** What the episode's last answer said (0: none yet), when it last sent, and when its alarm runs. */
async function told(id: string): Promise<{ flushMs: number; lastFlush: number; alarm: number | null }> {
  return runInDurableObject(env.EPISODES.getByName(id), async (instance, state) => {
    const sync = state.storage.sql.exec<{ flush_ms: number }>("SELECT flush_ms FROM index_sync").toArray()[0];
    const record = (instance as unknown as { state: { record: { indexState(): { lastFlush: number } } } }).state.record;
    return {
      flushMs: sync?.flush_ms ?? 0,
      lastFlush: record.indexState().lastFlush,
      alarm: await state.storage.getAlarm(),
    };
  });
}

/** Wait for the episode's updates in flight to be answered. */
async function settled(id: string): Promise<void> {
  await runInDurableObject(env.EPISODES.getByName(id), (instance) =>
    (instance as unknown as { rowSync: { settled(): Promise<void> } }).rowSync.settled(),
  );
}

/** The seq of the episode's row as its run's index holds it (null: none). */
async function heard(id: string): Promise<number | null> {
  const run = id.slice(0, id.lastIndexOf(":"));
  return runInDurableObject(env.EPISODE_INDEX.getByName(runIndexName(run)), (_i, state) => {
    const r = state.storage.sql.exec<{ seq: number }>("SELECT seq FROM rows WHERE id = ?", id).toArray()[0];
    return r?.seq ?? null;
  });
}

/** Open sockets on the run's index. */
async function openSockets(run: string): Promise<number> {
  return runInDurableObject(env.EPISODE_INDEX.getByName(runIndexName(run)), (instance) =>
    (instance as unknown as { sockets: { open(): number } }).sockets.open(),
  );
}

async function turn(id: string, n: number): Promise<void> {
  const res = await post(`${id}/deltas`, delta({ set: m({ turn: n }) }));
  expect(res.status, await res.clone().text()).toBe(200);
}

/** Create the episode (its first write is sent at once) and wait for the index's answer. */
async function create(id: string): Promise<void> {
  expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
  await settled(id);
  expect(await heard(id)).toBe(1);
}

/**
 * A turn, then the alarm that sends it: the update is due one told interval after the last send; once sent, the next
 * slot is one interval (the latest answer's) after it. Answers that interval.
 */
async function sendTurn(id: string, n: number, seq: number): Promise<number> {
  await turn(id, n);
  const before = await told(id);
  expect(before.alarm! - before.lastFlush).toBe(before.flushMs);
  expect(await runDurableObjectAlarm(env.EPISODES.getByName(id))).toBe(true);
  expect(await heard(id)).toBe(seq);
  const after = await told(id);
  expect(after.lastFlush).toBeGreaterThan(before.lastFlush);
  expect(after.alarm! - after.lastFlush).toBe(after.flushMs);
  return after.flushMs;
}

describe("attention: the interval a run's index tells its episodes", () => {
  it("the test's intervals differ, and one live episode's backpressure asks for less than either", () => {
    expect(IDLE).toBeGreaterThan(FLUSH);
    expect(1000 / Number(env.INDEX_WRITES_PER_S)).toBeLessThan(FLUSH);
  });

  it("nobody attends: INDEX_IDLE_FLUSH_MS, and the episode's next send waits that long", async () => {
    const id = `${freshId("idle")}:0`;
    await create(id);
    expect((await told(id)).flushMs).toBe(IDLE);
    expect(await sendTurn(id, 1, 2)).toBe(IDLE);
  });

  it("a run socket open: INDEX_FLUSH_MS; once it closed, INDEX_IDLE_FLUSH_MS again", async () => {
    const run = freshId("watched");
    const id = `${run}:0`;
    // a run nobody wrote yet may be watched: its first rows come as changes
    const res = await api(`runs/${run}`, { headers: { upgrade: "websocket" } });
    expect(res.status).toBe(101);
    const ws = res.webSocket!;
    ws.accept();
    await inbox(ws).next(); // its snapshot
    await create(id);
    expect((await told(id)).flushMs).toBe(FLUSH);
    expect(await sendTurn(id, 1, 2)).toBe(FLUSH);
    ws.close(1000, "done");
    for (let i = 0; i < 50 && (await openSockets(run)) > 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await openSockets(run)).toBe(0);
    expect(await sendTurn(id, 2, 3)).toBe(IDLE);
  });

  it("a read of the run's rows over HTTP: the next update is told INDEX_FLUSH_MS, and the slot after it follows", async () => {
    const run = freshId("read");
    const id = `${run}:0`;
    await create(id);
    expect((await told(id)).flushMs).toBe(IDLE);
    // the turn's update waits the long interval told before the read (the first update after a viewer arrives)
    await turn(id, 1);
    const waiting = await told(id);
    expect(waiting.alarm! - waiting.lastFlush).toBe(IDLE);
    expect((await api(`runs/${run}/episodes`)).status).toBe(200);
    expect(await runDurableObjectAlarm(env.EPISODES.getByName(id))).toBe(true);
    expect(await heard(id)).toBe(2);
    const after = await told(id);
    expect(after.flushMs).toBe(FLUSH);
    // the shorter answer takes effect at once: the next slot is INDEX_FLUSH_MS after this send, not a max with the old
    expect(after.alarm! - after.lastFlush).toBe(FLUSH);
    expect(await sendTurn(id, 2, 3)).toBe(FLUSH);
  });

  it("the run's aggregates and its search are reads too", async () => {
    for (const read of [(run: string) => `runs/${run}`, (run: string) => `runs/${run}/search?q=hello`]) {
      const run = freshId("reads");
      const id = `${run}:0`;
      await create(id);
      expect((await told(id)).flushMs).toBe(IDLE);
      expect((await api(read(run))).status).toBe(200);
      expect(await sendTurn(id, 1, 2)).toBe(FLUSH);
    }
  });

  it("a flag alert keeps the run attended (a live rollout's flags come with its updates); a threshold alert does not", async () => {
    const hook = { url: "https://hooks.example.com/attention", secret: "attention-secret-0123456789" };
    const cases: Array<[unknown, number]> = [
      [{ webhooks: [hook], rules: [{ id: "flagged", kind: "flag" }] }, FLUSH],
      [{ webhooks: [hook], rules: [] }, IDLE],
      [{ webhooks: [hook], rules: [{ id: "failing", kind: "failure_rate", above: 0.5 }] }, IDLE],
    ];
    for (const [body, want] of cases) {
      const run = freshId("alerted");
      const put = await api(`runs/${run}/alerts`, {
        method: "PUT",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
      expect(put.status, await put.clone().text()).toBe(200);
      const id = `${run}:0`;
      await create(id);
      expect((await told(id)).flushMs, JSON.stringify(body)).toBe(want);
    }
  });
});

describe("Attention", () => {
  it("a read attends the run for ATTENTION_MS; an open socket or a live alert at any time", () => {
    const a = new Attention();
    expect(a.attended(1_000_000, 0, false)).toBe(false);
    expect(a.attended(1_000_000, 1, false)).toBe(true);
    expect(a.attended(1_000_000, 0, true)).toBe(true);
    a.read(1_000_000);
    expect(a.attended(1_000_000, 0, false)).toBe(true);
    expect(a.attended(1_000_000 + ATTENTION_MS - 1, 0, false)).toBe(true);
    expect(a.attended(1_000_000 + ATTENTION_MS, 0, false)).toBe(false);
  });
});

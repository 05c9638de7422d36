// Archive pacing (src/objects/archive/gate.ts, src/protocol/archive/leases.ts): with ARCHIVE_SLOTS 1 (every local
// run; set in vitest.workers.config.ts) an episode's archive step runs only under the Episode
// class's one lease: steps wait for the slot (their alarm asks again soon), a crashed holder's
// lease expires, and every waiting archive then completes by its own alarms, exact.
import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { archiveGateName } from "../../src/objects/archive/gate.js";
import { WAIT_POLL_MS } from "../../src/protocol/archive/leases.js";
import { ARCHIVE_HEADER } from "../../src/objects/episode/archive-read.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { equal, freshId, golden, post, pushFrames, relay } from "./support.js";

const gate = () => env.ARCHIVE_GATE.getByName(archiveGateName("Episode"));

async function finish(id: string, c: GoldenCase): Promise<void> {
  await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
  const r = await post(`${id}/reply`, c.reply);
  expect(r.status, await r.clone().text()).toBe(200);
  await r.arrayBuffer();
}

async function isArchived(id: string): Promise<boolean> {
  return ((await (await relay(`${id}/status`)).json()) as { archived: boolean }).archived;
}

describe("archive steps share the class's slots", () => {
  it("steps wait for the slot while another holds it; a crashed holder's lease expires; then every archive completes by its alarms", async () => {
    const c = await golden("multi_trace_links");
    const ids = [freshId("pace-a"), freshId("pace-b"), freshId("pace-c")];
    for (const id of ids) await finish(id, c);
    const json = await Promise.all(
      ids.map(async (id) => (await relay(id, { headers: { accept: "application/json" } })).text()),
    );

    // a step that took the slot and crashed: it never gives it back (its lease lasts 3 s here)
    expect((await gate().acquire("crashed-step", 1, 3_000)).granted).toBe(true);
    const asked = Date.now();
    await Promise.all(ids.map((id) => runDurableObjectAlarm(env.EPISODES.getByName(id))));
    for (const id of ids) expect(await isArchived(id), `${id} waits for the slot`).toBe(false);
    const waiting = await gate().state();
    expect(waiting.leases.map((l) => l.holder)).toEqual(["crashed-step"]);
    expect(waiting.waiters.map((w) => w.holder).sort()).toEqual([...ids].sort());
    // each asks again soon, by its own alarm (ARCHIVE_AFTER_SECONDS is an hour here: not that one)
    for (const id of ids) {
      const at = await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => state.storage.getAlarm());
      expect(at, `${id} alarm armed`).not.toBeNull();
      expect(at! - asked).toBeLessThanOrEqual(WAIT_POLL_MS * ids.length + 1_000);
    }

    // nothing else runs them: the crashed lease expires, the alarms take the slot one at a time
    const held = new Set<number>();
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      const s = await gate().state();
      held.add(s.leases.filter((l) => l.until > Date.now()).length);
      const done = await Promise.all(ids.map(isArchived));
      if (done.every(Boolean)) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    for (const id of ids) expect(await isArchived(id), `${id} archived`).toBe(true);
    expect(Math.max(...held), "never two steps at once").toBeLessThanOrEqual(1);
    const after = await gate().state();
    expect(after.leases, "every lease given back").toEqual([]);
    expect(after.waiters).toEqual([]);

    for (const [i, id] of ids.entries()) {
      const res = await relay(id);
      expect(res.headers.get(ARCHIVE_HEADER)).toBe("1");
      expect(equal(new Uint8Array(await res.arrayBuffer()), c.episode!)).toBe(true);
      const j = await relay(id, { headers: { accept: "application/json" } });
      expect(await j.text()).toBe(json[i]);
    }
  });
});

// Archive pacing (src/objects/archive/gate.ts, src/protocol/archive/leases.ts): with ARCHIVE_SLOTS 1 (every local
// run; set in vitest.workers.config.ts) an episode's archive step runs only under the Episode
// class's one lease: steps wait in line for the slot (without polling: their own alarm is minutes
// away, so an idle waiter can be evicted), a crashed holder's lease expires, and the gate then wakes
// each waiter in turn: every archive completes, exact, with no episode alarm run.

import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { archiveGateName } from "../../src/objects/archive/gate.js";
import { ARCHIVE_HEADER } from "../../src/protocol/archive/archive-read.js";
import { ASK_AGAIN_MS } from "../../src/protocol/archive/leases.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
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
  it("steps wait in line while another holds the slot; a crashed holder's lease expires; the gate wakes each in turn", async () => {
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
    expect([...waiting.waiters].sort()).toEqual([...ids].sort());
    // none polls: each asks again by itself only ASK_AGAIN_MS on (a lost wake), so an idle waiter can be evicted
    const alarms: number[] = [];
    for (const id of ids) {
      const at = await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => state.storage.getAlarm());
      expect(at, `${id} alarm armed`).not.toBeNull();
      expect(at! - asked, `${id} asks again minutes later, not seconds`).toBeGreaterThanOrEqual(ASK_AGAIN_MS - 5_000);
      alarms.push(at!);
    }

    // no episode alarm runs them (theirs are minutes away): the crashed lease expires, and the gate
    // hands the slot to each waiter in turn and wakes it
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
    // the last step's slot rests as long as the step took (leases.ts), then is free
    let after = await gate().state();
    for (let i = 0; i < 100 && after.leases.length > 0; i++) {
      expect(
        after.leases.every((l) => l.holder.startsWith("pause:")),
        "only a rest after the last step",
      ).toBe(true);
      await new Promise((r) => setTimeout(r, 100));
      after = await gate().state();
    }
    expect(after.leases, "every lease given back").toEqual([]);
    expect(after.waiters).toEqual([]);
    for (const [i, id] of ids.entries()) {
      const at = await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => state.storage.getAlarm());
      expect(at === null || at !== alarms[i], `${id}: its waiting alarm was replaced once archived`).toBe(true);
    }

    for (const [i, id] of ids.entries()) {
      const res = await relay(id);
      expect(res.headers.get(ARCHIVE_HEADER)).toBe("1");
      expect(equal(new Uint8Array(await res.arrayBuffer()), c.episode!)).toBe(true);
      const j = await relay(id, { headers: { accept: "application/json" } });
      expect(await j.text()).toBe(json[i]);
    }
  });
});

describe("the gate's storage", () => {
  it("as the release before wrote it (version 1: waiters that polled, with `seen`) opens at version 2, its line kept in order", async () => {
    const name = `gate-v1-${Date.now()}`;
    const T = Date.now();
    await runInDurableObject(env.ARCHIVE_GATE.getByName(name), (_i, state) => {
      const sql = state.storage.sql;
      for (const t of ["leases", "waiters", "schema_version"]) sql.exec(`DROP TABLE IF EXISTS ${t}`);
      // version 1's tables, exactly as it created them, and rows as it wrote them
      sql.exec("CREATE TABLE leases (holder TEXT PRIMARY KEY, until INTEGER NOT NULL)");
      sql.exec("CREATE TABLE waiters (holder TEXT PRIMARY KEY, since INTEGER NOT NULL, seen INTEGER NOT NULL)");
      sql.exec("CREATE TABLE schema_version (version INTEGER NOT NULL)");
      sql.exec("INSERT INTO schema_version VALUES (1)");
      sql.exec("INSERT INTO leases VALUES ('holder', ?)", T + 60_000);
      sql.exec("INSERT INTO waiters VALUES ('late', ?, ?)", T + 2, T + 5);
      sql.exec("INSERT INTO waiters VALUES ('early', ?, ?)", T + 1, T + 9);
    });
    await abortAllDurableObjects();
    const g = env.ARCHIVE_GATE.getByName(name);
    expect(await g.state()).toEqual({ leases: [{ holder: "holder", until: T + 60_000 }], waiters: ["early", "late"] });
    await runInDurableObject(g, (_i, state) => {
      const sql = state.storage.sql;
      expect(sql.exec<{ version: number }>("SELECT version FROM schema_version").one().version).toBe(2);
      expect(sql.exec("SELECT name FROM sqlite_master WHERE name = 'waiters_line'").toArray()).toHaveLength(1);
    });
    // a version-1 waiter asking again keeps its place
    expect(await g.acquire("late", 1)).toMatchObject({ granted: false, ahead: 1 });
  });
});

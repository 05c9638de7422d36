// Nothing is stored for what nobody wrote: 1,000 reads of run names nobody wrote, over every run
// route and socket (auth off here: the viewer covers everything, so each read reaches the run's
// index), leave no object with storage: every run index (and the run directory) that answered has
// no table and no key. A run that was written has both, and its index frees them once its last row
// is gone (deletes, retention) and the directory heard of it.
import { listDurableObjectIds, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { EpisodeIndex } from "../../src/objects/registry/episode-index.js";
import worker from "../../src/worker/index.js";
import TOKENIZER from "../fixtures/tokenizer/tokenizer.json?raw";
import { openDelta } from "../support/deltas.js";
import { freshId, post, relay } from "./support.js";

/** A request to the Worker's fetch, called as a function (as the runtime calls it). */
async function direct(path: string, init: RequestInit = {}): Promise<Response> {
  return worker.fetch(new Request(`http://relay.test/v1/runs/${path}`, init), env);
}

const READS = 1000;
/**
 * Distinct run names, each read READS / NAMES times over different routes (more than the 9 routes, so
 * each name is read over every one). Kept small: vitest-pool-workers 0.15.1 wraps a Durable Object
 * class's prototype in one more Proxy at each construction (cloudflare/workers-sdk#15092, fixed in a
 * later release), so every property read on an index costs as many traps as indexes were made; 200
 * names (and the evictions a slow machine adds) made the file run for 15 minutes.
 */
const NAMES = 50;

/** One read of run `run`: its view, list, groups, a group, tasks, bulk fetch, usage, share link or socket. */
async function read(k: number, run: string): Promise<number> {
  const r = encodeURIComponent(run);
  const paths = [
    `${r}`,
    `${r}/episodes?status=live`,
    `${r}/groups`,
    `${r}/groups/g`,
    `${r}/tasks`,
    `${r}/finished`,
    `${r}/usage`,
  ];
  if (k % 9 === 7) {
    const res = await direct(`${r}/share`, { method: "POST" });
    await res.arrayBuffer();
    return res.status;
  }
  if (k % 9 === 8) {
    const res = await direct(r, { headers: { upgrade: "websocket" } });
    res.webSocket?.accept();
    res.webSocket?.close(1000, "read");
    return res.status;
  }
  const res = await direct(paths[k % 9]!);
  await res.arrayBuffer();
  return res.status;
}

/** Run the index's alarm as if RETENTION_SECONDS had passed since its rules or tokenizer were set (the deadline it keeps, moved to now). */
async function dueNow(index: DurableObjectStub<EpisodeIndex>): Promise<void> {
  await runInDurableObject(index, (_i, state) => {
    state.storage.sql.exec("UPDATE state SET v = ? WHERE k = 'rules_until' AND v != '0'", String(Date.now() - 1));
  });
  await runDurableObjectAlarm(index);
}

/** Run a run index's alarm (up to 10 times) until it has freed its storage: it then holds no table and no key. */
async function freedByAlarms(index: DurableObjectStub<EpisodeIndex>, indexId: DurableObjectId): Promise<void> {
  for (let i = 0; i < 10 && (await stored(env.EPISODE_INDEX, indexId)).tables.length > 0; i++) {
    await runDurableObjectAlarm(index);
    await new Promise((r) => setTimeout(r, 200));
  }
  expect(await stored(env.EPISODE_INDEX, indexId)).toEqual({ tables: [], keys: 0 });
}

/** The run as the directory lists it (undefined: not listed). */
async function listed(run: string): Promise<{ run: string; episodes: number } | undefined> {
  const page = (await (await relay("../runs?limit=500")).json()) as { runs: Array<{ run: string; episodes: number }> };
  return page.runs.find((r) => r.run === run);
}

/** The ids listed in `now` that were not in `before`. */
function madeSince(before: DurableObjectId[], now: DurableObjectId[]): DurableObjectId[] {
  const old = new Set(before.map((id) => id.toString()));
  return now.filter((id) => !old.has(id.toString()));
}

/** The tables of an object that hold `text` in some row, and whether a key-value key or value holds it. */
async function mentions(ns: Env["RUN_DIRECTORY"], id: DurableObjectId, text: string): Promise<string[]> {
  return runInDurableObject(ns.get(id), async (_i, state) => {
    const found = state.storage.sql
      .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%'")
      .toArray()
      .filter((t) => JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t.name}"`).toArray()).includes(text))
      .map((t) => t.name);
    for (const [k, v] of await state.storage.list()) if (JSON.stringify([k, v]).includes(text)) found.push(`key ${k}`);
    return found;
  });
}

/** What an object keeps: its tables (ours and any other), and its key-value keys. */
async function stored(
  ns: DurableObjectNamespace<undefined> | Env["EPISODE_INDEX"] | Env["RUN_DIRECTORY"],
  id: DurableObjectId,
): Promise<{ tables: string[]; keys: number }> {
  return runInDurableObject(ns.get(id), async (_i, state) => ({
    tables: state.storage.sql
      .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%'")
      .toArray()
      .map((t) => t.name),
    keys: (await state.storage.list()).size,
  }));
}

describe("reads of runs nobody wrote store nothing", () => {
  it(`${READS} reads of ${NAMES} unknown run names over every run route: every object that answered holds no table and no key`, async () => {
    const started = performance.now();
    const statuses = new Map<number, number>();
    const stamp = Date.now().toString(36);
    // the files share one runtime: objects that other files made are listed too, so what these reads made is what is new
    const [indexesBefore, directoriesBefore, episodesBefore, hubsBefore] = await Promise.all([
      listDurableObjectIds(env.EPISODE_INDEX),
      listDurableObjectIds(env.RUN_DIRECTORY),
      listDurableObjectIds(env.EPISODES),
      listDurableObjectIds(env.HUBS),
    ]);
    for (let k = 0; k < READS; k++) {
      const status = await read(k, `nobody-${k % NAMES}-${stamp}`);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
    // a run nobody wrote: 404 no run (its usage and a share link answer for the name; its socket opens and waits)
    expect([...statuses.keys()].sort()).toEqual([101, 200, 404]);
    const indexes = madeSince(indexesBefore, await listDurableObjectIds(env.EPISODE_INDEX));
    expect(indexes.length).toBe(NAMES); // each name's index answered some read
    for (const id of indexes) expect(await stored(env.EPISODE_INDEX, id)).toEqual({ tables: [], keys: 0 });
    const directories = await listDurableObjectIds(env.RUN_DIRECTORY);
    for (const id of madeSince(directoriesBefore, directories))
      expect(await stored(env.RUN_DIRECTORY, id)).toEqual({ tables: [], keys: 0 });
    // a directory that other files wrote to holds nothing of these names
    for (const id of directories) expect(await mentions(env.RUN_DIRECTORY, id, stamp)).toEqual([]);
    expect(madeSince(episodesBefore, await listDurableObjectIds(env.EPISODES))).toEqual([]);
    expect(madeSince(hubsBefore, await listDurableObjectIds(env.HUBS))).toEqual([]);
    console.log(
      `${READS} reads of ${NAMES} run names nobody wrote, ${[...statuses].map(([s, n]) => `${n}× ${s}`).join(", ")}: ${indexes.length} indexes, none stored anything (${Math.round(performance.now() - started)} ms)`,
    );
  }, 120_000);

  it("a run that was written is stored; once its last episode is deleted and the directory heard, its index holds nothing", async () => {
    const run = freshId("written");
    const id = `${run}:only`;
    expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const indexId = env.EPISODE_INDEX.idFromName(`run:${run}`);
    await expect.poll(async () => (await stored(env.EPISODE_INDEX, indexId)).tables.length).toBeGreaterThan(0);
    await expect.poll(async () => (await relay(`../runs/${run}/episodes`)).status).toBe(200);
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    await expect.poll(async () => (await relay(`../runs/${run}/episodes`)).status).toBe(404);
    // the alarm tells the directory the run is gone, then frees the storage
    await freedByAlarms(index, indexId);
    const runs = (await (await relay("../runs?limit=500")).json()) as { runs: Array<{ run: string }> };
    expect(runs.runs.map((r) => r.run)).not.toContain(run);
    // written again: the tables come back with the row
    expect((await post(`${run}:again/deltas`, openDelta())).status).toBe(200);
    await expect.poll(async () => (await stored(env.EPISODE_INDEX, indexId)).tables.length).toBeGreaterThan(0);
    await expect.poll(async () => (await relay(`../runs/${run}/episodes`)).status).toBe(200);
  }, 60_000);

  describe("rules PUT on a run nobody wrote (issue 39)", () => {
    const put = (run: string, body: unknown) =>
      relay(`../runs/${run}/rules`, {
        method: "PUT",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
    const RULES = { rules: [{ id: "says-hello", match: { pattern: "hello" } }] };
    it("are kept and the directory lists the run (no episode) until RETENTION_SECONDS pass; then the alarm frees everything", async () => {
      const run = freshId("rules-only");
      const index = env.EPISODE_INDEX.getByName(`run:${run}`);
      const indexId = env.EPISODE_INDEX.idFromName(`run:${run}`);
      expect((await put(run, RULES)).status).toBe(200);
      // the alarm, armed at once (it may already have fired by itself), lists the run
      await runDurableObjectAlarm(index);
      await expect.poll(async () => listed(run)).toMatchObject({ run, episodes: 0 });
      // the next alarm is days away (RETENTION_SECONDS, 7 days here), not minutes
      const at = await runInDurableObject(index, (_i, state) => state.storage.getAlarm());
      expect(at! - Date.now()).toBeGreaterThan(6 * 86400 * 1000);
      // an alarm that fires early (the platform may wake it sooner) keeps them
      await runDurableObjectAlarm(index);
      const kept = await (await relay(`../runs/${run}/rules`)).json();
      expect(kept).toMatchObject({ defaults: false, rules: [{ id: "says-hello" }] });
      // a role or tool past 128 characters is refused, naming the field; the rules as they were
      const long = await put(run, { rules: [{ id: "x", match: { pattern: "x", tool: "t".repeat(129) } }] });
      expect([long.status, ((await long.json()) as { field: string }).field]).toEqual([400, "rules[0].match.tool"]);
      expect(await (await relay(`../runs/${run}/rules`)).json()).toEqual(kept);
      expect((await stored(env.EPISODE_INDEX, indexId)).tables.length).toBeGreaterThan(0);
      await dueNow(index);
      await expect.poll(async () => stored(env.EPISODE_INDEX, indexId)).toEqual({ tables: [], keys: 0 });
      expect(await listed(run)).toBeUndefined();
      expect((await relay(`../runs/${run}/rules`)).status).toBe(404);
    });

    it("the defaults PUT after them free what they kept at once", async () => {
      const run = freshId("rules-back");
      const index = env.EPISODE_INDEX.getByName(`run:${run}`);
      const indexId = env.EPISODE_INDEX.idFromName(`run:${run}`);
      expect((await put(run, RULES)).status).toBe(200);
      await runDurableObjectAlarm(index);
      expect((await put(run, { defaults: true })).status).toBe(200);
      await runDurableObjectAlarm(index);
      await expect.poll(async () => stored(env.EPISODE_INDEX, indexId)).toEqual({ tables: [], keys: 0 });
      expect(await listed(run)).toBeUndefined();
    });

    it("a first row in time keeps them with the run: the directory hears of it at once, and nothing is freed when they were due", async () => {
      const run = freshId("rules-first");
      const index = env.EPISODE_INDEX.getByName(`run:${run}`);
      const indexId = env.EPISODE_INDEX.idFromName(`run:${run}`);
      expect((await put(run, RULES)).status).toBe(200);
      await runDurableObjectAlarm(index);
      expect((await post(`${run}:e/deltas`, openDelta())).status).toBe(200);
      await expect.poll(async () => (await relay(`../runs/${run}/episodes`)).status).toBe(200);
      // the alarm set for the rules' deadline was brought forward: the directory's update is due now
      const at = await runInDurableObject(index, (_i, state) => state.storage.getAlarm());
      expect(at! - Date.now()).toBeLessThan(60_000);
      await runDurableObjectAlarm(index);
      expect(await listed(run)).toMatchObject({ run, episodes: 1 });
      await dueNow(index);
      expect((await stored(env.EPISODE_INDEX, indexId)).tables.length).toBeGreaterThan(0);
      expect(await (await relay(`../runs/${run}/rules`)).json()).toMatchObject({ defaults: false });
    });
  });

  describe("a tokenizer PUT lives as long as its run", () => {
    const putTokenizer = (run: string) =>
      relay(`../runs/${run}/tokenizer`, {
        method: "PUT",
        body: TOKENIZER,
        headers: { "content-type": "application/json" },
      });
    const inR2 = async (run: string) => (await env.ARCHIVE.head(`tokenizers/${run}`)) !== null;

    it("on a run nobody wrote: kept and listed for RETENTION_SECONDS (the defaults rules after it keep it), then freed with its bytes in R2", async () => {
      const run = freshId("tokenizer-only");
      const index = env.EPISODE_INDEX.getByName(`run:${run}`);
      const indexId = env.EPISODE_INDEX.idFromName(`run:${run}`);
      expect((await putTokenizer(run)).status).toBe(200);
      await runDurableObjectAlarm(index);
      await expect.poll(async () => listed(run)).toMatchObject({ run, episodes: 0 });
      const at = await runInDurableObject(index, (_i, state) => state.storage.getAlarm());
      expect(at! - Date.now()).toBeGreaterThan(6 * 86400 * 1000);
      // the defaults asked for after it: nothing of the rules to keep, but the tokenizer still waits
      const defaults = await relay(`../runs/${run}/rules`, { method: "PUT", body: JSON.stringify({ defaults: true }) });
      expect(defaults.status).toBe(200);
      await runDurableObjectAlarm(index);
      expect(await inR2(run)).toBe(true);
      expect((await relay(`../runs/${run}/tokenizer`)).status).toBe(200);
      expect((await stored(env.EPISODE_INDEX, indexId)).tables.length).toBeGreaterThan(0);
      await dueNow(index);
      await expect.poll(async () => stored(env.EPISODE_INDEX, indexId)).toEqual({ tables: [], keys: 0 });
      expect(await inR2(run)).toBe(false);
      expect((await relay(`../runs/${run}/tokenizer`)).status).toBe(404);
      expect(await listed(run)).toBeUndefined();
      // kept again later: the run's lifetime starts over
      expect((await putTokenizer(run)).status).toBe(200);
      expect(await inR2(run)).toBe(true);
      // the alarm, armed at once, may have fired by itself: its directory update may still be on its way
      await runDurableObjectAlarm(index);
      await expect.poll(async () => listed(run)).toMatchObject({ run, episodes: 0 });
    });

    it("on a written run: deleted from R2 when the run's last episode goes and its index is freed", async () => {
      const run = freshId("tokenizer-written");
      const index = env.EPISODE_INDEX.getByName(`run:${run}`);
      const indexId = env.EPISODE_INDEX.idFromName(`run:${run}`);
      const id = `${run}:only`;
      expect((await post(`${id}/deltas`, openDelta())).status).toBe(200);
      await expect.poll(async () => (await relay(`../runs/${run}/episodes`)).status).toBe(200);
      expect((await putTokenizer(run)).status).toBe(200);
      expect(await inR2(run)).toBe(true);
      expect((await relay(id, { method: "DELETE" })).status).toBe(200);
      await expect.poll(async () => (await relay(`../runs/${run}/episodes`)).status).toBe(404);
      await freedByAlarms(index, indexId);
      expect(await inR2(run)).toBe(false);
    });
  });
});

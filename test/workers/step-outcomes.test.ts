// INDEX_SCHEMA 9 (src/objects/registry/step-recount.ts): a step's outcomes (truncated, timed out, errored) and
// response lengths, recounted from the rows of storage a release kept at version 8. The storage is the previous
// release's run index (test/fixtures/storage/release-17eaf78, brought to version 8 by this release's own
// migration 8), its rows given a training identity and how they ended, and its steps as version 8 kept them
// (without those parts). After the upgrade every step equals a recount from the rows the relay lists, and later
// updates of those rows keep it so (a row's part taken back was added by the recount: nothing goes negative).

import { abortAllDurableObjects, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { INDEX_SCHEMA } from "../../src/objects/registry/schemas.js";
import { latestVersion, storedVersion } from "../../src/objects/storage/schema.js";
import { type IndexEntry, type IndexRow, identityOf } from "../../src/protocol/registry/entry.js";
import { groupSummary } from "../../src/protocol/registry/groups.js";
import { recountSteps, type StepJson, stepJson } from "../../src/protocol/registry/steps.js";
import { fromNode, relay } from "./support.js";

const RELEASE = "release-17eaf78";
const INDEX = "run:fixture";

interface Dumped {
  schema: Array<{ type: string; name: string; sql: string }>;
  rows: Record<string, unknown[][]>;
}

/** The release's run index restored as it wrote it (its full-text table rebuilt from its content), then `tweak`. */
async function restoreIndex(tweak: (sql: SqlStorage) => void): Promise<void> {
  const res = await fromNode(env.STORAGE_FIXTURES, `http://fixtures/${RELEASE}/EpisodeIndex-run_fixture.json`);
  expect(res.status).toBe(200);
  const d = (await res.json()) as Dumped;
  // the files share one runtime: schema.test.ts leaves this release's episodes of the fixture run, which
  // would send their own rows to the index restored here; their storage goes first, as on a runtime of its own
  for (const [id] of d.rows.rows ?? [])
    await runInDurableObject(env.EPISODES.getByName(String(id)), async (_instance, state) => {
      await state.storage.deleteAlarm();
      await state.storage.deleteAll();
    });
  await abortAllDurableObjects();
  await runInDurableObject(env.EPISODE_INDEX.getByName(INDEX), async (_instance, state) => {
    await state.storage.deleteAll();
    const sql = state.storage.sql;
    const virtual = d.schema.filter((s) => /^CREATE VIRTUAL TABLE/i.test(s.sql)).map((s) => s.name);
    const derived = (name: string) => virtual.some((v) => name === v || name.startsWith(`${v}_`));
    for (const s of d.schema) if (!derived(s.name) || virtual.includes(s.name)) sql.exec(s.sql);
    for (const [table, rows] of Object.entries(d.rows)) {
      if (derived(table)) continue;
      for (const r of rows) {
        // the index's tables hold no BLOB
        sql.exec(`INSERT INTO "${table}" VALUES (${r.map(() => "?").join(", ")})`, ...(r as SqlStorageValue[]));
      }
    }
    for (const v of virtual) sql.exec(`INSERT INTO "${v}"("${v}") VALUES ('rebuild')`);
    tweak(sql);
  });
}

/** Each row's identity and ending, as if its episode had said so: one truncated, one timed out, one errored. */
const TWEAKS: Record<string, { step: number; stop?: string; truncated?: number; error?: string }> = {
  "fixture:chat_basic": { step: 1, stop: "max_turns" },
  "fixture:multi_trace_links": { step: 1, truncated: 1 },
  "fixture:routing_repair_widen": { step: 2, error: "reported at finish" },
  "fixture:discard_retry": { step: 2 },
};

const listed = async () =>
  ((await (await relay("../runs/fixture/episodes?limit=500")).json()) as { episodes: IndexEntry[] }).episodes;
const steps = async () => ((await (await relay("../runs/fixture/steps")).json()) as { steps: StepJson[] }).steps;

/** The steps recounted from the rows the relay lists, and their complete groups at their members' step. */
async function recounted(): Promise<StepJson[]> {
  const rows = (await listed()) as unknown as IndexRow[];
  const byGroup = new Map<string, IndexRow[]>();
  for (const x of rows) if (x.group) byGroup.set(x.group, [...(byGroup.get(x.group) ?? []), x]);
  const complete = [...byGroup].flatMap(([id, members]) => {
    const g = groupSummary(
      id,
      members.map((x) => ({ ...x, step: identityOf(x).step, kind: identityOf(x).kind })),
    );
    return g.complete
      ? [{ key: g.step === null ? null : { step: g.step, kind: g.kind ?? "" }, zero: g.zeroVariance }]
      : [];
  });
  return [...recountSteps(rows, complete).values()]
    .map((e) => stepJson(e.key, e.counters))
    .sort((a, b) => a.step - b.step || ((a.kind ?? "") < (b.kind ?? "") ? -1 : 1));
}

describe("INDEX_SCHEMA 9: the steps' outcomes recounted from the previous release's rows", () => {
  it("storage at version 8 opens with every step equal to a recount, and stays so as rows change", async () => {
    await restoreIndex((sql) => {
      for (const [id, t] of Object.entries(TWEAKS)) {
        sql.exec(
          "UPDATE rows SET dispatch = ?, kind = 'train', step = ?, stop = COALESCE(?, stop), truncated = COALESCE(?, truncated), error = COALESCE(?, error) WHERE id = ?",
          JSON.stringify({ kind: "train", step: t.step, policy_version: t.step - 1 }),
          t.step,
          t.stop ?? null,
          t.truncated ?? null,
          t.error ?? null,
          id,
        );
      }
      // version 8 as that release would leave it: migration 8, then its steps without the parts version 9 adds
      const v = storedVersion(sql)!;
      for (const m of INDEX_SCHEMA.migrations.slice(v, 8)) m.up(sql);
      const kept = sql.exec<{ step: number; kind: string; counters: string }>("SELECT * FROM steps").toArray();
      expect(kept.length).toBe(2);
      for (const s of kept) {
        const { truncated: _t, timeouts: _o, errored: _e, lengths: _l, ...old } = JSON.parse(s.counters);
        sql.exec("UPDATE steps SET counters = ? WHERE step = ? AND kind = ?", JSON.stringify(old), s.step, s.kind);
      }
      sql.exec("UPDATE schema_version SET version = 8");
    });
    await abortAllDurableObjects();

    const got = await steps();
    expect(
      await runInDurableObject(env.EPISODE_INDEX.getByName(INDEX), (_i, state) => storedVersion(state.storage.sql)),
    ).toBe(latestVersion(INDEX_SCHEMA));
    expect(got).toEqual(await recounted());
    // what the tweaks say: step 1 has two finished rollouts (one truncated, one timed out), step 2 one errored
    const one = got.find((s) => s.step === 1)!;
    expect(one.ended).toEqual({ count: 2, truncated: 1, timeouts: 1, errored: 0 });
    expect(one.output_tokens.mean).not.toBeNull();
    expect(got.find((s) => s.step === 2)!.ended).toMatchObject({ count: 1, errored: 1 });

    // a row rewritten after the upgrade takes back what the recount added: still a recount, never negative
    const row = (await listed()).find((e) => e.id === "fixture:chat_basic")!;
    const { reward: _r, scores: _s, kind: _k, env: _e, step: _st, policy_version: _p, staleness: _x, ...rest } = row;
    await env.EPISODE_INDEX.getByName(INDEX).upsert({
      ...(rest as unknown as IndexRow),
      created: Date.parse(row.created),
      updated: Date.parse(row.updated) + 1,
      ended: row.ended === null ? null : Date.parse(row.ended),
      stop_condition: "agent_completed",
      // as its episode would say with that stop and its calls (INDEX_SCHEMA 13: the trainer's truncation, sent)
      is_truncated: false,
      dispatch: { kind: "train", step: 2, policy_version: 1 },
    });
    const after = await steps();
    expect(after).toEqual(await recounted());
    expect(after.find((s) => s.step === 1)!.ended).toEqual({ count: 1, truncated: 0, timeouts: 1, errored: 0 });
    expect(after.find((s) => s.step === 2)!.ended).toEqual({ count: 2, truncated: 0, timeouts: 0, errored: 1 });
  });
});

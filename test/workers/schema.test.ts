// Versioned schemas (src/objects/storage/schema.ts): storage written by earlier releases (the last before
// versions, test/fixtures/storage/release-89af552, the one before the dispatch identity,
// release-6a9651a, the one before the archive's upload record, release-aed0573, and the one before the record of
// unknown delta keys, release-17eaf78, the one before alerts, release-413b234, and the one before the trainer's
// truncation, release-b14ae00, and the one before the producers' ledger moved into the episode's meta row,
// release-376f6ef, and the one before a running episode's text waited and segments took blocks of ids,
// release-773b8cb, the one before the episode's checkpoints and turns on frames, release-d4e57c7, and the one before
// the bill's cuts to bodies, log and search rows, release-4d54fbd, and the one before the bounded reads of body runs,
// release-14cf2d5; each made by
// running that release: see their README) is restored into this
// release's objects, which upgrade it at construction and answer as that release did; a migration that fails, or storage newer than the release, leaves the object
// refusing with 503 storage_upgrade_failed and its storage untouched.

import { abortAllDurableObjects, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import {
  bodiesIntoRuns,
  boundRuns,
  itemBodies,
  KIND,
  NODES,
  nodeBody,
  scaleOf,
} from "../../src/objects/episode/bodies.js";
import { EPISODE_SCHEMA } from "../../src/objects/episode/schema.js";
import { HUB_SCHEMA } from "../../src/objects/hub/store.js";
import { DIRECTORY_SCHEMA, INDEX_SCHEMA } from "../../src/objects/registry/schemas.js";
import { SEGMENT_BLOCK } from "../../src/objects/registry/search-store.js";
import { rowPages } from "../../src/objects/registry/sql-row.js";
import {
  checkSchema,
  createLatest,
  latestVersion,
  SchemaState,
  storedVersion,
} from "../../src/objects/storage/schema.js";
import type { ItemField } from "../../src/protocol/assembly/fields.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { type RunAggregates, recount } from "../../src/protocol/registry/aggregates.js";
import type { IndexEntry } from "../../src/protocol/registry/entry.js";
import type { GroupJson } from "../../src/protocol/registry/groups.js";
import { episodeReward, TOTAL_KEY } from "../../src/protocol/registry/rewards.js";
import { NO_FILTER } from "../../src/protocol/registry/row-filter.js";
import { parseListQuery } from "../../src/protocol/registry/rows.js";
import { parseSearchQuery } from "../../src/protocol/search/query.js";
import { type Json, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { currentRow } from "../support/index-rows.js";
import { equal, fromNode, getBytes, golden, post, relay } from "./support.js";
import { Watcher } from "./watcher.js";

/** The releases whose storage this one must open: the first before versioned schemas, then one per release that changed one. */
const RELEASES = [
  "release-89af552",
  "release-6a9651a",
  "release-aed0573",
  "release-17eaf78",
  "release-413b234",
  "release-b14ae00",
  "release-376f6ef",
  "release-773b8cb",
  "release-d4e57c7",
  "release-4d54fbd",
  "release-14cf2d5",
];
/** The release the failure cases below spoil. */
const RELEASE = RELEASES[0]!;

interface Dumped {
  class: string;
  name: string;
  schema: Array<{ type: string; name: string; sql: string }>;
  rows: Record<string, unknown[][]>;
}

/** Any of the four namespaces (their stubs' RPC types differ; only storage is touched here). */
interface Namespace {
  getByName(name: string): unknown;
}

interface Observed {
  commit: string;
  observed: Record<string, unknown>;
}

async function fixture<T>(file: string, release = RELEASE): Promise<T> {
  const res = await fromNode(env.STORAGE_FIXTURES, `http://fixtures/${release}/${file}`);
  if (!res.ok) throw new Error(`storage fixture ${file}: ${res.status}`);
  return (await res.json()) as T;
}

function unbase64(s: string): ArrayBuffer {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out.buffer;
}

async function sha256(b: Uint8Array): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", b));
  return [...d].map((x) => x.toString(16).padStart(2, "0")).join("");
}

/** Replace the object's storage with what the release wrote (`tweak` may spoil it first). */
async function restore(ns: Namespace, d: Dumped, tweak?: (sql: SqlStorage) => void): Promise<void> {
  await runInDurableObject(ns.getByName(d.name) as DurableObjectStub, async (_instance, state) => {
    await state.storage.deleteAll();
    const sql = state.storage.sql;
    // a full-text table (a run's search, FTS5 over its `segments`) makes its own shadow tables and
    // reads its rows from its content table: it is created, not filled, and its index rebuilt after
    const virtual = d.schema.filter((s) => /^CREATE VIRTUAL TABLE/i.test(s.sql)).map((s) => s.name);
    const shadows = ["data", "idx", "content", "docsize", "config"]; // FTS5's own tables beside a virtual one
    const derived = (name: string) => virtual.some((v) => name === v || shadows.some((x) => name === `${v}_${x}`));
    for (const s of d.schema) if (!derived(s.name) || virtual.includes(s.name)) sql.exec(s.sql);
    for (const [table, rows] of Object.entries(d.rows)) {
      if (derived(table)) continue;
      // a dump holds every column SELECT * gives, generated ones too (the log's seq and part from EPISODE_SCHEMA 8):
      // those are computed again, not inserted
      const columns = sql
        .exec<{ name: string; hidden: number }>(`SELECT name, hidden FROM pragma_table_xinfo('${table}')`)
        .toArray()
        .filter((c) => c.hidden !== 1);
      const stored = columns.map((c) => c.hidden === 0);
      const names = columns.filter((c) => c.hidden === 0).map((c) => `"${c.name}"`);
      for (const r of rows) {
        const values = r
          .map((v) => (v !== null && typeof v === "object" && "bin" in v ? unbase64((v as { bin: string }).bin) : v))
          .filter((_v, i) => r.length !== columns.length || stored[i]) as SqlStorageValue[];
        sql.exec(
          `INSERT INTO "${table}" (${names.slice(0, values.length).join(", ")}) VALUES (${values.map(() => "?").join(", ")})`,
          ...values,
        );
      }
    }
    for (const v of virtual) {
      // a contentless table (the search since INDEX_SCHEMA 17) cannot rebuild: it is filled from the packs' view
      const contentless = /content\s*=\s*''/i.test(d.schema.find((s) => s.name === v)?.sql ?? "");
      if (contentless)
        sql.exec(`INSERT INTO "${v}" (rowid, body, role, tool) SELECT id, body, role, tool FROM segments`);
      else sql.exec(`INSERT INTO "${v}"("${v}") VALUES ('rebuild')`);
    }
    tweak?.(sql);
  });
}

async function versionOf(ns: Namespace, name: string): Promise<number | null> {
  return runInDurableObject(ns.getByName(name) as DurableObjectStub, (_i, state) => storedVersion(state.storage.sql));
}

const EPISODES = ["chat_basic", "multi_trace_links", "routing_repair_widen", "discard_retry"];

describe.each(RELEASES)("storage written by an earlier release (%s) is upgraded", (release) => {
  it("every object opens it at this release's version and answers as that release did", async () => {
    const seen = await fixture<Observed>("observed.json", release);
    const dumps = await Promise.all([
      ...EPISODES.map((n) => fixture<Dumped>(`Episode-fixture_${n}.json`, release)),
      fixture<Dumped>("EpisodeIndex-run_fixture.json", release),
      fixture<Dumped>("RunDirectory-runs.json", release),
      fixture<Dumped>("ViewerHub-0_fixture_chat_basic.json", release),
    ]);
    const ns: Record<string, Namespace> = {
      Episode: env.EPISODES,
      EpisodeIndex: env.EPISODE_INDEX,
      RunDirectory: env.RUN_DIRECTORY,
      ViewerHub: env.HUBS,
    };
    for (const d of dumps) await restore(ns[d.class]!, d);
    await abortAllDurableObjects(); // as a deploy does: the next request starts this release's objects on the old storage

    // the run's list and the directory first: nothing below has written to them yet
    // every field that release answered, the same (later releases add fields: rows it wrote have them null)
    const list = (await (await relay("../runs/fixture/episodes")).json()) as {
      episodes: Array<Record<string, unknown>>;
    };
    // the reward is the trainer's since INDEX_SCHEMA 8 (issue 40): a recount, where that release showed its weighted mean
    const observedList = seen.observed["run:episodes"] as { episodes: Array<Record<string, unknown>> };
    const recounted: Array<Record<string, unknown>> = await Promise.all(
      observedList.episodes.map(async (e) => ({ ...e, reward: await recountedReward(e) })),
    );
    expect(recounted.find((e) => e.id === "fixture:chat_basic")?.reward).toBe(1.125);
    expect(list).toMatchObject({ ...observedList, episodes: recounted });
    // rows written before groups existed join none until rewritten
    if (release === "release-89af552")
      expect(list.episodes.map((e) => e.group ?? null)).toEqual(list.episodes.map(() => null));
    // the suite's files share one runtime: a run another file wrote may reach the directory after the
    // restore (its index's alarm); the fixture's runs answer as that release did, the others aside
    const observedRuns = seen.observed.runs as { runs: Array<{ run: string }>; cursor: string | null };
    const fixtureRuns = new Set(observedRuns.runs.map((r) => r.run));
    const runs = (await (await relay("../runs?limit=500")).json()) as typeof observedRuns;
    expect(runs.runs.filter((r) => fixtureRuns.has(r.run))).toEqual(observedRuns.runs);
    if (runs.runs.length === observedRuns.runs.length) expect(runs).toEqual(observedRuns);

    for (const name of EPISODES) {
      const id = `fixture:${name}`;
      const o = seen.observed[id] as {
        frames: number;
        finished: boolean;
        bytes: number;
        sha256: string;
        status: Record<string, unknown>;
      };
      const got = await getBytes(id);
      // the live one (a finished one is archived as it wakes: its bodies and log leave SQLite)
      if (!o.finished) await keyedWithoutRowid(dumps.find((d) => d.class === "Episode" && d.name === id)!);
      expect(got.length, id).toBe(o.bytes);
      expect(await sha256(got), id).toBe(o.sha256);
      const status = (await (await relay(`${id}/status`)).json()) as Record<string, unknown>;
      for (const k of [
        "id",
        "status",
        "seq",
        "traces",
        "nodes",
        "calls",
        "frame_bytes",
        "episode_bytes",
        "created",
        "updated",
        "error",
      ]) {
        expect(status[k], `${id} status.${k}`).toEqual(o.status[k]);
      }
      const c = await golden(name);
      if (o.finished) expect(equal(got, c.episode!), `${id}: the golden episode`).toBe(true);
      else {
        // the live one goes on where the release left it, with the same producer, and finishes exactly
        const producer = new ProducerCursor("fixture");
        for (const f of c.frames.slice(0, o.frames)) {
          producer.envelope(f);
          producer.acknowledge();
        }
        for (const f of c.frames.slice(o.frames)) {
          const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(f)));
          expect(r.status, await r.clone().text()).toBe(200);
          expect(await r.json()).toMatchObject({ applied: 1, duplicates: 0 });
          producer.acknowledge();
        }
        (await post(`${id}/reply`, c.reply)).body?.cancel();
        expect(equal(await getBytes(id), c.episode!), `${id}: finished after the upgrade`).toBe(true);
        // its nodes written before the upgrade have no parent or role stored: the row reads their bodies
        const rows = (await (await relay("../runs/fixture/episodes")).json()) as {
          episodes: Array<{ id: string; live: { branches: number } | null }>;
        };
        const ep = toJson(decodeLossless(c.episode!)) as { traces: Array<{ nodes: Array<{ parent: number | null }> }> };
        const leaves = ep.traces.reduce(
          (n, t) => n + t.nodes.filter((_x, i) => !t.nodes.some((y) => y.parent === i)).length,
          0,
        );
        expect(rows.episodes.find((e) => e.id === id)?.live?.branches, `${id}: branches of nodes stored before`).toBe(
          leaves,
        );
      }
      expect(await versionOf(env.EPISODES, id)).toBe(latestVersion(EPISODE_SCHEMA));
    }

    // the hub kept its row through the upgrade; a watcher on it gets the finished episode
    const w = await Watcher.open("fixture:chat_basic");
    await w.read((x) => x.finished !== null);
    expect(equal(w.episodeBytes(), (await golden("chat_basic")).episode!)).toBe(true);
    // the hub holds its row while its watcher is connected (it drops its storage when the last one leaves)
    expect(await versionOf(env.HUBS, "0/fixture:chat_basic")).toBe(latestVersion(HUB_SCHEMA));
    w.close();
    // a finished episode that release kept in SQLite is archived by its alarm (set on wake), the same bytes after
    expect(await runDurableObjectAlarm(env.EPISODES.getByName("fixture:multi_trace_links"))).toBe(true);
    expect(((await (await relay("fixture:multi_trace_links/status")).json()) as { archived: boolean }).archived).toBe(
      true,
    );
    const archived = await relay("fixture:multi_trace_links");
    expect(archived.headers.get("x-episode-archive")).toBe("1");
    expect(equal(new Uint8Array(await archived.arrayBuffer()), (await golden("multi_trace_links")).episode!)).toBe(
      true,
    );
    expect(await versionOf(env.EPISODE_INDEX, "run:fixture")).toBe(latestVersion(INDEX_SCHEMA));
    expect(await versionOf(env.RUN_DIRECTORY, "runs")).toBe(latestVersion(DIRECTORY_SCHEMA));
    await everyRewardRecounted();
    await alertsOnUpgradedRun();
    await textStillFound(release);
  });
});

/** A `body_runs` row (EPISODE_SCHEMA 12). */
type BodyRun = {
  tnum: number;
  kind: number;
  idx: number;
  first: number;
  parts: number;
  top: number;
  vers: string;
  ends: string;
};

/** Every live body of `runs` by `tnum/kind/idx/ver`, base64, cut from the parts (base64 by key) each run spans. */
function bodiesOfRuns(runs: readonly BodyRun[], parts: ReadonlyMap<number, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const r of runs) {
    let stream = "";
    for (let k = r.first; k < r.first + r.parts; k++) stream += atob(parts.get(k) ?? "");
    const ends = JSON.parse(r.ends) as number[];
    (JSON.parse(r.vers) as number[]).forEach((ver, k) => {
      if (ver >= 0)
        out[`${r.tnum}/${r.kind}/${r.idx + k}/${ver}`] = btoa(stream.slice(k === 0 ? 0 : ends[k - 1], ends[k]));
    });
  }
  return out;
}

/** The release's runs as it wrote them (version 12 on: eight columns, no scale or last). */
function dumpedRuns(d: Dumped): BodyRun[] {
  return ((d.rows.body_runs ?? []) as Array<[number, number, number, number, number, number, string, string]>).map(
    ([tnum, kind, idx, first, parts, top, vers, ends]) => ({ tnum, kind, idx, first, parts, top, vers, ends }),
  );
}

/** The release's parts (version 12 on) by number, base64. */
function dumpedParts(d: Dumped): Map<number, string> {
  return new Map(((d.rows.body_parts ?? []) as Array<[number, { bin: string }]>).map(([k, data]) => [k, data.bin]));
}

/**
 * Every body the release wrote by `tnum/kind/idx/ver`, base64: in runs (version 12 on), else from the `bodies` table
 * of version 11 (tnum, kind, idx, ver, part, data), its parts joined.
 */
function dumpedBodies(d: Dumped): Record<string, string> {
  const want = bodiesOfRuns(dumpedRuns(d), dumpedParts(d));
  const parts = new Map<string, Array<[number, string]>>();
  for (const [tnum, kind, idx, ver, part, data] of (d.rows.bodies ?? []) as Array<
    [number, number, number, number, number, { bin: string }]
  >) {
    const key = `${tnum}/${kind}/${idx}/${ver}`;
    parts.set(key, [...(parts.get(key) ?? []), [part, data.bin]]);
  }
  for (const [key, ps] of parts)
    want[key] = btoa(
      ps
        .sort((x, y) => x[0] - y[0])
        .map(([, b]) => atob(b))
        .join(""),
    );
  return want;
}

/**
 * EPISODE_SCHEMA 7: node metadata is keyed without rowids, every row the release wrote kept; the log, rows of large
 * blobs, stays a rowid table.
 * EPISODE_SCHEMA 8: the log is keyed by its rowid alone, every frame kept.
 * EPISODE_SCHEMA 12: the bodies in runs (bodies.ts): every body the release wrote, at its index and version, the same
 * bytes; the parts a rowid table keyed by its rowid alone, the runs' small rows without rowids; the table of version
 * 11 gone, and the migration run again changes nothing.
 * EPISODE_SCHEMA 13: the runs keyed by scale (bodies.ts), the same bodies; run again, nothing changes.
 */
async function keyedWithoutRowid(d: Dumped): Promise<void> {
  const got = await runInDurableObject(env.EPISODES.getByName(d.name), (_i, state) => {
    const sql = state.storage.sql;
    const tables = ["frames", "body_parts", "body_runs", "node_meta"];
    const created = Object.fromEntries(
      tables.map((t) => [t, sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE name = ?", t).one().sql]),
    );
    const indexes = sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name LIKE 'bod%' AND sql IS NOT NULL",
      )
      .toArray()
      .map((r) => r.name);
    const old = sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'bodies'").toArray().length;
    const rows = Object.fromEntries(
      ["frames", "node_meta"].map((t) => [t, sql.exec(`SELECT * FROM ${t}`).toArray().length]),
    );
    const log = sql
      .exec<{ seq: number; part: number; data: ArrayBuffer }>("SELECT seq, part, data FROM frames ORDER BY k")
      .toArray()
      .map((r) => [r.seq, r.part, btoa(String.fromCharCode(...new Uint8Array(r.data)))]);
    const bodies = () => {
      const runs = sql.exec<BodyRun>("SELECT * FROM body_runs").toArray();
      const parts = new Map(
        sql
          .exec<{ k: number; data: ArrayBuffer }>("SELECT k, data FROM body_parts")
          .toArray()
          .map((p) => [p.k, btoa(String.fromCharCode(...new Uint8Array(p.data)))]),
      );
      return { out: bodiesOfRuns(runs, parts), runs: runs.length, parts: parts.size };
    };
    const first = bodies();
    // again: nothing to do
    bodiesIntoRuns(sql);
    boundRuns(sql);
    return { created, indexes, old, rows, log, bodies: first, again: bodies() };
  });
  // EPISODE_SCHEMA 8: the log keyed by one integer (seq << 16 | part), its frames as the release wrote them
  expect(got.created.frames, d.name).toMatch(/k INTEGER PRIMARY KEY/);
  // (seq, part, data) as releases before it wrote the log; (k, data, seq, part) from it on (seq and part generated)
  const written = ((d.rows.frames ?? []) as Array<[number, number | { bin: string }, unknown]>).map(
    ([a, b, c]): [number, number, { bin: string }] =>
      typeof b === "object" ? [Math.floor(a / 65536), a % 65536, b] : [a, b, c as { bin: string }],
  );
  expect(got.log, d.name).toEqual(
    [...written].sort((x, y) => x[0] - y[0] || x[1] - y[1]).map(([seq, part, data]) => [seq, part, data.bin]),
  );
  expect(got.created.node_meta, d.name).toMatch(/WITHOUT ROWID$/);
  expect(got.created.body_runs, d.name).toMatch(/WITHOUT ROWID$/);
  for (const t of ["frames", "body_parts"]) expect(got.created[t], `${d.name}: ${t}`).not.toMatch(/WITHOUT ROWID/);
  expect(got.created.body_parts, d.name).toMatch(/k INTEGER PRIMARY KEY/);
  expect(got.indexes).toEqual([]);
  expect(got.old, `${d.name}: the bodies table of version 11 is gone`).toBe(0);
  expect(got.rows).toEqual({ frames: d.rows.frames?.length ?? 0, node_meta: d.rows.node_meta?.length ?? 0 });
  const want = dumpedBodies(d);
  expect(got.bodies.out, d.name).toEqual(want);
  // consecutive bodies of a list share a run: fewer runs than bodies where a list has more than one
  if (Object.keys(want).length > 0 && !d.rows.body_runs)
    expect(got.bodies.runs, d.name).toBeLessThan(Object.keys(want).length);
  expect(got.again, d.name).toEqual(got.bodies);
}

describe("body runs keyed by scale (EPISODE_SCHEMA 13) on the previous release's storage", () => {
  it("every episode of release-14cf2d5: each body the same bytes, by its run and by the readers; run again, nothing changes", async () => {
    const release = "release-14cf2d5";
    const fieldOf = new Map(Object.entries(KIND).map(([f, k]) => [k, f as ItemField]));
    const b64 = (b: Uint8Array) => btoa(String.fromCharCode(...b));
    for (const name of EPISODES) {
      const d = await fixture<Dumped>(`Episode-fixture_${name}.json`, release);
      const id = `scale13-${Date.now().toString(36)}:${name}`;
      await restore(env.EPISODES, { ...d, name: id });
      const got = await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => {
        const sql = state.storage.sql;
        const before = storedVersion(sql);
        // as the object opens it at construction: every migration it lacks, in one transaction
        const schema = new SchemaState(state.storage, EPISODE_SCHEMA);
        schema.open();
        const stored = () => ({
          runs: sql
            .exec<BodyRun & { scale: number; last: number }>("SELECT * FROM body_runs ORDER BY tnum, kind, idx, first")
            .toArray(),
          parts: sql
            .exec<{ k: number; data: ArrayBuffer }>("SELECT k, data FROM body_parts ORDER BY k")
            .toArray()
            .map((p) => [p.k, b64(new Uint8Array(p.data))] as [number, string]),
          key: sql
            .exec<{ name: string; pk: number }>(
              "SELECT name, pk FROM pragma_table_info('body_runs') WHERE pk > 0 ORDER BY pk",
            )
            .toArray()
            .map((c) => c.name),
        });
        const first = stored();
        // every live body through bodies.ts's readers (the bounded query), at its version
        const read: Record<string, string> = {};
        for (const r of first.runs)
          (JSON.parse(r.vers) as number[]).forEach((ver, k) => {
            if (ver < 0) return;
            const idx = r.idx + k;
            const body =
              r.kind === NODES
                ? nodeBody(sql, r.tnum, idx, ver)
                : itemBodies(sql, r.tnum, fieldOf.get(r.kind)!, idx, idx + 1)[0]!;
            read[`${r.tnum}/${r.kind}/${idx}/${ver}`] = b64(body);
          });
        boundRuns(sql);
        return { before, after: storedVersion(sql), failed: schema.failed, first, read, again: stored() };
      });
      expect(got.failed, name).toBeNull();
      expect([got.before, got.after], name).toEqual([12, latestVersion(EPISODE_SCHEMA)]);
      expect(got.first.key).toEqual(["tnum", "kind", "scale", "idx", "first"]);
      const want = dumpedBodies(d);
      expect(Object.keys(want).length, name).toBeGreaterThan(0);
      // the parts untouched, every run's columns as written; each body the same bytes, cut from its run and read
      expect(got.first.parts, name).toEqual([...dumpedParts(d)].sort((a, b) => a[0] - b[0]));
      const key = (r: BodyRun) => [r.tnum, r.kind, r.idx, r.first].join("/");
      expect(
        got.first.runs.map(({ scale: _s, last: _l, ...r }) => r),
        name,
      ).toEqual(dumpedRuns(d).sort((a, b) => a.tnum - b.tnum || a.kind - b.kind || a.idx - b.idx || a.first - b.first));
      expect(bodiesOfRuns(got.first.runs, new Map(got.first.parts)), name).toEqual(want);
      expect(got.read, name).toEqual(want);
      // each run's last index and scale, from its entries
      for (const r of got.first.runs) {
        const entries = (JSON.parse(r.ends) as number[]).length;
        expect([r.last, r.scale], `${name} ${key(r)}`).toEqual([r.idx + entries - 1, scaleOf(entries)]);
      }
      expect(got.again, name).toEqual(got.first);
    }
  });
});

/** The alert tables came with INDEX_SCHEMA 10: the upgraded run takes alerts, and reads them back. */
async function alertsOnUpgradedRun(): Promise<void> {
  const body = {
    webhooks: [{ url: "https://hooks.example.com/fixture", secret: "fixture-secret-0123" }],
    rules: [{ id: "failing", kind: "failure_rate", above: 0.5, window: 2 }],
  };
  const set = await relay("../runs/fixture/alerts", { method: "PUT", body: JSON.stringify(body) });
  expect(set.status, await set.clone().text()).toBe(200);
  const got = (await (await relay("../runs/fixture/alerts")).json()) as Record<string, unknown>;
  expect(got).toMatchObject({ rules: [{ id: "failing", window: 2 }], pending: 0, recent: [], deliveries: [] });
}

/**
 * INDEX_SCHEMA 11: no trigger writes FTS5 any more (the index does, once per upsert); the text that release indexed
 * is found as a scan finds it.
 */
async function textStillFound(release: string): Promise<void> {
  const index = env.EPISODE_INDEX.getByName("run:fixture");
  const triggers = await runInDurableObject(index as DurableObjectStub, (_i, state) =>
    state.storage.sql.exec("SELECT name FROM sqlite_master WHERE type = 'trigger'").toArray(),
  );
  expect(triggers).toEqual([]);
  // the releases with search indexed its text; the others' episodes send theirs when asked again (index == scan in all)
  const searched = [
    "release-aed0573",
    "release-17eaf78",
    "release-413b234",
    "release-b14ae00",
    "release-376f6ef",
    "release-773b8cb",
    "release-d4e57c7",
  ].includes(release);
  // INDEX_SCHEMA 14: each episode's segments have ids in its row's block, and no index of their own
  const blocks = await runInDurableObject(index as DurableObjectStub, (_i, state) => ({
    segments: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM segments").one().n,
    outside: state.storage.sql
      .exec<{ n: number }>(
        `SELECT COUNT(*) AS n FROM segments s LEFT JOIN rows r ON r.id = s.episode
         WHERE r.seg_base IS NULL OR s.id NOT BETWEEN r.seg_base * ${SEGMENT_BLOCK} AND (r.seg_base + 1) * ${SEGMENT_BLOCK} - 1`,
      )
      .one().n,
    indexes: state.storage.sql
      .exec("SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'segments_by_episode'")
      .toArray(),
    // INDEX_SCHEMA 17: the text in packs (segments a view of them), FTS5 contentless, a document per segment
    kinds: state.storage.sql
      .exec<{ name: string; type: string }>(
        "SELECT name, type FROM sqlite_master WHERE name IN ('segments', 'segment_packs') ORDER BY name",
      )
      .toArray(),
    fts: state.storage.sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE name = 'search'").one().sql,
    documents: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM search_docsize").one().n,
  }));
  expect(blocks.outside).toBe(0);
  expect(blocks.indexes).toEqual([]);
  expect(blocks.kinds).toEqual([
    { name: "segment_packs", type: "table" },
    { name: "segments", type: "view" },
  ]);
  expect(blocks.fts).toMatch(/content\s*=\s*''/);
  expect(blocks.documents).toBe(blocks.segments);
  if (searched) expect(blocks.segments).toBeGreaterThan(0);
  for (const word of ["mergesort", "calculator", "route"]) {
    const found = await index.searchAgainstScan(word, 20, 1);
    expect(found.indexFound, word).toBe(found.scanFound);
    if (searched) expect(found.indexFound, word).toBe(1);
  }
}

/** An observed row's reward by the trainer's rule: over the golden episode's traces (finished), else its own rewards. */
async function recountedReward(e: Record<string, unknown>): Promise<number | null> {
  const name = String(e.id).replace(/^fixture:/, "");
  if (e.status !== "finished" || !EPISODES.includes(name)) return episodeReward([(e.rewards ?? null) as Json]).reward;
  const ep = toJson(decodeLossless((await golden(name)).episode!)) as { traces: Array<{ rewards?: Json }> };
  return episodeReward(ep.traces.map((t) => t.rewards ?? null)).reward;
}

/**
 * After the upgrade: the episode of several traces was asked by the index's alarm and sent every trace's rewards;
 * every row's reward, the run's reward statistics and each group's equal a recount from the rows.
 */
async function everyRewardRecounted(): Promise<void> {
  await runDurableObjectAlarm(env.EPISODE_INDEX.getByName("run:fixture"));
  type Row = IndexEntry & { trace_rewards?: Json[] | null };
  const rows = async () => ((await (await relay("../runs/fixture/episodes")).json()) as { episodes: Row[] }).episodes;
  await expect
    .poll(async () => (await rows()).find((r) => r.id === "fixture:multi_trace_links")?.trace_rewards?.length)
    .toBe(3);
  const all = await rows();
  for (const r of all) expect(r.reward, r.id).toBe(await recountedReward(r as unknown as Record<string, unknown>));
  const agg = ((await (await relay("../runs/fixture")).json()) as { aggregates: RunAggregates }).aggregates;
  const finished = all.filter((r) => r.status === "finished" && r.reward !== null).map((r) => r.reward!);
  expect(agg.finished_rewards[TOTAL_KEY]?.count).toBe(finished.length);
  expect(agg.finished_rewards[TOTAL_KEY]?.mean).toBeCloseTo(finished.reduce((a, b) => a + b, 0) / finished.length, 9);
  const groups = (await (await relay("../runs/fixture/groups")).json()) as { groups: GroupJson[] };
  expect(groups.groups.length).toBeGreaterThan(0);
  for (const g of groups.groups) {
    const members = all.filter((r) => r.group === g.id && r.status === "finished" && r.reward !== null);
    const mean = members.length ? members.reduce((a, r) => a + r.reward!, 0) / members.length : null;
    expect(g.mean_reward, g.id).toBe(mean);
  }
}

describe("turns as prime-rl counts them (INDEX_SCHEMA 12) on the previous release's storage", () => {
  it("each row's episode counts them again, asked a page at a time; a row whose episode is gone shows none counted", async () => {
    const release = "release-413b234";
    const kept = EPISODES.filter((n) => n !== "discard_retry");
    const dumps = await Promise.all([
      ...kept.map((n) => fixture<Dumped>(`Episode-fixture_${n}.json`, release)),
      fixture<Dumped>("EpisodeIndex-run_fixture.json", release),
    ]);
    for (const d of dumps) await restore(d.class === "Episode" ? env.EPISODES : env.EPISODE_INDEX, d);
    // the live rollout's episode is gone (its row stays in the index): nothing can count its turns
    await runInDurableObject(env.EPISODES.getByName("fixture:discard_retry"), (_i, state) => state.storage.deleteAll());
    await abortAllDurableObjects();
    type Row = IndexEntry & { turns: number | null };
    const rows = async () => ((await (await relay("../runs/fixture/episodes")).json()) as { episodes: Row[] }).episodes;
    const meanTurns = async () =>
      ((await (await relay("../runs/fixture")).json()) as { aggregates: RunAggregates }).aggregates.mean_turns;
    // upgraded, before any episode answered: every row uncounted, no mean
    const before = await rows();
    expect(before.map((r) => r.turns)).toEqual(before.map(() => null));
    expect(await meanTurns()).toBeNull();
    // the rows are read a page at a time (by id), every one once
    const paged = await runInDurableObject(env.EPISODE_INDEX.getByName("run:fixture"), (_i, state) =>
      [...rowPages(state.storage.sql, 3)].map((p) => p.map((r) => r.id)),
    );
    expect(paged.map((p) => p.length)).toEqual([3, 1]);
    expect(paged.flat()).toEqual(before.map((r) => r.id).sort());

    await runDurableObjectAlarm(env.EPISODE_INDEX.getByName("run:fixture"));
    await expect.poll(async () => (await rows()).filter((r) => r.turns !== null).length).toBe(kept.length);
    const assistants = async (name: string) => {
      const ep = toJson(decodeLossless((await golden(name)).episode!)) as {
        traces: Array<{ nodes: Array<{ message?: { role?: string } }> }>;
      };
      return ep.traces.reduce((n, t) => n + t.nodes.filter((x) => x.message?.role === "assistant").length, 0);
    };
    const after = await rows();
    const expected: Record<string, number | null> = { "fixture:discard_retry": null };
    for (const n of kept) expected[`fixture:${n}`] = await assistants(n);
    expect(Object.fromEntries(after.map((r) => [r.id, r.turns]))).toEqual(expected);
    // the multi-trace rollout: every trace's assistant nodes (2 + 1 + 1)
    expect(expected["fixture:multi_trace_links"]).toBe(4);
    // the mean over the counted rows only: the uncounted one is no 0 in it
    const counted = kept.map((n) => expected[`fixture:${n}`]!);
    expect(await meanTurns()).toBe(counted.reduce((a, b) => a + b, 0) / counted.length);
    // the list's turn bound: an uncounted row matches none
    const atLeast = (await (await relay("../runs/fixture/episodes?min_turns=0")).json()) as { episodes: Row[] };
    expect(atLeast.episodes.map((r) => r.id).sort()).toEqual(kept.map((n) => `fixture:${n}`).sort());
  });
});

describe("truncation as the trainer counts it (INDEX_SCHEMA 13) on the previous release's storage", () => {
  it("is_timeout keeps what `truncated` held; each row's episode counts is_truncated again; a stop at a limit counts at once", async () => {
    const release = "release-b14ae00";
    const seen = await fixture<Observed>("observed.json", release);
    const kept = EPISODES.filter((n) => n !== "discard_retry");
    const dumps = await Promise.all([
      ...kept.map((n) => fixture<Dumped>(`Episode-fixture_${n}.json`, release)),
      fixture<Dumped>("EpisodeIndex-run_fixture.json", release),
    ]);
    // as if chat_basic had stopped at max_turns (that release counted truncation from the stop alone), and
    // routing_repair_widen had timed out (that release's `truncated` column: the first trace's is_timeout)
    const tweak = (sql: SqlStorage) => {
      sql.exec("UPDATE rows SET stop = 'max_turns' WHERE id = 'fixture:chat_basic'");
      sql.exec("UPDATE rows SET truncated = 1 WHERE id = 'fixture:routing_repair_widen'");
    };
    for (const d of dumps)
      await restore(
        d.class === "Episode" ? env.EPISODES : env.EPISODE_INDEX,
        d,
        d.class === "Episode" ? undefined : tweak,
      );
    // the live rollout's episode is gone (its row stays in the index): nothing can count its truncation
    await runInDurableObject(env.EPISODES.getByName("fixture:discard_retry"), (_i, state) => state.storage.deleteAll());
    await abortAllDurableObjects();
    type Row = IndexEntry & { flags?: Array<{ rule: string }> };
    const truncation = (all: Row[]) =>
      Object.fromEntries(all.map((r) => [r.id, [r.is_truncated, r.is_timeout, r.truncated]]));
    const ids = (all: Row[]) => all.map((r) => r.id).sort();

    // upgraded, before any episode answered (read in one turn of the object: no episode's row comes between)
    const index = env.EPISODE_INDEX.getByName("run:fixture");
    const before = await runInDurableObject(index, (instance, state) => {
      const list = (q: string) =>
        (instance.list(parseListQuery(new URLSearchParams(q)), null)?.episodes ?? []) as Row[];
      const indexes = state.storage.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'rows_is_%'")
        .toArray()
        .map((r) => r.name)
        .sort();
      return {
        all: list(""),
        truncated: ids(list("is_truncated=1")),
        untruncated: ids(list("is_truncated=0")),
        timeout: ids(list("is_timeout=1")),
        alias: ids(list("truncated=1")),
        flagged: ids(list("flag=rewarded-truncated")),
        indexes,
      };
    });
    // that release showed no row as `truncated` (timed out); the timeout is now under both names, and truncated
    // only where the stop says so (the rest not counted)
    const observed = (seen.observed["run:episodes"] as { episodes: Array<{ id: string; truncated: boolean }> })
      .episodes;
    expect(observed.every((e) => e.truncated === false)).toBe(true);
    expect(truncation(before.all)).toEqual({
      "fixture:chat_basic": [true, false, false],
      "fixture:multi_trace_links": [null, false, false],
      "fixture:routing_repair_widen": [null, true, true],
      "fixture:discard_retry": [null, false, false],
    });
    expect(before.truncated).toEqual(["fixture:chat_basic"]);
    expect(before.untruncated).toEqual([]); // not counted matches neither
    expect(before.timeout).toEqual(["fixture:routing_repair_widen"]);
    expect(before.alias).toEqual(["fixture:routing_repair_widen"]); // the deprecated alias
    // the reward rules' flags recounted: a full reward (1.125) on a rollout now truncated
    expect(before.flagged).toEqual(["fixture:chat_basic"]);
    expect(before.indexes).toEqual(["rows_is_timeout", "rows_is_truncated"]);

    // the index's alarm asks the episodes of uncounted rows again: each counts from its calls
    await runDurableObjectAlarm(index);
    type Api = { episodes: Row[] };
    const rows = async (q = "") => ((await (await relay(`../runs/fixture/episodes${q}`)).json()) as Api).episodes;
    // each answer comes by an RPC to its episode (woken, its storage upgraded): more than poll's 1 s under load
    await expect
      .poll(async () => (await rows()).filter((r) => r.is_truncated !== null).length, { timeout: 30_000 })
      .toBe(kept.length);
    const recounted: Record<string, [boolean | null, boolean, boolean]> = {
      "fixture:discard_retry": [null, false, false],
    };
    for (const n of kept) {
      type Call = { finish_reason?: Json; error?: Json };
      const ep = toJson(decodeLossless((await golden(n)).episode!)) as {
        traces: Array<{ stop_condition?: Json; calls?: Call[]; is_timeout?: Json }>;
      };
      const limits = ["max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"];
      const trainer = ep.traces.some((t) => {
        const ok = (t.calls ?? []).filter((c) => c.error === undefined || c.error === null);
        return limits.includes(t.stop_condition as string) || ok.at(-1)?.finish_reason === "length";
      });
      // chat_basic stands on its stop in the index (not asked again: no call can undo a limit); the others are
      // their episodes' own word, the timeout too (routing_repair_widen's episode says it did not time out)
      const timeout = ep.traces[0]?.is_timeout === true;
      recounted[`fixture:${n}`] = [n === "chat_basic" ? true : trainer, timeout, timeout];
    }
    expect(truncation(await rows())).toEqual(recounted);
    expect(ids(await rows("?is_truncated=0"))).toEqual(["fixture:multi_trace_links", "fixture:routing_repair_widen"]);
  });
});

describe("a live row's update writes its row only (INDEX_SCHEMA 15) on the previous release's storage", () => {
  it("the list's indexes hold the ended rows, the live one is listed as before; the saved counters are the ended rows'", async () => {
    const release = "release-773b8cb";
    const seen = await fixture<Observed>("observed.json", release);
    await restore(env.EPISODE_INDEX, await fixture<Dumped>("EpisodeIndex-run_fixture.json", release));
    await abortAllDurableObjects();
    const index = env.EPISODE_INDEX.getByName("run:fixture");
    const got = await runInDurableObject(index, (instance, state) => {
      const sql = state.storage.sql;
      const list = (q: string) =>
        (instance.list(parseListQuery(new URLSearchParams(q)), null)?.episodes ?? []).map((e) => e.id);
      const rows = [...rowPages(sql)].flat();
      const state_ = (k: string) =>
        sql.exec<{ v: string }>("SELECT v FROM state WHERE k = ?", k).toArray()[0]?.v ?? null;
      const partial = sql
        .exec<{ name: string; sql: string }>(
          "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'rows'",
        )
        .toArray();
      return {
        version: storedVersion(sql),
        all: list(""),
        live: list("status=live"),
        finished: list("status=finished"),
        rows: rows.map((r) => ({ id: r.id, status: r.status, updated: r.updated })),
        counters: state_("counters"),
        settled: JSON.parse(state_("settled") ?? "null") as unknown,
        settledExpected: recount(rows.filter((r) => r.status !== "live")).counters,
        aggregates: instance.aggregates("fixture"),
        recounted: recount(rows).counters,
        byUpdate: partial
          .filter((i) => /\bupdated\b/.test(i.sql))
          .map((i) => [i.name, /status <> 'live'/.test(i.sql) || i.name === "rows_live"]),
      };
    });
    expect(got.version).toBe(latestVersion(INDEX_SCHEMA));
    // listed as that release listed them: every row by update, the live one among them
    const observed = (seen.observed["run:episodes"] as { episodes: Array<{ id: string }> }).episodes.map((e) => e.id);
    expect(got.all).toEqual(observed);
    const byUpdate = [...got.rows].sort((a, b) => b.updated - a.updated || (a.id < b.id ? 1 : -1)).map((r) => r.id);
    expect(got.all).toEqual(byUpdate);
    expect(got.live).toEqual(got.rows.filter((r) => r.status === "live").map((r) => r.id));
    expect(got.live.length).toBeGreaterThan(0);
    expect(got.finished.length).toBe(got.rows.filter((r) => r.status === "finished").length);
    // the counters: the ended rows' part saved, the live part recounted on load; together a recount of every row
    expect(got.counters).toBeNull();
    expect(got.settled).toEqual(got.settledExpected);
    expect(got.aggregates?.episodes).toBe(got.recounted.episodes);
    expect(got.aggregates?.counts.live).toBe(got.recounted.live);
    expect(got.aggregates?.mean_tokens).toBe(got.recounted.tokens / got.recounted.episodes);
    // every index holding `updated` holds the ended rows only, but rows_live
    expect(got.byUpdate.length).toBeGreaterThanOrEqual(10);
    expect(got.byUpdate.filter(([, ok]) => !ok)).toEqual([]);
  });
});

const searchQuery = { status: null, prefix: null, filter: NO_FILTER, limit: 10 };

describe("a running episode's waiting text in its row (INDEX_SCHEMA 16) on storage of version 15", () => {
  it("a batch waiting in search_pending moves into its row, still waits, and goes into the search at the end", async () => {
    const run = `wait16-${Date.now()}`;
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const batch = (node: number, body: string) => ({
      traces: ["t0"],
      from: { t0: node },
      segments: [{ trace: "t0", node, role: "assistant", tool: null, kind: "text" as const, body }],
    });
    const live = (seq: number) =>
      currentRow({ id: `${run}:e`, run, status: "live", created: 1, updated: 10 + seq, seq, nodes: seq });
    await index.upsert(live(1), batch(1, "marmot"));
    await index.upsert(live(2), batch(2, "wombat"));
    // as version 15 kept it: the waiting batch in search_pending, the row without it
    await runInDurableObject(index, (_i, state) => {
      const sql = state.storage.sql;
      const r = sql
        .exec<{ since: number; batch: string }>(
          "SELECT text_since AS since, text_waiting AS batch FROM rows WHERE id = ?",
          `${run}:e`,
        )
        .one();
      expect(JSON.parse(r.batch)).toEqual(batch(2, "wombat"));
      sql.exec(
        `CREATE TABLE search_pending (episode TEXT PRIMARY KEY, since INTEGER NOT NULL, batch TEXT NOT NULL) WITHOUT ROWID`,
      );
      sql.exec("INSERT INTO search_pending VALUES (?, ?, ?)", `${run}:e`, r.since, r.batch);
      // and one whose episode has no row: it cannot be found again, it goes
      sql.exec("INSERT INTO search_pending VALUES ('gone', 1, ?)", r.batch);
      sql.exec("DROP INDEX rows_text_waiting");
      sql.exec("ALTER TABLE rows DROP COLUMN text_since");
      sql.exec("ALTER TABLE rows DROP COLUMN text_waiting");
      sql.exec("UPDATE schema_version SET version = 15");
    });
    await abortAllDurableObjects();
    const after = env.EPISODE_INDEX.getByName(`run:${run}`);
    expect(
      (await after.search(parseSearchQuery("marmot"), searchQuery, null, null))?.episodes.map((h) => h.id),
    ).toEqual([`${run}:e`]);
    const moved = await runInDurableObject(after, (_i, state) => ({
      version: storedVersion(state.storage.sql),
      pending: state.storage.sql.exec("SELECT name FROM sqlite_master WHERE name = 'search_pending'").toArray().length,
      waiting: state.storage.sql
        .exec<{ id: string; batch: string }>("SELECT id, text_waiting AS batch FROM rows WHERE text_since IS NOT NULL")
        .toArray()
        .map((r) => [r.id, JSON.parse(r.batch) as unknown]),
    }));
    expect(moved).toEqual({
      version: latestVersion(INDEX_SCHEMA),
      pending: 0,
      waiting: [[`${run}:e`, batch(2, "wombat")]],
    });
    expect((await after.search(parseSearchQuery("wombat"), searchQuery, null, null))?.episodes).toEqual([]);
    await after.upsert({ ...live(3), status: "finished", ended: 20 }, batch(3, "quoll"));
    for (const w of ["wombat", "quoll"])
      expect((await after.search(parseSearchQuery(w), searchQuery, null, null))?.episodes.map((h) => h.id)).toEqual([
        `${run}:e`,
      ]);
  });
});

describe("an object whose storage cannot be upgraded refuses every request, its storage untouched", () => {
  async function tablesOf(name: string): Promise<string[]> {
    return runInDurableObject(env.EPISODES.getByName(name) as DurableObjectStub, (_i, state) =>
      state.storage.sql
        .exec<{ name: string }>(
          "SELECT name FROM sqlite_master WHERE name NOT LIKE '\\_cf\\_%' ESCAPE '\\' ORDER BY name",
        )
        .toArray()
        .map((r) => r.name),
    );
  }

  it("a migration that fails: 503 storage_upgrade_failed with what failed, nothing half-done", async () => {
    const d = await fixture<Dumped>("Episode-fixture_chat_basic.json");
    const spoiled = { ...d, name: "schema-fail:chat_basic" };
    // an index where migration 1 creates a table: its CREATE TABLE fails
    await restore(env.EPISODES, spoiled, (sql) => {
      sql.exec("DROP TABLE IF EXISTS rewinds");
      sql.exec("CREATE INDEX rewinds ON meta (id)");
    });
    const before = await tablesOf(spoiled.name);
    await abortAllDurableObjects();
    for (const [path, init] of [
      [spoiled.name, undefined],
      [`${spoiled.name}/status`, undefined],
      [`${spoiled.name}/deltas`, { method: "POST", body: new Uint8Array([0x80]) }],
    ] as const) {
      const res = await relay(path, init);
      expect(res.status, path).toBe(503);
      const body = (await res.json()) as { error: string; message: string };
      expect(body.error).toBe("storage_upgrade_failed");
      expect(body.message).toMatch(
        /Episode storage could not go from schema version 0 to \d+ \(the layout of the releases before versioned schemas\): .*rewinds/,
      );
    }
    expect(await tablesOf(spoiled.name), "the failed migration rolled back whole").toEqual(before);
    expect(before).not.toContain("schema_version");
  });

  it("storage written by a newer release: refused, not downgraded", async () => {
    const d = await fixture<Dumped>("Episode-fixture_multi_trace_links.json");
    const newer = { ...d, name: "schema-newer:multi_trace_links" };
    await restore(env.EPISODES, newer, (sql) => {
      sql.exec("CREATE TABLE schema_version (version INTEGER NOT NULL)");
      sql.exec("INSERT INTO schema_version VALUES (99)");
    });
    await abortAllDurableObjects();
    const res = await relay(newer.name);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { message: string }).message).toContain(
      "schema version 99, newer than this release's",
    );
    expect(await versionOf(env.EPISODES, newer.name)).toBe(99);
  });

  it("tables of the runtime (`_cf_KV`, Miniflare's `__miniflare_do_name`) do not make storage non-empty", async () => {
    const name = `schema-runtime-${Date.now().toString(36)}`;
    await runInDurableObject(env.EPISODES.getByName(name), (_i, state) => {
      state.storage.sql.exec("CREATE TABLE __miniflare_do_name (name TEXT)");
      expect(storedVersion(state.storage.sql)).toBeNull();
    });
    const c = await golden("chat_basic");
    const r = await post(`${name}/deltas`, encodeEnvelope(new ProducerCursor("p").envelope(c.frames[0]!)));
    expect(r.status, await r.clone().text()).toBe(200);
    await r.arrayBuffer();
    expect(await versionOf(env.EPISODES, name)).toBe(latestVersion(EPISODE_SCHEMA));
  });

  it("a schema's migrations are numbered 1..n in order", () => {
    const up = () => {};
    expect(() => checkSchema({ object: "X", migrations: [{ version: 2, what: "x", up }] })).toThrow(
      /numbered 2, expected 1/,
    );
    expect(checkSchema({ object: "X", migrations: [{ version: 1, what: "x", up }] }).migrations).toHaveLength(1);
  });
});

describe("storage nobody wrote stays empty", () => {
  it("a GET of an unknown episode creates no table; the first write creates them at the latest version", async () => {
    const id = `schema-empty-${Date.now().toString(36)}`;
    expect((await relay(id)).status).toBe(404);
    expect(await versionOf(env.EPISODES, id)).toBeNull();
    const c = await golden("chat_basic");
    const r = await post(`${id}/deltas`, encodeEnvelope(new ProducerCursor("p").envelope(c.frames[0]!)));
    expect(r.status).toBe(200);
    await r.arrayBuffer();
    expect(await versionOf(env.EPISODES, id)).toBe(latestVersion(EPISODE_SCHEMA));
  });
});

describe("the producers' ledger in the meta row (EPISODE_SCHEMA 9) on the previous release's storage", () => {
  it("the live rollout's producer keeps its seq and its unconfirmed frame: a resend is a duplicate, the next applies", async () => {
    const release = "release-376f6ef";
    const id = "fixture:discard_retry";
    await restore(env.EPISODES, await fixture<Dumped>("Episode-fixture_discard_retry.json", release));
    await abortAllDurableObjects();
    // that release wrote frames 0-4 as envelopes of producer "fixture", seqs 1-5, the last one unconfirmed
    const c = await golden("discard_retry");
    const resend = await post(
      `${id}/deltas`,
      encodeEnvelope({ producer: "fixture", seq: 5, cursor: 4, delta: c.frames[4]! }),
    );
    expect(resend.status).toBe(200);
    expect(await resend.json()).toMatchObject({ seq: 5, applied: 0, duplicates: 1, producers: { fixture: 5 } });
    const next = await post(
      `${id}/deltas`,
      encodeEnvelope({ producer: "fixture", seq: 6, cursor: 5, delta: c.frames[5]! }),
    );
    expect(next.status).toBe(200);
    expect(await next.json()).toMatchObject({ seq: 6, applied: 1, duplicates: 0, producers: { fixture: 6 } });
    const stored = await runInDurableObject(env.EPISODES.getByName(id), (_i, state) => ({
      table: state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'producers'").toArray().length,
      // as stored: the newest turn logged after the meta row (EPISODE_SCHEMA 10, record-store.ts `Turn`), else the row's
      ledger: JSON.parse(
        state.storage.sql
          .exec<{ p: string }>(
            `SELECT COALESCE((SELECT json_extract(turn, '$.producers') FROM frames WHERE turn IS NOT NULL
               AND seq > (SELECT seq FROM meta) ORDER BY k DESC LIMIT 1), (SELECT producers FROM meta)) AS p`,
          )
          .one().p,
      ) as unknown,
      version: storedVersion(state.storage.sql),
    }));
    expect(stored).toEqual({
      table: 0,
      ledger: { fixture: { last: 6, unconfirmed: [{ pseq: 6, seq: 6 }] } },
      version: latestVersion(EPISODE_SCHEMA),
    });
  });
});

describe("empty storage gets the latest layout at once (Schema.fresh)", () => {
  /** Every table of ours and its columns, rowid-ness and indexes, as SQLite reports them (names sorted). */
  function layout(sql: SqlStorage): Json {
    const tables = sql
      .exec<{ name: string; sql: string }>(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND substr(name, 1, 1) <> '_' ORDER BY name",
      )
      .toArray();
    return tables.map((t) => ({
      table: t.name,
      withoutRowid: /WITHOUT\s+ROWID\s*$/i.test(t.sql),
      columns: sql.exec(`SELECT * FROM pragma_table_xinfo('${t.name}') ORDER BY cid`).toArray() as Json,
      indexes: sql
        .exec<{ name: string; unique: number; origin: string; partial: number }>(
          `SELECT name, "unique", origin, partial FROM pragma_index_list('${t.name}') ORDER BY name`,
        )
        .toArray()
        .map((i) => ({
          ...i,
          columns: sql.exec(`SELECT seqno, name, "desc", coll, key FROM pragma_index_xinfo('${i.name}')`).toArray(),
        })) as Json,
    }));
  }

  /** `sql` counting the rows its statements write (index entries and schema rows too, as workerd counts them). */
  function counting(sql: SqlStorage): { sql: SqlStorage; written: () => number } {
    const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
    const exec = (query: string, ...bindings: unknown[]) => {
      const cursor = sql.exec(query, ...bindings);
      cursors.push(cursor);
      return cursor;
    };
    return {
      sql: new Proxy(sql, { get: (t, p) => (p === "exec" ? exec : Reflect.get(t, p, t)) }),
      written: () => cursors.reduce((n, c) => n + c.rowsWritten, 0),
    };
  }

  for (const [name, schema] of [
    ["Episode", EPISODE_SCHEMA],
    ["ViewerHub", HUB_SCHEMA],
    ["EpisodeIndex", INDEX_SCHEMA],
  ] as const) {
    it(`${name}: the same tables, columns and indexes as every migration run in turn, for fewer rows written`, async () => {
      const stepwise = await runInDurableObject(
        env.EPISODES.getByName(`layout-steps-${name}-${Date.now()}`),
        (_i, ctx) => {
          const c = counting(ctx.storage.sql);
          ctx.storage.transactionSync(() => createLatest(c.sql, { ...schema, fresh: undefined }));
          return { layout: layout(ctx.storage.sql), written: c.written(), version: storedVersion(ctx.storage.sql) };
        },
      );
      const atOnce = await runInDurableObject(
        env.EPISODES.getByName(`layout-fresh-${name}-${Date.now()}`),
        (_i, ctx) => {
          const c = counting(ctx.storage.sql);
          ctx.storage.transactionSync(() => createLatest(c.sql, schema));
          return { layout: layout(ctx.storage.sql), written: c.written(), version: storedVersion(ctx.storage.sql) };
        },
      );
      console.log(
        `${name}: rows written creating the latest layout: ${stepwise.written} by every migration, ${atOnce.written} at once`,
      );
      expect(atOnce.layout).toEqual(stepwise.layout);
      expect(atOnce.version).toBe(latestVersion(schema));
      expect(stepwise.version).toBe(latestVersion(schema));
      if (schema.fresh) expect(atOnce.written).toBeLessThan(stepwise.written);
      else expect(atOnce.written).toBe(stepwise.written);
    });
  }
});

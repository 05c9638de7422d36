// Make a storage fixture: what a release of the relay wrote to its Durable Objects' SQLite, for the
// migration tests (test/workers/schema.test.ts) to upgrade. Run against the commit of a release:
//
//   npx tsx tools/storage-fixture.ts <commit> test/fixtures/storage/<name>
//
// It checks the commit out into a temporary worktree, bundles its Worker (wrangler deploy
// --dry-run), runs it in Miniflare with persisted SQLite storage, and drives it as a user would:
// golden cases pushed (some finished, one left live mid-way), a watcher caught up on a finished
// episode (its hub keeps a row), the run's index and the run directory filled. Then a second
// Miniflare opens the same files with a dumper Worker whose classes have the same names, and writes
// each object's tables (schema and rows, BLOBs as base64) to one JSON file per object, with what
// the release answered (GET bytes' length and hash, status, the run's list) for the tests to compare.

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { Miniflare, type WorkerOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { QUIET_ENV } from "../scripts/quiet-env.mjs";
import { encodeEnvelope, ProducerCursor } from "../src/protocol/index.js";
import { fixturePath, loadCase } from "./conformance/cases.js";

const root = resolve(import.meta.dirname, "..");
const [commit, outArg] = process.argv.slice(2);
if (!commit || !outArg) {
  console.error("usage: npx tsx tools/storage-fixture.ts <commit> <out dir>");
  process.exit(2);
}
const out = resolve(outArg);
const RUN = "fixture";
/** The objects and the unique keys their files live under (the same in both Miniflares). */
const CLASSES = {
  EPISODES: "Episode",
  EPISODE_INDEX: "EpisodeIndex",
  RUN_DIRECTORY: "RunDirectory",
  HUBS: "ViewerHub",
} as const;
const uniqueKey = (cls: string) => `fixture-${cls}`;
const work = mkdtempSync(join(tmpdir(), "storage-fixture-"));
const tree = join(work, "tree");
const persist = join(work, "persist");

function objects() {
  return Object.fromEntries(
    Object.entries(CLASSES).map(([binding, className]) => [
      binding,
      { className, useSQLite: true, unsafeUniqueKey: uniqueKey(className) },
    ]),
  );
}

function sha256(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}

/** Run the release and use it; what it answered, by episode id. */
async function writeWithRelease(script: string): Promise<Record<string, unknown>> {
  // the release's own settings (its flags, vars, buckets and further objects) as wrangler reads its wrangler.toml
  const w = unstable_getMiniflareWorkerOptions(join(tree, "wrangler.toml")).workerOptions;
  const further = Object.fromEntries(
    Object.entries((w.durableObjects ?? {}) as Record<string, { className: string }>).map(([binding, d]) => [
      binding,
      { className: d.className, useSQLite: true, unsafeUniqueKey: uniqueKey(d.className) },
    ]),
  );
  const mf = new Miniflare({
    modules: true,
    scriptPath: script,
    modulesRoot: dirname(script),
    compatibilityDate: w.compatibilityDate ?? "2026-05-01",
    compatibilityFlags: w.compatibilityFlags ?? ["no_web_socket_compression"],
    durableObjects: { ...further, ...objects() },
    durableObjectsPersist: persist,
    r2Buckets: w.r2Buckets as WorkerOptions["r2Buckets"],
    // finished episodes stay in SQLite (no archive step while the fixture is written: the dump holds SQLite only)
    bindings: {
      ...((w.bindings ?? {}) as Record<string, string>),
      AUTH_OFF_ON_LOOPBACK: "true",
      INDEX_FLUSH_MS: "100",
      INDEX_IDLE_FLUSH_MS: "100", // rows every 100 ms though nobody attends the run
      ARCHIVE_AFTER_SECONDS: "86400",
    },
  });
  const base = "http://127.0.0.1/v1";
  const observed: Record<string, unknown> = {};
  try {
    // finished cases, one live case stopped after half its frames
    const plan: Array<[string, number | null]> = [
      ["chat_basic", null],
      ["multi_trace_links", null],
      ["routing_repair_widen", null],
      ["discard_retry", 5],
    ];
    for (const [name, stop] of plan) {
      const c = loadCase(fixturePath(name));
      const id = `${RUN}:${name}`;
      const producer = new ProducerCursor("fixture");
      for (const f of c.frames.slice(0, stop ?? c.frames.length)) {
        const r = await mf.dispatchFetch(`${base}/episodes/${id}/deltas`, {
          method: "POST",
          body: encodeEnvelope(producer.envelope(f)),
        });
        if (r.status !== 200) throw new Error(`${id}: ${r.status} ${await r.text()}`);
        await r.arrayBuffer();
        producer.acknowledge();
      }
      if (stop === null) {
        const r = await mf.dispatchFetch(`${base}/episodes/${id}/reply`, { method: "POST", body: c.reply });
        if (r.status !== 200) throw new Error(`${id} reply: ${r.status} ${await r.text()}`);
      }
      const got = new Uint8Array(await (await mf.dispatchFetch(`${base}/episodes/${id}`)).arrayBuffer());
      const status = await (await mf.dispatchFetch(`${base}/episodes/${id}/status`)).json();
      observed[id] = {
        case: name,
        frames: stop ?? c.frames.length,
        finished: stop === null,
        bytes: got.length,
        sha256: sha256(got),
        status,
      };
    }
    // a watcher on a finished episode: its hub keeps its row and the reply while it is connected
    const res = await mf.dispatchFetch(`${base}/episodes/${RUN}:chat_basic/watch`, {
      headers: { upgrade: "websocket" },
    });
    const ws = res.webSocket!;
    ws.accept();
    await new Promise<void>((done) => {
      ws.addEventListener("message", () => done()); // the hello: the hub has joined
    });
    await new Promise((r) => setTimeout(r, 1500)); // index rows sent, the directory's counts landed
    observed["run:episodes"] = await (await mf.dispatchFetch(`${base}/runs/${RUN}/episodes`)).json();
    observed["runs"] = await (await mf.dispatchFetch(`${base}/runs`)).json();
  } finally {
    await mf.dispose();
  }
  return observed;
}

const DUMPER = `
import { DurableObject } from "cloudflare:workers";
function b64(buf) { let s = ""; const u = new Uint8Array(buf); for (let i = 0; i < u.length; i++) s += String.fromCharCode(u[i]); return btoa(s); }
class Dump extends DurableObject {
  fetch() {
    const sql = this.ctx.storage.sql;
    const schema = sql.exec("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\\\_cf\\\\_%' ESCAPE '\\\\' AND sql IS NOT NULL ORDER BY rowid").toArray();
    const rows = {};
    for (const t of schema.filter((s) => s.type === "table")) {
      rows[t.name] = sql.exec("SELECT * FROM \\"" + t.name + "\\"").raw().toArray().map((r) => r.map((v) => v instanceof ArrayBuffer ? { bin: b64(v) } : v));
    }
    return Response.json({ schema, rows });
  }
}
export class Episode extends Dump {}
export class EpisodeIndex extends Dump {}
export class RunDirectory extends Dump {}
export class ViewerHub extends Dump {}
export default {
  fetch(req, env) {
    const u = new URL(req.url);
    const ns = env[u.searchParams.get("binding")];
    return ns.get(ns.idFromString(u.searchParams.get("id"))).fetch(req);
  },
};`;

/** Open the same files with the dumper and write one JSON file per object. */
async function dump(observed: Record<string, unknown>): Promise<void> {
  const mf = new Miniflare({
    modules: true,
    script: DUMPER,
    compatibilityDate: "2026-05-01",
    durableObjects: objects(),
    durableObjectsPersist: persist,
  });
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  try {
    for (const [binding, className] of Object.entries(CLASSES)) {
      const dir = join(persist, uniqueKey(className));
      if (!existsSync(dir)) continue;
      for (const file of readdirSync(dir).filter((f) => /^[0-9a-f]{64}\.sqlite$/.test(f))) {
        const id = file.replace(/\.sqlite$/, "");
        const tables = (await (await mf.dispatchFetch(`http://dump/?binding=${binding}&id=${id}`)).json()) as {
          rows: Record<string, unknown[][]>;
        };
        // which episode, run or hub this is (the files are named by object id)
        const name = nameOf(className, tables.rows);
        writeFileSync(
          join(out, `${className}-${name.replace(/[^A-Za-z0-9._-]/g, "_")}.json`),
          `${JSON.stringify({ class: className, name, ...tables })}\n`,
        );
      }
    }
  } finally {
    await mf.dispose();
  }
  const made = {
    commit: execFileSync("git", ["rev-parse", commit!], { cwd: root, encoding: "utf8" }).trim(),
    made_with: "npx tsx tools/storage-fixture.ts",
    observed,
  };
  writeFileSync(join(out, "observed.json"), `${JSON.stringify(made, null, 1)}\n`);
}

function nameOf(className: string, rows: Record<string, unknown[][]>): string {
  if (className === "Episode") return String(rows.meta?.[0]?.[0] ?? rows.tombstone?.[0]?.[0] ?? "unnamed");
  if (className === "ViewerHub") return `${rows.hub?.[0]?.[1]}/${rows.hub?.[0]?.[0]}`;
  if (className === "EpisodeIndex") return `run:${rows.state?.find((r) => r[0] === "run")?.[1] ?? "?"}`;
  return "runs";
}

async function main(): Promise<void> {
  execFileSync("git", ["worktree", "add", "--detach", tree, commit], { cwd: root, stdio: "ignore" });
  try {
    symlinkSync(join(root, "node_modules"), join(tree, "node_modules"));
    mkdirSync(join(tree, "dashboard", "dist"), { recursive: true });
    writeFileSync(join(tree, "dashboard", "dist", "index.html"), "<!doctype html>");
    const bundleDir = join(work, "bundle");
    execFileSync(join(root, "node_modules", ".bin", "wrangler"), ["deploy", "--dry-run", "--outdir", bundleDir], {
      cwd: tree,
      env: { ...process.env, ...QUIET_ENV },
      stdio: ["ignore", "ignore", "inherit"],
    });
    const observed = await writeWithRelease(join(bundleDir, "index.js"));
    await dump(observed);
    console.log(`wrote ${out}`);
  } finally {
    execFileSync("git", ["worktree", "remove", "--force", tree], { cwd: root, stdio: "ignore" });
    rmSync(work, { recursive: true, force: true });
  }
}

await main();

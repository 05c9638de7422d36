// The run directory (src/objects/registry/run-directory.ts over directory-store.ts, sockets by
// run-sockets.ts) through its RPC methods and its socket, on fresh directory objects (the relay
// has one, "runs"; each test here names its own): runs list newest-created first, paged by a
// cursor that survives a scope or prefix passing few runs; a row's mean rewards show once its run
// sends them; removes take rows out; the runs socket starts with the runs its scope covers, then
// gets coalesced changes for that scope only, and is read-only.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { DirectoryStore, type RunRow } from "../../src/objects/registry/directory-store.js";
import { RUN_SOCKET_TAG } from "../../src/objects/registry/run-sockets.js";
import { PUSH_MS, parseRunsMessage, type RunSummary } from "../../src/protocol/registry/index-protocol.js";
import { positionText, type RunPosition, readPosition } from "../../src/protocol/registry/list-cursors.js";
import { SCOPE_HEADER, type Scope } from "../../src/protocol/registry/rows.js";
import { freshId, inbox } from "./support.js";

const directory = () => env.RUN_DIRECTORY.getByName(freshId("dir"));
type Directory = ReturnType<typeof directory>;

function runRow(run: string, created: number, extra: Partial<RunRow> = {}): RunRow {
  return {
    run,
    created,
    updated: created + 1,
    episodes: 3,
    live: 1,
    finished: 1,
    failed: 1,
    finish_refused: 0,
    mean_rewards: null,
    ...extra,
  };
}

/** Every run `runs` answers for these arguments, page by page (`limit` per page), and the pages' sizes. */
async function allRuns(dir: Directory, limit: number, scope: Scope, prefix: string | null, whole: boolean) {
  const runs: string[] = [];
  const sizes: number[] = [];
  let cursor: string | null = null;
  do {
    const page: { runs: RunSummary[]; cursor: string | null } = await dir.runs(
      cursor === null ? null : readPosition("runs", cursor),
      limit,
      scope,
      prefix,
      whole,
    );
    runs.push(...page.runs.map((r) => r.run));
    sizes.push(page.runs.length);
    cursor = page.cursor;
  } while (cursor !== null);
  return { runs, sizes };
}

async function runsSocket(dir: Directory, scope: Scope): Promise<WebSocket> {
  const res = await dir.fetch(
    new Request("http://relay.test/v1/runs", {
      headers: { upgrade: "websocket", [SCOPE_HEADER]: JSON.stringify(scope) },
    }),
  );
  expect(res.status).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  return ws;
}

describe("the runs list", () => {
  it("newest created first (ties by name, last first), paged by an opaque cursor; times as ISO strings", async () => {
    const dir = directory();
    for (const [run, created] of [
      ["a", 10],
      ["b", 30],
      ["c", 20],
      ["d", 30],
      ["e", 5],
    ] as const) {
      await dir.upsertRun(runRow(run, created));
    }
    expect(await allRuns(dir, 2, null, null, true)).toEqual({ runs: ["d", "b", "c", "a", "e"], sizes: [2, 2, 1] });
    const first = await dir.runs(null, 1, null, null, true);
    expect(first.runs).toEqual([
      {
        run: "d",
        created: new Date(30).toISOString(),
        updated: new Date(31).toISOString(),
        episodes: 3,
        live: 1,
        finished: 1,
        failed: 1,
        finish_refused: 0,
      },
    ]);
    expect(readPosition("runs", first.cursor!)).toEqual({ created: 30, run: "d" });
    expect(positionText("runs", readPosition("runs", first.cursor!) as RunPosition)).toBe(first.cursor);
  });

  it("a row replaced by its run's next write; mean rewards shown once sent", async () => {
    const dir = directory();
    await dir.upsertRun(runRow("r", 1));
    expect((await dir.runs(null, 10, null, null, true)).runs[0]).not.toHaveProperty("mean_rewards");
    await dir.upsertRun(runRow("r", 1, { episodes: 9, mean_rewards: { correct: 0.5 } }));
    const [r] = (await dir.runs(null, 10, null, null, true)).runs;
    expect([r!.episodes, r!.mean_rewards]).toEqual([9, { correct: 0.5 }]);
  });

  it("scope: whole runs for the runs list, runs that may hold a visible episode for the list across runs; prefix narrows", async () => {
    const dir = directory();
    for (const [i, run] of ["p-1", "p-2", "q-1", "p-10"].entries()) await dir.upsertRun(runRow(run, 100 - i));
    const names = async (scope: Scope, prefix: string | null, whole: boolean) =>
      (await dir.runs(null, 50, scope, prefix, whole)).runs.map((r) => r.run);
    expect(await names(["p-1:*"], null, true)).toEqual(["p-1"]);
    expect(await names(["p-1:7"], null, true)).toEqual([]);
    expect(await names(["p-1:7"], null, false)).toEqual(["p-1"]);
    expect(await names(["p-*"], null, true)).toEqual(["p-1", "p-2", "p-10"]);
    expect(await names(null, "p-1", true)).toEqual(["p-1", "p-10"]);
    expect(await names(null, "p-1:", true)).toEqual(["p-1"]);
    expect(await names([], null, false)).toEqual([]);
  });

  it("a scope passing few runs still pages full pages, then ends (no short page with a cursor)", async () => {
    const dir = directory();
    // 30 runs, every fifth in scope: a page of 2 reads past several batches of 3
    for (let i = 0; i < 30; i++) await dir.upsertRun(runRow(`${i % 5 === 0 ? "mine" : "other"}-${i}`, 1000 - i));
    const got = await allRuns(dir, 2, ["mine-*"], null, true);
    expect(got.runs).toEqual([0, 5, 10, 15, 20, 25].map((i) => `mine-${i}`));
    expect(got.sizes).toEqual([2, 2, 2]);
  });

  it("removeRun takes the row out; an unknown run is no change", async () => {
    const dir = directory();
    await dir.upsertRun(runRow("x", 1));
    await dir.upsertRun(runRow("y", 2));
    await dir.removeRun("x");
    await dir.removeRun("never");
    expect((await dir.runs(null, 10, null, null, true)).runs.map((r) => r.run)).toEqual(["y"]);
  });

  it("the store's page takes a filter, reads at most its budget, and says where the next starts", async () => {
    const dir = directory();
    for (let i = 0; i < 7; i++) await dir.upsertRun(runRow(`r${i}`, i));
    await runInDurableObject(dir, (_o, state) => {
      const store = new DirectoryStore(state.storage.sql);
      const odd = (run: string) => Number(run.slice(1)) % 2 === 1;
      expect(store.page(null, 2, odd)).toMatchObject({
        rows: [{ run: "r5" }, { run: "r3" }],
        next: { created: 3, run: "r3" },
      });
      expect(store.page({ created: 3, run: "r3" }, 2, odd)).toMatchObject({ rows: [{ run: "r1" }], next: null });
      // a budget of 3 rows read: the page stops short, at the last row read (r4, not one the filter passes)
      expect(store.page(null, 2, odd, 3)).toMatchObject({ rows: [{ run: "r5" }], next: { created: 4, run: "r4" } });
      expect(store.page({ created: 4, run: "r4" }, 2, odd, 3)).toMatchObject({
        rows: [{ run: "r3" }, { run: "r1" }],
        next: { created: 1, run: "r1" },
      });
      expect(store.page({ created: 1, run: "r1" }, 2, odd, 3)).toMatchObject({ rows: [], next: null });
      expect(store.delete("r1")).toBe(true);
      expect(store.delete("r1")).toBe(false);
    });
  });
});

describe("the runs socket", () => {
  it("starts with the runs its scope covers, then gets coalesced changes for its scope only", async () => {
    const dir = directory();
    await dir.upsertRun(runRow("mine-0", 1));
    await dir.upsertRun(runRow("theirs-0", 2));
    await new Promise((r) => setTimeout(r, 2 * PUSH_MS)); // those changes pushed (to no socket yet) and forgotten
    const ws = await runsSocket(dir, ["mine-*"]);
    const box = inbox(ws);
    expect(parseRunsMessage((await box.next()) as string)).toMatchObject({
      type: "runs",
      runs: [{ run: "mine-0" }],
      truncated: false,
      limit: 200,
    });
    // a burst: collected for PUSH_MS into one message (two if the burst straddles a push), without the runs outside the scope
    for (let i = 1; i <= 5; i++) {
      await dir.upsertRun(runRow(`mine-${i}`, 10 + i));
      await dir.upsertRun(runRow(`theirs-${i}`, 10 + i));
    }
    const seen: string[] = [];
    let messages = 0;
    while (seen.length < 5) {
      const change = parseRunsMessage((await box.next()) as string);
      if (change.type !== "run_changes") throw new Error(`expected run_changes, got ${change.type}`);
      messages++;
      seen.push(...change.upserts.map((r) => r.run));
      expect(change.deletes).toEqual([]);
    }
    expect(seen.sort()).toEqual(["mine-1", "mine-2", "mine-3", "mine-4", "mine-5"]);
    expect(messages, "coalesced").toBeLessThanOrEqual(2);
    await dir.removeRun("theirs-0");
    await dir.removeRun("mine-0");
    expect(parseRunsMessage((await box.next()) as string)).toEqual({
      type: "run_changes",
      upserts: [],
      deletes: ["mine-0"],
    });
    await new Promise((r) => setTimeout(r, 2 * PUSH_MS));
    expect(box.pending(), "nothing for changes outside the scope").toBe(0);
    ws.close(1000, "done");
  });

  it("is read-only: ping is answered, anything else closes it 1008; its sockets carry the tag earlier releases gave them", async () => {
    const dir = directory();
    const ws = await runsSocket(dir, null);
    const box = inbox(ws);
    expect(parseRunsMessage((await box.next()) as string)).toMatchObject({ type: "runs", runs: [] });
    expect(RUN_SOCKET_TAG).toBe("index");
    expect(await runInDurableObject(dir, (_o, state) => state.getWebSockets("index").length)).toBe(1);
    ws.send("ping");
    expect(await box.next()).toBe("pong");
    ws.send("hello");
    expect((await box.closed()).code).toBe(1008);
  });

  it("a request that is not an upgrade is refused 426", async () => {
    const res = await directory().fetch(new Request("http://relay.test/v1/runs"));
    expect(res.status).toBe(426);
  });
});

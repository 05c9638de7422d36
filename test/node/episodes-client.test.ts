// A run's episodes with filters (`GET /v1/runs/{run}/episodes?status=&task=&stop=&truncated=&errored=
// &reward=&min_turns=&min_tokens=&sort=`) through the TypeScript client (`fetchEpisodesPage`,
// `listEpisodes`) and the CLI (`episodes --run R`), against a relay the test starts (auth on): the
// golden case chat_basic pushed as rollouts of two tasks (the open frame's task key set by the
// test) with rewards, a stop condition and a timeout set by one more delta before the reply, one
// live and one failed. Each filter gives the expected episodes (named, and recounted with the
// relay's own `rowMatches` over the unfiltered list); a bad filter is the relay's 400 bad_filter
// with its field. Following a short page with a cursor (the relay's walk stopped on its budget) is
// driven by scripted answers.
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import {
  type EpisodeFilter,
  type EpisodesPage,
  fetchEpisodesPage,
  type IndexEntry,
  listEpisodes,
  RelayRefusal,
  type RowFilter,
} from "../../clients/typescript/watch.js";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { NO_FILTER, rowMatches } from "../../src/protocol/registry/row-filter.js";
import type { LMap } from "../../src/protocol/wire/lossless.js";
import { concatChunks } from "../../src/protocol/wire/writer.js";
import { chat, openFrame, rewardsOf, setDelta, CHAT_TASK as TASK_A } from "../support/chat-rollouts.js";
import { collect, failure, runCli, useAdminRelay } from "../support/client-relay.js";
import { m } from "../support/deltas.js";

const relay = useAdminRelay();
const secret = relay.secret;
const TASK_B = "task-b";

const RUN = "eps";
const id = (name: string) => `${RUN}:${name}`;

interface Rollout {
  name: string;
  task: string;
  /** (correct, format) scores, weights 1.0 and 0.25 as in the golden case; null: frames 0-3 only (live, no rewards). */
  scores: [number, number] | null;
  /** A stop condition and timeout set before the reply (else the golden case's agent_completed, not truncated). */
  stop?: string;
}
const FINISHED: Rollout[] = [
  // the trainer's reward, correct × 1 + format × 0.25 (before issue 40 the weighted means 0.9, 0.1, 1.0, 0, 0.8, 0.2)
  { name: "a-0", task: TASK_A, scores: [1, 0.5] }, // reward 1.125
  { name: "a-1", task: TASK_A, scores: [0, 0.5] }, // 0.125
  { name: "a-2", task: TASK_A, scores: [1, 1] }, // 1.25
  { name: "a-3", task: TASK_A, scores: [0, 0] }, // 0
  { name: "b-0", task: TASK_B, scores: [1, 0], stop: "max_turns" }, // 1.0, truncated
  { name: "b-1", task: TASK_B, scores: [0, 1] }, // 0.25
];
/** Every episode of the run: the finished ones, one live (3 calls of 3 not yet: 2 calls, 65 tokens) and one failed (no calls). */
const ALL = [...FINISHED.map((r) => id(r.name)), id("live"), id("failed")];
/** Best reward first; those without a reward last, by id descending. */
const BY_REWARD = ["a-2", "a-0", "b-0", "b-1", "a-1", "a-3", "live", "failed"].map(id);

const post = (path: string, body: Uint8Array) => relay.post(path, body);

/**
 * The live episode's frames in one message (an array of envelopes): its row goes to the index at once on creation,
 * with these counters; a live episode's later turns would reach it only after INDEX_FLUSH_MS (30 s).
 */
async function pushAtOnce(name: string, task: string, frames: number) {
  const deltas = [openFrame(task), ...chat.frames.slice(1, frames)];
  const envelopes = deltas.map((delta, i) => encodeEnvelope({ producer: "t", seq: i + 1, cursor: null, delta }));
  // a msgpack fixarray of the envelopes (fewer than 16)
  await post(`/v1/episodes/${id(name)}/deltas`, concatChunks([Uint8Array.of(0x90 + envelopes.length), ...envelopes]));
}

async function push(name: string, task: string, frames: number, extra: LMap | null) {
  await post(`/v1/episodes/${id(name)}/deltas`, openFrame(task));
  for (const frame of chat.frames.slice(1, frames)) await post(`/v1/episodes/${id(name)}/deltas`, frame);
  if (extra) await post(`/v1/episodes/${id(name)}/deltas`, setDelta(extra));
}

const ids = async (it: AsyncIterable<IndexEntry>) => (await collect(it)).map((e) => e.id);
const sorted = (xs: string[]) => [...xs].sort();

/** Every episode, unfiltered (what the recount matches). */
let everything: IndexEntry[] = [];

beforeAll(async () => {
  for (const r of FINISHED) {
    const set = m({ rewards: rewardsOf(r.scores!), ...(r.stop ? { stop_condition: r.stop, is_timeout: true } : {}) });
    await push(r.name, r.task, chat.frames.length, set);
    await post(`/v1/episodes/${id(r.name)}/reply`, chat.reply);
  }
  await pushAtOnce("live", TASK_A, 4);
  await push("failed", TASK_A, 2, null);
  await post(`/v1/episodes/${id("failed")}/reply`, encodeReply({ success: false, error: "sandbox crashed" }));
  await relay.indexed(RUN, { finished: FINISHED.length, live: 1, failed: 1 });
  // the live episode's row came with its creation, its 2 calls in it (pushAtOnce)
  everything = await collect(listEpisodes(relay.url, RUN, { token: relay.admin, limit: 500 }));
  expect(everything.find((e) => e.id === id("live"))?.calls).toBe(2);
}, 120_000);

describe("listEpisodes / fetchEpisodesPage against a relay", () => {
  it("lists the run's episodes with their rows: task, stop condition, truncated, error, turns, tokens, reward", () => {
    expect(sorted(everything.map((e) => e.id))).toEqual(sorted(ALL));
    const row = (name: string) => everything.find((e) => e.id === id(name))!;
    expect([
      row("a-0").task,
      row("a-0").stop_condition,
      row("a-0").truncated,
      row("a-0").calls,
      row("a-0").tokens,
    ]).toEqual([TASK_A, "agent_completed", false, 3, 99]);
    expect(row("a-0").reward).toBe(1.125);
    expect([row("b-0").task, row("b-0").stop_condition, row("b-0").truncated]).toEqual([TASK_B, "max_turns", true]);
    // max_turns truncates (the trainer's is_truncated); its is_timeout is answered under both names
    expect([row("b-0").is_truncated, row("b-0").is_timeout]).toEqual([true, true]);
    expect([row("a-0").is_truncated, row("a-0").is_timeout, row("a-0").truncated]).toEqual([false, false, false]);
    expect([row("live").status, row("live").calls, row("live").tokens, row("live").reward]).toEqual([
      "live",
      2,
      65,
      null,
    ]);
    expect([row("failed").status, row("failed").error, row("failed").calls]).toEqual(["failed", "sandbox crashed", 0]);
  });

  it("each filter gives the expected episodes", async () => {
    const list = (filter: EpisodeFilter, status?: IndexEntry["status"]) =>
      ids(listEpisodes(relay.url, RUN, { token: relay.admin, filter, status }));
    expect(sorted(await list({ task: TASK_B }))).toEqual([id("b-0"), id("b-1")]);
    expect(await list({ stop: "max_turns" })).toEqual([id("b-0")]);
    expect(await list({ truncated: true })).toEqual([id("b-0")]);
    expect(sorted(await list({ truncated: false }))).toEqual(sorted(ALL.filter((x) => x !== id("b-0"))));
    // the names: is_timeout (the deprecated `truncated` above is its alias) and the trainer's is_truncated
    expect(await list({ isTimeout: true })).toEqual([id("b-0")]);
    expect(await list({ isTruncated: true })).toEqual([id("b-0")]);
    expect(sorted(await list({ isTruncated: false }))).toEqual(sorted(ALL.filter((x) => x !== id("b-0"))));
    expect(await list({ errored: true })).toEqual([id("failed")]);
    expect(sorted(await list({ errored: false }, "finished"))).toEqual(sorted(FINISHED.map((r) => id(r.name))));
    expect(sorted(await list({ minTurns: 3 }))).toEqual(sorted(FINISHED.map((r) => id(r.name))));
    expect(sorted(await list({ minTokens: 60 }))).toEqual(sorted([...FINISHED.map((r) => id(r.name)), id("live")]));
    expect(sorted(await list({ rewards: [{ key: "correct", min: 1, max: null }] }))).toEqual(
      sorted(["a-0", "a-2", "b-0"].map(id)),
    );
    expect(
      sorted(
        await list({
          rewards: [
            { key: "correct", min: null, max: 0 },
            { key: "format", min: 0.5, max: null },
          ],
        }),
      ),
    ).toEqual([id("a-1"), id("b-1")]);
    expect(await list({ task: TASK_A, rewards: [{ key: "format", min: 0.25, max: 0.75 }] }, "finished")).toEqual(
      ["a-0", "a-1"]
        .map(id)
        .sort((a, b) => everything.findIndex((e) => e.id === a) - everything.findIndex((e) => e.id === b)),
    );
    expect(await list({ task: "no-such-task" })).toEqual([]);
  });

  it("every filter matches what the relay's own rowMatches finds in the unfiltered list, in the same order", async () => {
    const filters: Array<[Partial<RowFilter>, IndexEntry["status"] | undefined]> = [
      [{ task: TASK_A }, undefined],
      [{ task: TASK_A, minTurns: 1 }, "live"],
      [{ stop: "agent_completed", isTimeout: false }, undefined],
      [{ isTruncated: false, minTokens: 1 }, undefined],
      [{ errored: false, minTokens: 1 }, undefined],
      [{ rewards: [{ key: "reward", min: 0, max: 1 }] }, undefined], // no key "reward": none
      [{ rewards: [{ key: "format", min: null, max: 0.5 }], minTurns: 3 }, "finished"],
    ];
    for (const [filter, status] of filters) {
      const full: RowFilter = { ...NO_FILTER, ...filter };
      const expected = everything
        .filter((e) => (status === undefined || e.status === status) && rowMatches(e, full))
        .map((e) => e.id);
      expect(
        await ids(listEpisodes(relay.url, RUN, { token: relay.admin, filter, status })),
        JSON.stringify(filter),
      ).toEqual(expected);
    }
  });

  it("sort=reward: best reward first, those without one last; paged one by one in the same order", async () => {
    expect(await ids(listEpisodes(relay.url, RUN, { token: relay.admin, sort: "reward" }))).toEqual(BY_REWARD);
    expect(await ids(listEpisodes(relay.url, RUN, { token: relay.admin, sort: "reward", limit: 1 }))).toEqual(
      BY_REWARD,
    );
    expect(await ids(listEpisodes(relay.url, RUN, { token: relay.admin, limit: 1 }))).toEqual(
      everything.map((e) => e.id),
    );
    const winners = await ids(
      listEpisodes(relay.url, RUN, {
        token: relay.admin,
        sort: "reward",
        status: "finished",
        filter: { rewards: [{ key: "correct", min: 1, max: null }] },
        limit: 2,
      }),
    );
    expect(winners).toEqual(["a-2", "a-0", "b-0"].map(id));
    const one: EpisodesPage = await fetchEpisodesPage(relay.url, RUN, { token: relay.admin, sort: "reward", limit: 2 });
    expect(one.episodes.map((e) => e.id)).toEqual(BY_REWARD.slice(0, 2));
    expect(typeof one.cursor).toBe("string");
    expect(one.searched).toBeGreaterThanOrEqual(2);
    const two = await fetchEpisodesPage(relay.url, RUN, {
      token: relay.admin,
      sort: "reward",
      limit: 2,
      cursor: one.cursor,
    });
    expect(two.episodes.map((e) => e.id)).toEqual(BY_REWARD.slice(2, 4));
  });

  it("a token sees the episodes its patterns cover", async () => {
    const some = await mintToken(secret, { role: "watcher", episodes: [`${RUN}:a-*`], ttl: 600 });
    expect(sorted(await ids(listEpisodes(relay.url, RUN, { token: some, filter: { minTurns: 1 } })))).toEqual(
      ["a-0", "a-1", "a-2", "a-3"].map(id),
    );
    const none = await failure(fetchEpisodesPage(relay.url, RUN));
    expect(none).toBeInstanceOf(RelayRefusal);
    expect((none as RelayRefusal).status).toBe(401);
  });

  it("a bad filter is the relay's 400 bad_filter refusal naming the parameter as field", async () => {
    const cases: Array<[Partial<RowFilter>, string]> = [
      [{ rewards: [{ key: "correct", min: 1, max: 0 }] }, "reward"],
      [{ rewards: [{ key: "correct", min: Number.NaN, max: null }] }, "reward"],
      [{ rewards: ["a", "b", "c", "d", "e"].map((key) => ({ key, min: 0, max: null })) }, "reward"],
      [{ minTurns: -1 }, "min_turns"],
      [{ minTokens: 1.5 }, "min_tokens"],
      [{ task: "x".repeat(300) }, "task"],
    ];
    for (const [filter, field] of cases) {
      const e = await failure(collect(listEpisodes(relay.url, RUN, { token: relay.admin, filter })));
      expect(e, JSON.stringify(filter)).toBeInstanceOf(RelayRefusal);
      const r = e as RelayRefusal;
      expect([r.status, r.code, r.field], JSON.stringify(filter)).toEqual([400, "bad_filter", field]);
      expect(r.message).toMatch(/^400 bad_filter: .*; change that filter value$/);
    }
    const status = await failure(fetchEpisodesPage(relay.url, RUN, { token: relay.admin, status: "done" as "live" }));
    expect([(status as RelayRefusal).code, (status as RelayRefusal).field]).toEqual(["bad_status", "status"]);
    const sort = await failure(fetchEpisodesPage(relay.url, RUN, { token: relay.admin, sort: "spread" as "reward" }));
    expect([(sort as RelayRefusal).code, (sort as RelayRefusal).field]).toEqual(["bad_sort", "sort"]);
  });
});

// ---- the client's paging and checks, over scripted answers ----

describe("episodes client (scripted answers)", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });
  const entry = (name: string) => ({ ...everything[0]!, id: `S:${name}` });
  /** Answer each fetch with the page for its cursor. */
  function script(pages: Record<string, unknown>) {
    return vi.spyOn(globalThis, "fetch").mockImplementation(async (url) => {
      const cursor = new URL(String(url)).searchParams.get("cursor") ?? "";
      return new Response(JSON.stringify(pages[cursor]), {
        headers: { "content-type": "application/json", "x-episode-relay": "1" },
      });
    });
  }

  it("follows a short page, and an empty one, with a cursor to the end; sends every filter as the relay reads it", async () => {
    const spy = script({
      "": { episodes: [entry("a")], cursor: "c1", searched: 1000 }, // short: the walk stopped on its budget
      c1: { episodes: [], cursor: "c2", searched: 1000 }, // nothing matched in this walk
      c2: { episodes: [entry("b"), entry("c")], cursor: null, searched: 420 },
    });
    const filter: Partial<RowFilter> = {
      task: "t 1",
      stop: "max_turns",
      isTimeout: false,
      errored: true,
      rewards: [
        { key: "correct", min: 1, max: null },
        { key: "format", min: null, max: 0.5 },
      ],
      minTurns: 2,
      minTokens: 100,
    };
    const got = await ids(
      listEpisodes("https://relay.test/", "S:x", { token: "t", status: "finished", filter, sort: "reward", limit: 3 }),
    );
    expect(got).toEqual(["S:a", "S:b", "S:c"]);
    const query =
      "status=finished&task=t+1&stop=max_turns&is_timeout=0&errored=1&reward=correct%3A1..&reward=format%3A..0.5&min_turns=2&min_tokens=100&sort=reward&limit=3";
    expect(spy.mock.calls.map(([u]) => String(u))).toEqual([
      `https://relay.test/v1/runs/S%3Ax/episodes?${query}`,
      `https://relay.test/v1/runs/S%3Ax/episodes?${query}&cursor=c1`,
      `https://relay.test/v1/runs/S%3Ax/episodes?${query}&cursor=c2`,
    ]);
    expect((spy.mock.calls[0]![1]!.headers as Record<string, string>).authorization).toBe("Bearer t");
    // one page: short, with its cursor and what the walk searched
    vi.restoreAllMocks();
    script({ "": { episodes: [entry("a")], cursor: "c1", searched: 1000 } });
    expect(await fetchEpisodesPage("https://relay.test", "S", { limit: 50 })).toEqual({
      episodes: [entry("a")],
      cursor: "c1",
      searched: 1000,
    });
  });

  it("no filter sends no filter parameter; fields left undefined are not sent", async () => {
    const spy = script({ "": { episodes: [], cursor: null, searched: 0 } });
    await fetchEpisodesPage("https://relay.test", "S");
    await fetchEpisodesPage("https://relay.test", "S", { filter: { task: undefined, rewards: [], minTurns: null } });
    expect(spy.mock.calls.map(([u]) => String(u))).toEqual([
      "https://relay.test/v1/runs/S/episodes",
      "https://relay.test/v1/runs/S/episodes",
    ]);
  });

  it("refused before sending: an empty task or stop (the relay would read no filter), a run a path cannot carry, a bad URL", async () => {
    const spy = script({ "": { episodes: [], cursor: null, searched: 0 } });
    for (const [filter, field] of [
      [{ task: "" }, "task"],
      [{ stop: "" }, "stop"],
    ] as const) {
      const e = await failure(fetchEpisodesPage("https://relay.test", "S", { filter }));
      expect([(e as RelayRefusal).code, (e as RelayRefusal).field]).toEqual(["bad_filter", field]);
    }
    expect(((await failure(fetchEpisodesPage("https://relay.test", ".."))) as RelayRefusal).code).toBe("bad_run");
    expect(((await failure(fetchEpisodesPage("relay.test", "S"))) as RelayRefusal).code).toBe("bad_url");
    expect(spy).not.toHaveBeenCalled();
  });

  it("a repeated cursor and an answer that is not a page are errors", async () => {
    script({
      "": { episodes: [entry("a")], cursor: "c1", searched: 1 },
      c1: { episodes: [], cursor: "c1", searched: 1000 },
    });
    await expect(collect(listEpisodes("https://relay.test", "S"))).rejects.toThrow(/same cursor/);
    vi.restoreAllMocks();
    script({ "": { episodes: "no" } });
    await expect(fetchEpisodesPage("https://relay.test", "S")).rejects.toThrow(/not a page of episodes/);
  });
});

// ---- the CLI ----

const cli = (...args: string[]) => runCli(args);

describe("episode-relay episodes", () => {
  it("prints one line per episode: id, status, reward, turns, tokens, task, stop (and error)", async () => {
    const r = await cli("episodes", "--run", RUN, relay.url, "--token", relay.admin, "--task", TASK_B);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.split("\n");
    expect(lines[0]).toBe(`run ${RUN}: 2 episode(s)`);
    expect(lines[2]!.split(/\s{2,}/)).toEqual([
      "id",
      "status",
      "kind",
      "step",
      "reward",
      "turns",
      "tokens",
      "task",
      "stop",
      "error",
    ]);
    const row = (name: string) => lines.find((l) => l.startsWith(`${id(name)} `))!.split(/\s{2,}/);
    expect(row("b-0")).toEqual([
      id("b-0"),
      "finished",
      "-",
      "-",
      "1.000",
      "3",
      "99",
      TASK_B,
      "max_turns (truncated, timed out)",
    ]);
    expect(row("b-1")).toEqual([id("b-1"), "finished", "-", "-", "0.250", "3", "99", TASK_B, "agent_completed"]);

    const failed = await cli("episodes", "--run", RUN, relay.url, "--token", relay.admin, "--errored");
    expect(failed.code, failed.stderr).toBe(0);
    expect(
      failed.stdout
        .split("\n")
        .find((l) => l.startsWith(id("failed")))!
        .split(/\s{2,}/),
    ).toEqual([id("failed"), "failed", "-", "-", "-", "0", "0", TASK_A, "-", "sandbox crashed"]);
    const none = await cli("episodes", "--run", RUN, relay.url, "--token", relay.admin, "--task", "no-such-task");
    expect([none.code, none.stdout]).toEqual([0, `run ${RUN}: 0 episode(s)\n`]);
  }, 60_000);

  it("--json prints JSON lines; the filters, --sort reward and --limit as the client's", async () => {
    const r = await cli(
      "episodes",
      "--run",
      RUN,
      relay.url,
      "--token",
      relay.admin,
      "--json",
      "--sort",
      "reward",
      "--status",
      "finished",
      "--reward",
      "correct:1..",
      "--not-truncated",
      "--no-error",
      "--min-turns",
      "3",
      "--min-tokens",
      "99",
      "--stop",
      "agent_completed",
    );
    expect(r.code, r.stderr).toBe(0);
    const got = r.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as IndexEntry);
    expect(got.map((e) => e.id)).toEqual(["a-2", "a-0"].map(id));
    expect(got[0]).toEqual(everything.find((e) => e.id === id("a-2")));
    const two = await cli(
      "episodes",
      "--run",
      RUN,
      relay.url,
      "--token",
      relay.admin,
      "--sort",
      "reward",
      "--limit",
      "2",
    );
    expect(two.code, two.stderr).toBe(0);
    const lines = two.stdout.split("\n");
    expect(lines[0]).toBe(`run ${RUN}: 2 episode(s) (stopped at --limit 2)`);
    expect(lines.slice(3, 5).map((l) => l.split(/\s{2,}/)[0])).toEqual(BY_REWARD.slice(0, 2));
    const ranges = await cli(
      "episodes",
      "--run",
      RUN,
      relay.url,
      "--token",
      relay.admin,
      "--json",
      "--reward",
      "correct:..0",
      "--reward",
      "format:0.5..",
    );
    expect(
      sorted(
        ranges.stdout
          .trim()
          .split("\n")
          .map((l) => (JSON.parse(l) as IndexEntry).id),
      ),
    ).toEqual([id("a-1"), id("b-1")]);
  }, 60_000);

  it("a bad filter or flag is a usage error (exit 2) before anything is sent; a refusal exits 1", async () => {
    for (const [args, message] of [
      [["--reward", "correct:1..0"], /--reward: reward correct: MIN is above MAX/],
      [["--reward", "correct"], /--reward: reward must be KEY:MIN\.\.MAX/],
      [["--min-turns", "many"], /--min-turns: min_turns must be a whole number/],
      [["--truncated", "--not-truncated"], /exclude each other/],
      [["--errored", "--no-error"], /exclude each other/],
      [["--sort", "spread"], /--sort: expected one of updated, reward/],
      [["--status", "done"], /--status: expected one of live, finished, failed, finish_refused/],
      [["--limit", "0"], /--limit: expected a whole number from 1/],
      [["--task="], /--task needs a value/],
      [["--group", "g"], /unknown option --group/],
    ] as const) {
      const r = await cli("episodes", "--run", RUN, relay.url, "--token", relay.admin, ...args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toMatch(message);
    }
    expect((await cli("episodes", relay.url, "--token", relay.admin)).code).toBe(2); // no --run
    expect((await cli("episodes", "--run", RUN, "--token", relay.admin)).code).toBe(2); // no URL
    const unauthorized = await cli("episodes", "--run", RUN, relay.url);
    expect(unauthorized.code).toBe(1);
    expect(unauthorized.stderr).toMatch(/401 unauthorized.*pass --token T \(or set RELAY_TOKEN\)/);
  }, 60_000);
});

// A run's groups (`GET /v1/runs/{run}/groups`, `/groups/{group}`) through the TypeScript client
// (`fetchGroupsPage`, `fetchGroups`, `fetchGroup`) and the CLI (`groups --run R`), against a relay
// the test starts (auth on): the golden case chat_basic pushed as several rollouts per group (the
// reply head's `group.id` set by the test, the rewards set by one more delta before the reply),
// one group whose rewards are all equal (zero variance), a group id a path must escape, and a live
// rollout. The client's checks (URL, names, foreign answers, paging) are also driven by scripted
// answers.
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import {
  fetchGroup,
  fetchGroups,
  fetchGroupsPage,
  type GroupSummary,
  RelayRefusal,
  RelayUnreachable,
} from "../../clients/typescript/watch.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { freePort } from "../../tools/free-port.js";
import { chat, groupReply, rewardsOf, setDelta, CHAT_TASK as TASK_KEY } from "../support/chat-rollouts.js";
import { collect, failure, runCli, useAdminRelay } from "../support/client-relay.js";
import { m } from "../support/deltas.js";

const relay = useAdminRelay();
const secret = relay.secret;

const RUN = "grp";
/** (correct, format) scores per rollout; weights 1.0 and 0.25 as in the golden case. */
const VARIED = "grp-varied";
const VARIED_SCORES: Array<[number, number]> = [
  [1, 0.5],
  [0, 0.5],
  [0, 1],
  [1, 0],
];
const ZERO = "grp-zero";
const ZERO_SCORES: Array<[number, number]> = [
  [1, 0.5],
  [1, 0.5],
  [1, 0.5],
];
/** A group id a URL path must escape. */
const ODD = "grp/odd id:1%";
const ODD_SCORES: Array<[number, number]> = [
  [0, 0],
  [1, 1],
];
const ALL_GROUPS = [VARIED, ZERO, ODD, TASK_KEY].sort();

/** The trainer's reward of one trace: Σ score × weight (the relay showed the weighted mean before issue 40). */
const weighted = ([c, fm]: [number, number]) => c + fm * 0.25;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const pstd = (xs: number[]) => Math.sqrt(mean(xs.map((x) => (x - mean(xs)) ** 2)));
const post = (path: string, body: Uint8Array) => relay.post(path, body);

/** chat_basic into `id`; with scores one more delta sets its rewards, and with a group the reply (head `group.id`) finishes it. */
async function rollout(id: string, group: string | null, scores: [number, number] | null) {
  for (const frame of chat.frames) await post(`/v1/episodes/${id}/deltas`, frame);
  if (scores) await post(`/v1/episodes/${id}/deltas`, setDelta(m({ rewards: rewardsOf(scores) })));
  if (group === null) return;
  await post(`/v1/episodes/${id}/reply`, groupReply(group));
}

beforeAll(async () => {
  for (const [i, s] of VARIED_SCORES.entries()) await rollout(`${RUN}:varied-${i}`, VARIED, s);
  for (const [i, s] of ZERO_SCORES.entries()) await rollout(`${RUN}:zero-${i}`, ZERO, s);
  for (const [i, s] of ODD_SCORES.entries()) await rollout(`${RUN}:odd-${i}`, ODD, s);
  await rollout(`${RUN}:live`, null, null);
  await relay.indexed(RUN, { finished: VARIED_SCORES.length + ZERO_SCORES.length + ODD_SCORES.length, live: 1 });
}, 120_000);

describe("fetchGroupsPage / fetchGroups against a relay", () => {
  it("a page carries the run's numbers: groups, finished groups, the zero-variance share", async () => {
    const page = await fetchGroupsPage(relay.url, RUN, { token: relay.admin });
    expect(page.run).toBe(RUN);
    expect(page.groups_total).toBe(4); // VARIED, ZERO, ODD and the live rollout's (its task key)
    expect(page.finished_groups).toBe(3);
    expect(page.zero_variance_groups).toBe(1);
    expect(page.zero_variance_share).toBeCloseTo(1 / 3, 9);
    expect(page.cursor).toBeNull();
    expect(page.groups.map((g) => g.id).sort()).toEqual(ALL_GROUPS);
  });

  it("each group: its counts by status and per reward key mean, population std, min, max", async () => {
    const groups = new Map((await collect(fetchGroups(relay.url, RUN, { token: relay.admin }))).map((g) => [g.id, g]));
    const varied = groups.get(VARIED)!;
    expect([varied.size, varied.finished, varied.failed, varied.live]).toEqual([4, 4, 0, 0]);
    expect(varied.task).toBe(TASK_KEY);
    expect(Object.keys(varied.rewards).sort()).toEqual(["correct", "format"]);
    for (const [key, k] of [
      ["correct", 0],
      ["format", 1],
    ] as const) {
      const xs = VARIED_SCORES.map((s) => s[k]);
      const s = varied.rewards[key]!;
      expect(s.mean, key).toBeCloseTo(mean(xs), 9);
      expect(s.std, key).toBeCloseTo(pstd(xs), 9);
      expect([s.min, s.max], key).toEqual([Math.min(...xs), Math.max(...xs)]);
    }
    const zero = groups.get(ZERO)!;
    expect([zero.size, zero.finished, zero.live]).toEqual([3, 3, 0]);
    expect(zero.rewards.correct).toEqual({ mean: 1, std: 0, min: 1, max: 1 });
    expect(zero.rewards.format!.std).toBe(0);
    const live = groups.get(TASK_KEY)!;
    expect([live.size, live.finished, live.live]).toEqual([1, 0, 1]);
    expect(groups.get(ODD)!.size).toBe(2);
    const totals = VARIED_SCORES.map(weighted);
    expect(varied.mean_reward).toBeCloseTo(mean(totals), 9);
    expect(varied.std_reward).toBeCloseTo(pstd(totals), 9);
    expect(varied.spread).toBeCloseTo(Math.max(...totals) - Math.min(...totals), 9);
    expect(varied.spread).toBeGreaterThan(0);
    expect(zero.spread ?? 0).toBe(0);
  });

  it("follows the cursors page after page, in the relay's order for each sort", async () => {
    for (const sort of [undefined, "spread", "size", "task"] as const) {
      const whole = (await fetchGroupsPage(relay.url, RUN, { token: relay.admin, sort, limit: 500 })).groups.map(
        (g) => g.id,
      );
      const paged = (await collect(fetchGroups(relay.url, RUN, { token: relay.admin, sort, limit: 1 }))).map(
        (g) => g.id,
      );
      expect(paged, String(sort)).toEqual(whole);
      expect([...paged].sort(), String(sort)).toEqual(ALL_GROUPS);
    }
    const one = await fetchGroupsPage(relay.url, RUN, { token: relay.admin, limit: 1 });
    expect(one.groups).toHaveLength(1);
    expect(typeof one.cursor).toBe("string");
    expect(one.groups_total).toBe(4);
    const two = await fetchGroupsPage(relay.url, RUN, { token: relay.admin, limit: 1, cursor: one.cursor });
    expect(two.groups[0]!.id).not.toBe(one.groups[0]!.id);
    const sizes = (await collect(fetchGroups(relay.url, RUN, { token: relay.admin, sort: "size" }))).map((g) => g.size);
    expect(sizes).toEqual([...sizes].sort((a, b) => b - a));
    const spread = (await collect(fetchGroups(relay.url, RUN, { token: relay.admin, sort: "spread" }))).map(
      (g) => g.id,
    );
    expect(spread.indexOf(VARIED)).toBeLessThan(spread.indexOf(ZERO));
  });
});

describe("fetchGroup against a relay", () => {
  it("the rollouts, best reward first, each with its advantage on the reward and per reward key", async () => {
    const g = await fetchGroup(relay.url, RUN, VARIED, { token: relay.admin });
    expect([g.id, g.size, g.finished]).toEqual([VARIED, 4, 4]);
    const order = VARIED_SCORES.map((s, i) => [weighted(s), i] as const)
      .sort((a, b) => b[0] - a[0])
      .map(([, i]) => `${RUN}:varied-${i}`);
    expect(g.rollouts.map((r) => r.id)).toEqual(order);
    for (const r of g.rollouts) {
      const s = VARIED_SCORES[Number(r.id.split("-").at(-1))]!;
      expect(r.status).toBe("finished");
      expect(r.rewards).toEqual({ correct: { score: s[0], weight: 1 }, format: { score: s[1], weight: 0.25 } });
      expect(r.reward).toBeCloseTo(weighted(s), 9);
      expect(r.calls).toBe(3);
      expect(r.turns).toBe(3);
      expect(Number.isInteger(r.tokens)).toBe(true);
      expect([r.stop_condition, r.truncated, r.error]).toEqual(["agent_completed", false, null]);
      const totals = VARIED_SCORES.map(weighted);
      expect(r.advantage!.raw).toBeCloseTo(weighted(s) - mean(totals), 9);
      expect(r.advantage!.normalized!).toBeCloseTo((weighted(s) - mean(totals)) / pstd(totals), 9);
      for (const [key, k] of [
        ["correct", 0],
        ["format", 1],
      ] as const) {
        const xs = VARIED_SCORES.map((x) => x[k]);
        const a = r.key_advantages[key]!;
        expect(a.raw, `${r.id} ${key}`).toBeCloseTo(s[k] - mean(xs), 9);
        expect(a.normalized!, `${r.id} ${key}`).toBeCloseTo((s[k] - mean(xs)) / pstd(xs), 9);
      }
    }
    const zero = await fetchGroup(relay.url, RUN, ZERO, { token: relay.admin });
    expect(zero.rollouts).toHaveLength(3);
    for (const r of zero.rollouts) {
      expect(r.advantage).toEqual({ raw: 0, normalized: null });
      expect(r.key_advantages.correct).toEqual({ raw: 0, normalized: null });
      expect(r.key_advantages.format!.normalized).toBeNull();
    }
    const odd = await fetchGroup(relay.url, RUN, ODD, { token: relay.admin });
    expect(odd.id).toBe(ODD);
    expect(odd.rollouts.map((r) => r.id)).toEqual([`${RUN}:odd-1`, `${RUN}:odd-0`]);
    const live = await fetchGroup(relay.url, RUN, TASK_KEY, { token: relay.admin });
    expect(live.rollouts.map((r) => [r.id, r.status])).toEqual([[`${RUN}:live`, "live"]]);
  });

  it("refusals: an unknown group (404), no token (401), a token that covers part of the run (403), a bad sort (400)", async () => {
    const unknown = await failure(fetchGroup(relay.url, RUN, "no-such-group", { token: relay.admin }));
    expect(unknown).toBeInstanceOf(RelayRefusal);
    expect([(unknown as RelayRefusal).status, (unknown as RelayRefusal).code]).toEqual([404, "not_found"]);
    const none = await failure(fetchGroupsPage(relay.url, RUN));
    expect((none as RelayRefusal).status).toBe(401);
    expect((none as RelayRefusal).message).toMatch(/pass \{ token \}/);
    const some = await mintToken(secret, { role: "watcher", episodes: [`${RUN}:varied-*`], ttl: 600 });
    const partial = await failure(collect(fetchGroups(relay.url, RUN, { token: some })));
    expect(partial).toBeInstanceOf(RelayRefusal);
    expect((partial as RelayRefusal).status).toBe(403);
    expect((partial as RelayRefusal).message).toMatch(/"grp:\*"/);
    expect(((await failure(fetchGroup(relay.url, RUN, VARIED, { token: some }))) as RelayRefusal).status).toBe(403);
    const whole = await mintToken(secret, { role: "watcher", episodes: [`${RUN}:*`], ttl: 600 });
    expect((await fetchGroupsPage(relay.url, RUN, { token: whole })).groups_total).toBe(4);
    const sort = await failure(fetchGroupsPage(relay.url, RUN, { token: relay.admin, sort: "reward" as "size" }));
    expect((sort as RelayRefusal).status).toBe(400);
  });

  it("a cursor the relay did not hand out is a 400 bad_cursor refusal", async () => {
    const cursor = await failure(fetchGroupsPage(relay.url, RUN, { token: relay.admin, cursor: "not-a-cursor" }));
    expect(cursor).toBeInstanceOf(RelayRefusal);
    expect([(cursor as RelayRefusal).status, (cursor as RelayRefusal).code]).toEqual([400, "bad_cursor"]);
  });
});

// ---- the client's checks, over scripted answers ----

describe("groups client checks (scripted answers)", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });
  const summary = (id: string): GroupSummary => ({
    id,
    task: null,
    size: 1,
    finished: 1,
    failed: 0,
    live: 0,
    mean_reward: null,
    std_reward: null,
    rewards: {},
    spread: null,
    step: null,
    kind: null,
  });
  const page = (ids: string[], cursor: string | null) => ({
    run: "S",
    groups_total: 3,
    finished_groups: 3,
    zero_variance_groups: 0,
    zero_variance_share: 0,
    groups: ids.map(summary),
    cursor,
  });
  /** Answer each fetch with the page for its cursor (or `body` as is). */
  function script(pages: Record<string, unknown>, headers: Record<string, string> = { "x-episode-relay": "1" }) {
    return vi.spyOn(globalThis, "fetch").mockImplementation(async (url) => {
      const cursor = new URL(String(url)).searchParams.get("cursor") ?? "";
      return new Response(JSON.stringify(pages[cursor]), {
        headers: { "content-type": "application/json", ...headers },
      });
    });
  }

  it("sends the parameters and the token, and follows the cursors to the end", async () => {
    const spy = script({ "": page(["a", "b"], "c1"), c1: page(["c"], null) });
    const got = await collect(fetchGroups("https://relay.test/", "S:x", { token: "t", sort: "size", limit: 2 }));
    expect(got.map((g) => g.id)).toEqual(["a", "b", "c"]);
    expect(spy.mock.calls.map(([u]) => String(u))).toEqual([
      "https://relay.test/v1/runs/S%3Ax/groups?sort=size&limit=2",
      "https://relay.test/v1/runs/S%3Ax/groups?sort=size&limit=2&cursor=c1",
    ]);
    expect((spy.mock.calls[0]![1]!.headers as Record<string, string>).authorization).toBe("Bearer t");
  });

  it("a repeated cursor, an answer that is not a page and one that is not the relay's are errors", async () => {
    script({ "": page(["a"], "c1"), c1: page(["b"], "c1") });
    await expect(collect(fetchGroups("https://relay.test", "S"))).rejects.toThrow(/same cursor/);
    vi.restoreAllMocks();
    script({ "": { groups: "no" } });
    await expect(fetchGroupsPage("https://relay.test", "S")).rejects.toThrow(/not a page of groups/);
    vi.restoreAllMocks();
    script({ "": page([], null) }, {});
    const foreign = await failure(fetchGroupsPage("https://relay.test", "S"));
    expect(foreign).toBeInstanceOf(RelayRefusal);
    expect((foreign as RelayRefusal).code).toBe("not_the_relay");
  });

  it("a group id is escaped as one path segment; names a path cannot carry and bad URLs are refused before sending", async () => {
    const spy = vi
      .spyOn(globalThis, "fetch")
      .mockImplementation(
        async () =>
          new Response(JSON.stringify({ ...summary("a/b c"), rollouts: [] }), { headers: { "x-episode-relay": "1" } }),
      );
    expect((await fetchGroup("https://relay.test", "S", "a/b c")).id).toBe("a/b c");
    expect(String(spy.mock.calls[0]![0])).toBe("https://relay.test/v1/runs/S/groups/a%2Fb%20c");
    for (const bad of ["", ".", ".."]) {
      const e = await failure(fetchGroup("https://relay.test", "S", bad));
      expect((e as RelayRefusal).code, JSON.stringify(bad)).toBe("bad_group");
    }
    expect(((await failure(fetchGroupsPage("https://relay.test", ".."))) as RelayRefusal).code).toBe("bad_run");
    expect(((await failure(fetchGroup("relay.test", "S", "g"))) as RelayRefusal).code).toBe("bad_url");
    expect(spy).toHaveBeenCalledTimes(1);
  });

  it("a relay that is not there is a RelayUnreachable naming the cause", async () => {
    const port = await freePort();
    const e = await failure(fetchGroupsPage(`http://127.0.0.1:${port}`, "S"));
    expect(e).toBeInstanceOf(RelayUnreachable);
    expect((e as RelayUnreachable).kind).toBe("refused");
  });
});

// ---- the CLI ----

const cli = (...args: string[]) => runCli(args);

describe("episode-relay groups", () => {
  it("prints the zero-variance share and a table: id, task, size, finished, the reward's and per key mean±std", async () => {
    const r = await cli("groups", "--run", RUN, relay.url, "--token", relay.admin, "--sort", "size");
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.split("\n");
    expect(lines[0]).toBe(`run ${RUN}: 4 group(s), 3 finished`);
    expect(lines[1]).toMatch(/^zero-variance share: 33\.3% \(1 of 3 finished group\(s\)/);
    const head = lines.find((l) => l.startsWith("id "))!;
    expect(head.split(/\s{2,}/)).toEqual([
      "id",
      "task",
      "size",
      "finished",
      "reward mean±std",
      "spread",
      "correct mean±std",
      "format mean±std",
    ]);
    const row = (id: string) => lines.find((l) => l.startsWith(`${id} `))!.split(/\s{2,}/);
    // VARIED's rewards 1.125, 0.125, 0.25, 1.0: mean 0.625, population std 0.442
    // its spread: max − min = 1.125 − 0.125
    expect(row(VARIED)).toEqual([VARIED, TASK_KEY, "4", "4", "0.625±0.442", "1.000", "0.500±0.500", "0.500±0.354"]);
    expect(row(ZERO)).toEqual([ZERO, TASK_KEY, "3", "3", "1.125±0.000", "0.000", "1.000±0.000", "0.500±0.000"]);
    expect(row(TASK_KEY).slice(0, 6)).toEqual([TASK_KEY, TASK_KEY, "1", "0", "-", "-"]);
    // --sort size: largest first
    expect(lines.indexOf(lines.find((l) => l.startsWith(`${VARIED} `))!)).toBeLessThan(
      lines.indexOf(lines.find((l) => l.startsWith(`${ZERO} `))!),
    );

    // --sort spread: the column it sorts by, largest first
    const bySpread = await cli("groups", "--run", RUN, relay.url, "--token", relay.admin, "--sort", "spread");
    expect(bySpread.code, bySpread.stderr).toBe(0);
    const spreadAt = bySpread.stdout
      .split("\n")
      .find((l) => l.startsWith("id "))!
      .split(/\s{2,}/)
      .indexOf("spread");
    const spreads = bySpread.stdout
      .split("\n")
      .filter((l) => ALL_GROUPS.some((g) => l.startsWith(`${g} `)))
      .map((l) => l.split(/\s{2,}/)[spreadAt]!)
      .filter((x) => x !== "-")
      .map(Number);
    expect(spreads.length).toBeGreaterThan(1);
    expect(spreads).toEqual([...spreads].sort((a, b) => b - a));

    const json = await cli("groups", "--run", RUN, relay.url, "--token", relay.admin, "--json");
    expect(json.code, json.stderr).toBe(0);
    const page = JSON.parse(json.stdout) as {
      groups_total: number;
      zero_variance_share: number;
      groups: GroupSummary[];
    };
    expect(page.groups_total).toBe(4);
    expect(page.zero_variance_share).toBeCloseTo(1 / 3, 9);
    expect(page.groups.map((g) => g.id).sort()).toEqual(ALL_GROUPS);
  }, 60_000);

  it("--group G prints the rollouts best first with their advantages; RELAY_TOKEN stands in for --token", async () => {
    const {
      code,
      stdout: out,
      stderr: err,
    } = await runCli(["groups", "--run", RUN, "--group", VARIED, relay.url], relay.admin);
    expect(code, err).toBe(0);
    const lines = out.split("\n");
    expect(lines[0]).toBe(`group ${VARIED} of run ${RUN}: task ${TASK_KEY}`);
    expect(lines[1]).toMatch(/^4 rollout\(s\): 4 finished, 0 failed, 0 live/);
    expect(out).toMatch(/ {2}reward: mean 0\.625 ± 0\.442 \(per rewarded trace Σ score × weight/);
    expect(out).toMatch(/ {2}correct: mean 0\.500 ± 0\.500, min 0\.000, max 1\.000/);
    const head = lines.find((l) => l.startsWith("id "))!;
    expect(head.split(/\s{2,}/)).toEqual([
      "id",
      "status",
      "reward",
      "adv (norm)",
      "correct",
      "correct adv (norm)",
      "format",
      "format adv (norm)",
      "turns",
      "calls",
      "tokens",
      "stop",
      "error",
    ]);
    const rows = lines.filter((l) => l.startsWith(`${RUN}:varied-`)).map((l) => l.split(/\s{2,}/));
    expect(rows.map((r) => r[0])).toEqual([`${RUN}:varied-0`, `${RUN}:varied-3`, `${RUN}:varied-2`, `${RUN}:varied-1`]);
    // varied-0: reward 1.125 (mean 0.625, std 0.442), correct 1.0 (mean 0.5, std 0.5), format 0.5 (mean 0.5)
    expect(rows[0]!.slice(0, 8)).toEqual([
      `${RUN}:varied-0`,
      "finished",
      "1.125",
      "+0.500 (+1.13)",
      "1.000",
      "+0.500 (+1.00)",
      "0.500",
      "+0.000 (+0.00)",
    ]);
    // turns (chat_basic's 3 assistant nodes) beside the calls; then tokens and the stop condition
    expect(rows[0]!.slice(8, 10)).toEqual(["3", "3"]);
    expect(rows[0]![11]).toBe("agent_completed");

    const zero = await cli("groups", "--run", RUN, "--group", ZERO, relay.url, "--token", relay.admin);
    expect(zero.code, zero.stderr).toBe(0);
    expect(zero.stdout).toMatch(/\+0\.000 \(-\)/);
    const json = await cli("groups", "--run", RUN, "--group", ODD, relay.url, "--token", relay.admin, "--json");
    expect(json.code, json.stderr).toBe(0);
    expect((JSON.parse(json.stdout) as { id: string }).id).toBe(ODD);
  }, 60_000);

  it("refusals exit 1 with the relay's reason; usage errors exit 2", async () => {
    const none = await cli("groups", "--run", RUN, relay.url);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/401 unauthorized.*pass --token T \(or set RELAY_TOKEN\)/);
    const unknown = await cli("groups", "--run", RUN, "--group", "no-such-group", relay.url, "--token", relay.admin);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/404 not_found/);
    expect((await cli("groups", relay.url, "--token", relay.admin)).code).toBe(2); // no --run
    expect((await cli("groups", "--run", RUN, "--token", relay.admin)).code).toBe(2); // no URL
    const sort = await cli("groups", "--run", RUN, relay.url, "--sort", "reward", "--token", relay.admin);
    expect(sort.code).toBe(2);
    expect(sort.stderr).toMatch(/--sort: expected one of spread, size, task/);
    expect((await cli("groups", "--run", RUN, "--group", VARIED, "--sort", "size", relay.url)).code).toBe(2);
  }, 60_000);
});

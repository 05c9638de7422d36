// A run's search in workerd (src/objects/registry/search-store.ts, src/objects/episode/search-sync.ts): every
// golden case pushed into one run through the Worker, then queries over HTTP give exactly the
// episodes a brute-force scan of the same segments finds (words, phrases, prefixes, field filters,
// OR, exclusions), ranked, with snippets that hold the words; the list's filters and the token's
// scope hold; a running episode's new turn waits (SEARCH_FLUSH_MS), a retraction and a discarded trace send
// what waits at once and leave no stale text, the end sends the rest; a deleted episode's text goes; an archived episode is still found.
import { runDurableObjectAlarm } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { RESCAN_STEPS } from "../../src/objects/registry/flag-store.js";
import type { SearchHit as Hit, SearchPage } from "../../src/objects/registry/search-store.js";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { SEGMENT_STEPS, TURN_STEPS } from "../../src/protocol/flags/rules.js";
import { nodeSegments, type Segment, taskSegment, withinBudget } from "../../src/protocol/search/segments.js";
import { type Json, type JsonObject, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import worker from "../../src/worker/index.js";
import { delta, m, node, openDelta } from "../support/deltas.js";
import { golden, goldenNames, post, pushFrames, relay } from "./support.js";

const RUN = `search-${Date.now().toString(36)}`;
/** The route's answer, as the run's index gives it. */
type Page = SearchPage;

/** Per episode, its segments as the relay cuts them, from the golden episode (the brute force's corpus). */
const corpus = new Map<string, Segment[]>();

async function search(query: string): Promise<Page> {
  const res = await relay(`../runs/${RUN}/search?${query}`);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Page;
}

async function allHits(query: string): Promise<Hit[]> {
  const out: Hit[] = [];
  let cursor: string | null = null;
  do {
    const page: Page = await search(`${query}&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    out.push(...page.episodes);
    cursor = page.cursor;
  } while (cursor);
  return out;
}

/** unicode61 with diacritics removed, as the index tokenizes: lower case, letters and digits. */
function words(text: string): string[] {
  return text
    .normalize("NFKD")
    .replace(/\p{M}/gu, "")
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter(Boolean);
}

function hasPhrase(text: string, phrase: string): boolean {
  const w = words(text);
  const p = words(phrase);
  return w.some((_x, i) => p.every((q, k) => w[i + k] === q));
}

function segmentsOf(episode: Uint8Array): Segment[] {
  const ep = toJson(decodeLossless(episode)) as JsonObject;
  const out: Segment[] = [];
  (ep.traces as JsonObject[]).forEach((t, i) => {
    if (i === 0) {
      const s = taskSegment(t.id as string, t.task as Json);
      if (s) out.push(s);
    }
    for (const [k, n] of (t.nodes as JsonObject[]).entries())
      out.push(...nodeSegments(t.id as string, k, n.message as Json));
  });
  return withinBudget(out, 0).kept;
}

beforeAll(async () => {
  for (const name of await goldenNames()) {
    const c = await golden(name);
    if (!c.episode) continue; // gap_detected: its reply is refused
    const id = `${RUN}:${name}`;
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    const r = await post(`${id}/reply`, c.reply);
    expect(r.status).toBe(200);
    await r.arrayBuffer();
    corpus.set(id, segmentsOf(c.episode));
  }
}, 120_000);

describe("search over a run's episodes", () => {
  const cases: Array<[string, (s: Segment) => boolean]> = [
    ["q=calculator", (s) => words(s.body).includes("calculator")],
    ["q=%22tool%20says%2042%22", (s) => hasPhrase(s.body, "tool says 42")],
    ["q=calc*", (s) => words(s.body).some((w) => w.startsWith("calc"))],
    ["q=role:tool%2042", (s) => s.role === "tool" && words(s.body).includes("42")],
    ["q=tool:calculator", (s) => s.tool === "calculator"],
    ["q=answer", (s) => words(s.body).includes("answer")],
  ];
  for (const [query, matches] of cases) {
    it(`${decodeURIComponent(query)}: exactly the episodes a brute-force scan finds, each once, best first`, async () => {
      const want = [...corpus].filter(([, segs]) => segs.some(matches)).map(([id]) => id);
      expect(want.length, "the query finds something").toBeGreaterThan(0);
      const hits = await allHits(query);
      expect(hits.map((h) => h.id).sort()).toEqual(want.sort());
      expect(new Set(hits.map((h) => h.id)).size).toBe(hits.length);
      for (let i = 1; i < hits.length; i++) expect(hits[i]!.score).toBeLessThanOrEqual(hits[i - 1]!.score);
      for (const h of hits) {
        expect(h.snippets.length).toBeGreaterThan(0);
        for (const s of h.snippets) {
          // each snippet is from a segment the query matches (a bare word matches a role or a tool's name too)
          expect(
            corpus
              .get(h.id)!
              .some(
                (x) =>
                  x.trace === s.trace &&
                  x.node === s.node &&
                  (matches(x) || matches({ ...x, body: `${x.role} ${x.tool ?? ""}` })),
              ),
            `${h.id} ${s.trace}/${s.node}`,
          ).toBe(true);
          // and marks the words it shows, only those
          const shown = {
            trace: s.trace,
            node: s.node,
            role: s.role,
            tool: s.tool,
            kind: "text" as const,
            body: s.text,
          };
          if (!query.startsWith("q=tool:") && matches(shown))
            expect(s.highlights.length, `${h.id} ${s.text}`).toBeGreaterThan(0);
          for (const [a, b] of s.highlights)
            expect(matches({ ...shown, body: s.text.slice(a, b) }), s.text.slice(a, b)).toBe(true);
        }
      }
    });
  }

  it("what the text costs the index: every segment held, the rows it wrote, its payload bytes", async () => {
    const size = await env.EPISODE_INDEX.getByName(`run:${RUN}`).searchSize();
    const segments = [...corpus.values()].flat();
    expect(size.segments).toBe(segments.length);
    // (SQLite's LENGTH counts code points)
    expect(size.chars).toBe(segments.reduce((n, s) => n + [...s.body].length, 0));
    expect(size.rowsWritten).toBeGreaterThanOrEqual(size.segments);
    expect(size.textBytes).toBeGreaterThanOrEqual(size.chars);
    expect(size.ftsBytes).toBeGreaterThan(0);
  });

  it("OR and exclusions; snippets mark the words found", async () => {
    const either = await allHits("q=calculator%20OR%20391");
    const want = [...corpus]
      .filter(([, segs]) => segs.some((s) => words(s.body).includes("calculator") || words(s.body).includes("391")))
      .map(([id]) => id);
    expect(either.map((h) => h.id).sort()).toEqual(want.sort());
    const not = await allHits("q=42%20-calculator");
    const wantNot = [...corpus]
      .filter(([, segs]) => segs.some((s) => words(s.body).includes("42") && !words(s.body).includes("calculator")))
      .map(([id]) => id);
    expect(not.map((h) => h.id).sort()).toEqual(wantNot.sort());
    const [hit] = (await search("q=calculator&limit=1")).episodes;
    const s = hit!.snippets[0]!;
    expect(s.highlights.length).toBeGreaterThan(0);
    for (const [a, b] of s.highlights) expect(s.text.slice(a, b).toLowerCase()).toBe("calculator");
  });

  it("a token covering part of the run: exactly its own rollouts a brute-force scan of them finds, snippets from them", async () => {
    const secret = "search-scope-secret-7d1e0c9b2a4f6e8d0c1b3a5f7e9d";
    const authEnv: Env = { ...env, RELAY_SECRET: secret, AUTH_OFF_ON_LOOPBACK: undefined };
    const patterns = [`${RUN}:c`, `${RUN}:t`, `${RUN}:r`];
    const covers = (id: string) => patterns.some((p) => id.startsWith(p));
    const token = await new SignJWT({ role: "watcher", episodes: patterns.map((p) => `${p}*`) })
      .setProtectedHeader({ alg: "HS256" })
      .setIssuedAt()
      .setExpirationTime("1h")
      .sign(new TextEncoder().encode(secret));
    const scoped = async (q: string): Promise<Hit[]> => {
      const out: Hit[] = [];
      let cursor: string | null = null;
      do {
        const url = `https://relay.example.com/v1/runs/${RUN}/search?q=${q}&limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
        const res = await worker.fetch(new Request(url, { headers: { authorization: `Bearer ${token}` } }), authEnv);
        expect(res.status, await res.clone().text()).toBe(200);
        const page = (await res.json()) as Page;
        out.push(...page.episodes);
        cursor = page.cursor;
      } while (cursor);
      return out;
    };
    let filtered = 0;
    let found = 0;
    for (const [q, word] of [
      ["calculator", "calculator"],
      ["answer", "answer"],
      ["the", "the"],
    ] as const) {
      const all = [...corpus]
        .filter(([, segs]) => segs.some((x) => words(`${x.body} ${x.role} ${x.tool ?? ""}`).includes(word)))
        .map(([id]) => id);
      const want = all.filter(covers);
      filtered += all.length - want.length;
      found += want.length;
      const hits = await scoped(q);
      expect(hits.map((h) => h.id).sort(), q).toEqual(want.sort());
      for (const h of hits)
        for (const s of h.snippets)
          expect(corpus.get(h.id)!.some((x) => x.trace === s.trace && x.node === s.node)).toBe(true);
    }
    // the scope let some rollouts in and left some out (the check can fail)
    expect(found).toBeGreaterThan(0);
    expect(filtered).toBeGreaterThan(0);
  });

  it("with the list's filters, and refusals: 400 bad_query, bad_cursor, bad_filter", async () => {
    const eval_ = await allHits("q=answer&status=finished&min_turns=3");
    const rows = (await (await relay(`../runs/${RUN}/episodes?status=finished&min_turns=3&limit=500`)).json()) as {
      episodes: Array<{ id: string }>;
    };
    const allowed = new Set(rows.episodes.map((e) => e.id));
    expect(eval_.length).toBeGreaterThan(0);
    for (const h of eval_) expect(allowed.has(h.id)).toBe(true);
    expect((await relay(`../runs/${RUN}/search?q=`)).status).toBe(400);
    expect(((await (await relay(`../runs/${RUN}/search?q=a%20OR`)).json()) as { error: string }).error).toBe(
      "bad_query",
    );
    expect((await relay(`../runs/${RUN}/search?q=a&cursor=nope`)).status).toBe(400);
    expect((await relay(`../runs/${RUN}/search?q=a&min_turns=x`)).status).toBe(400);
  });

  // by design (SEARCH_FLUSH_MS, 5 min here): a running episode's text waits in its run's index, and goes in at once
  // when a batch replaces text (a retraction, a discarded trace) or the episode ends
  it("a running episode's new turn waits; a retraction or a discard sends what waits at once and leaves no stale text; the end sends the rest; a delete takes it all", async () => {
    const id = `${RUN}:hand`;
    const producer = new ProducerCursor("h");
    const send = async (d: Uint8Array, acked = true) => {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      if (acked) producer.acknowledge();
      await runDurableObjectAlarm(env.EPISODES.getByName(id));
    };
    const found = async (word: string) => (await search(`q=${word}`)).episodes.map((h) => h.id);
    const nodes = async () =>
      (
        (await (await relay(`../runs/${RUN}/episodes?prefix=${encodeURIComponent(id)}`)).json()) as {
          episodes: Array<{ nodes: number }>;
        }
      ).episodes[0]?.nodes;
    const say = (i: number, text: string) => node(i, { message: m({ role: "assistant", content: text }) });
    await send(openDelta());
    await send(delta({ nodes: [say(0, "zebra crossing")] }));
    // the row moved; its text waits
    expect(await nodes()).toBe(1);
    expect(await found("zebra")).toEqual([]);
    // a turn whose ack is lost (it waits too), then the re-diff without it: the relay retracts it, the batch replaces
    // waiting text, and all that waited goes in at once, without the retracted turn
    await send(delta({ nodes: [say(1, "okapi")] }), false);
    expect(await found("okapi")).toEqual([]);
    await send(delta({ nodes: [say(1, "narwhal")] }), false);
    expect(await found("okapi")).toEqual([]);
    expect(await found("narwhal")).toEqual([id]);
    expect(await found("zebra")).toEqual([id]);
    // a retraction of text already found: it goes at once
    await send(delta({ nodes: [say(1, "ibis")] }));
    expect(await found("narwhal")).toEqual([]);
    expect(await found("ibis")).toEqual([id]);
    // a second trace waits; a retraction sends it in; its discard then takes it out at once
    await send(openDelta("t-2"));
    await send(delta({ nodes: [say(0, "pangolin")] }, "t-2"));
    expect(await found("pangolin")).toEqual([]);
    await send(delta({ nodes: [say(2, "heron")] }), false);
    await send(delta({ nodes: [say(2, "egret")] }));
    expect(await found("heron")).toEqual([]);
    expect(await found("egret")).toEqual([id]);
    expect(await found("pangolin")).toEqual([id]);
    await send(delta({ discard: true }, "t-2"));
    expect(await found("pangolin")).toEqual([]);
    // a new turn waits until the episode ends (here it fails): then it is found
    await send(delta({ nodes: [say(3, "quokka")] }));
    expect(await found("quokka")).toEqual([]);
    const failed = await post(`${id}/reply`, encodeReply({ success: false, error: "the env gave up" }));
    expect(failed.status, await failed.clone().text()).toBe(200);
    await failed.arrayBuffer();
    await runDurableObjectAlarm(env.EPISODES.getByName(id));
    expect(await found("quokka")).toEqual([id]);
    expect(await found("egret")).toEqual([id]);
    expect((await relay(id, { method: "DELETE" })).status).toBe(200);
    await runDurableObjectAlarm(env.EPISODES.getByName(id)).catch(() => false);
    for (let i = 0; i < 50 && (await search("q=zebra")).episodes.length > 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect((await search("q=zebra")).episodes).toEqual([]);
  });

  it("an archived episode is still found", async () => {
    const id = `${RUN}:chat_basic`;
    const status = async () => ((await (await relay(`${id}/status`)).json()) as { archived: boolean }).archived;
    for (let i = 0; i < 20 && !(await status()); i++) await runDurableObjectAlarm(env.EPISODES.getByName(id));
    expect(await status()).toBe(true);
    expect((await search("q=%2217%20*%2023%22")).episodes.map((h) => h.id)).toContain(id);
  });
});

describe("flags", () => {
  const FRUN = `flags-${Date.now().toString(36)}`;
  type Row = { id: string; flags: Array<{ rule: string; trace: string | null; node: number | null; excerpt: string }> };
  const list = async (q = "") =>
    ((await (await relay(`../runs/${FRUN}/episodes?${q}`)).json()) as { episodes: Row[] }).episodes;
  const say = (i: number, text: string) => node(i, { message: m({ role: "assistant", content: text }) });
  const callBash = (i: number, cmd: string) =>
    node(i, {
      message: m({
        role: "assistant",
        content: null,
        tool_calls: [m({ id: `c${i}`, name: "bash", arguments: JSON.stringify({ cmd }) })],
      }),
    });

  const rollout = (name: string, ...turns: Uint8Array[]) => rolloutIn(FRUN, name, ...turns);
  async function rolloutIn(run: string, name: string, ...turns: Uint8Array[]): Promise<string> {
    const id = `${run}:${name}`;
    const producer = new ProducerCursor(name);
    for (const d of [openDelta(), ...turns]) {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      producer.acknowledge();
    }
    await runDurableObjectAlarm(env.EPISODES.getByName(id));
    return id;
  }

  it("the default rules flag a rollout as its text arrives: evidence in its row, counts in the aggregates, a list filter", async () => {
    const hack = await rollout("hack", delta({ nodes: [say(0, "solve it"), callBash(1, "cat tests/grader.py")] }));
    const honest = await rollout("honest", delta({ nodes: [say(0, "solve it"), say(1, "the answer is 42")] }));
    const rows = await list();
    const flagged = rows.find((r) => r.id === hack)!;
    expect(flagged.flags).toEqual([
      { rule: "touches-grader", trace: "t-1", node: 1, excerpt: expect.stringContaining("tests/grader.py") },
    ]);
    expect(rows.find((r) => r.id === honest)!.flags).toEqual([]);
    expect((await list("flag=touches-grader")).map((r) => r.id)).toEqual([hack]);
    expect((await list("flagged=0")).map((r) => r.id)).toEqual([honest]);
    const agg = (await (await relay(`../runs/${FRUN}`)).json()) as { aggregates: { flags: Record<string, number> } };
    expect(agg.aggregates.flags).toEqual({ "touches-grader": 1 });
    // a retraction takes the evidence back with the text
    const id = `${FRUN}:retracted`;
    const p = new ProducerCursor("r");
    const send = async (d: Uint8Array, acked = true) => {
      const r = await post(`${id}/deltas`, encodeEnvelope(p.envelope(d)));
      await r.arrayBuffer();
      if (acked) p.acknowledge();
    };
    await send(openDelta());
    await send(delta({ nodes: [callBash(0, "cat grader.py")] }), false);
    await runDurableObjectAlarm(env.EPISODES.getByName(id));
    expect((await list()).find((r) => r.id === id)!.flags.map((f) => f.rule)).toEqual(["touches-grader"]);
    await send(delta({ nodes: [callBash(0, "cat main.py")] }));
    await runDurableObjectAlarm(env.EPISODES.getByName(id));
    expect((await list()).find((r) => r.id === id)!.flags).toEqual([]);
  });

  it("rules set later: PUT replaces them, the alarm rescans what was written (paced), GET says how far; bad rules are 400", async () => {
    const put = (body: unknown) =>
      relay(`../runs/${FRUN}/rules`, {
        method: "PUT",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
    const before = (await (await relay(`../runs/${FRUN}/rules`)).json()) as {
      defaults: boolean;
      rules: Array<{ id: string }>;
    };
    expect(before.defaults).toBe(true);
    expect(before.rules.map((r) => r.id)).toContain("touches-grader");
    const res = await put({
      rules: [
        { id: "says-42", description: "the honest answer", match: { pattern: "answer is 42", role: "assistant" } },
      ],
    });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(await res.json()).toMatchObject({ defaults: false, rules: [{ id: "says-42" }], rescan: { done: false } });
    const index = env.EPISODE_INDEX.getByName(`run:${FRUN}`);
    for (
      let i = 0;
      i < 10 && !((await (await relay(`../runs/${FRUN}/rules`)).json()) as { rescan: { done: boolean } }).rescan.done;
      i++
    ) {
      await runDurableObjectAlarm(index);
    }
    const rows = await list();
    expect(rows.filter((r) => r.flags.length > 0).map((r) => [r.id, r.flags.map((f) => f.rule)])).toEqual([
      [`${FRUN}:honest`, ["says-42"]],
    ]);
    // (a pattern RE2 cannot run in linear time; nested repeats like (a+)+ it runs, and takes)
    const bad = await put({ rules: [{ id: "x", match: { pattern: "x(?=y)", regex: true } }] });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: "bad_rules", field: "rules[0].match.pattern" });
    expect((await put({ defaults: true })).status).toBe(200);
  });

  it("the default rules round-trip: GET them, PUT them back (as they are, or as the run's own)", async () => {
    const put = (body: unknown) =>
      relay(`../runs/${FRUN}/rules`, {
        method: "PUT",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
    const got = (await (await relay(`../runs/${FRUN}/rules`)).json()) as { defaults: boolean; rules: unknown[] };
    expect(got.defaults).toBe(true);
    const back = await put(got);
    expect(back.status, await back.clone().text()).toBe(200);
    expect(await back.json()).toMatchObject({ defaults: true, rules: got.rules });
    const own = await put({ rules: got.rules });
    expect(own.status, await own.clone().text()).toBe(200);
    expect(await own.json()).toMatchObject({ defaults: false, rules: got.rules });
    expect((await put({ defaults: true })).status).toBe(200);
  });

  it("each rule is evaluated once per delta: each new segment by every text rule once, each row update by every reward rule once", async () => {
    const run = `${FRUN}-count`;
    const rules = [
      { id: "grader", match: { pattern: "grader" } },
      { id: "rm", match: { pattern: "rm -rf", in: "arguments" } },
      { id: "low", reward: { key: "correct", below: 0.5 } },
    ];
    const set = await relay(`../runs/${run}/rules`, {
      method: "PUT",
      body: JSON.stringify({ rules }),
      headers: { "content-type": "application/json" },
    });
    expect(set.status, await set.clone().text()).toBe(200);
    const index = env.EPISODE_INDEX.getByName(`run:${run}`);
    const before = await index.flagEvaluations();
    expect(before).toMatchObject({ textRules: 2, rewardRules: 1 });
    const id = `${run}:ep`;
    const producer = new ProducerCursor("count");
    // the task (1 segment), then 2, 1 and 2 segments; each delta's row flushed before the next
    const deltas = [
      openDelta(),
      delta({ nodes: [say(0, "what does the grader check"), callBash(1, "ls")] }),
      delta({ nodes: [say(2, "nothing yet")] }),
      delta({ nodes: [callBash(3, "rm -rf /tmp/x"), say(4, "done")] }),
    ];
    for (const d of deltas) {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      producer.acknowledge();
      await runDurableObjectAlarm(env.EPISODES.getByName(id));
    }
    const after = await index.flagEvaluations();
    const segments = after.segments - before.segments;
    const rows = after.rows - before.rows;
    expect(segments).toBe(6);
    expect(after.textChecks - before.textChecks).toBe(segments * 2);
    // one row update per delta at most (a flush carries every delta since the last), each checked by the reward rule once
    expect(rows).toBeGreaterThanOrEqual(1);
    expect(rows).toBeLessThanOrEqual(deltas.length);
    expect(after.rewardChecks - before.rewardChecks).toBe(rows);
    const [row] = ((await (await relay(`../runs/${run}/episodes`)).json()) as { episodes: Row[] }).episodes;
    expect(row!.flags.map((f) => [f.rule, f.node])).toEqual([
      ["grader", 0],
      ["rm", 3],
    ]);
  });

  it("rules set before a run's first rollout: the defaults store nothing, rules of its own are kept and hold from the first row", async () => {
    const run = `${FRUN}-early`;
    const put = (body: unknown) =>
      relay(`../runs/${run}/rules`, {
        method: "PUT",
        body: JSON.stringify(body),
        headers: { "content-type": "application/json" },
      });
    const get = () => relay(`../runs/${run}/rules`);
    expect((await get()).status).toBe(404);
    // the defaults: answered, nothing stored (still no run)
    const defaults = await put({ defaults: true });
    expect(defaults.status, await defaults.clone().text()).toBe(200);
    expect(await defaults.json()).toMatchObject({ defaults: true, rescan: { done: true } });
    expect((await get()).status).toBe(404);
    expect((await put({ rules: [{ id: "x", match: { pattern: "x(?=y)", regex: true } }] })).status).toBe(400);
    expect((await get()).status).toBe(404);
    // rules of its own: kept, and GET answers them
    const rules = [
      {
        id: "says-hello",
        description: "",
        match: { pattern: "hello there", regex: false, role: "assistant", tool: null, in: "text" },
      },
    ];
    const set = await put({ rules });
    expect(set.status, await set.clone().text()).toBe(200);
    expect(await set.json()).toEqual({
      rules,
      defaults: false,
      rescan: { done: true, segments: 0, rows: 0 },
      budget: {
        segment_steps: SEGMENT_STEPS,
        upsert_steps: TURN_STEPS,
        rescan_steps: RESCAN_STEPS,
        skipped: { segments: 0, checks: 0, steps: 0 },
      },
    });
    expect(await (await get()).json()).toMatchObject({ rules, defaults: false });
    // the first rollouts are flagged by them (and not by the defaults)
    const hi = await rolloutIn(
      run,
      "hi",
      delta({ nodes: [say(0, "hello there"), callBash(1, "cat tests/grader.py")] }),
    );
    const rows = ((await (await relay(`../runs/${run}/episodes`)).json()) as { episodes: Row[] }).episodes;
    expect(rows.map((r) => [r.id, r.flags.map((f) => f.rule)])).toEqual([[hi, ["says-hello"]]]);
  });
});

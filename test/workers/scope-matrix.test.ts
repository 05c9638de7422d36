// Scope in every byte, through the real Worker and objects with auth on: every run route and
// socket, the lists across runs and the watch, for each kind of token (none, another run's, one
// episode, part of a run, a run prefix, a scoped admin, `*`). Every answer (bodies, socket
// messages, the bulk fetch's bytes) is searched for the ids, rewards and task names of the
// episodes the token does not cover, and its counts checked against what it covers; a token
// for another run gets exactly the answer of a run nobody wrote; cursors say nothing and serve
// their own token only. Tokens are signed here with jose, independently of src/protocol/http/auth.ts.
import { env } from "cloudflare:workers";
import { decodeMulti } from "@msgpack/msgpack";
import { SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import type { IndexRow } from "../../src/protocol/registry/entry.js";
import { PUSH_MS } from "../../src/protocol/registry/index-protocol.js";
import worker from "../../src/worker/index.js";
import { currentRow, weightOne } from "../support/index-rows.js";
import { golden, inbox } from "./support.js";

const SECRET = "scope-matrix-secret-5b0c7e2f9a4d1836e7c2b9a0f1d3";
const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
const HOST = "https://relay.example.com";

const tag = Date.now().toString(36);
/** The run under test, another run, and a run nobody writes. */
const A = `mxa${tag}`;
const B = `mzb${tag}`;
const MISSING = `mxm${tag}`;

// run A: finished episodes (real ones, with bodies), a live one, and rows with rewards and tasks of their own
const FINISHED = [`${A}:pa`, `${A}:pb`, `${A}:qa`];
const LIVE = `${A}:qb`;
const SCORED: Array<[string, number, string]> = [
  [`${A}:ra`, 0.7130913, "tk-ra"],
  [`${A}:rb`, 0.4190127, "tk-rb"],
  [`${A}:rc`, 0.2870455, "tk-rc"],
];
const ALL_A = [...FINISHED, LIVE, ...SCORED.map(([id]) => id)];
const IN_B = [`${B}:ba`];
/** Written while sockets are open: a change only whole-run viewers may hear of. */
const LATE: [string, number, string] = [`${A}:rd`, 0.5550381, "tk-rd"];

type TokenName = "none" | "other" | "one" | "part" | "prefix" | "admin" | "star";
interface Viewer {
  name: TokenName;
  role: string;
  episodes: string[];
  /** The episodes of A (and B) it covers. */
  covers: (id: string) => boolean;
  /** Covers all of run A. */
  wholeA: boolean;
}
const VIEWERS: Viewer[] = [
  { name: "none", role: "", episodes: [], covers: () => false, wholeA: false },
  { name: "other", role: "watcher", episodes: [`${B}:*`], covers: (id) => id.startsWith(`${B}:`), wholeA: false },
  { name: "one", role: "watcher", episodes: [`${A}:pa`], covers: (id) => id === `${A}:pa`, wholeA: false },
  { name: "part", role: "watcher", episodes: [`${A}:p*`], covers: (id) => id.startsWith(`${A}:p`), wholeA: false },
  { name: "prefix", role: "watcher", episodes: ["mxa*"], covers: (id) => id.startsWith("mxa"), wholeA: true },
  { name: "admin", role: "admin", episodes: [`${A}:*`], covers: (id) => id.startsWith(`${A}:`), wholeA: true },
  { name: "star", role: "admin", episodes: ["*"], covers: () => true, wholeA: true },
];
const tokens = new Map<TokenName, string>();

async function sign(role: string, episodes: string[]): Promise<string> {
  return new SignJWT({ role, episodes })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(SECRET));
}

function headersOf(v: Viewer, extra: Record<string, string> = {}): Record<string, string> {
  const t = tokens.get(v.name);
  return t ? { authorization: `Bearer ${t}`, ...extra } : extra;
}

interface Answer {
  status: number;
  text: string;
}

async function call(v: Viewer, method: string, path: string, extra: Record<string, string> = {}): Promise<Answer> {
  const res = await worker.fetch(new Request(`${HOST}${path}`, { method, headers: headersOf(v, extra) }), AUTH_ENV);
  if (res.webSocket) throw new Error(`${path}: a socket where an answer was expected`);
  const bytes = new Uint8Array(await res.arrayBuffer());
  const binary = (res.headers.get("content-type") ?? "").includes("msgpack") && res.status === 200;
  return {
    status: res.status,
    text: binary ? JSON.stringify([...decodeMulti(bytes)], replacer) : new TextDecoder().decode(bytes),
  };
}

/** Bytes (embedded episodes) as text too: ids or rewards inside them would show. */
function replacer(_k: string, v: unknown): unknown {
  return v instanceof Uint8Array ? new TextDecoder().decode(v) : v;
}

/** What `v` must never see of run A and run B: ids, rewards and tasks of the episodes it does not cover. */
function secretsFor(v: Viewer): string[] {
  const out: string[] = [];
  for (const id of [...ALL_A, ...IN_B, LATE[0]]) if (!v.covers(id)) out.push(id);
  for (const [id, reward, task] of [...SCORED, LATE]) {
    if (v.covers(id)) continue;
    out.push(String(reward), task);
  }
  return out;
}

function expectNoSecrets(v: Viewer, what: string, text: string): void {
  for (const s of secretsFor(v)) expect(text.includes(s), `${v.name}: ${what} names ${s}`).toBe(false);
}

/** `text` with run names put in place of `from`, for comparing the answer about A with the one about MISSING. */
const asMissing = (text: string, run: string) => text.replaceAll(run, MISSING);

async function finish(id: string): Promise<void> {
  const c = await golden("chat_basic");
  const producer = new ProducerCursor("matrix");
  const auth = { authorization: `Bearer ${await sign("producer", ["*"])}`, "content-type": "application/msgpack" };
  for (const f of c.frames) {
    const r = await worker.fetch(
      new Request(`${HOST}/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: encodeEnvelope(producer.envelope(f)),
        headers: auth,
      }),
      AUTH_ENV,
    );
    expect(r.status, await r.clone().text()).toBe(200);
    await r.arrayBuffer();
    producer.acknowledge();
  }
  const r = await worker.fetch(
    new Request(`${HOST}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply, headers: auth }),
    AUTH_ENV,
  );
  expect(r.status, await r.clone().text()).toBe(200);
  await r.arrayBuffer();
}

function scoredRow([id, reward, task]: [string, number, string], updated: number): IndexRow {
  return currentRow({ id, run: A, status: "finished", updated, rewards: weightOne({ correct: reward }), task });
}

beforeAll(async () => {
  for (const v of VIEWERS) if (v.role) tokens.set(v.name, await sign(v.role, v.episodes));
  for (const id of [...FINISHED, ...IN_B]) await finish(id);
  const live = await worker.fetch(
    new Request(`${HOST}/v1/episodes/${LIVE}/deltas`, {
      method: "POST",
      body: encodeEnvelope(new ProducerCursor("m").envelope((await golden("chat_basic")).frames[0]!)),
      headers: { authorization: `Bearer ${await sign("producer", ["*"])}` },
    }),
    AUTH_ENV,
  );
  expect(live.status).toBe(200);
  await live.arrayBuffer();
  const index = env.EPISODE_INDEX.getByName(`run:${A}`);
  for (const [i, s] of SCORED.entries()) await index.upsert(scoredRow(s, Date.now() + i));
  // every row of A is in its index before the matrix starts
  const star = VIEWERS.find((v) => v.name === "star")!;
  for (let i = 0; ; i++) {
    const listed =
      (JSON.parse((await call(star, "GET", `/v1/runs/${A}/episodes?limit=500`)).text) as { episodes?: unknown[] })
        .episodes?.length ?? 0;
    if (listed === ALL_A.length) break;
    if (i > 200) throw new Error(`run ${A}: ${listed} of ${ALL_A.length} rows indexed`);
    await new Promise((r) => setTimeout(r, 50));
  }
}, 60_000);

/** Every HTTP run route, for one run. */
const RUN_ROUTES: Array<[string, string, (run: string) => string]> = [
  ["the run's view", "GET", (r) => `/v1/runs/${r}`],
  ["the list", "GET", (r) => `/v1/runs/${r}/episodes?limit=500`],
  ["the list, by reward", "GET", (r) => `/v1/runs/${r}/episodes?sort=reward&limit=500`],
  ["the list filtered by status", "GET", (r) => `/v1/runs/${r}/episodes?status=finished`],
  ["the list filtered by task", "GET", (r) => `/v1/runs/${r}/episodes?task=tk-ra`],
  ["the groups", "GET", (r) => `/v1/runs/${r}/groups`],
  ["a group", "GET", (r) => `/v1/runs/${r}/groups/g1`],
  ["the tasks", "GET", (r) => `/v1/runs/${r}/tasks?key=correct&threshold=0.5`],
  ["the bulk fetch", "GET", (r) => `/v1/runs/${r}/finished`],
  ["the bulk fetch as NDJSON", "GET", (r) => `/v1/runs/${r}/finished`],
  ["the bulk fetch with rows (an export)", "GET", (r) => `/v1/runs/${r}/finished?row=1`],
  ["the bulk fetch with rows, filtered, as NDJSON", "GET", (r) => `/v1/runs/${r}/finished?row=1&min_turns=0`],
  ["the usage", "GET", (r) => `/v1/runs/${r}/usage`],
  ["a share link", "POST", (r) => `/v1/runs/${r}/share`],
];

describe("every run route × every token", () => {
  for (const v of VIEWERS) {
    for (const [what, method, path] of RUN_ROUTES) {
      it(`${v.name}: ${what}`, async () => {
        const extra: Record<string, string> = what.includes("NDJSON") ? { accept: "application/x-ndjson" } : {};
        const a = await call(v, method, path(A), extra);
        const m = await call(v, method, path(MISSING), extra);
        expectNoSecrets(v, what, a.text);
        if (v.name === "none") {
          expect([a.status, m.status]).toEqual([401, 401]);
          return;
        }
        const adminOnly = what === "the usage" || what === "a share link";
        const wholeOnly = adminOnly || /group|tasks/.test(what);
        const missing = JSON.parse(m.text) as { error?: string };
        // a run nobody wrote: refused (or, admin-only routes, the role's refusal); `*` may still share one or read its usage
        if (adminOnly && v.role !== "admin") expect(m.status).toBe(403);
        else if (adminOnly && v.name === "star") expect(m.status, m.text).toBe(200);
        else expect([m.status, missing.error]).toEqual([404, "not_found"]);
        if (!v.covers(`${A}:pa`) && !v.covers(`${A}:ra`)) {
          // a token covering nothing of the run: the answer of a run nobody wrote, byte for byte
          expect(a.status).toBe(m.status);
          expect(asMissing(a.text, A), what).toBe(m.text);
          return;
        }
        if (adminOnly && v.role !== "admin") {
          expect(a.status, a.text).toBe(403); // the role's, whatever the run
          return;
        }
        if (!v.wholeA && wholeOnly) {
          // needs the whole run: refused from the token alone (the same whether the run holds anything or not)
          expect(a.status, a.text).toBe(403);
          expect(a.text).toMatch(/need a token covering the whole run/);
          return;
        }
        if (!v.wholeA) {
          expect(a.status, a.text).toBe(200);
          checkPartial(
            v,
            what,
            what.includes("NDJSON")
              ? a.text
                  .split("\n")
                  .filter(Boolean)
                  .map((l) => JSON.parse(l))
              : JSON.parse(a.text),
          );
          return;
        }
        // the whole run
        expect(a.status, a.text).toBe(what === "a group" ? 404 : 200);
        if (what === "a group") expect(a.text).toMatch(/has no group/);
        // the run directory serves every run: its usage only for a token covering every episode
        if (what === "the usage")
          expect((JSON.parse(a.text) as { directory: unknown }).directory === null).toBe(v.name !== "star");
      });
    }
  }
});

/** A partial viewer's answer: only what it covers, counted over what it covers. */
function checkPartial(v: Viewer, what: string, body: unknown): void {
  const mine = ALL_A.filter(v.covers);
  if (what === "the run's view") {
    expect(body).toEqual({ run: A, covered: false, aggregates: null });
    return;
  }
  if (what.startsWith("the bulk fetch")) {
    const elements = body as Array<{ id: string; row?: { id: string } }>;
    const ids = elements.map((e) => e.id);
    expect(ids.sort()).toEqual(FINISHED.filter(v.covers).sort());
    // an export's rows: each the row of the episode beside it
    if (what.includes("with rows")) expect(elements.map((e) => e.row?.id).sort()).toEqual(ids);
    return;
  }
  const page = body as { episodes: Array<{ id: string }>; searched: number; cursor: string | null };
  expect(
    page.episodes.every((e) => v.covers(e.id)),
    what,
  ).toBe(true);
  expect(page.searched, `${what}: searched counts only its own rows`).toBeLessThanOrEqual(mine.length);
  expect(page.cursor).toBeNull();
  if (what === "the list") expect(page.episodes.map((e) => e.id).sort()).toEqual(mine.sort());
}

describe("cursors", () => {
  it("say nothing (no id, reward or position), and open for the token they were made for only", async () => {
    const star = VIEWERS.find((v) => v.name === "star")!;
    const part = VIEWERS.find((v) => v.name === "part")!;
    const admin = VIEWERS.find((v) => v.name === "admin")!;
    const seen: string[] = [];
    for (const sort of ["updated", "reward"]) {
      let cursor: string | null = null;
      const ids: string[] = [];
      do {
        const a = await call(
          star,
          "GET",
          `/v1/runs/${A}/episodes?limit=1&sort=${sort}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
        );
        expect(a.status, a.text).toBe(200);
        const page = JSON.parse(a.text) as { episodes: Array<{ id: string }>; cursor: string | null };
        ids.push(...page.episodes.map((e) => e.id));
        cursor = page.cursor;
        if (cursor) seen.push(cursor);
      } while (cursor !== null && ids.length < 50);
      expect(ids.sort()).toEqual([...ALL_A].sort());
    }
    for (const c of seen) {
      const decoded = (() => {
        try {
          return atob(c.replace(/-/g, "+").replace(/_/g, "/"));
        } catch {
          return "";
        }
      })();
      for (const s of [...ALL_A, ...SCORED.map(([, r]) => String(r)), `${A}:`]) {
        expect(c.includes(s)).toBe(false);
        expect(decoded.includes(s), `a cursor decodes to ${s}`).toBe(false);
      }
    }
    // a cursor of `*` given by another token, or for another list or run, or altered: 400 bad_cursor
    const c = seen[0]!;
    for (const [who, path] of [
      [admin, `/v1/runs/${A}/episodes?limit=1&cursor=${encodeURIComponent(c)}`],
      [part, `/v1/runs/${A}/episodes?limit=1&cursor=${encodeURIComponent(c)}`],
      [star, `/v1/runs/${B}/episodes?limit=1&cursor=${encodeURIComponent(c)}`],
      [star, `/v1/runs/${A}/episodes?limit=1&sort=reward&cursor=${encodeURIComponent(c)}`],
      [star, `/v1/runs/${A}/finished?cursor=${encodeURIComponent(c)}`],
      [
        star,
        `/v1/runs/${A}/episodes?limit=1&cursor=${encodeURIComponent(`${c.slice(0, -2)}${c.at(-2) === "A" ? "B" : "A"}${c.at(-1)}`)}`,
      ],
    ] as const) {
      const a = await call(who, "GET", path);
      expect([a.status, JSON.parse(a.text).error], `${who.name} ${path}`).toEqual([400, "bad_cursor"]);
    }
  });

  it("the bulk fetch's cursors resume its own token's stream", async () => {
    const star = VIEWERS.find((v) => v.name === "star")!;
    const part = VIEWERS.find((v) => v.name === "part")!;
    const all = JSON.parse((await call(star, "GET", `/v1/runs/${A}/finished`)).text) as Array<{
      id: string;
      cursor: string;
    }>;
    expect(all.map((e) => e.id)).toEqual(FINISHED);
    const rest = JSON.parse(
      (await call(star, "GET", `/v1/runs/${A}/finished?cursor=${encodeURIComponent(all[0]!.cursor)}`)).text,
    ) as Array<{ id: string }>;
    expect(rest.map((e) => e.id)).toEqual(FINISHED.slice(1));
    expect(
      (await call(part, "GET", `/v1/runs/${A}/finished?cursor=${encodeURIComponent(all[0]!.cursor)}`)).status,
    ).toBe(400);
  });
});

describe("lists across runs and the runs directory", () => {
  for (const v of VIEWERS) {
    it(`${v.name}: GET /v1/episodes and GET /v1/runs`, async () => {
      const list = await call(v, "GET", "/v1/episodes?limit=500");
      const runs = await call(v, "GET", "/v1/runs?limit=500");
      if (v.name === "none") {
        expect([list.status, runs.status]).toEqual([401, 401]);
        return;
      }
      expectNoSecrets(v, "the list across runs", list.text);
      expectNoSecrets(v, "the runs", runs.text);
      const listed = JSON.parse(list.text) as { episodes: Array<{ id: string }> };
      expect(
        listed.episodes.every((e) => v.covers(e.id)),
        list.text,
      ).toBe(true);
      const mine = [...ALL_A, ...IN_B].filter(v.covers);
      // the directory hears of a run within DIRECTORY_MS: the runs it lists are the ones it covers whole
      const names = (JSON.parse(runs.text) as { runs: Array<{ run: string }> }).runs.map((r) => r.run);
      expect(names.includes(A)).toBe(v.wholeA && names.includes(A));
      if (!v.wholeA) expect(names.includes(A)).toBe(false);
      if (v.name !== "star" && v.name !== "prefix")
        for (const id of listed.episodes.map((e) => e.id)) expect(mine).toContain(id);
    });
  }
});

describe("sockets", () => {
  /** Open a socket at `path` for `v`: its messages until a quiet moment, or the refusal. */
  async function socket(
    v: Viewer,
    path: string,
    during?: () => Promise<void>,
  ): Promise<{ status: number; text: string; messages: string[] }> {
    const t = tokens.get(v.name);
    const headers: Record<string, string> = {
      upgrade: "websocket",
      ...(t ? { "sec-websocket-protocol": `episode-relay, bearer.${t}` } : {}),
    };
    const res = await worker.fetch(new Request(`${HOST}${path}`, { headers }), AUTH_ENV);
    if (res.status !== 101) return { status: res.status, text: await res.text(), messages: [] };
    const ws = res.webSocket!;
    ws.binaryType = "arraybuffer";
    ws.accept();
    const box = inbox(ws);
    const messages: string[] = [];
    const first = await box.next(5000);
    messages.push(typeof first === "string" ? first : new TextDecoder().decode(first));
    await during?.();
    for (;;) {
      const m = await box.next(PUSH_MS * 4).catch(() => null);
      if (m === null) break;
      messages.push(typeof m === "string" ? m : `[${(m as ArrayBuffer).byteLength} bytes]`);
    }
    ws.close(1000, "done");
    return { status: 101, text: "", messages };
  }

  for (const v of VIEWERS) {
    it(`${v.name}: the run socket (snapshot and changes), the runs socket, the watch`, async () => {
      const index = env.EPISODE_INDEX.getByName(`run:${A}`);
      const late = async () => {
        await index.upsert(scoredRow(LATE, Date.now()));
        await index.upsert(scoredRow(SCORED[0]!, Date.now() + 1)); // a change of a row only some cover
      };
      const run = await socket(v, `/v1/runs/${A}`, late);
      const missing = await socket(v, `/v1/runs/${MISSING}`);
      const runs = await socket(v, "/v1/runs");
      const watch = await socket(v, `/v1/episodes/${encodeURIComponent(`${A}:pa`)}/watch`);
      if (v.name === "none") {
        expect([run.status, missing.status, runs.status, watch.status]).toEqual([401, 401, 401, 401]);
        return;
      }
      for (const [what, s] of [
        ["run socket", run],
        ["runs socket", runs],
      ] as const) {
        expectNoSecrets(v, what, s.text + s.messages.join("\n"));
      }
      if (v.name === "other") {
        // another run's socket: the refusal a run nobody wrote would get from a token that does not cover it
        expect(run.status).toBe(404);
        expect(asMissing(run.text, A)).toBe(missing.text);
        expect(watch.status).toBe(403);
        return;
      }
      expect(run.status).toBe(101);
      const parsed = run.messages.map(
        (m) =>
          JSON.parse(m) as {
            type: string;
            aggregates: unknown;
            episodes?: Array<{ id: string }>;
            upserts?: Array<{ id: string }>;
          },
      );
      expect(parsed[0]!.type).toBe("snapshot");
      for (const m of parsed) {
        expect(m.aggregates === null, `${v.name}: aggregates only for the whole run`).toBe(!v.wholeA);
        for (const e of [...(m.episodes ?? []), ...(m.upserts ?? [])]) expect(v.covers(e.id), e.id).toBe(true);
      }
      expect(watch.status).toBe(v.covers(`${A}:pa`) ? 101 : 403);
    });
  }
});

describe("share links", () => {
  it("an admin covering the run gets a read-only token for it: a watcher's for RUN:*, 7 days unless ?ttl= says, at most the watcher's maximum and its maker's life", async () => {
    const admin = VIEWERS.find((v) => v.name === "admin")!;
    const a = await call(admin, "POST", `/v1/runs/${A}/share`);
    expect(a.status, a.text).toBe(200);
    const share = JSON.parse(a.text) as {
      run: string;
      token: string;
      role: string;
      episodes: string[];
      expires: string;
    };
    expect(share).toMatchObject({ run: A, role: "watcher", episodes: [`${A}:*`] });
    const claims = JSON.parse(atob(share.token.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))) as {
      role: string;
      episodes: string[];
      exp: number;
      iat: number;
    };
    expect(claims).toMatchObject({ role: "watcher", episodes: [`${A}:*`] });
    // the 7 days asked end with the admin's 1-hour token (issue 39: a share never outlives its maker)
    const makerExp = (
      JSON.parse(atob(tokens.get("admin")!.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))) as { exp: number }
    ).exp;
    expect(claims.exp).toBe(makerExp);
    expect(Date.parse(share.expires) / 1000).toBe(claims.exp);
    const asShared = (method: string, path: string) =>
      worker.fetch(
        new Request(`${HOST}${path}`, { method, headers: { authorization: `Bearer ${share.token}` } }),
        AUTH_ENV,
      );
    const list = await asShared("GET", `/v1/runs/${A}/episodes?limit=500`);
    expect(((await list.json()) as { episodes: unknown[] }).episodes.length).toBeGreaterThanOrEqual(ALL_A.length);
    // read-only, and only this run
    expect((await asShared("DELETE", `/v1/episodes/${A}:pa`)).status).toBe(403);
    expect((await asShared("POST", `/v1/runs/${A}/share`)).status).toBe(403);
    expect((await asShared("GET", `/v1/runs/${B}/episodes`)).status).toBe(404);
    const hour = JSON.parse((await call(admin, "POST", `/v1/runs/${A}/share?ttl=1h`)).text) as { token: string };
    const c = JSON.parse(atob(hour.token.split(".")[1]!.replace(/-/g, "+").replace(/_/g, "/"))) as {
      exp: number;
      iat: number;
    };
    expect(c.exp).toBe(Math.min(c.iat + 3600, makerExp));
    const long = await call(admin, "POST", `/v1/runs/${A}/share?ttl=8d`);
    expect([long.status, JSON.parse(long.text).field]).toEqual([400, "ttl"]);
    expect((await call(admin, "GET", `/v1/runs/${A}/share`)).status).toBe(405);
  });
});

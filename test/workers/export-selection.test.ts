// The bulk fetch as an export reads it (src/worker/bulk-finished.ts `bulkFinished`, finished-pages.ts):
// the list's filters select the episodes whose rows pass them, `row=1` puts each episode's index
// row beside its exact bytes, a token covering part of the run gets only its own, and a cursor of
// one selection is refused by another (bound to the filters as every cursor is to its list).
import { env } from "cloudflare:workers";
import { decodeMulti } from "@msgpack/msgpack";
import { SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import type { IndexEntry } from "../../src/protocol/registry/entry.js";
import worker from "../../src/worker/index.js";
import { golden, post, pushFrames } from "./support.js";

const SECRET = "export-test-secret-0b1c2d3e4f5a6b7c8d9e0f1a2b3c";
const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
const RUN = `exp-${Date.now().toString(36)}`;
/** Finished in this order: two stop at max_turns (truncated; odd_values also timed out), two complete. */
const CASES = ["chat_basic", "large_routing", "odd_values", "tool_calls_pending"] as const;

const sign = (role: string, episodes: string[]) =>
  new SignJWT({ role, episodes })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(SECRET));

type Element = { id?: string; cursor: string; row?: IndexEntry; episode?: unknown; more?: boolean };

async function bulk(token: string, query: string, accept = "application/msgpack"): Promise<Response> {
  const req = new Request(`https://relay.example.com/v1/runs/${RUN}/finished${query ? `?${query}` : ""}`, {
    headers: { authorization: `Bearer ${token}`, accept },
  });
  return worker.fetch(req, AUTH_ENV);
}

async function elements(token: string, query: string): Promise<{ elements: Element[]; bytes: Uint8Array }> {
  const res = await bulk(token, query);
  expect(res.status, res.status === 200 ? "" : await res.clone().text()).toBe(200);
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { elements: [...decodeMulti(bytes)] as Element[], bytes };
}

let admin = "";

beforeAll(async () => {
  for (const name of CASES) {
    const c = await golden(name);
    const id = `${RUN}:${name}`;
    await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
    const r = await post(`${id}/reply`, c.reply);
    expect(r.status, r.status === 200 ? "" : await r.clone().text()).toBe(200);
    await r.arrayBuffer();
  }
  admin = await sign("watcher", [`${RUN}:*`]);
  // the run's index hears of each finish in the background
  for (let i = 0; i < 100; i++) {
    const { elements: all } = await elements(admin, "");
    if (all.length === CASES.length) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("the run's index never showed every finished episode");
}, 60_000);

describe("the bulk fetch as an export's source", () => {
  it("row=1: each element is {id, cursor, row, episode}, the row the list shows and the episode's exact bytes", async () => {
    const { elements: got, bytes } = await elements(admin, "row=1");
    expect(got.map((e) => e.id)).toEqual(CASES.map((n) => `${RUN}:${n}`));
    const listed = (await (await bulkList(admin)).json()) as { episodes: IndexEntry[] };
    const byId = new Map(listed.episodes.map((e) => [e.id, e]));
    for (const e of got) {
      expect(Object.keys(e)).toEqual(["id", "cursor", "row", "episode"]);
      const row = byId.get(e.id!)!;
      expect(e.row!.id).toBe(e.id);
      expect({ ...e.row, rewards: null }).toEqual({ ...row, rewards: null }); // rewards: msgpack keeps 1.0 as 1, so compared as numbers below
      expect(JSON.stringify(e.row!.rewards)).toBe(JSON.stringify(row.rewards));
    }
    // the episodes are embedded byte for byte: each golden episode occurs in the answer
    for (const name of CASES) expect(contains(bytes, (await golden(name)).episode!), name).toBe(true);
    // without row=1 the elements are as before
    const plain = (await elements(admin, "")).elements;
    expect(plain.map((e) => Object.keys(e))).toEqual(CASES.map(() => ["id", "cursor", "episode"]));
  });

  it("the list's filters select by row: stop, timed out, truncated, task; none matching gives an empty answer", async () => {
    const ids = async (q: string) => (await elements(admin, q)).elements.map((e) => e.id);
    expect(await ids("stop=max_turns")).toEqual([`${RUN}:large_routing`, `${RUN}:odd_values`]);
    expect(await ids("stop=max_turns&truncated=1&row=1")).toEqual([`${RUN}:odd_values`]);
    expect(await ids("truncated=0")).toEqual([
      `${RUN}:chat_basic`,
      `${RUN}:large_routing`,
      `${RUN}:tool_calls_pending`,
    ]);
    // the names: is_timeout (`truncated=` is its deprecated alias), and the trainer's truncation (max_turns)
    expect(await ids("is_timeout=1")).toEqual([`${RUN}:odd_values`]);
    expect(await ids("is_truncated=1")).toEqual([`${RUN}:large_routing`, `${RUN}:odd_values`]);
    expect(await ids("is_truncated=0")).toEqual([`${RUN}:chat_basic`, `${RUN}:tool_calls_pending`]);
    expect(await ids("task=ef9574d48b59c34d")).toEqual([`${RUN}:tool_calls_pending`]);
    expect(await ids("reward=correct:1..")).toEqual([`${RUN}:chat_basic`, `${RUN}:tool_calls_pending`]);
    expect(await ids("kind=train")).toEqual([]); // none has a dispatch identity
    const bad = await bulk(admin, "step=3..1");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string; field: string }).field).toBe("step");
  });

  it("resuming a filtered fetch from each cursor gives the rest, and a cursor of another selection is refused", async () => {
    const all = (await elements(admin, "truncated=0")).elements;
    for (let i = 0; i < all.length; i++) {
      const rest = (await elements(admin, `truncated=0&cursor=${encodeURIComponent(all[i]!.cursor)}`)).elements;
      expect(rest.map((e) => e.id)).toEqual(all.slice(i + 1).map((e) => e.id));
    }
    const other = await bulk(admin, `stop=max_turns&cursor=${encodeURIComponent(all[0]!.cursor)}`);
    expect(other.status).toBe(400);
    const unfiltered = await bulk(admin, `cursor=${encodeURIComponent(all[0]!.cursor)}`);
    expect(unfiltered.status).toBe(400);
  });

  it("a token covering part of the run gets only its episodes and rows, filtered", async () => {
    const token = await sign("watcher", [`${RUN}:odd_values`, `${RUN}:chat_basic`]);
    const got = (await elements(token, "row=1")).elements;
    expect(got.map((e) => e.id)).toEqual([`${RUN}:chat_basic`, `${RUN}:odd_values`]);
    expect(got.map((e) => e.row!.id)).toEqual([`${RUN}:chat_basic`, `${RUN}:odd_values`]);
    expect((await elements(token, "stop=max_turns&row=1")).elements.map((e) => e.id)).toEqual([`${RUN}:odd_values`]);
    expect((await elements(token, "task=ef9574d48b59c34d")).elements).toEqual([]);
    // a cursor sealed for the admin's token is refused for this one
    const theirs = (await elements(admin, "stop=max_turns")).elements[0]!.cursor;
    expect((await bulk(token, `stop=max_turns&cursor=${encodeURIComponent(theirs)}`)).status).toBe(400);
  });

  it("a search with row=1: each result carries its index row; a token covering part of the run gets only its own", async () => {
    type Hit = { id: string; row?: IndexEntry | null };
    const search = async (token: string, q: string) => {
      const res = await worker.fetch(
        new Request(`https://relay.example.com/v1/runs/${RUN}/search?${q}`, {
          headers: { authorization: `Bearer ${token}` },
        }),
        AUTH_ENV,
      );
      expect(res.status).toBe(200);
      return ((await res.json()) as { episodes: Hit[] }).episodes;
    };
    let hits: Hit[] = [];
    for (let i = 0; i < 100 && hits.length === 0; i++) {
      hits = await search(admin, "q=calculator&row=1");
      if (hits.length === 0) await new Promise((r) => setTimeout(r, 50)); // the search index is fed in the background
    }
    expect(hits.map((h) => h.id)).toContain(`${RUN}:tool_calls_pending`);
    const listed = new Map(
      ((await (await bulkList(admin)).json()) as { episodes: IndexEntry[] }).episodes.map((e) => [e.id, e]),
    );
    for (const h of hits) expect(h.row, h.id).toEqual(listed.get(h.id));
    expect((await search(admin, "q=calculator")).every((h) => !("row" in h))).toBe(true);
    const partial = await sign("watcher", [`${RUN}:chat_basic`, `${RUN}:odd_values`]);
    const theirs = await search(partial, "q=calculator&row=1");
    expect(theirs.map((h) => h.id)).toEqual(
      hits.map((h) => h.id).filter((id) => id.endsWith(":chat_basic") || id.endsWith(":odd_values")),
    );
    for (const h of theirs) expect(h.row?.id).toBe(h.id);
  });

  it("NDJSON: each line {id, cursor, row, episode} with the JSON view", async () => {
    const res = await bulk(admin, "row=1&stop=max_turns", "application/x-ndjson");
    const lines = (await res.text())
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Element);
    expect(lines.map((l) => [l.id, l.row!.id, Object.keys(l)])).toEqual([
      [`${RUN}:large_routing`, `${RUN}:large_routing`, ["id", "cursor", "row", "episode"]],
      [`${RUN}:odd_values`, `${RUN}:odd_values`, ["id", "cursor", "row", "episode"]],
    ]);
  });
});

function bulkList(token: string): Promise<Response> {
  return worker.fetch(
    new Request(`https://relay.example.com/v1/runs/${RUN}/episodes?limit=50`, {
      headers: { authorization: `Bearer ${token}` },
    }),
    AUTH_ENV,
  );
}

function contains(hay: Uint8Array, needle: Uint8Array): boolean {
  outer: for (let i = 0; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return true;
  }
  return false;
}

// Inputs that once stalled an object or answered 500 (issue 39), through the Worker in workerd:
// bodies nested past MAX_DEPTH (JSON and msgpack, on every route that parses one) and annotation
// infos past MAX_INFO_KEYS are refused 400 naming the limit, and leave everything as it was.
import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { MAX_INFO_KEYS } from "../../src/protocol/annotations/records.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { MAX_DEPTH } from "../../src/protocol/limits/limits.js";
import { toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { freshId, getBytes, golden, post, relay } from "./support.js";

const jsonNest = (n: number, leaf: string) => `${"[".repeat(n)}${leaf}${"]".repeat(n)}`;
/** A msgpack delta {trace: "t", nodes: [{message: v}]} whose one node's message is `n` arrays deep. */
function deepDelta(n: number): Uint8Array {
  const str = (s: string) => [0xa0 + s.length, ...new TextEncoder().encode(s)];
  const node = [0x81, ...str("message"), ...new Array<number>(n).fill(0x91), 0xc0];
  return new Uint8Array([0x82, ...str("trace"), ...str("t"), ...str("nodes"), 0x91, ...node]);
}

async function refusedFor(res: Response): Promise<{ error: string; message: string }> {
  const body = (await res.json()) as { error: string; message: string };
  expect(res.status, JSON.stringify(body)).toBe(400);
  return body;
}

async function health(): Promise<number> {
  return (await exports.default.fetch("http://relay.test/v1/health")).status;
}

/** A finished golden episode (chat_basic) and its first trace. */
async function finished(): Promise<{ id: string; trace: string }> {
  const c = await golden("chat_basic");
  const id = `${freshId("deep")}:e`;
  const producer = new ProducerCursor("p");
  for (const frame of c.frames) {
    await (await post(`${id}/deltas`, encodeEnvelope(producer.envelope(frame)))).arrayBuffer();
    producer.acknowledge();
  }
  await (await post(`${id}/reply`, c.reply)).arrayBuffer();
  const ep = toJson(decodeLossless(c.episode!)) as { traces: Array<{ id: string }> };
  return { id, trace: ep.traces[0]!.id };
}

const annotationsOf = async (id: string) =>
  (await (await relay(`${id}/annotations`, { headers: { accept: "application/json" } })).json()) as {
    version: number;
    traces: unknown[];
  };

describe("bodies nested past MAX_DEPTH", () => {
  it("annotations 200k deep (JSON and msgpack): 400 malformed naming the depth; the episode's annotations as they were", async () => {
    const { id, trace } = await finished();
    const ok = await relay(`${id}/annotations`, {
      method: "POST",
      body: JSON.stringify({ trace_id: trace, info: { a: 1 } }),
      headers: { "content-type": "application/json" },
    });
    expect(ok.status).toBe(200);
    const before = await annotationsOf(id);
    const json = await relay(`${id}/annotations`, {
      method: "POST",
      body: `{"trace_id":"${trace}","info":{"deep":${jsonNest(200_000, "1")}}}`,
      headers: { "content-type": "application/json" },
    });
    expect((await refusedFor(json)).message).toContain(`nesting deeper than ${MAX_DEPTH}`);
    const msgpack = await post(`${id}/annotations`, new Uint8Array([...new Array<number>(200_000).fill(0x91), 0xc0]));
    const m = await refusedFor(msgpack);
    expect(m.error).toBe("malformed");
    expect(m.message).toContain(`nesting deeper than ${MAX_DEPTH}`);
    expect(await annotationsOf(id)).toEqual(before);
    expect(await health()).toBe(200);
  });

  it("a dispatch identity 8k deep: 400 malformed naming the depth; no episode is created", async () => {
    const id = `${freshId("deepd")}:e`;
    const res = await relay(`${id}/dispatch`, {
      method: "POST",
      body: `{"id":"abc","kind":"train","extra":${jsonNest(8000, "0")}}`,
      headers: { "content-type": "application/json" },
    });
    const body = await refusedFor(res);
    expect(body.error).toBe("malformed");
    expect(body.message).toContain(`nesting deeper than ${MAX_DEPTH}`);
    expect((await relay(`${id}/status`)).status).toBe(404);
  });

  it("a rules body whose role is 30k deep: 400 malformed naming the depth; the run has no rules and no storage", async () => {
    const run = freshId("deepr");
    const res = await relay(`../runs/${run}/rules`, {
      method: "PUT",
      body: `{"rules":[{"id":"a","match":{"pattern":"x","role":${jsonNest(30_000, '"assistant"')}}}]}`,
      headers: { "content-type": "application/json" },
    });
    expect((await refusedFor(res)).message).toContain(`the rules: nesting deeper than ${MAX_DEPTH}`);
    expect((await relay(`../runs/${run}/rules`)).status).toBe(404);
  });

  it("a delta whose node holds a value 10k arrays deep: 400 malformed naming the depth; no episode is created", async () => {
    const id = `${freshId("deepm")}:e`;
    const body = await refusedFor(await post(`${id}/deltas`, deepDelta(10_000)));
    expect(body.error).toBe("malformed");
    expect(body.message).toContain(`nesting deeper than ${MAX_DEPTH}`);
    expect((await relay(`${id}/status`)).status).toBe(404);
    expect(await health()).toBe(200);
  });
});

describe(`annotation infos past MAX_INFO_KEYS (${MAX_INFO_KEYS})`, () => {
  const postInfo = (id: string, trace: string, info: Record<string, unknown>) =>
    relay(`${id}/annotations`, {
      method: "POST",
      body: JSON.stringify({ trace_id: trace, info }),
      headers: { "content-type": "application/json" },
    });
  const keys = (n: number, from = 0) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${from + i}`, i]));

  it("40,000 keys: refused 400 naming the cap, nothing stored; at the cap merged, and later small records still merge", async () => {
    const { id, trace } = await finished();
    const over = await refusedFor(await postInfo(id, trace, keys(40_000)));
    expect(over.message).toContain(`holds more than ${MAX_INFO_KEYS} keys`);
    expect((await annotationsOf(id)).version).toBe(0);
    expect((await postInfo(id, trace, keys(MAX_INFO_KEYS))).status).toBe(200);
    // overwriting a key adds none: merged
    const small = await postInfo(id, trace, { k0: "again" });
    expect(small.status).toBe(200);
    // a new key would go past the cap: refused, the merged record as it was
    const before = await annotationsOf(id);
    expect((await refusedFor(await postInfo(id, trace, { fresh: 1 }))).message).toMatch(
      /merged info would hold 10001 keys, over the limit of 10000/,
    );
    const after = await annotationsOf(id);
    expect(after).toEqual(before);
    expect(after.version).toBe(2);
    const info = (after.traces[0] as { info: Record<string, unknown> }).info;
    expect(Object.keys(info)).toHaveLength(MAX_INFO_KEYS);
    expect(info.k0).toBe("again");
    expect(await getBytes(id)).toEqual((await golden("chat_basic")).episode!);
  });
});

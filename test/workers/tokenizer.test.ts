// A run's tokenizer (PUT/GET /v1/runs/{run}/tokenizer), through the real Worker and R2 with auth on:
// the producer of the run keeps one, a watcher of the run reads the same bytes, tokens of other
// runs are answered as for a run nobody wrote, and every refusal (a watcher writing, part of a
// run, past MAX_TOKENIZER_BYTES, not JSON, JSON without a model) leaves the kept bytes as they were.
import { env } from "cloudflare:workers";
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import worker from "../../src/worker/index.js";
import TOKENIZER from "../fixtures/tokenizer/tokenizer.json?raw";

const SECRET = "tokenizer-test-secret-3e91c0a47b2d58f6e1a9c3d7";
const AUTH_ENV: Env = { ...env, RELAY_SECRET: SECRET, AUTH_OFF_ON_LOOPBACK: undefined };
const HOST = "https://relay.example.com";
const tag = Date.now().toString(36);
const RUN = `tk${tag}`;
const OTHER = `tko${tag}`;

async function sign(role: string, episodes: string[]): Promise<string> {
  return new SignJWT({ role, episodes })
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(SECRET));
}

async function call(
  token: string,
  method: string,
  run: string,
  body?: BodyInit,
  headers: Record<string, string> = {},
  query = "",
): Promise<Response> {
  return worker.fetch(
    new Request(`${HOST}/v1/runs/${run}/tokenizer${query}`, {
      method,
      body,
      headers: { authorization: `Bearer ${token}`, ...headers },
    }),
    AUTH_ENV,
  );
}

async function sha256(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

describe("a run's tokenizer", () => {
  it("kept by the run's producer, read back byte for byte by its watchers; the same bytes again change nothing", async () => {
    const producer = await sign("producer", [`${RUN}:*`]);
    const watcherOne = await sign("watcher", [`${RUN}:ep-1`]);
    expect((await call(watcherOne, "GET", RUN)).status).toBe(404); // none kept yet
    // a page that only wants it if there is one asks ?optional=1: 204, not a 404 for the browser's console
    const none = await call(watcherOne, "GET", RUN, undefined, {}, "?optional=1");
    expect([none.status, await none.text()]).toEqual([204, ""]);
    const put = await call(producer, "PUT", RUN, TOKENIZER, { "content-type": "application/json" });
    expect(put.status, await put.clone().text()).toBe(200);
    const digest = await sha256(TOKENIZER);
    expect(await put.json()).toEqual({
      ok: true,
      run: RUN,
      bytes: new TextEncoder().encode(TOKENIZER).byteLength,
      sha256: digest,
      changed: true,
    });
    // a watcher covering one episode of the run decodes that episode's ids with it
    const got = await call(watcherOne, "GET", RUN);
    expect(got.status).toBe(200);
    expect(got.headers.get("content-type")).toBe("application/json");
    expect(got.headers.get("etag")).toBe(`"${digest}"`);
    expect(await got.text()).toBe(TOKENIZER);
    expect(await (await call(watcherOne, "GET", RUN, undefined, {}, "?optional=1")).text()).toBe(TOKENIZER);
    const again = await call(watcherOne, "GET", RUN, undefined, { "if-none-match": `"${digest}"` });
    expect(again.status).toBe(304);
    const head = await call(watcherOne, "HEAD", RUN);
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    const uploaded = (await env.ARCHIVE.head(`tokenizers/${RUN}`))!.uploaded.getTime();
    const same = await call(producer, "PUT", RUN, TOKENIZER);
    expect(await same.json()).toMatchObject({ sha256: digest, changed: false });
    // not written again
    expect((await env.ARCHIVE.head(`tokenizers/${RUN}`))!.uploaded.getTime()).toBe(uploaded);
  });

  it("other runs' tokens: 404 as for a run nobody wrote; a watcher or part of the run may not write (403)", async () => {
    const producer = await sign("producer", [`${RUN}:*`]);
    await call(producer, "PUT", RUN, TOKENIZER);
    const other = await sign("watcher", [`${OTHER}:*`]);
    const otherProducer = await sign("producer", [`${OTHER}:*`]);
    const nobody = `tkm${tag}`;
    const refused = await call(other, "GET", RUN);
    expect(refused.status).toBe(404);
    const missing = await call(await sign("watcher", [`${RUN}x:*`]), "GET", nobody);
    expect(missing.status).toBe(404);
    // the same bytes as for a run nobody wrote (run names put alike)
    expect((await refused.text()).replaceAll(RUN, "R")).toBe((await missing.text()).replaceAll(nobody, "R"));
    expect((await call(otherProducer, "PUT", RUN, "{}")).status).toBe(404);
    const watcher = await call(await sign("watcher", [`${RUN}:*`]), "PUT", RUN, '{"model":{}}');
    expect(watcher.status).toBe(403);
    expect(await watcher.json()).toMatchObject({ error: "forbidden" });
    const part = await call(await sign("producer", [`${RUN}:ep-1`]), "PUT", RUN, '{"model":{}}');
    expect(part.status).toBe(403);
    expect(await (await call(producer, "GET", RUN)).text()).toBe(TOKENIZER);
  });

  it("refused and nothing kept changes: past MAX_TOKENIZER_BYTES (413), not JSON or no model (400)", async () => {
    const producer = await sign("producer", [`${RUN}:*`]);
    await call(producer, "PUT", RUN, TOKENIZER);
    const big = JSON.stringify({ model: { vocab: { x: "y".repeat(Number(env.MAX_TOKENIZER_BYTES)) } } });
    const declared = await call(producer, "PUT", RUN, big);
    expect(declared.status).toBe(413);
    expect(await declared.json()).toMatchObject({ error: "message_too_large" });
    // streamed without a length: refused while reading
    const stream = new Blob([big]).stream();
    const streamed = await call(producer, "PUT", RUN, stream);
    expect(streamed.status).toBe(413);
    const notJson = await call(producer, "PUT", RUN, '{"model": {');
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ error: "malformed" });
    const noModel = await call(producer, "PUT", RUN, '{"vocab": {}}');
    expect(noModel.status).toBe(400);
    expect(await noModel.json()).toMatchObject({ error: "malformed", field: "model" });
    const list = await call(producer, "PUT", RUN, "[1, 2]");
    expect(list.status).toBe(400);
    expect(await (await call(producer, "GET", RUN)).text()).toBe(TOKENIZER);
  });

  it("other bytes replace the kept ones (a run's wrong upload can be put right)", async () => {
    const run = `tkr${tag}`;
    const producer = await sign("producer", [`${run}:*`]);
    await call(producer, "PUT", run, '{"model":{"type":"WordLevel","vocab":{}}}');
    const put = await call(producer, "PUT", run, TOKENIZER);
    expect(await put.json()).toMatchObject({ changed: true, sha256: await sha256(TOKENIZER) });
    expect(await (await call(producer, "GET", run)).text()).toBe(TOKENIZER);
  });
});

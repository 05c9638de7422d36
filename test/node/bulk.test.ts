// Bulk fetch of a run's finished episodes (`GET /v1/runs/{run}/finished`) through the TypeScript
// client `fetchRun` and the CLI `get --run`, against a relay the test starts (auth on): golden
// cases pushed into episodes of run R (plus a live, a failed and a finish_refused one, and
// neighbours in other runs) come back exactly, byte for byte, resumably, as NDJSON, and only
// within a token's scope. The client's splitting is also driven by a scripted body (any chunking,
// an element yielded before the body ends, a truncated body).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { fetchRun, type RunEpisode } from "../../clients/typescript/bulk.js";
import { RelayRefusal } from "../../clients/typescript/watch.js";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { ChunkWriter } from "../../src/protocol/wire/writer.js";
import { fixturePath, type GoldenCase, loadCase } from "../../tools/conformance/cases.js";
import { useAuthedRelay } from "../support/relay.js";

const root = join(import.meta.dirname, "..", "..");
const relay = useAuthedRelay();
const secret = relay.secret;
let admin = "";

const golden = (name: string) => loadCase(fixturePath(name));
const auth = () => ({ authorization: `Bearer ${admin}` });
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

/** The cases finished in run R, in the order they are finished (so: the order the bulk fetch answers). */
const FINISHED = [
  "chat_basic",
  "large_routing",
  "ack_lost",
  "odd_values",
  "multi_trace_links",
  "empty_trace",
  "tool_calls_pending",
  "routing_repair_widen",
];

/** Push frames [from, to) of a case into `id` as a producer would (frames in ack_lost stay unacknowledged). */
async function push(id: string, c: GoldenCase, from = 0, to = c.frames.length, producer = new ProducerCursor("bulk")) {
  for (let i = from; i < to; i++) {
    const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(c.frames[i]!)),
      headers: auth(),
    });
    expect(res.status, await res.text()).toBe(200);
    if (!c.ack_lost.includes(i)) producer.acknowledge();
  }
  return producer;
}

async function reply(id: string, body: Uint8Array, status = 200) {
  const res = await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body, headers: auth() });
  expect(res.status, await res.text()).toBe(status);
}

/** Push a whole case and finish it with its reply. */
async function finish(id: string, name: string) {
  const c = golden(name);
  await push(id, c);
  await reply(id, c.reply);
  // a few ms apart: the bulk fetch orders by when each row became finished in the run's index
  await new Promise((r) => setTimeout(r, 5));
}

/** Wait until the run's index shows these counts (the episodes update it in the background). */
async function indexed(run: string, counts: Record<string, number>) {
  const end = Date.now() + 20_000;
  let last = "";
  for (;;) {
    last = await (await fetch(`${relay.url}/v1/runs/${encodeURIComponent(run)}`, { headers: auth() })).text();
    const got = (JSON.parse(last) as { aggregates?: { counts?: Record<string, number> } }).aggregates?.counts ?? {};
    if (Object.entries(counts).every(([k, v]) => got[k] === v)) return;
    if (Date.now() > end)
      throw new Error(`run ${run} not indexed with ${JSON.stringify(counts)}: ${last.slice(0, 300)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function collect<E>(it: AsyncIterable<RunEpisode<E>>, max = Number.POSITIVE_INFINITY): Promise<RunEpisode<E>[]> {
  const out: RunEpisode<E>[] = [];
  if (max === 0) return out;
  for await (const e of it) {
    out.push(e);
    if (out.length >= max) break;
  }
  return out;
}

async function getEpisode(id: string, accept = "application/msgpack"): Promise<Uint8Array> {
  const url = `${relay.url}/v1/episodes/${encodeURIComponent(id)}`;
  // once more when the pooled connection was closed as the request went out (the runtime drops an idle
  // keep-alive connection; comparing a large episode between two GETs leaves it idle that long on a
  // loaded machine): a GET is idempotent, and undici's fetch does not retry it by itself
  const res = await fetch(url, { headers: { ...auth(), accept } }).catch((e: unknown) => {
    if ((e as { cause?: { code?: string } }).cause?.code !== "UND_ERR_SOCKET") throw e;
    return fetch(url, { headers: { ...auth(), accept } });
  });
  expect(res.status).toBe(200);
  return new Uint8Array(await res.arrayBuffer());
}

beforeAll(async () => {
  admin = await mintToken(secret, { role: "admin", episodes: ["*"], ttl: 3600 });
  // run R: finished cases, one live, one failed, one whose reply was refused (finish_refused)
  for (const name of FINISHED) await finish(`R:${name}`, name);
  await push("R:live", golden("chat_basic"), 0, 3);
  await push("R:failed", golden("chat_basic"), 0, 1);
  await reply("R:failed", encodeReply({ success: false, error: "sandbox crashed" }));
  const gap = golden("gap_detected");
  await push("R:gap", gap);
  await reply("R:gap", gap.reply, 409);
  // neighbours: run R:sub (an id under R: with one more ':'), run Rx, and run ~ (no ':')
  await finish("R:sub:chat_basic", "chat_basic");
  await finish("Rx:chat_basic", "chat_basic");
  await finish("nocolon-chat", "chat_basic");
  await indexed("R", { finished: FINISHED.length, live: 1, failed: 1, finish_refused: 1 });
  await indexed("R:sub", { finished: 1 });
  await indexed("Rx", { finished: 1 });
}, 120_000);

describe("fetchRun against a relay", () => {
  it("returns exactly the run's finished episodes, in the order they finished, each the exact bytes GET and the golden case have", async () => {
    const all = await collect(fetchRun(relay.url, "R", { token: admin }));
    expect(all.map((e) => e.id)).toEqual(FINISHED.map((n) => `R:${n}`));
    for (const e of all) {
      const name = e.id.slice(2);
      expect(e.episode).toBeInstanceOf(Uint8Array);
      expect(e.episode.length, name).toBe(golden(name).episode!.length);
      expect(hex(e.episode) === hex(golden(name).episode!), `${name}: golden bytes`).toBe(true);
      expect(hex(e.episode) === hex(await getEpisode(e.id)), `${name}: GET bytes`).toBe(true);
      expect(e.cursor).toMatch(/^[A-Za-z0-9_-]+=*$/);
    }
    expect(new Set(all.map((e) => e.cursor)).size).toBe(all.length);
    // the other runs are their own
    expect((await collect(fetchRun(relay.url, "R:sub", { token: admin }))).map((e) => e.id)).toEqual([
      "R:sub:chat_basic",
    ]);
    expect((await collect(fetchRun(relay.url, "Rx", { token: admin }))).map((e) => e.id)).toEqual(["Rx:chat_basic"]);
    const none = await collect(fetchRun(relay.url, "~", { token: admin }));
    expect(none.map((e) => e.id)).toEqual(["nocolon-chat"]);
    expect(hex(none[0]!.episode) === hex(golden("chat_basic").episode!)).toBe(true);
    await expect(collect(fetchRun(relay.url, "no-such-run", { token: admin }))).rejects.toMatchObject({
      status: 404,
      code: "not_found",
    });
  }, 60_000);

  it("resumes after the k-th element's cursor with exactly the rest, no duplicates", async () => {
    const all = (await collect(fetchRun(relay.url, "R", { token: admin }))).map((e) => e.id);
    expect(all.length).toBe(FINISHED.length);
    for (const k of [1, 2, 5, FINISHED.length - 1, FINISHED.length]) {
      const head = await collect(fetchRun(relay.url, "R", { token: admin }), k);
      expect(head.map((e) => e.id)).toEqual(all.slice(0, k));
      const rest = await collect(fetchRun(relay.url, "R", { token: admin, cursor: head.at(-1)!.cursor }));
      expect(
        rest.map((e) => e.id),
        `after ${k}`,
      ).toEqual(all.slice(k));
      for (const e of rest) expect(hex(e.episode) === hex(golden(e.id.slice(2)).episode!), e.id).toBe(true);
    }
  }, 60_000);

  it("json: NDJSON elements with the same ids and cursors, each episode the JSON view GET answers", async () => {
    const bin = await collect(fetchRun(relay.url, "R", { token: admin }));
    const json = await collect(fetchRun(relay.url, "R", { token: admin, json: true }));
    expect(json.map((e) => e.id)).toEqual(bin.map((e) => e.id));
    expect(json.map((e) => e.cursor)).toEqual(bin.map((e) => e.cursor));
    for (const e of json) {
      expect(typeof e.episode).toBe("object");
      expect(e.episode, e.id).toEqual(JSON.parse(new TextDecoder().decode(await getEpisode(e.id, "application/json"))));
    }
    // and it resumes the same way
    const rest = await collect(fetchRun(relay.url, "R", { token: admin, json: true, cursor: json[2]!.cursor }));
    expect(rest.map((e) => e.id)).toEqual(json.slice(3).map((e) => e.id));
  }, 60_000);

  it("a scope-limited token gets only its episodes; no token and a bad cursor are refusals", async () => {
    const some = await mintToken(secret, {
      role: "watcher",
      episodes: ["R:chat_basic", "R:o*", "R:live", "Rx:*"],
      ttl: 600,
    });
    const got = await collect(fetchRun(relay.url, "R", { token: some }));
    expect(got.map((e) => e.id)).toEqual(["R:chat_basic", "R:odd_values"]);
    expect(hex(got[1]!.episode) === hex(golden("odd_values").episode!)).toBe(true);
    // resuming with this token stays within its scope
    expect((await collect(fetchRun(relay.url, "R", { token: some, cursor: got[0]!.cursor }))).map((e) => e.id)).toEqual(
      ["R:odd_values"],
    );
    // a token for another run: refused as a run nobody wrote is, the same bytes
    const elsewhere = await mintToken(secret, { role: "watcher", episodes: ["other:*"], ttl: 600 });
    const missing = await collect(fetchRun(relay.url, "no-such-run", { token: admin })).catch((e: unknown) => e);
    const foreign = await collect(fetchRun(relay.url, "R", { token: elsewhere })).catch((e: unknown) => e);
    expect(foreign).toMatchObject({ status: 404, code: "not_found" });
    expect((foreign as RelayRefusal).message.replaceAll('"R"', '"no-such-run"')).toBe(
      (missing as RelayRefusal).message,
    );

    const refusal = async (p: Promise<unknown>) =>
      p.then(
        () => null,
        (e: unknown) => e,
      );
    const none = await refusal(collect(fetchRun(relay.url, "R")));
    expect(none).toBeInstanceOf(RelayRefusal);
    expect((none as RelayRefusal).status).toBe(401);
    expect((none as RelayRefusal).message).toMatch(/token/);
    const forged = await refusal(
      collect(
        fetchRun(relay.url, "R", {
          token: await mintToken(`${secret}-not-it`, { role: "admin", episodes: ["*"], ttl: 600 }),
        }),
      ),
    );
    expect((forged as RelayRefusal).status).toBe(401);
    const bad = await refusal(collect(fetchRun(relay.url, "R", { token: admin, cursor: "not-a-cursor" })));
    expect(bad).toBeInstanceOf(RelayRefusal);
    expect((bad as RelayRefusal).status).toBe(400);
    expect((bad as RelayRefusal).code).toBe("bad_cursor");
  }, 60_000);

  it("stops the request when the caller stops early or aborts", async () => {
    const ac = new AbortController();
    const seen: string[] = [];
    const failure = await (async () => {
      try {
        for await (const e of fetchRun(relay.url, "R", { token: admin, signal: ac.signal })) {
          seen.push(e.id);
          ac.abort();
        }
        return null;
      } catch (e) {
        return e as Error;
      }
    })();
    expect(seen).toEqual(["R:chat_basic"]);
    expect(failure?.name).toBe("AbortError");
  }, 60_000);
});

// ---- the client's splitting, over a scripted body ----

/** A bulk answer as the relay writes it: `{id, cursor, episode}` heads, each followed by the raw episode. */
function sequence(items: Array<{ id: string; cursor: string; episode: Uint8Array }>): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const it of items) {
    const w = new ChunkWriter();
    w.mapHeader(3);
    w.str("id");
    w.str(it.id);
    w.str("cursor");
    w.str(it.cursor);
    w.str("episode");
    parts.push(w.bytes(), it.episode);
  }
  return Buffer.concat(parts);
}

/** Answer the next fetch with a body delivered as `chunks`; `hold` keeps it open after them until released. */
function scriptFetch(chunks: Uint8Array[], hold = false) {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const spy = vi.spyOn(globalThis, "fetch").mockImplementation(async () => {
    // one chunk per pull (Node's stream queue is slow with many chunks queued at once)
    let i = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (i < chunks.length) return controller.enqueue(chunks[i++]!);
        if (hold) await released;
        controller.close();
      },
    });
    return new Response(body, { headers: { "content-type": "application/msgpack", "x-episode-relay": "1" } });
  });
  return { spy, release };
}

describe("fetchRun splitting (scripted bodies)", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });
  const items = ["chat_basic", "odd_values", "empty_trace", "multi_trace_links"].map((n, i) => ({
    id: `S:${n}`,
    cursor: `c${i}`,
    episode: golden(n).episode!,
  }));
  const body = sequence(items);

  it("splits the same elements at any chunking, episodes as views of the exact bytes", async () => {
    for (const size of [1, 2, 7, 64, 4096, body.length]) {
      const chunks: Uint8Array[] = [];
      for (let i = 0; i < body.length; i += size) chunks.push(body.slice(i, i + size));
      const { spy } = scriptFetch(chunks);
      const got = await collect(fetchRun("https://relay.test", "S", { token: "t", cursor: "c0" }));
      expect(
        got.map((e) => e.id),
        `chunks of ${size}`,
      ).toEqual(items.map((e) => e.id));
      expect(got.map((e) => e.cursor)).toEqual(items.map((e) => e.cursor));
      for (const [i, e] of got.entries())
        expect(hex(e.episode) === hex(items[i]!.episode), `chunks of ${size}, ${e.id}`).toBe(true);
      const [url, init] = spy.mock.calls[0]!;
      expect(String(url)).toBe("https://relay.test/v1/runs/S/finished?cursor=c0");
      expect((init!.headers as Record<string, string>).authorization).toBe("Bearer t");
      spy.mockRestore();
    }
  });

  it("yields an element as soon as it is complete, before the body ends", async () => {
    const first = sequence(items.slice(0, 1));
    const { release } = scriptFetch([first, sequence(items.slice(1, 2)).subarray(0, 10)], true);
    const it = fetchRun("https://relay.test", "S")[Symbol.asyncIterator]();
    const one = await Promise.race([it.next(), new Promise((r) => setTimeout(() => r("timeout"), 2000))]);
    expect(one).not.toBe("timeout");
    expect((one as IteratorResult<RunEpisode>).value.id).toBe("S:chat_basic");
    release();
    // the body then ends inside the second element: an error that says to resume
    await expect(it.next()).rejects.toThrow(/ended inside an element/);
  });

  it("an answer that is not a sequence of element maps is an error, not an element", async () => {
    scriptFetch([Uint8Array.of(0x93, 0x01, 0x02, 0x03)]);
    await expect(collect(fetchRun("https://relay.test", "S"))).rejects.toThrow(/element map/);
    vi.restoreAllMocks();
    const { spy } = scriptFetch([sequence([{ id: "S:x", cursor: "c", episode: Uint8Array.of(0xc1) }])]);
    await expect(collect(fetchRun("https://relay.test", "S"))).rejects.toThrow(/reserved byte/);
    spy.mockRestore();
  });
});

// ---- the CLI ----

function cli(...args: string[]) {
  const p = spawn(process.execPath, [join(root, "dist", "tools", "cli", "main.js"), ...args], { cwd: root });
  let stdout = "";
  let stderr = "";
  p.stdout.on("data", (d) => (stdout += d));
  p.stderr.on("data", (d) => (stderr += d));
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    p.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr })),
  );
}

describe("episode-relay get --run", () => {
  const dir = mkdtempSync(join(tmpdir(), "episode-relay-bulk-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("writes each finished episode to DIR/<id>.msgpack, then resumes: 0 new, then 1 after another finishes", async () => {
    await finish("C:chat_basic", "chat_basic");
    await finish("C:routing_repair_widen", "routing_repair_widen");
    const producer = await push("C:live", golden("tool_calls_pending"), 0, 2);
    await indexed("C", { finished: 2, live: 1 });
    const out = join(dir, "msgpack");

    const first = await cli("get", "--run", "C", "--out", out, "--token", admin, relay.url);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/^2 episode\(s\) of run C written to /);
    expect(readdirSync(out).sort()).toEqual([".cursor", "C:chat_basic.msgpack", "C:routing_repair_widen.msgpack"]);
    for (const name of ["chat_basic", "routing_repair_widen"]) {
      expect(hex(readFileSync(join(out, `C:${name}.msgpack`))) === hex(golden(name).episode!), name).toBe(true);
    }
    const all = await collect(fetchRun(relay.url, "C", { token: admin }));
    expect(readFileSync(join(out, ".cursor"), "utf8").trim()).toBe(all.at(-1)!.cursor);

    const again = await cli("get", "--run", "C", "--out", out, "--token", admin, relay.url);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/^0 episode\(s\) of run C written/);

    // the live one finishes: the next call writes just it
    const c = golden("tool_calls_pending");
    await push("C:live", c, 2, c.frames.length, producer);
    await reply("C:live", c.reply);
    await indexed("C", { finished: 3, live: 0 });
    const third = await cli("get", "--run", "C", "--out", out, "--token", admin, relay.url);
    expect(third.code, third.stderr).toBe(0);
    expect(third.stdout).toMatch(/^1 episode\(s\) of run C written/);
    expect(readdirSync(out).sort()).toEqual([
      ".cursor",
      "C:chat_basic.msgpack",
      "C:live.msgpack",
      "C:routing_repair_widen.msgpack",
    ]);
    expect(hex(readFileSync(join(out, "C:live.msgpack"))) === hex(c.episode!)).toBe(true);
    const now = await collect(fetchRun(relay.url, "C", { token: admin }));
    expect(readFileSync(join(out, ".cursor"), "utf8").trim()).toBe(now.at(-1)!.cursor);
  }, 90_000);

  it("--json writes DIR/<id>.json; usage errors exit 2, refusals exit 1", async () => {
    const out = join(dir, "json");
    const r = await cli("get", "--run", "C", "--out", out, "--json", "--token", admin, relay.url);
    expect(r.code, r.stderr).toBe(0);
    const files = readdirSync(out)
      .filter((f) => f !== ".cursor")
      .sort();
    expect(files).toEqual(["C:chat_basic.json", "C:live.json", "C:routing_repair_widen.json"]);
    for (const f of files) {
      const id = f.slice(0, -".json".length);
      expect(JSON.parse(readFileSync(join(out, f), "utf8")), f).toEqual(
        JSON.parse(new TextDecoder().decode(await getEpisode(id, "application/json"))),
      );
    }
    expect((await cli("get", "--run", "C", relay.url, "--token", admin)).code).toBe(2); // no --out
    expect((await cli("get", "--out", out, `${relay.url}/C:live`)).code).toBe(2); // --out without --run
    const refused = await cli("get", "--run", "C", "--out", join(dir, "refused"), relay.url);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/401 unauthorized/);
    expect(existsSync(join(dir, "refused", ".cursor"))).toBe(false);
  }, 60_000);
});

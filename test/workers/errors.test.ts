// The catch-all: an unexpected error (a bug, injected here) is logged and answered 500 with CORS
// headers over HTTP, answered and closed 1011 on the producer socket; it never leaves a request
// without an answer, and the stored episode stays as it was.
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { EpisodeState } from "../../src/objects/episode/state.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import worker from "../../src/worker/index.js";
import { openDelta } from "../support/deltas.js";
import { equal, freshId, getBytes, inbox, openSocket, post } from "./support.js";

const ORIGIN = "https://dash.example";
const CORS_ENV = { ...env, CORS_ORIGINS: ORIGIN } as Env;

/** Make every episode's index throw a TypeError until restored (memory only: storage is untouched). */
function injectFault(): () => void {
  const fault = vi.spyOn(EpisodeState.prototype, "memory").mockImplementation(() => {
    throw new TypeError("injected fault");
  });
  return () => fault.mockRestore();
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("unexpected errors are answered, never dropped", () => {
  it("HTTP: 500 internal with CORS headers; the episode is unchanged", async () => {
    const id = freshId("fault");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    const before = await getBytes(id);
    const restore = injectFault();
    const log = vi.spyOn(console, "error").mockImplementation(() => {});
    const res = await worker.fetch(
      new Request(`http://relay.test/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: openDelta(),
        headers: { origin: ORIGIN },
      }),
      CORS_ENV,
    );
    expect(res.status).toBe(500);
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe("internal");
    expect(body.message).not.toContain("injected");
    expect(log).toHaveBeenCalled();
    restore();
    expect(equal(await getBytes(id), before)).toBe(true);
  });

  it("producer socket: answered ok:false status 500, then closed 1011", async () => {
    const id = freshId("fault-ws");
    (await post(`${id}/deltas`, openDelta())).body?.cancel();
    const before = await getBytes(id);
    const ws = await openSocket(`${id}/ingest`);
    const box = inbox(ws);
    const restore = injectFault();
    ws.send(encodeEnvelope({ producer: "p", seq: 1, cursor: null, delta: openDelta("t-2") }));
    const answer = JSON.parse((await box.next()) as string) as { ok: boolean; status: number; error: string };
    expect(answer).toMatchObject({ ok: false, status: 500, error: "internal" });
    expect((await box.closed()).code).toBe(1011);
    restore();
    expect(equal(await getBytes(id), before)).toBe(true);
  });

  it("Worker: an error from the object's RPC is a 500 with CORS headers", async () => {
    const broken = {
      getByName: () => ({
        status: async () => {
          throw new Error("Network connection lost.");
        },
      }),
    };
    vi.spyOn(console, "error").mockImplementation(() => {});
    const res = await worker.fetch(
      new Request(`http://relay.test/v1/episodes/${freshId("rpc")}/status`, { headers: { origin: ORIGIN } }),
      {
        ...CORS_ENV,
        EPISODES: broken,
      } as unknown as Env,
    );
    expect(res.status).toBe(500);
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    expect(await res.json()).toMatchObject({ error: "internal" });
  });

  it("a refusal on the producer socket is answered and the socket stays open", async () => {
    const id = freshId("refuse-ws");
    const ws = await openSocket(`${id}/ingest`);
    const box = inbox(ws);
    ws.send(Uint8Array.of(0xc1));
    expect(JSON.parse((await box.next()) as string)).toMatchObject({ ok: false, status: 400, error: "malformed" });
    ws.send(encodeEnvelope({ producer: "p", seq: 1, cursor: null, delta: openDelta() }));
    expect(JSON.parse((await box.next()) as string)).toMatchObject({ ok: true, seq: 1, applied: 1 });
    ws.close(1000, "done");
  });
});

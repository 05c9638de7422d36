// The message size limit through the real Worker and object (default limits from wrangler.toml):
// a POST body is streamed from the Worker to the episode's object, so a message of exactly
// MAX_MESSAGE_BYTES (32 MiB) is applied like any other (an RPC argument of that size would exceed
// the platform's 32 MiB RPC limit with its envelope and fail 500). Messages over the limit are 413
// (test/workers/episode.test.ts "oversized"; here the local proxy resets a refused upload before
// the client reads the answer).
import { describe, expect, it } from "vitest";
import { wranglerVars } from "../../bench/helpers.js";
import { delta, m, node, openDelta } from "../support/deltas.js";
import { useRelay } from "../support/relay.js";

const relay = useRelay();
const MAX = Number(wranglerVars().MAX_MESSAGE_BYTES);

/** A delta adding one node whose message content pads the encoded delta to exactly `size` bytes. */
function deltaOfSize(size: number): Uint8Array {
  const make = (pad: number) => delta({ nodes: [node(0, { message: m({ role: "user", content: "x".repeat(pad) }) })] });
  const probe = make(100_000).byteLength - 100_000;
  const out = make(size - probe);
  expect(out.byteLength).toBe(size);
  return out;
}

const post = (id: string, body: Uint8Array) => fetch(`${relay.url}/v1/episodes/${id}/deltas`, { method: "POST", body });

describe("MAX_MESSAGE_BYTES through the Worker and the object", () => {
  it("is 32 MiB by default", () => {
    expect(MAX).toBe(32 * 1024 * 1024);
  });

  it("a message of exactly the limit is applied; GET holds it", async () => {
    const id = `limit-${Date.now().toString(36)}`;
    expect((await post(id, openDelta())).status).toBe(200);
    const big = deltaOfSize(MAX);
    const res = await post(id, big);
    expect(res.status, await res.clone().text()).toBe(200);
    const status = (await (await fetch(`${relay.url}/v1/episodes/${id}/status`)).json()) as {
      nodes: number;
      frame_bytes: number;
    };
    expect(status.nodes).toBe(1);
    expect(status.frame_bytes).toBeGreaterThan(MAX);
  }, 120_000);
});

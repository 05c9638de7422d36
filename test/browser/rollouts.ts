// What the browser tests do with the relay they start: post to it, read its API, push chat_basic
// as a rollout of a run (test/support/chat-rollouts.ts) and finish it, and wait for the run's index.

import { expect } from "vitest";
import type { LMap } from "../../src/protocol/wire/lossless.js";
import { chat, failedReply, groupReply, openFrame, setDelta } from "../support/chat-rollouts.js";
import { batch } from "./batch.js";

/** The relay at `url()` (read on each call: the relay starts in `beforeAll`). */
export function relayCalls(url: () => string) {
  /** POST msgpack `body` to `path`; a 200 expected. */
  async function post(path: string, body: Uint8Array): Promise<void> {
    const res = await fetch(`${url()}${path}`, {
      method: "POST",
      body,
      headers: { "content-type": "application/msgpack" },
    });
    expect(res.status, `${path}: ${await res.text()}`).toBe(200);
  }

  /** GET `path` as JSON; a 200 expected. */
  async function api<T>(path: string): Promise<T> {
    const res = await fetch(`${url()}${path}`);
    expect(res.status, path).toBe(200);
    return (await res.json()) as T;
  }

  /** Wait (up to `ms`) until the run's index shows these counts (episodes update it in the background). */
  async function indexed(run: string, counts: Record<string, number>, ms: number): Promise<void> {
    const end = Date.now() + ms;
    for (;;) {
      const got =
        (await api<{ aggregates?: { counts?: Record<string, number> } }>(`/v1/runs/${run}`)).aggregates?.counts ?? {};
      if (Object.entries(counts).every(([k, v]) => got[k] === v)) return;
      if (Date.now() > end)
        throw new Error(`run ${run} not indexed with ${JSON.stringify(counts)}: ${JSON.stringify(got)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * chat_basic into episode `id`: its open frame with task key `task`, its other frames (those
   * `keep` keeps), then one more delta setting `set`; in one request (`batch`).
   */
  async function pushChat(
    id: string,
    task: string,
    set: LMap,
    keep: (frame: Uint8Array) => boolean = () => true,
  ): Promise<void> {
    await post(
      `/v1/episodes/${id}/deltas`,
      batch([openFrame(task), ...chat.frames.slice(1).filter(keep), setDelta(set)]),
    );
  }

  /** Finish episode `id` of `group` on `task`: chat_basic's reply with both in its head, or (failed) a failed reply. */
  async function replyChat(id: string, group: string, task: string, failed: boolean): Promise<void> {
    await post(`/v1/episodes/${id}/reply`, failed ? failedReply(id, group) : groupReply(group, task));
  }

  return { post, api, indexed, pushChat, replyChat };
}

// How a viewer hub joins and leaves its episode, step by step as ARCHITECTURE.md draws it ("A hub's
// membership"): the first watcher makes the hub join with a new session; feeds of that session are
// applied, those of another are answered "not a member" (the episode then drops it); the last
// watcher leaving makes it leave, and a feed after that is refused; the next watcher joins with a
// new session; a report of another session is answered null (the hub would join again); the
// episode's end closes the session's watchers.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { hubName } from "../../src/protocol/hub/shards.js";
import { freshId, golden, pushFrames, relay } from "./support.js";
import { Watcher } from "./watcher.js";

const hub = (id: string) => env.HUBS.getByName(hubName(id, 0));
const episode = (id: string) => env.EPISODES.getByName(id);

async function eventually<T>(read: () => Promise<T>, ok: (v: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const v = await read();
    if (ok(v)) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out: ${what}`);
}

const status = async (id: string) =>
  (await relay(`${id}/status`)).json() as Promise<{ watchers: number; hubs: number }>;

describe("a hub's membership, as drawn", () => {
  it("idle → joining → member(S) → leaving → idle → member(S′); feeds and reports of another session are refused; the episode's end closes the session", async () => {
    const c = await golden("chat_basic");
    const id = freshId("membership");
    const producer = new ProducerCursor("p");
    await pushFrames(id, c, 0, 2, producer);

    // idle: no session, and a feed for any session is "not a member"
    expect((await hub(id).stats()).session).toBeNull();
    expect(await hub(id).feed(42, null)).toMatchObject({ applied: false, view: null, member: false });

    // the first watcher: the hub joins with a session of its own and starts from the episode as it is
    const w1 = await Watcher.open(id);
    await w1.read((x) => x.caughtUp);
    const joined = await hub(id).stats();
    const s = joined.session!;
    expect(s).not.toBeNull();
    expect(joined.view?.head).toBe(2);
    expect((await status(id)).watchers).toBe(1);

    // member(S): a feed of S that follows the hub's view is applied (the watcher gets it); a bare
    // feed answers the view; a feed of another session is refused as "not a member"
    await pushFrames(id, c, 2, 3, producer);
    await w1.read((x) => x.lastSeq === 3);
    expect(await hub(id).feed(s, null)).toMatchObject({ applied: false, member: true, view: { head: 3 } });
    expect(await hub(id).feed(s + 1, null)).toMatchObject({ member: false });

    // the episode's side of a report: its hub count for the member's session; null for a session it
    // does not count (the hub then joins again, from where the episode is)
    expect(await episode(id).hubLoad(id, 0, s, 1)).toBe(1);
    expect(await episode(id).hubLoad(id, 0, s + 1, 1)).toBeNull();
    const w2 = await Watcher.open(id); // a second watcher on the same session
    await w2.read((x) => x.caughtUp);
    expect((await hub(id).stats()).session).toBe(s);
    await pushFrames(id, c, 3, 4, producer);
    await w1.read((x) => x.lastSeq === 4);
    await w2.read((x) => x.lastSeq === 4);

    // leaving: the last watcher goes, the hub leaves; a feed of its old session is refused after
    w1.close();
    w2.close();
    await eventually(
      () => hub(id).stats(),
      (x) => x.session === null,
      "the hub leaves with its last watcher",
    );
    await eventually(
      () => status(id),
      (x) => x.watchers === 0,
      "the episode counts no watcher",
    );
    expect(await hub(id).feed(s, null)).toMatchObject({ member: false });

    // idle again, then member(S″): a new session; the episode's end (a delete) closes its watchers
    const w3 = await Watcher.open(id);
    await w3.read((x) => x.caughtUp);
    const s3 = (await hub(id).stats()).session!;
    expect(s3).not.toBe(s);
    const gone = await relay(id, { method: "DELETE" });
    expect(gone.status).toBeLessThan(300);
    await gone.arrayBuffer();
    const closed = await w3.box.closed();
    // a definite end: closed normally, with the reason, and the hub holds no session after
    expect(closed.code).toBe(1000);
    expect(closed.reason.length).toBeGreaterThan(0);
    expect((await hub(id).stats()).session).toBeNull();
  });
});

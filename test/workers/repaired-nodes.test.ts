// The record of routing repairs (node_meta.repaired, `status.repaired_nodes`): which nodes a
// `routing_repairs` rewrote is kept as the repairs are applied, so it is the same when the object
// wakes from storage and once the episode is archived (its log gone); a retracted repair leaves no
// record; and the episode's bytes are the golden ones throughout.

import { abortAllDurableObjects, runDurableObjectAlarm } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { decodeLossless, LMap } from "../../src/protocol/wire/lossless.js";
import type { GoldenCase } from "../../tools/conformance/case-format.js";
import { delta, intKeyed, nd, node, openDelta } from "../support/deltas.js";
import { equal, freshId, getBytes, golden, post, pushFrames, relay } from "./support.js";

type Status = { archived: boolean; repaired_nodes: Record<string, number[]> };
const status = async (id: string) => (await (await relay(`${id}/status`)).json()) as Status;

/** Per trace, the nodes the frames that stay (not retracted by a later send) repair: read from the frames themselves. */
function repairsIn(c: GoldenCase): Record<string, number[]> {
  const lost = new Set(c.ack_lost);
  const out: Record<string, Set<number>> = {};
  c.frames.forEach((f, i) => {
    if (lost.has(i) && i < c.frames.length - 1) return; // retracted by the next send, which carries it again
    const d = decodeLossless(f) as LMap;
    const repairs = d.get("routing_repairs");
    if (!(repairs instanceof LMap)) return;
    const trace = d.get("trace") as string;
    for (const k of repairs.keys()) (out[trace] ??= new Set()).add(Number(k));
  });
  return Object.fromEntries(Object.entries(out).map(([t, s]) => [t, [...s].sort((a, b) => a - b)]));
}

describe("status.repaired_nodes", () => {
  for (const name of ["routing_repair_u8", "routing_repair_widen", "failed_sends"]) {
    it(`${name}: the repaired nodes, the same after a restart and once archived`, async () => {
      const c = await golden(name);
      const want = repairsIn(c);
      expect(Object.keys(want).length, "the case has repairs").toBeGreaterThan(0);
      const id = freshId(`repaired-${name}`);
      await pushFrames(id, c, 0, c.frames.length, new ProducerCursor("p"));
      expect((await status(id)).repaired_nodes).toEqual(want);
      (await post(`${id}/reply`, c.reply)).body?.cancel();
      await abortAllDurableObjects(); // the index is read back from storage
      expect((await status(id)).repaired_nodes).toEqual(want);
      for (let i = 0; i < 20 && !(await status(id)).archived; i++)
        await runDurableObjectAlarm(env.EPISODES.getByName(id));
      const after = await status(id);
      expect(after.archived).toBe(true);
      expect(after.repaired_nodes, "kept through the archive").toEqual(want);
      expect(equal(await getBytes(id), c.episode!)).toBe(true);
    });
  }

  it("a repair retracted (its ack lost, the next send does not carry it) leaves no record; one that stays does", async () => {
    const id = freshId("repaired-retract");
    const routed = (v: number) => nd("uint8", [2, 1, 2], [v, v, v, v]);
    const row = nd("uint8", [1, 1, 2], [9, 9]);
    const producer = new ProducerCursor("p");
    const send = async (d: Uint8Array, acked: boolean) => {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      if (acked) producer.acknowledge();
    };
    await send(openDelta(), true);
    await send(
      delta({ nodes: [node(0, { routed_experts: routed(1) }), node(1, { routed_experts: routed(2) })] }),
      true,
    );
    await send(delta({ routing_repairs: intKeyed([[0, row]]) }), false); // its ack is lost
    expect((await status(id)).repaired_nodes).toEqual({ "t-1": [0] });
    // the next send does not carry node 0's repair again: the relay retracts it, and its record
    await send(delta({ routing_repairs: intKeyed([[1, row]]) }), true);
    expect((await status(id)).repaired_nodes).toEqual({ "t-1": [1] });
    await abortAllDurableObjects();
    expect((await status(id)).repaired_nodes).toEqual({ "t-1": [1] });
  });
});

describe("a repair reads the one node it touches (EPISODE_SCHEMA 13: body runs keyed by scale)", () => {
  /** Rows read by the commit that let `n - 1` superseded versions go, by `n`. */
  const collected = new Map<number, number>();
  /**
   * Rows the episode reads (as billed, its usage) applying one repair of its last node, after `n` nodes were appended
   * and every other one repaired after the checkpoint their repairs made: a run of one each.
   */
  async function lastRepairRead(n: number): Promise<number> {
    const id = freshId(`repair-reads-${n}`);
    const routed = (v: number) => nd("uint8", [2, 1, 2], [v, v, v, v]);
    const row = nd("uint8", [1, 1, 2], [9, 9]);
    const producer = new ProducerCursor("p");
    const send = async (d: Uint8Array) => {
      const r = await post(`${id}/deltas`, encodeEnvelope(producer.envelope(d)));
      expect(r.status, await r.clone().text()).toBe(200);
      await r.arrayBuffer();
      producer.acknowledge();
    };
    await send(openDelta());
    await send(delta({ nodes: Array.from({ length: n }, (_, i) => node(i, { routed_experts: routed(i & 0x7f) })) }));
    await send(delta({ routing_repairs: intKeyed(Array.from({ length: n - 1 }, (_, i) => [i, row])) }));
    // the versions those repairs superseded are held until the frame is acknowledged, and go after the next commit:
    // one more repair (of node 0) lets them go before the one measured
    const read = async () =>
      ((await (await relay(`${id}/usage`)).json()) as { episode: { rowsRead: number } }).episode.rowsRead;
    const released = await read();
    await send(delta({ routing_repairs: intKeyed([[0, row]]) }));
    const before = await read();
    collected.set(n, before - released);
    await send(delta({ routing_repairs: intKeyed([[n - 1, row]]) }));
    const after = await read();
    expect((await status(id)).repaired_nodes["t-1"]?.length).toBe(n);
    return after - before;
  }

  it("the rows read by a repair of the last node stay the same as its trace grows from 10 to 400 runs", async () => {
    const small = await lastRepairRead(10);
    const large = await lastRepairRead(400);
    console.log(
      `rows read by one repair of the last node: ${small} after 10 runs, ${large} after 400; by the commit releasing the superseded versions: ${collected.get(10)}, ${collected.get(400)}`,
    );
    // schema 12 read every run of the trace's nodes below it: 390 more
    expect(large - small).toBeLessThanOrEqual(8);
    // releasing the superseded versions reads about as much per version for 399 as for 9 (`stale` deleted by rowid;
    // a delete by its columns scanned the table per entry: 95,778 rows for 399, 423 for 9)
    expect(collected.get(400)! / 399).toBeLessThanOrEqual((2 * collected.get(10)!) / 9);
  });
});

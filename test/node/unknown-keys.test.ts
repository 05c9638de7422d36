// Keys a newer verifiers sends that the relay does not know: kept where that cannot break exactness
// (an unknown list key appended after the known lists, as a reference that knows it appends it; an
// unknown `set` scalar applied as every `set` key is), carried in the frames either way, and named
// (`unknown`) in the parse, the ack and the status. `sampling_mask` (int32 arrays in nodes) travels
// like `routed_experts`: exact in msgpack, nil in `?routing=0` views. First the pure modules, then
// the same episode through a relay: POST, watchers, GET, the status and the archive.

import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { type SocketFactory, type WatchEvent, watchEpisode } from "../../clients/typescript/watch.js";
import { finishedDeltas } from "../../src/protocol/archive/finished-deltas.js";
import { parseDelta } from "../../src/protocol/assembly/delta.js";
import { EpisodeAssembly, type Undo } from "../../src/protocol/assembly/episode-assembly.js";
import { snapshotDeltas } from "../../src/protocol/assembly/snapshot.js";
import { parseAnswer } from "../../src/protocol/envelope/answer.js";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { stripRouting } from "../../src/protocol/watch/variant.js";
import { jsonText } from "../../src/protocol/wire/json-view.js";
import { decodeLossless, type LValue } from "../../src/protocol/wire/lossless.js";
import { concatChunks } from "../../src/protocol/wire/writer.js";
import { enc, f, m, nd, node } from "../support/deltas.js";
import { until, useRelay } from "../support/relay.js";

const T = "t-new";
const OPEN = m({ version: 1, id: T, verifiers: m({ version: "0.2.0" }), task: m({ type: "MathTask" }) });
const MASK = m({ ids: nd("int32", [2], [151_655, 7]), counts: nd("int32", [2], [1, 2]) });
const N0 = node(0, { sampling_mask: MASK });
const N1 = node(1, { routed_experts: nd("uint8", [1, 2, 2], [1, 2, 3, 4]), sampling_mask: MASK });
const SET1 = {
  agent: m({ name: "solver" }),
  rewards: m({}),
  root_reply: null,
  is_completed: false,
  is_timeout: false,
  num_input_tokens: 10,
  num_output_tokens: 3,
  num_total_tokens: 13,
  future_scalar: 7,
};

/** A delta of a newer producer: an unknown list key, an unknown scalar in `set`, an unknown top-level scalar. */
const F1 = enc(
  m({
    trace: T,
    open: OPEN,
    nodes: [N0],
    payload: [m({ kind: "request" })],
    future_list: ["a", m({ k: f(1.5) })],
    set: m(SET1),
    future_flag: "x",
  }),
);
const F2 = enc(m({ trace: T, nodes: [N1], future_list: [3], set: m({ future_scalar: f(2.5) }) }));
const HEAD = {
  id: "ep",
  env: m({ id: "e", name: "e" }),
  task: m({ type: "MathTask" }),
  group: null,
  run: null,
  ok: true,
  errors: [] as LValue[],
};
const REPLY = enc(m({ success: true, error: null, head: m(HEAD), traces: [m({ id: T, nodes: 2, calls: 0 })] }));

/** The trace a reference that knows `future_list` assembles: the list after the known ones, scalars in arrival order. */
function expectedTrace(pending: boolean): LValue {
  return m({
    version: 1,
    id: T,
    verifiers: m({ version: "0.2.0" }),
    task: m({ type: "MathTask" }),
    nodes: [N0, N1],
    calls: [],
    payload: [m({ kind: "request" })],
    errors: [],
    extra_usage: [],
    request_rewrites: [],
    response_rewrites: [],
    future_list: ["a", m({ k: f(1.5) }), 3],
    ...(pending ? { pending: [] } : {}),
    ...SET1,
    future_scalar: f(2.5),
  });
}
const EPISODE = enc(m({ ...HEAD, traces: [expectedTrace(false)] }));
const NAMES = ["future_list", "set.future_scalar", "future_flag"];

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

describe("unknown keys in the pure modules", () => {
  it("are named; the keys that arrived after the seed (payload, is_timeout, num_*_tokens) are not", () => {
    expect(parseDelta(F1).unknown).toEqual(NAMES);
    expect(parseDelta(F2).unknown).toEqual(["future_list", "set.future_scalar"]);
    const known = enc(m({ trace: T, payload: [1], set: m({ is_timeout: true, num_total_tokens: 4 }) }));
    expect(parseDelta(known).unknown).toEqual([]);
    expect(parseDelta(enc(m({ trace: T, open: m({ version: 1, id: T, future_header: 1 }) }))).unknown).toEqual([
      "open.future_header",
    ]);
    expect(() =>
      parseDelta(concatChunks([Uint8Array.of(0x83), enc("trace"), enc(T), enc("z"), enc(1), enc("z"), enc(2)])),
    ).toThrow(/duplicate key/);
  });

  it("an unknown list is appended after the known lists, an unknown scalar applied: the newer reference's bytes", () => {
    const asm = new EpisodeAssembly();
    asm.apply(F1);
    asm.apply(F2);
    expect(hex(asm.tracesBytes())).toBe(hex(enc([expectedTrace(true)])));
    expect(hex(asm.finishReply(REPLY))).toBe(hex(EPISODE));
  });

  it("a late watcher's snapshot rebuilds it exactly; a refused change is undone exactly", () => {
    const asm = new EpisodeAssembly();
    asm.apply(F1);
    asm.apply(F2);
    const fresh = new EpisodeAssembly();
    for (const d of snapshotDeltas(asm.bodies, asm.views(), 64)) fresh.apply(d);
    expect(hex(fresh.tracesBytes())).toBe(hex(asm.tracesBytes()));

    const one = new EpisodeAssembly();
    one.apply(F1);
    const before = hex(one.tracesBytes());
    const undo: Undo = [];
    one.applyParsed(parseDelta(F2), undo);
    one.applyParsed(parseDelta(enc(m({ trace: T, brand_new: [1, 2] }))), undo);
    expect(hex(one.tracesBytes())).not.toBe(before);
    for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
    expect(hex(one.tracesBytes())).toBe(before);
  });

  it("an archived episode's deltas carry the unknown list under its own key: same bytes, same names", async () => {
    async function* chunks(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
      for (let i = 0; i < bytes.length; i += size) yield bytes.slice(i, i + size);
    }
    for (const [size, budget] of [
      [1, 64],
      [7, 1 << 20],
      [EPISODE.length, 48],
    ] as const) {
      const asm = new EpisodeAssembly();
      const names = new Set<string>();
      for await (const d of finishedDeltas(chunks(EPISODE, size), budget))
        for (const k of asm.apply(d).unknown) names.add(k);
      expect(hex(asm.finishReply(REPLY)), `chunks of ${size}, budget ${budget}`).toBe(hex(EPISODE));
      expect([...names]).toEqual(["future_list", "set.future_scalar"]);
    }
  });

  it("a name the trace holds as a scalar is no list: only the frame keeps it", () => {
    const asm = new EpisodeAssembly();
    asm.apply(F1);
    const before = hex(asm.tracesBytes());
    const d = asm.apply(enc(m({ trace: T, agent: [1] })));
    expect(d.unknown).toEqual(["agent"]);
    expect(hex(asm.tracesBytes())).toBe(before);
  });

  it("sampling_mask: kept in msgpack, nil without routing, base64 ndarrays in the JSON view as routing is", () => {
    const stripped = decodeLossless(stripRouting(F2)) as unknown as { get(k: string): LValue };
    const n = (stripped.get("nodes") as LValue[])[0] as unknown as { get(k: string): LValue };
    expect(n.get("sampling_mask")).toBeNull();
    expect(n.get("routed_experts")).toBeNull();
    // a delta with a mask and no routing is stripped too (routing=0 means no per-token arrays)
    const maskOnly = decodeLossless(stripRouting(F1)) as unknown as { get(k: string): LValue };
    expect(
      ((maskOnly.get("nodes") as LValue[])[0] as unknown as { get(k: string): LValue }).get("sampling_mask"),
    ).toBeNull();
    expect((maskOnly.get("future_list") as LValue[]).length).toBe(2);
    const json = JSON.parse(jsonText(decodeLossless(F2))) as {
      nodes: Array<{ sampling_mask: { ids: { data: string } }; routed_experts: { data: string } }>;
    };
    expect(json.nodes[0]!.sampling_mask.ids.data).toBe(
      Buffer.from([0x67, 0x50, 0x02, 0, 7, 0, 0, 0]).toString("base64"),
    );
    expect(typeof json.nodes[0]!.routed_experts.data).toBe("string");
  });
});

// archive a finished episode a second after its finish (the archive read is part of the round trip)
const relay = useRelay({ ARCHIVE_AFTER_SECONDS: "1" });
const WS: SocketFactory = WebSocket;

function watch(id: string, routing = true) {
  const w = watchEpisode(relay.url, id, { WebSocket: WS, routing });
  const events: WatchEvent[] = [];
  w.on((e) => events.push(e));
  return { w, events };
}

describe("unknown keys through a relay", () => {
  it("POST, watchers, GET, status and archive: exact, and named", async () => {
    const id = `unknown-${Date.now().toString(36)}`;
    const full = watch(id);
    const light = watch(id, false);
    await until(() => full.w.state === "live" && light.w.state === "live", 20_000, "watchers live");
    const producer = new ProducerCursor("newer-verifiers");
    const acks = [];
    // F2 goes twice: its first ack is lost, so the second retracts it (the relay rewinds its storage
    // and reads its index back, the unknown list included) and applies it again
    for (const [frame, acked] of [
      [F1, true],
      [F2, false],
      [F2, true],
    ] as const) {
      const res = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
        method: "POST",
        body: encodeEnvelope(producer.envelope(frame)),
      });
      expect(res.status).toBe(200);
      acks.push(parseAnswer(await res.text()));
      if (acked) producer.acknowledge();
    }
    const again = ["future_list", "set.future_scalar"];
    expect(acks.map((a) => (a.ok ? a.unknown : null))).toEqual([NAMES, again, again]);
    const known = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(enc(m({ trace: T, set: m({ is_timeout: true }) })))),
    });
    const knownAck = parseAnswer(await known.text());
    expect(knownAck.ok && knownAck.unknown).toBeUndefined();
    producer.acknowledge();

    const finished = await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: REPLY });
    expect(finished.status).toBe(200);
    await Promise.all([full.w.finished(), light.w.finished()]);

    const get = new Uint8Array(await (await fetch(`${relay.url}/v1/episodes/${id}`)).arrayBuffer());
    // the finished episode: today's reply bytes plus the `is_timeout` set above, as the newer reference
    const want = enc(
      m({
        ...HEAD,
        traces: [
          (() => {
            const t = expectedTrace(false) as unknown as { entries: Array<[LValue, LValue]> };
            const i = t.entries.findIndex(([k]) => k === "is_timeout");
            t.entries[i] = ["is_timeout", true];
            return t as unknown as LValue;
          })(),
        ],
      }),
    );
    expect(hex(get)).toBe(hex(want));
    expect(hex(full.w.episode!)).toBe(hex(get));
    // the stored frames are the frames as sent, the unknown top-level scalar included
    const frames = full.events.flatMap((e) => (e.type === "delta" ? [hex(e.delta)] : []));
    expect(frames.slice(0, 2)).toEqual([hex(F1), hex(F2)]);
    // without routing: the same episode with every sampling_mask and routed_experts nil
    const lightTraces = light.w.json() as Array<{ nodes: Array<Record<string, unknown>>; future_list: unknown[] }>;
    const nodes = lightTraces[0]!.nodes;
    expect(nodes.map((n) => [n.sampling_mask, n.routed_experts])).toEqual([
      [null, null],
      [null, null],
    ]);
    expect(lightTraces[0]!.future_list).toEqual(["a", { k: 1.5 }, 3]);

    const status = async () =>
      (await (await fetch(`${relay.url}/v1/episodes/${id}/status`)).json()) as { unknown: string[]; archived: boolean };
    expect((await status()).unknown).toEqual(NAMES);
    const jsonBefore = await (
      await fetch(`${relay.url}/v1/episodes/${id}`, { headers: { accept: "application/json" } })
    ).text();
    let archived = false;
    const end = Date.now() + 60_000;
    while (!archived && Date.now() < end) {
      archived = (await status()).archived;
      if (!archived) await new Promise((r) => setTimeout(r, 200));
    }
    expect(archived).toBe(true);
    expect((await status()).unknown).toEqual(NAMES);
    const fromArchive = new Uint8Array(await (await fetch(`${relay.url}/v1/episodes/${id}`)).arrayBuffer());
    expect(hex(fromArchive)).toBe(hex(want));
    const jsonAfter = await (
      await fetch(`${relay.url}/v1/episodes/${id}`, { headers: { accept: "application/json" } })
    ).text();
    expect(jsonAfter).toBe(jsonBefore);
    const late = watch(id);
    await late.w.finished();
    expect(hex(late.w.episode!)).toBe(hex(want));
    // caught up from the archive: the unknown list came as a list, as the producer sent it
    expect(late.w.unknown).toEqual(["future_list", "set.future_scalar"]);
  }, 120_000);
});

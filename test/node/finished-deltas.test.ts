// Archived finished episodes back into upstream deltas (src/protocol/archive/finished-deltas.ts): every
// golden episode, in chunks of any size, rebuilt byte for byte by a fresh assembly, in bounded memory.
import { describe, expect, it } from "vitest";
import { type FinishedDeltasOptions, finishedDeltas } from "../../src/protocol/archive/finished-deltas.js";
import { ArchiveError, type FinishedDeltaStats } from "../../src/protocol/archive/stream-input.js";
import { mapEntries, parseDelta } from "../../src/protocol/assembly/delta.js";
import { EpisodeAssembly } from "../../src/protocol/assembly/episode-assembly.js";
import { isListField, LIST_FIELDS } from "../../src/protocol/assembly/fields.js";
import { encodeReply } from "../../src/protocol/assembly/reply.js";
import { DELTA_BYTES } from "../../src/protocol/assembly/snapshot.js";
import { Reader } from "../../src/protocol/wire/reader.js";
import { decodeStrSpan } from "../../src/protocol/wire/utf8.js";
import { concatChunks } from "../../src/protocol/wire/writer.js";
import { type GoldenCase, goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";
import { compareBytes } from "../../tools/conformance/compare.js";
import { delta, enc, m, node, openDelta } from "../support/deltas.js";

// plain Uint8Array copies: the loader's are Buffer views, whose `slice` would not copy
const cases = goldenCasePaths()
  .map(loadCase)
  .filter((c): c is GoldenCase & { episode: Uint8Array } => c.episode !== null)
  .map((c) => ({ ...c, episode: new Uint8Array(c.episode), reply: new Uint8Array(c.reply) }));
const WHOLE = 0;
const CHUNKINGS = [1, 7, 4096, WHOLE];
const KEY_ORDER = ["trace", "open", ...LIST_FIELDS, "set", "pending"];

/** The bytes in chunks of `size` (WHOLE: one chunk); `delivered` counts what was handed out. */
function feed(bytes: Uint8Array, size: number): AsyncIterable<Uint8Array> & { delivered: number } {
  const src = {
    delivered: 0,
    async *[Symbol.asyncIterator]() {
      const step = size === WHOLE ? Math.max(1, bytes.length) : size;
      for (let at = 0; at < bytes.length; at += step) {
        const chunk = bytes.subarray(at, at + step);
        src.delivered += chunk.length;
        yield chunk;
      }
    },
  };
  return src;
}

interface Run {
  deltas: Uint8Array[];
  /** Input bytes handed out when each delta came. */
  deliveredAt: number[];
  stats: FinishedDeltaStats;
}

async function run(
  bytes: Uint8Array,
  size: number,
  budget?: number,
  options: FinishedDeltasOptions = {},
): Promise<Run> {
  const src = feed(bytes, size);
  const stats = { peakHeld: 0, pulls: 0 };
  const out: Run = { deltas: [], deliveredAt: [], stats };
  for await (const d of finishedDeltas(src, budget, { ...options, stats })) {
    out.deltas.push(d);
    out.deliveredAt.push(src.delivered);
  }
  return out;
}

/**
 * Runs at the default budget (DELTA_BYTES) in chunks of 1, 7 and 4096 bytes: each is made once, by the
 * chunking test, and taken (once) by the case's default-budget test, whose run it is (the same input,
 * chunks and budget). The byte-by-byte run of the 27 MB case is the costliest thing here.
 */
const atDefault = new Map<string, Promise<Run>>();
function runAtDefault(c: { name: string; episode: Uint8Array }, size: number): Promise<Run> {
  const key = `${c.name}/${size}`;
  const made = atDefault.get(key);
  if (made) {
    atDefault.delete(key);
    return made;
  }
  const r = run(c.episode, size);
  if (size !== WHOLE) atDefault.set(key, r);
  return r;
}

function rebuild(reply: Uint8Array, deltas: readonly Uint8Array[]): Uint8Array {
  const asm = new EpisodeAssembly();
  for (const d of deltas) asm.apply(d); // the relay's own delta checks
  return asm.finishReply(reply);
}

/** The episode read whole, independently of the module: where its units end, and their sizes. */
function layout(episode: Uint8Array) {
  const at = (span: Uint8Array) => span.byteOffset - episode.byteOffset;
  const top = mapEntries(new Reader(episode), "episode");
  const traces = top.find((e) => e.key === "traces")!;
  let largest = 0; // an item, a set entry, a trace's header, or a head entry
  for (const e of top) if (e.key !== "traces") largest = Math.max(largest, e.keySpan.length + e.value.length);
  const ids: string[] = [];
  /** Where each item and set entry ends, in input order. */
  const unitEnds: number[] = [];
  const traceEnds: number[] = [];
  const r = new Reader(traces.value);
  const n = r.arrayHeader();
  for (let i = 0; i < n; i++) {
    const entries = mapEntries(r, "trace");
    traceEnds.push(at(traces.value) + r.pos);
    ids.push(decodeStrSpan(entries.find((e) => e.key === "id")!.value));
    let header = 0;
    let lists = false;
    for (const e of entries) {
      if (isListField(e.key)) {
        lists = true;
        const items = new Reader(e.value);
        const count = items.arrayHeader();
        for (let j = 0; j < count; j++) {
          const item = items.span();
          largest = Math.max(largest, item.length);
          unitEnds.push(at(item) + item.length);
        }
      } else if (lists) {
        largest = Math.max(largest, e.keySpan.length + e.value.length);
        unitEnds.push(at(e.value) + e.value.length);
      } else header += e.keySpan.length + e.value.length;
    }
    largest = Math.max(largest, header);
  }
  return { tracesAt: at(traces.value), largest, ids, unitEnds, traceEnds };
}

/** Items and set entries a delta carries. */
function units(d: Uint8Array): number {
  const p = parseDelta(d);
  return (p.nodes?.length ?? 0) + Object.values(p.lists).reduce((n, l) => n + l.length, 0) + (p.set?.length ?? 0);
}

/** Deltas in upstream form: per trace a run with `open` first and `pending: []` last, nothing else. */
function checkShape(deltas: readonly Uint8Array[], ids: readonly string[]): void {
  const runs: string[] = [];
  deltas.forEach((d, i) => {
    const p = parseDelta(d);
    const keys = p.entries.map((e) => e.key);
    expect(keys[0]).toBe("trace");
    const order = keys.map((k) => KEY_ORDER.indexOf(k));
    expect(
      order.every((o, j) => o >= 0 && (j === 0 || o > order[j - 1]!)),
      `delta ${i} keys ${keys}`,
    ).toBe(true);
    const first = runs.at(-1) !== p.trace;
    if (first) runs.push(p.trace);
    expect(p.open !== undefined, `delta ${i}: open on the first delta of a trace only`).toBe(first);
    const last = i === deltas.length - 1 || parseDelta(deltas[i + 1]!).trace !== p.trace;
    expect(p.pending !== undefined, `delta ${i}: pending on the last delta of a trace only`).toBe(last);
    if (p.pending) expect([...p.pending]).toEqual([0x90]);
    expect(p.discard).toBe(false);
  });
  expect(runs).toEqual([...new Set(ids)]);
}

describe("finished episodes back into deltas", () => {
  it("finds golden episodes, the routing-heavy and the discard/retry ones among them", () => {
    const names = cases.map((c) => c.name);
    expect(names.length).toBeGreaterThanOrEqual(11);
    expect(names).toEqual(
      expect.arrayContaining(["large_routing", "discard_retry", "routing_repair_widen", "odd_values", "ack_lost"]),
    );
  });

  for (const c of cases) {
    for (const size of CHUNKINGS) {
      it(`${c.name}, chunks of ${size || "the whole episode"}: a fresh assembly rebuilds the episode's bytes`, async () => {
        const before = c.episode.slice();
        const { deltas } = await runAtDefault(c, size);
        expect(Buffer.compare(before, c.episode), "the input chunks are not written to").toBe(0);
        checkShape(deltas, layout(c.episode).ids);
        expect(compareBytes(c.episode, rebuild(c.reply, deltas), "episode")).toBeUndefined();
      }, 60_000);
    }

    for (const budget of [512, DELTA_BYTES]) {
      it(`${c.name}, budget ${budget}: deltas within it unless one item, memory within a delta, an item and a chunk`, async () => {
        const { largest, ids, unitEnds, traceEnds } = layout(c.episode);
        // what the input carries and the deltas do not (map headers, keys of empty lists), per trace
        const slack = 128 * (ids.length + 1);
        for (const size of [1, 7, 4096]) {
          const r = budget === DELTA_BYTES ? await runAtDefault(c, size) : await run(c.episode, size, budget);
          expect(compareBytes(c.episode, rebuild(c.reply, r.deltas), "episode")).toBeUndefined();
          for (const [i, d] of r.deltas.entries()) {
            if (d.length > budget) expect(units(d), `delta ${i} of ${d.length} bytes`).toBeLessThanOrEqual(1);
          }
          expect(r.stats.peakHeld).toBeLessThanOrEqual(budget + largest + size + slack);
          // no read-ahead: a delta comes as soon as the unit that closes it (its last, or the next that
          // does not fit, or the trace's end) is read, within one chunk
          let done = 0;
          let t = -1;
          r.deltas.forEach((d, i) => {
            if (i === 0 || parseDelta(d).trace !== parseDelta(r.deltas[i - 1]!).trace) t++;
            done += units(d);
            const points = [traceEnds[t]!, unitEnds[done - 1] ?? -1, unitEnds[done] ?? -1];
            const got = r.deliveredAt[i]!;
            expect(
              points.some((p) => got >= p && got < p + size),
              `delta ${i}: ${got} bytes read, closing points ${points}`,
            ).toBe(true);
          });
          expect(done).toBe(unitEnds.length);
        }
      }, 180_000); // CPU-bound per case; large_routing under a loaded machine took over 60 s
    }
  }

  it("large_routing splits into several deltas per trace at a small budget and at the default", async () => {
    const c = cases.find((x) => x.name === "large_routing")!;
    const small = await run(c.episode, 4096, 512);
    const byTrace = new Map<string, number>();
    for (const d of small.deltas) byTrace.set(parseDelta(d).trace, (byTrace.get(parseDelta(d).trace) ?? 0) + 1);
    for (const n of byTrace.values()) expect(n).toBeGreaterThan(4);
    const big = await run(c.episode, 65536);
    expect(big.deltas.length).toBeGreaterThan(Math.floor(c.episode.length / DELTA_BYTES));
    for (const d of big.deltas) if (d.length > DELTA_BYTES) expect(units(d)).toBe(1);
    // an item is never split: each node went whole into one delta
    expect(big.deltas.reduce((n, d) => n + (parseDelta(d).nodes?.length ?? 0), 0)).toBe(
      small.deltas.reduce((n, d) => n + (parseDelta(d).nodes?.length ?? 0), 0),
    );
  }, 120_000); // CPU-bound: the largest golden case split twice

  it("the memory bound can fail: a whole-episode chunk is held whole", async () => {
    const c = cases.find((x) => x.name === "large_routing")!;
    const { largest } = layout(c.episode);
    const r = await run(c.episode, WHOLE, 512);
    expect(r.stats.peakHeld).toBe(c.episode.length);
    expect(r.stats.peakHeld).toBeGreaterThan(512 + largest + 4096);
  });

  describe("truncated or invalid input rejects with an Error", () => {
    const c = cases.find((x) => x.name === "chat_basic")!;
    const expectReject = async (bytes: Uint8Array, size: number, message: RegExp) => {
      const err = await run(bytes, size).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ArchiveError);
      expect((err as Error).message).toMatch(message);
    };

    for (const size of CHUNKINGS) {
      it(`the episode minus its last byte, chunks of ${size || "the whole episode"}`, async () => {
        await expectReject(c.episode.subarray(0, c.episode.length - 1), size, /^truncated/);
      });
    }
    it("every proper prefix of a small episode", async () => {
      const e = cases.find((x) => x.name === "empty_trace")!.episode;
      for (let n = 0; n < e.length; n++) await expectReject(e.subarray(0, n), 64, /truncated/);
    });
    it("an empty stream", () => expectReject(new Uint8Array(0), 1, /^truncated/));
    it("text", () => expectReject(new TextEncoder().encode("not msgpack at all"), 7, /must be a msgpack map/));
    it("random bytes", async () => {
      let x = 0x9e3779b9;
      for (let k = 0; k < 50; k++) {
        const junk = Uint8Array.from({ length: 300 }, () => {
          x = (Math.imul(x, 1103515245) + 12345) >>> 0;
          return x >>> 24;
        });
        junk[0] = 0x85; // past the first check, into the walk
        await expectReject(junk, 13, /./);
      }
    });
    it("trailing bytes", () => expectReject(Uint8Array.of(...c.episode, 0x00), 4096, /^trailing bytes/));
    it("a reserved byte inside a node", async () => {
      const bad = c.episode.slice();
      const at = Buffer.from(bad).indexOf(Buffer.from("token_ids"));
      bad[at + "token_ids".length] = 0xc1;
      await expectReject(bad, 7, /0xc1/);
    });
    it("a non-canonical int", async () => {
      const bad = Buffer.from(c.episode);
      const key = Buffer.from("\xa6parent", "latin1");
      let at = bad.indexOf(key);
      while (bad[at + 7]! >= 0x80) at = bad.indexOf(key, at + 1); // a fixint parent, written in 2 bytes below
      expect(at).toBeGreaterThan(0);
      const patched = Buffer.concat([bad.subarray(0, at + 7), Uint8Array.of(0xcc, bad[at + 7]!), bad.subarray(at + 8)]);
      await expectReject(patched, 4096, /non-canonical/);
    });
    it("a finished episode without traces, or with a trace map the assembly never writes", async () => {
      await expectReject(enc(m({ id: "e" })), 4096, /no `traces`/);
      const trace = (fields: Record<string, unknown>) => enc(m({ traces: [m(fields as never)] }));
      await expectReject(trace({ version: 1, id: "t", nodes: [] }), 4096, /no `calls`/);
      await expectReject(trace({ version: 1, id: "t", calls: [] }), 4096, /`calls` where the assembly writes `nodes`/);
      await expectReject(trace({ version: 1, nodes: [] }), 4096, /no str `id`/);
      await expectReject(trace({ id: "t", pending: [] }), 4096, /holds `pending`/);
    });
    it("chunks that are not bytes", async () => {
      const src = (async function* () {
        yield "text" as unknown as Uint8Array;
      })();
      await expect(finishedDeltas(src).next()).rejects.toThrow(/Uint8Array/);
    });
  });

  it("a consumer that stops early cancels the input", async () => {
    const c = cases.find((x) => x.name === "large_routing")!;
    let returned = false;
    const src: AsyncIterable<Uint8Array> = {
      [Symbol.asyncIterator]() {
        const it = feed(c.episode, 4096)[Symbol.asyncIterator]();
        return {
          next: () => it.next(),
          async return() {
            returned = true;
            return { done: true, value: undefined };
          },
        };
      },
    };
    for await (const _ of finishedDeltas(src, 512)) break;
    expect(returned).toBe(true);
  });

  describe("trace keys", () => {
    // an assembly whose trace is keyed "t-1" but whose header says id "other" (the relay does not check)
    const asm = new EpisodeAssembly();
    asm.apply(openDelta("t-1", { open: m({ version: 1, id: "other", verifiers: m({}), task: m({}) }) }));
    asm.apply(delta({ nodes: [node(0), node(1)], calls: [m({ n: 1 })] }));
    const reply = encodeReply({ success: true, traces: [{ id: "t-1", nodes: 2, calls: 1 }] });
    const episode = asm.finishReply(reply);

    it("by default a trace is keyed by its header's id; given the reply's ids, by those", async () => {
      const byId = await run(episode, 7);
      expect(parseDelta(byId.deltas[0]!).trace).toBe("other");
      expect(() => rebuild(reply, byId.deltas)).toThrow("served episode is missing trace t-1");
      const given = await run(episode, 7, undefined, { traceIds: ["t-1"] });
      expect(compareBytes(episode, rebuild(reply, given.deltas), "episode")).toBeUndefined();
      await expect(run(episode, 7, undefined, { traceIds: [] })).rejects.toThrow(/1 trace\(s\), 0 trace id\(s\)/);
    });

    it("a reply naming a trace twice: its deltas once, the episode still rebuilt", async () => {
      const twice = encodeReply({
        success: true,
        traces: [
          { id: "t-1", nodes: 2, calls: 1 },
          { id: "t-1", nodes: 2, calls: 1 },
        ],
      });
      const doubled = asm.finishReply(twice);
      const r = await run(doubled, 5, 64, { traceIds: ["t-1", "t-1"] });
      checkShape(r.deltas, ["t-1"]);
      expect(compareBytes(doubled, rebuild(twice, r.deltas), "episode")).toBeUndefined();
    });
  });

  it("a head that holds `traces` itself: the traces stand where the head had them", async () => {
    const c = cases.find((x) => x.name === "multi_trace_links")!;
    const asm = new EpisodeAssembly();
    for (const f of c.frames) asm.apply(f);
    const r = mapEntries(new Reader(c.reply), "reply");
    const summaries = new Reader(r.find((e) => e.key === "traces")!.value);
    const n = summaries.arrayHeader();
    const list = Array.from({ length: n }, () => mapEntries(summaries, "s"));
    const head = mapEntries(new Reader(r.find((e) => e.key === "head")!.value), "head");
    const at = 2;
    const withTraces = [
      ...head.slice(0, at),
      { key: "traces", keySpan: enc("traces"), value: enc(null) },
      ...head.slice(at),
    ];
    const ids = list.map((s) => ({
      id: decodeStrSpan(s.find((e) => e.key === "id")!.value),
      nodes: new Reader(s.find((e) => e.key === "nodes")!.value).int()!,
      calls: new Reader(s.find((e) => e.key === "calls")!.value).int()!,
    }));
    const episode = concatChunks(asm.finish(withTraces, ids));
    const out = await run(episode, 7, 512);
    const fresh = new EpisodeAssembly();
    for (const d of out.deltas) fresh.apply(d);
    expect(compareBytes(episode, concatChunks(fresh.finish(withTraces, ids)), "episode")).toBeUndefined();
  });
});

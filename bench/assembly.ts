// Bench section `assembly`: the project's EpisodeAssembly on every golden case, against a plain
// `decode` (@msgpack/msgpack) of the same frames measured in the same run.
//
// Timed work per iteration (one whole case):
//   assembly: `new EpisodeAssembly()`, every frame applied (`asm.apply(frame)`; for a case with
//             `ack_lost`, the envelope path of tools/conformance/local.ts: a MemoryEpisode's
//             ingest of each frame's producer envelope, retractions included), then
//             `parseReply` + `asm.finish(head, summaries)`
//             (the chunk list is counted, not concatenated; a FinishError is part of the work).
//             The envelopes are built once beforehand: they are the producer's work, not the relay's.
//   decode:   `decode(frame)` for every frame.
// Frames and reply are copied into plain Uint8Arrays first, as a relay in workerd receives them.
// Before timing, the same assembly path is checked once against the case's expected episode
// (or finish_error), so the figures are for work that produces the right bytes.

import { decode } from "@msgpack/msgpack";
import {
  concatChunks,
  EpisodeAssembly,
  encodeEnvelope,
  FinishError,
  MemoryEpisode,
  ProducerCursor,
  parseReply,
} from "../src/protocol/index.js";
import { type GoldenCase, loadCase } from "../tools/conformance/cases.js";
import { checkFinish } from "../tools/conformance/local.js";
import { type BenchOptions, measure, sig } from "./harness.js";

export const name = "assembly";

/** What the project wants to meet (reported as a check column, not asserted). */
export const TARGETS = {
  default: { maxRatio: 2 },
  large_routing: { minMBps: 4000, maxRatio: 1.5 },
} as const;

export interface AssemblyFigures {
  ms: number;
  mb_per_s: number;
  ratio_vs_decode: number;
}

interface Prepared {
  c: GoldenCase;
  frameBytes: number;
  /** Producer envelopes (cases with ack_lost), else null: frames applied bare. */
  envelopes: Uint8Array[] | null;
}

/**
 * A copy in its own ArrayBuffer, as the relay gets a request body in workerd. The case loader
 * hands out node `Buffer` views of the container file; their `subarray` goes through Node's
 * Buffer override (a FastBuffer per call), which costs the span-based parser ~20% on small
 * frames and is not what the relay sees.
 */
function plain(b: Uint8Array): Uint8Array {
  return new Uint8Array(b);
}

function prepare(loaded: GoldenCase): Prepared {
  const c: GoldenCase = { ...loaded, frames: loaded.frames.map(plain), reply: plain(loaded.reply) };
  const frameBytes = c.frames.reduce((n, f) => n + f.length, 0);
  if (c.ack_lost.length === 0) return { c, frameBytes, envelopes: null };
  // Exactly the producer sequence of tools/conformance/local.ts `runCaseLocally` (keep the two
  // in step): envelope from the cursor, then `acknowledge` unless the ack was lost.
  // The cursor never looks at the relay's state, so the envelopes can be built beforehand.
  const producer = new ProducerCursor("conformance");
  const lost = new Set(c.ack_lost);
  const envelopes = c.frames.map((frame, i) => {
    const msg = encodeEnvelope(producer.envelope(frame));
    if (!lost.has(i)) producer.acknowledge();
    return msg;
  });
  return { c, frameBytes, envelopes };
}

/** Assemble the case and finish it: the episode's chunks (throws FinishError like the reference). */
function assemble(p: Prepared): Uint8Array[] {
  let asm = new EpisodeAssembly();
  if (p.envelopes) {
    const episode = new MemoryEpisode();
    for (const m of p.envelopes) episode.ingest(m);
    asm = episode.asm;
  } else {
    for (const f of p.c.frames) asm.apply(f);
  }
  const reply = parseReply(p.c.reply);
  return asm.finish(reply.head ?? [], reply.summaries);
}

function assembleTimed(p: Prepared): number {
  try {
    return assemble(p).length;
  } catch (e) {
    if (e instanceof FinishError) return -1;
    throw e;
  }
}

function decodeTimed(frames: Uint8Array[]): number {
  let n = 0;
  for (const f of frames) if (decode(f) !== undefined) n++;
  return n;
}

function check(name: string, f: AssemblyFigures): { target: string; ok: boolean; why: string } {
  const t = name === "large_routing" ? TARGETS.large_routing : TARGETS.default;
  const misses: string[] = [];
  let target = `ratio ≤ ${t.maxRatio}`;
  if ("minMBps" in t) {
    target = `≥ ${t.minMBps / 1000} GB/s, ${target}`;
    if (f.mb_per_s < t.minMBps) misses.push(`${(f.mb_per_s / 1000).toFixed(2)} GB/s`);
  }
  if (f.ratio_vs_decode > t.maxRatio) misses.push(`ratio ${f.ratio_vs_decode.toFixed(2)}`);
  return { target, ok: misses.length === 0, why: misses.join(", ") };
}

const fmtInt = (n: number) => n.toLocaleString("en-US");
const fmtMs = (ms: number) =>
  ms >= 10 ? ms.toFixed(1) : ms >= 1 ? ms.toFixed(2) : ms >= 0.1 ? ms.toFixed(3) : ms.toFixed(4);
const fmtRate = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));

export async function run(opts: BenchOptions): Promise<Record<string, AssemblyFigures>> {
  let paths = opts.casePaths;
  if (opts.cases) {
    const want = new Set(opts.cases);
    paths = paths.filter((p) => want.has(p.replace(/^.*[\\/]/, "").replace(/\.msgpack$/, "")));
    if (paths.length === 0) throw new Error(`--cases ${opts.cases.join(",")}: no such golden case`);
  }
  const result: Record<string, AssemblyFigures> = {};
  const rows: string[][] = [];
  let met = 0;
  for (const path of paths) {
    const p = prepare(loadCase(path));
    const c = p.c;
    const wrong = checkFinish(c, () => concatChunks(assemble(p)));
    if (wrong) throw new Error(`assembly bench: ${c.name} does not produce the expected result: ${wrong}`);
    opts.log(`assembly: ${c.name} (${c.frames.length} frames, ${fmtInt(p.frameBytes)} bytes)`);
    const [asm, dec] = measure([() => assembleTimed(p), () => decodeTimed(c.frames)], opts);
    const figures: AssemblyFigures = {
      ms: sig(asm!.medianMs),
      mb_per_s: sig(p.frameBytes / 1e6 / (asm!.medianMs / 1e3)),
      ratio_vs_decode: sig(asm!.medianMs / dec!.medianMs),
    };
    result[c.name] = figures;
    const verdict = check(c.name, figures);
    if (verdict.ok) met++;
    rows.push([
      c.name + (p.envelopes ? " *" : ""),
      String(c.frames.length),
      fmtInt(p.frameBytes),
      fmtMs(asm!.medianMs),
      fmtMs(dec!.medianMs),
      fmtRate(figures.mb_per_s),
      fmtRate(p.frameBytes / 1e6 / (dec!.medianMs / 1e3)),
      figures.ratio_vs_decode.toFixed(2),
      verdict.target,
      verdict.ok ? "ok" : `MISS (${verdict.why})`,
      `${asm!.iterations}/${dec!.iterations}`,
    ]);
  }
  opts.table({
    title:
      "assembly: EpisodeAssembly (apply every frame, parseReply, finish) vs @msgpack/msgpack decode of the same frames",
    columns: [
      "case",
      "frames",
      "frame bytes",
      "asm ms",
      "decode ms",
      "asm MB/s",
      "decode MB/s",
      "ratio",
      "target",
      "check",
      "iters asm/dec",
    ],
    rows,
    align: ["l", "r", "r", "r", "r", "r", "r", "r", "l", "l", "r"],
    notes: [
      "ms: median time of one iteration over the whole case; MB/s: total frame bytes (10^6) per second; ratio: asm ms / decode ms",
      "* frames ingested as producer envelopes (ack_lost), as tools/conformance/local.ts does; envelopes built outside the timing",
      `targets met: ${met} of ${rows.length}`,
    ],
  });
  return result;
}

// The JSON view of an archived episode, rendered from its msgpack as it streams in
// (src/protocol/archive/json-view.ts): every golden episode, in chunks of any size, gives the JSON view's
// text (src/protocol/wire/json-view.ts, what the object writes from SQLite); test/workers/archive.test.ts
// checks it against the live episode's JSON answer through R2.
import { describe, expect, it } from "vitest";
import { archivedJson } from "../../src/protocol/archive/json-view.js";
import { ArchiveError } from "../../src/protocol/archive/stream-input.js";
import { jsonText } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { type GoldenCase, goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";

const cases = goldenCasePaths()
  .map(loadCase)
  .filter((c): c is GoldenCase & { episode: Uint8Array } => c.episode !== null)
  .map((c) => ({ ...c, episode: new Uint8Array(c.episode) }));

async function* chunks(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < bytes.length; i += size || bytes.length) yield bytes.slice(i, size ? i + size : bytes.length);
}

async function render(bytes: Uint8Array, size: number): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const p of archivedJson(chunks(bytes, size))) parts.push(p);
  return Buffer.concat(parts).toString("utf8");
}

describe("archived JSON view", () => {
  it("every golden episode, in chunks of 1 (small ones), 7, 4096 bytes or whole: the JSON view's exact text", async () => {
    expect(cases.length).toBeGreaterThan(5);
    for (const c of cases) {
      const want = jsonText(decodeLossless(c.episode));
      // byte by byte only for the small ones (the large ones go the same way, seven bytes at a time)
      for (const size of c.episode.length < 64 * 1024 ? [1, 7, 4096, 0] : [7, 4096, 0])
        expect(await render(c.episode, size), `${c.name} in chunks of ${size}`).toBe(want);
    }
  }, 120_000); // CPU-bound: every golden case four times over; a loaded machine took over 30 s

  it("a truncated archive or trailing bytes fail (never a partial view passed off as whole)", async () => {
    const c = cases[0]!;
    await expect(render(c.episode.subarray(0, c.episode.length - 1), 7)).rejects.toThrow(ArchiveError);
    const longer = new Uint8Array(c.episode.length + 1);
    longer.set(c.episode);
    await expect(render(longer, 0)).rejects.toThrow(/trailing bytes/);
  });

  it("streams: a large episode comes out in many parts, none much over the step", async () => {
    // one trace with 2,000 item-sized nodes of 1 KiB text each
    const { encode } = await import("@msgpack/msgpack");
    const nodes = Array.from({ length: 2000 }, (_, i) => ({
      message: { role: "user", content: `${i}`.padEnd(1024, "x") },
    }));
    const episode = encode({ success: true, traces: [{ id: "t", nodes, calls: [] }] });
    const sizes: number[] = [];
    for await (const p of archivedJson(chunks(episode, 4096))) sizes.push(p.length);
    expect(sizes.length).toBeGreaterThan(20);
    expect(Math.max(...sizes)).toBeLessThan(64 * 1024 + 4096);
    expect(await render(episode, 0)).toBe(jsonText(decodeLossless(episode)));
  });
});

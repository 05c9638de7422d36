// One request for many deltas (no vitest here: test/browser/readme-screenshot.ts runs outside it).
import { ChunkWriter } from "../../src/protocol/wire/writer.js";

/**
 * Bare deltas as one ingest message, a msgpack array (docs/http-api.md: "an array of envelopes";
 * a map that is no envelope is a bare delta): the relay applies them in order in one request and
 * one commit. The tests seed hundreds of rollouts; a request per frame made seeding most of a
 * file's time.
 */
export function batch(deltas: Uint8Array[]): Uint8Array {
  const w = new ChunkWriter();
  w.arrayHeader(deltas.length);
  for (const d of deltas) w.raw(d);
  return w.bytes();
}

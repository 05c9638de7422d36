// The golden case container (`test/fixtures/golden/README.md`), decoded without touching the filesystem
// (so workerd-side tests can use it too).
import { decode } from "@msgpack/msgpack";

export interface GoldenCase {
  name: string;
  description: string;
  frames: Uint8Array[];
  reply: Uint8Array;
  episode: Uint8Array | null;
  finish_error: string | null;
  checkpoints: Array<{ after: number; traces: Uint8Array }>;
  ack_lost: number[];
}

// The container holds only str, int, bin, nil and arrays/maps of them, so a generic decoder
// is exact here; the nested blobs (frames, episode, ...) stay bytes and are never decoded by it.
export function parseCase(bytes: Uint8Array, fallbackName: string): GoldenCase {
  const c = decode(bytes) as GoldenCase;
  if (!c || typeof c !== "object" || !Array.isArray(c.frames) || !(c.reply instanceof Uint8Array)) {
    throw new Error(`${fallbackName}: not a golden case container`);
  }
  c.name ??= fallbackName;
  c.ack_lost ??= [];
  c.checkpoints ??= [];
  return c;
}

// Golden cases (`../shared/golden/README.md` format): one msgpack container per case.
import { decode } from "@msgpack/msgpack";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";

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
export function loadCase(path: string): GoldenCase {
  const c = decode(readFileSync(path)) as GoldenCase;
  if (!c || typeof c !== "object" || !Array.isArray(c.frames) || !(c.reply instanceof Uint8Array)) {
    throw new Error(`${path}: not a golden case container`);
  }
  c.name ??= basename(path, ".msgpack");
  c.ack_lost ??= [];
  c.checkpoints ??= [];
  return c;
}

/** Case files named by the paths: files as given, directories expanded to their `*.msgpack`. */
export function casePaths(paths: string[]): string[] {
  const out: string[] = [];
  for (const p of paths) {
    if (statSync(p).isDirectory()) {
      for (const f of readdirSync(p).sort()) if (f.endsWith(".msgpack")) out.push(join(p, f));
    } else out.push(p);
  }
  return out;
}

/** The golden directory beside the project (`../shared/golden`), overridable by GOLDEN_DIR. */
export function goldenDir(): string {
  return process.env.GOLDEN_DIR ?? join(import.meta.dirname ?? new URL(".", import.meta.url).pathname, "..", "..", "..", "shared", "golden");
}

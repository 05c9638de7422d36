// Values that may outgrow a SQLite row (frames, the reply, node and item bodies, field values and
// previews) are stored in parts of at most PART_BYTES, one row each (SQLite rows stay far below
// 2 MB), and read back in part order.

/** Largest part of a body or frame row. */
export const PART_BYTES = 1 << 20;

/** `data` in parts of at most PART_BYTES (at least one part, empty for empty data). */
export function eachPart(data: Uint8Array, write: (part: number, chunk: ArrayBuffer) => void): void {
  for (let part = 0, at = 0; at < data.length || part === 0; part++, at += PART_BYTES)
    write(part, buffer(data.subarray(at, at + PART_BYTES)));
}

/**
 * A view as a binding. workerd binds any BufferSource (its binding type is `kj::Array<const byte>`,
 * which it copies from the view's bytes), though the type declarations say ArrayBuffer: passing the
 * view saves a copy of every body.
 */
export function buffer(view: Uint8Array): ArrayBuffer {
  return view as unknown as ArrayBuffer;
}

// The UTF-8 of msgpack str values: checked once, as the reader walks a frame (src/protocol/wire/reader.ts),
// and decoded to JS strings only for the few keys and values the relay interprets.

import { WireError } from "./errors.js";

// ignoreBOM: a str that starts with U+FEFF keeps it (the default would strip it, changing the value)
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Throws a WireError (at `at`, the str's format byte) unless `b[from, to)` is valid UTF-8. */
export function checkUtf8(b: Uint8Array, from: number, to: number, at: number): void {
  try {
    utf8.decode(b.subarray(from, to));
  } catch {
    throw new WireError("invalid UTF-8 in str", at);
  }
}

/** The JS string of an already validated str span (header included). */
export function decodeStrSpan(span: Uint8Array): string {
  const t = span[0]!;
  const head = t <= 0xbf ? 1 : t === 0xd9 ? 2 : t === 0xda ? 3 : 5;
  return decodeStrRange(span, head, span.length);
}

/** The JS string of validated UTF-8 bytes `bytes[from, to)`. */
export function decodeStrRange(bytes: Uint8Array, from: number, to: number): string {
  // Short ASCII keys dominate; avoid TextDecoder's call overhead for them.
  if (to - from < 24) {
    let s = "";
    for (let i = from; i < to; i++) {
      const c = bytes[i]!;
      if (c >= 0x80) return utf8.decode(bytes.subarray(from, to));
      s += String.fromCharCode(c);
    }
    return s;
  }
  return utf8.decode(bytes.subarray(from, to));
}

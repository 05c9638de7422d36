import { decodeLossless, firstDifference } from "../../src/protocol/index.js";

/** Undefined when equal; else `<where> <path> expected <x> got <y>` at the first decoded difference. */
export function compareBytes(expected: Uint8Array, got: Uint8Array, where: string): string | undefined {
  if (
    expected.length === got.length &&
    Buffer.compare(
      Buffer.from(expected.buffer, expected.byteOffset, expected.length),
      Buffer.from(got.buffer, got.byteOffset, got.length),
    ) === 0
  ) {
    return undefined;
  }
  let d: ReturnType<typeof firstDifference>;
  try {
    d = firstDifference(decodeLossless(expected), decodeLossless(got));
  } catch (e) {
    return `${where}: output is not valid msgpack: ${(e as Error).message}`;
  }
  if (!d) return `${where}: same values, different bytes (${expected.length} vs ${got.length} bytes)`;
  return `${where} ${d.path} expected ${d.expected} got ${d.got}`;
}

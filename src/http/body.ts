import { concatChunks } from "../wire/writer.js";
import { tooLarge } from "./errors.js";

/** The request body, refused with 413 past `max` bytes (checked before and while reading). */
export async function readBody(request: Request, max: number): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > max) throw tooLarge(Number(declared), max);
  if (!request.body) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      await reader.cancel();
      throw tooLarge(total, max);
    }
    chunks.push(value);
  }
  return concatChunks(chunks, total);
}

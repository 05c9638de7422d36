import { MAX_DEPTH } from "../limits/limits.js";
import { decodeLossless, type LValue } from "../wire/lossless.js";
import { concatChunks } from "../wire/writer.js";
import { RelayError, tooLarge } from "./errors.js";

/** Refuse a request whose declared length is over `max` (413) before anything reads it. */
export function checkDeclaredLength(request: Request, max: number): void {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > max) throw tooLarge(Number(declared), max);
}

/**
 * A request body read to its end, refused with 413 past `max` bytes while reading. The Worker
 * hands the body to the episode's object as a stream (RPC streams it; a byte array would be copied
 * and is limited to 32 MiB with its envelope, less than MAX_MESSAGE_BYTES), and the object reads it here.
 */
export async function readStream(body: ReadableStream<Uint8Array> | null, max: number): Promise<Uint8Array> {
  if (!body) return new Uint8Array(0);
  const reader = body.getReader();
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

/** Whether a request body is JSON by its Content-Type (else it is read as msgpack). */
export function isJsonBody(contentType: string | null): boolean {
  return /^application\/(.+\+)?json\b/i.test(contentType?.trim() ?? "");
}

/**
 * A JSON request body's value; 400 malformed naming `what` when it is not JSON, or when it nests
 * deeper than MAX_DEPTH (checked on the text first: what reads the value afterwards recurses).
 */
export function parseJsonBody(bytes: Uint8Array, what: string): unknown {
  let text: string;
  let value: unknown;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
    value = JSON.parse(text);
  } catch (e) {
    throw new RelayError("malformed", `${what} is not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  const at = jsonTooDeep(text);
  if (at >= 0) throw new RelayError("malformed", `${what}: nesting deeper than ${MAX_DEPTH} (at character ${at})`);
  return value;
}

/**
 * Where a JSON text first puts a value inside more than `max` arrays or objects (as the msgpack
 * Reader counts: an empty one there holds none), or -1: one pass over its characters, brackets
 * inside strings skipped. Run on text JSON.parse accepted.
 */
export function jsonTooDeep(text: string, max = MAX_DEPTH): number {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // a string: to its closing quote, escapes skipped
      for (i++; text.charCodeAt(i) !== 0x22; i++) if (text.charCodeAt(i) === 0x5c) i++;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max && !closesNext(text, i + 1)) return i;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return -1;
}

/** Whether the next character past white space at `from` closes an array or object. */
function closesNext(text: string, from: number): boolean {
  let i = from;
  while (/[ \t\n\r]/.test(text[i] ?? "")) i++;
  return text[i] === "]" || text[i] === "}";
}

/**
 * A msgpack request body as one value (every distinction kept); 400 malformed naming `what` when it is not one
 * document.
 */
export function decodeBody(bytes: Uint8Array, what: string): LValue {
  try {
    return decodeLossless(bytes);
  } catch (e) {
    throw new RelayError(
      "malformed",
      `${what}: not one msgpack document (${e instanceof Error ? e.message : String(e)})`,
    );
  }
}

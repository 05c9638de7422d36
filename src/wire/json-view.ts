// The JSON view of msgpack data (`Accept: application/json`). JSON cannot hold every msgpack
// distinction, so the mapping is explicit and documented in README:
// - ints within ±2^53 are numbers, larger ones are decimal strings;
// - floats are numbers, except NaN / Infinity / -Infinity, which are those strings;
// - bin is `{"$bin": "<base64>"}`; an ndarray map keeps its keys with `data` as base64;
// - map keys become strings (int keys in decimal), order kept.
import { F64, type LMap, type LValue } from "./lossless.js";

export type Json = null | boolean | number | string | JsonArray | JsonObject;
// interfaces, not an inline recursive type: the runtime's RPC types (Rpc.Serializable) can then
// check an answer holding JSON without recursing past TypeScript's instantiation depth
export interface JsonArray extends Array<Json> {}
export interface JsonObject {
  [k: string]: Json;
}

export function toJson(v: LValue): Json {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return v.toString();
  if (v instanceof F64) return Number.isFinite(v.value) ? v.value : String(v.value);
  if (v instanceof Uint8Array) return { $bin: base64(v) };
  if (Array.isArray(v)) return v.map(toJson);
  const nd = v.get("__nd__") === true && v.get("data") instanceof Uint8Array;
  const out: { [k: string]: Json } = {};
  for (const [k, x] of (v as LMap).entries) {
    const key = typeof k === "string" ? k : String(k instanceof F64 ? k.value : k);
    out[key] = nd && key === "data" ? base64(x as Uint8Array) : toJson(x);
  }
  return out;
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

export function base64(bytes: Uint8Array): string {
  let out = "";
  let i = 0;
  const parts: string[] = [];
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]! + ALPHABET[(n >> 6) & 63]! + ALPHABET[n & 63]!;
    if (out.length >= 8192) {
      parts.push(out);
      out = "";
    }
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]! + "==";
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]! + ALPHABET[(n >> 6) & 63]! + "=";
  }
  parts.push(out);
  return parts.join("");
}

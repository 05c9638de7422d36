// The JSON view of msgpack data (`Accept: application/json`). JSON cannot hold every msgpack
// distinction, so the mapping is explicit:
// - ints within ±2^53 are numbers, larger ones are decimal strings;
// - floats are numbers, except NaN / Infinity / -Infinity, which are those strings;
// - bin is `{"$bin": "<base64>"}`; an ndarray map keeps its keys with `data` as base64;
// - map keys become strings (int keys in decimal), order kept; every key is kept, `__proto__`
//   included (an own property, not the object's prototype).
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
    const value = nd && key === "data" ? base64(x as Uint8Array) : toJson(x);
    // `out.__proto__ = v` would set the prototype and drop the key: define it as an own property
    if (key === "__proto__")
      Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
    else out[key] = value;
  }
  return out;
}

/**
 * The JSON view as text, written value by value: the same mapping as `toJson`, with every map's
 * keys in their msgpack order (a JS object would put integer-like keys first) and none dropped.
 * The relay writes its JSON answers and archive copies with this.
 */
export function jsonText(v: LValue): string {
  const parts: string[] = [];
  writeJson(v, parts);
  return parts.join("");
}

function writeJson(v: LValue, out: string[]): void {
  if (
    v === null ||
    typeof v === "boolean" ||
    typeof v === "string" ||
    typeof v === "number" ||
    typeof v === "bigint" ||
    v instanceof F64 ||
    v instanceof Uint8Array
  ) {
    out.push(JSON.stringify(toJson(v)));
    return;
  }
  if (Array.isArray(v)) {
    out.push("[");
    v.forEach((x, i) => {
      if (i > 0) out.push(",");
      writeJson(x, out);
    });
    out.push("]");
    return;
  }
  const nd = v.get("__nd__") === true && v.get("data") instanceof Uint8Array;
  out.push("{");
  v.entries.forEach(([k, x], i) => {
    const key = typeof k === "string" ? k : String(k instanceof F64 ? k.value : k);
    out.push(i > 0 ? "," : "", JSON.stringify(key), ":");
    if (nd && key === "data") out.push(JSON.stringify(base64(x as Uint8Array)));
    else writeJson(x, out);
  });
  out.push("}");
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

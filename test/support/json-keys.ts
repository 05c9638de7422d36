// Every map key of a document, in document order (depth first), from the msgpack value and from
// JSON text, so a JSON view can be checked to keep every key of every map, in order. The JSON side
// is a small scanner of its own (JSON.parse would drop a `__proto__` key's order and put
// integer-like keys first). Plain code: used in Node and inside workerd.
import { F64, LMap, type LValue } from "../../src/protocol/wire/lossless.js";

/** The keys of every map in `v`, as the JSON view names them, depth first (bin is `{"$bin": …}`, but not an ndarray's data). */
export function mapKeysInOrder(v: LValue, out: string[] = []): string[] {
  if (v instanceof Uint8Array) out.push("$bin");
  else if (Array.isArray(v)) for (const x of v) mapKeysInOrder(x, out);
  else if (v instanceof LMap) {
    const nd = v.get("__nd__") === true && v.get("data") instanceof Uint8Array;
    for (const [k, x] of v.entries) {
      const key = typeof k === "string" ? k : String(k instanceof F64 ? k.value : k);
      out.push(key);
      if (!(nd && key === "data")) mapKeysInOrder(x, out);
    }
  }
  return out;
}

/** The keys of every object in JSON `text`, depth first: each string that a `:` follows. */
export function jsonKeysInOrder(text: string): string[] {
  const keys: string[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '"') continue;
    let j = i + 1;
    while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
    let k = j + 1;
    while (text[k] === " " || text[k] === "\n") k++;
    if (text[k] === ":") keys.push(JSON.parse(text.slice(i, j + 1)) as string);
    i = j;
  }
  return keys;
}

// The JSON view (src/protocol/wire/json-view.ts) keeps every map key, in its msgpack order: the golden
// odd_values episode key for key, and a crafted map whose keys a plain JS object would drop
// (`__proto__`) or reorder (integer-like strings).
import { describe, expect, it } from "vitest";
import { jsonText, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless, encodeLossless, LMap } from "../../src/protocol/wire/lossless.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { jsonKeysInOrder, mapKeysInOrder } from "../support/json-keys.js";

const crafted = new LMap([
  ["__proto__", new LMap([["polluted", true]])],
  ["151655", 1],
  ["constructor", "c"],
  ["2", new LMap([["__proto__", null]])],
]);

describe("the JSON view keeps every key", () => {
  it("odd_values: every map key of the episode, in order", () => {
    const episode = decodeLossless(loadCase(fixturePath("odd_values")).episode!);
    const keys = mapKeysInOrder(episode);
    expect(keys.length).toBeGreaterThan(100);
    expect(jsonKeysInOrder(jsonText(episode))).toEqual(keys);
  });

  it("a crafted map: __proto__ is a key like any other, integer-like keys keep their place", () => {
    const text = jsonText(decodeLossless(encodeLossless(crafted)));
    expect(text).toBe('{"__proto__":{"polluted":true},"151655":1,"constructor":"c","2":{"__proto__":null}}');
    const parsed = JSON.parse(text) as Record<string, unknown>;
    expect(Object.hasOwn(parsed, "__proto__")).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("toJson (the clients' objects) keeps __proto__ as an own key, and sets no prototype", () => {
    const o = toJson(crafted) as Record<string, unknown>;
    expect(Object.keys(o).sort()).toEqual(["151655", "2", "__proto__", "constructor"]);
    expect(Object.getPrototypeOf(o)).toBe(Object.prototype);
    expect(JSON.stringify(o)).toContain('"__proto__":{"polluted":true}');
  });
});

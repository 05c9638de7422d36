// One depth limit for every body the relay parses (issue 39): JSON and msgpack bodies nested past
// MAX_DEPTH are refused 400 malformed naming it, counted alike (a value inside more than MAX_DEPTH
// arrays or maps), before anything recurses over them.
import { describe, expect, it } from "vitest";
import { decodeBody, jsonTooDeep, parseJsonBody } from "../../src/protocol/http/body.js";
import { RelayError } from "../../src/protocol/http/errors.js";
import { MAX_DEPTH } from "../../src/protocol/limits/limits.js";
import { encodeLossless, fromJson } from "../../src/protocol/wire/lossless.js";

const utf8 = (s: string) => new TextEncoder().encode(s);
/** `n` arrays around `leaf` as JSON text. */
const jsonNest = (n: number, leaf = "1") => `${"[".repeat(n)}${leaf}${"]".repeat(n)}`;
/** `n` arrays (fixarray of one) around nil, as msgpack. */
const msgpackNest = (n: number) => new Uint8Array([...new Array<number>(n).fill(0x91), 0xc0]);

function refusal(f: () => unknown): RelayError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(RelayError);
    return e as RelayError;
  }
  throw new Error("not refused");
}

describe("the depth limit", () => {
  it(`JSON and msgpack agree: a value inside ${MAX_DEPTH} arrays is read, inside ${MAX_DEPTH + 1} refused`, () => {
    const json = parseJsonBody(utf8(jsonNest(MAX_DEPTH)), "the body");
    expect(encodeLossless(fromJson(json))).toEqual(encodeLossless(decodeBody(encodeLossless(fromJson(json)), "x")));
    expect(decodeBody(msgpackNest(MAX_DEPTH), "the body")).toBeDefined();
    const j = refusal(() => parseJsonBody(utf8(jsonNest(MAX_DEPTH + 1)), "the rules"));
    expect(j.code).toBe("malformed");
    expect(j.message).toBe(`the rules: nesting deeper than ${MAX_DEPTH} (at character ${MAX_DEPTH})`);
    const m = refusal(() => decodeBody(msgpackNest(MAX_DEPTH + 1), "annotations"));
    expect(m.code).toBe("malformed");
    expect(m.message).toContain(`nesting deeper than ${MAX_DEPTH}`);
    // an empty array or object there holds no value: both readers take it
    expect(jsonTooDeep(`${"[".repeat(MAX_DEPTH)}[ ]${"]".repeat(MAX_DEPTH)}`)).toBe(-1);
    expect(jsonTooDeep(`${"[".repeat(MAX_DEPTH)}{}${"]".repeat(MAX_DEPTH)}`)).toBe(-1);
    expect(decodeBody(new Uint8Array([...new Array<number>(MAX_DEPTH).fill(0x91), 0x90]), "x")).toBeDefined();
  });

  it("the issue's inputs: 200k, 30k and 8k levels of JSON, and 200k of msgpack, refused without recursing", () => {
    for (const n of [200_000, 30_000, 8_000]) {
      const text = `{"rules":[{"id":"a","match":{"pattern":"x","role":${jsonNest(n, '"r"')}}}]}`;
      expect(refusal(() => parseJsonBody(utf8(text), "the rules")).message).toMatch(/nesting deeper than 200/);
      const objects = `${'{"a":'.repeat(n)}1${"}".repeat(n)}`;
      expect(refusal(() => parseJsonBody(utf8(objects), "the annotations")).code).toBe("malformed");
    }
    expect(refusal(() => decodeBody(msgpackNest(200_000), "annotations")).code).toBe("malformed");
  });

  it("brackets inside strings, escaped quotes and backslashes do not count", () => {
    const deepText = JSON.stringify({ s: `${"[".repeat(5000)}\\"{{{`, t: ["\\", '"]]]'] });
    expect(jsonTooDeep(deepText)).toBe(-1);
    expect(parseJsonBody(utf8(deepText), "x")).toEqual(JSON.parse(deepText));
    // nesting resumes counting after a string that ends in an escaped backslash
    expect(jsonTooDeep(`["\\\\", ${jsonNest(3)}]`, 3)).toBe(9);
    expect(jsonTooDeep(`["\\\\", ${jsonNest(2)}]`, 3)).toBe(-1);
  });

  it("what is not JSON is refused as before (before any depth is counted)", () => {
    const e = refusal(() => parseJsonBody(utf8("[[[1]"), "the dispatch identity"));
    expect(e.code).toBe("malformed");
    expect(e.message).toMatch(/^the dispatch identity is not JSON/);
  });
});

// Values stored in parts of at most PART_BYTES (src/protocol/episode/parts.ts): at least one part, the
// parts in order, each a view of the value (no copy).
import { describe, expect, it } from "vitest";
import { eachPart, PART_BYTES } from "../../src/protocol/episode/parts.js";

function parts(data: Uint8Array): Array<[number, Uint8Array]> {
  const out: Array<[number, Uint8Array]> = [];
  eachPart(data, (part, chunk) => {
    out.push([part, chunk as unknown as Uint8Array]); // typed ArrayBuffer, a view in fact (parts.ts `buffer`)
  });
  return out;
}

describe("eachPart", () => {
  it("empty data: one empty part", () => {
    expect(parts(new Uint8Array(0)).map(([p, c]) => [p, c.length])).toEqual([[0, 0]]);
  });

  it("up to PART_BYTES: one part; beyond: parts of PART_BYTES, the rest last", () => {
    expect(parts(new Uint8Array(PART_BYTES)).map(([p, c]) => [p, c.length])).toEqual([[0, PART_BYTES]]);
    expect(parts(new Uint8Array(2 * PART_BYTES + 3)).map(([p, c]) => [p, c.length])).toEqual([
      [0, PART_BYTES],
      [1, PART_BYTES],
      [2, 3],
    ]);
  });

  it("each part is a view of the data, in order", () => {
    const data = new Uint8Array(PART_BYTES + 2);
    data[0] = 1;
    data[PART_BYTES] = 2;
    data[PART_BYTES + 1] = 3;
    const [[, first], [, second]] = parts(data) as [[number, Uint8Array], [number, Uint8Array]];
    expect(first.buffer).toBe(data.buffer);
    expect([first[0], second[0], second[1]]).toEqual([1, 2, 3]);
  });
});

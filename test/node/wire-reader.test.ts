// The raw-span msgpack reader (src/protocol/wire/reader.ts) and the lossless value model built on it
// (src/protocol/wire/lossless.ts): every format family, the canonical (minimal-format) checks, the
// refusals (float32, ext, 0xc1, bad UTF-8, nesting), truncation at every byte, trailing bytes,
// and byte-exact round trips of the golden fixtures. Expected values are written out by hand or
// come from @msgpack/msgpack (an independent decoder), never from the module under test.
import { readFileSync } from "node:fs";
import { decode as refDecode, encode as refEncode } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import { MAX_DEPTH } from "../../src/protocol/limits/limits.js";
import { WireError } from "../../src/protocol/wire/errors.js";
import { type Kind, kindOf } from "../../src/protocol/wire/format.js";
import { decodeLossless, encodeLossless, F64, LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { binItems, Reader } from "../../src/protocol/wire/reader.js";
import { decodeStrRange, decodeStrSpan } from "../../src/protocol/wire/utf8.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";

/** Bytes from hex pairs ("cc 80") and/or byte arrays, concatenated. */
function h(...parts: Array<string | ArrayLike<number>>): Uint8Array {
  const out: number[] = [];
  for (const p of parts) {
    if (typeof p === "string") {
      for (const x of p.split(/\s+/).filter(Boolean)) out.push(Number.parseInt(x, 16));
    } else for (let i = 0; i < p.length; i++) out.push(p[i]!);
  }
  return Uint8Array.from(out);
}

const fill = (n: number, byte: number): Uint8Array => new Uint8Array(n).fill(byte);
const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");

/** The WireError `fn` throws (fails the test when it throws nothing or something else). */
function wireError(fn: () => unknown): WireError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(WireError);
    return e as WireError;
  }
  throw new Error("expected a WireError, nothing was thrown");
}

/** Read one whole document with the span reader: the span must cover every byte. */
function spanAll(bytes: Uint8Array): Uint8Array {
  const r = new Reader(bytes);
  const s = r.span();
  expect(r.atEnd()).toBe(true);
  expect(s.length).toBe(bytes.length);
  return s;
}

// ---- valid values of every family ----

const MAP16_BODY = Array.from({ length: 16 }, (_, i) => [i, 0xc0]).flat(); // {0: nil, ..., 15: nil}
const map16Value = new LMap(Array.from({ length: 16 }, (_, i): [LValue, LValue] => [i, null]));
const map32Body = new Uint8Array(0x10000 * 2);
for (let i = 0; i < 0x10000; i++) {
  map32Body[2 * i] = 0xc3; // true
  map32Body[2 * i + 1] = 0xc2; // false
}

const VALID: Array<[label: string, bytes: Uint8Array, kind: Kind, value: LValue]> = [
  ["positive fixint 0", h("00"), "int", 0],
  ["positive fixint 127", h("7f"), "int", 127],
  ["negative fixint -1", h("ff"), "int", -1],
  ["negative fixint -32", h("e0"), "int", -32],
  ["uint8 128", h("cc 80"), "int", 128],
  ["uint8 255", h("cc ff"), "int", 255],
  ["uint16 256", h("cd 01 00"), "int", 256],
  ["uint16 65535", h("cd ff ff"), "int", 65535],
  ["uint32 65536", h("ce 00 01 00 00"), "int", 65536],
  ["uint32 2^32-1", h("ce ff ff ff ff"), "int", 4294967295],
  ["uint64 2^32", h("cf 00 00 00 01 00 00 00 00"), "int", 4294967296],
  ["uint64 2^53-1 (still a number)", h("cf 00 1f ff ff ff ff ff ff"), "int", 9007199254740991],
  ["uint64 2^53 (a bigint)", h("cf 00 20 00 00 00 00 00 00"), "int", 9007199254740992n],
  ["uint64 2^53+1 stays exact", h("cf 00 20 00 00 00 00 00 01"), "int", 9007199254740993n],
  ["uint64 2^64-1", h("cf ff ff ff ff ff ff ff ff"), "int", 18446744073709551615n],
  ["int8 -33", h("d0 df"), "int", -33],
  ["int8 -128", h("d0 80"), "int", -128],
  ["int16 -129", h("d1 ff 7f"), "int", -129],
  ["int16 -32768", h("d1 80 00"), "int", -32768],
  ["int32 -32769", h("d2 ff ff 7f ff"), "int", -32769],
  ["int32 -2^31", h("d2 80 00 00 00"), "int", -2147483648],
  ["int64 -2^31-1", h("d3 ff ff ff ff 7f ff ff ff"), "int", -2147483649],
  ["int64 -(2^53-1) (still a number)", h("d3 ff e0 00 00 00 00 00 01"), "int", -9007199254740991],
  ["int64 -(2^53+1) stays exact", h("d3 ff df ff ff ff ff ff ff"), "int", -9007199254740993n],
  ["int64 -2^63", h("d3 80 00 00 00 00 00 00 00"), "int", -9223372036854775808n],
  ["float64 1.0 stays a float", h("cb 3f f0 00 00 00 00 00 00"), "float", new F64(1)],
  ["float64 -0.0", h("cb 80 00 00 00 00 00 00 00"), "float", new F64(-0)],
  ["float64 0.1", h("cb 3f b9 99 99 99 99 99 9a"), "float", new F64(0.1)],
  ["float64 NaN", h("cb 7f f8 00 00 00 00 00 00"), "float", new F64(Number.NaN)],
  ["float64 -Infinity", h("cb ff f0 00 00 00 00 00 00"), "float", new F64(Number.NEGATIVE_INFINITY)],
  ["float64 5e-324", h("cb 00 00 00 00 00 00 00 01"), "float", new F64(5e-324)],
  ["nil", h("c0"), "nil", null],
  ["false", h("c2"), "bool", false],
  ["true", h("c3"), "bool", true],
  ["fixstr empty", h("a0"), "str", ""],
  ["fixstr abc", h("a3 61 62 63"), "str", "abc"],
  ["fixstr 31 bytes", h("bf", fill(31, 0x61)), "str", "a".repeat(31)],
  ["fixstr 2-byte UTF-8", h("a2 c3 a9"), "str", "é"],
  ["fixstr 4-byte UTF-8", h("a4 f0 9f 98 80"), "str", "😀"],
  ["fixstr NUL", h("a1 00"), "str", "\u0000"],
  ["str8 32 bytes", h("d9 20", fill(32, 0x62)), "str", "b".repeat(32)],
  ["str8 255 bytes", h("d9 ff", fill(255, 0x62)), "str", "b".repeat(255)],
  ["str16 256 bytes", h("da 01 00", fill(256, 0x63)), "str", "c".repeat(256)],
  ["str32 65536 bytes", h("db 00 01 00 00", fill(0x10000, 0x64)), "str", "d".repeat(0x10000)],
  ["bin8 empty", h("c4 00"), "bin", new Uint8Array(0)],
  ["bin8 3 bytes", h("c4 03 00 ff 80"), "bin", h("00 ff 80")],
  ["bin8 255 bytes", h("c4 ff", fill(255, 7)), "bin", fill(255, 7)],
  ["bin16 256 bytes", h("c5 01 00", fill(256, 8)), "bin", fill(256, 8)],
  ["bin32 65536 bytes", h("c6 00 01 00 00", fill(0x10000, 9)), "bin", fill(0x10000, 9)],
  ["bin with bytes that are not UTF-8", h("c4 02 c3 28"), "bin", h("c3 28")],
  ["fixarray empty", h("90"), "array", []],
  ["fixarray mixed", h("93 01 a1 78 c0"), "array", [1, "x", null]],
  ["fixarray 15", h("9f", fill(15, 0xc3)), "array", new Array(15).fill(true)],
  ["array16 16", h("dc 00 10", fill(16, 0x05)), "array", new Array(16).fill(5)],
  ["array32 65536", h("dd 00 01 00 00", fill(0x10000, 0xc2)), "array", new Array(0x10000).fill(false)],
  ["fixmap empty", h("80"), "map", new LMap()],
  [
    "fixmap keeps key order and key types (int 1 vs str '1')",
    h("83 a1 62 01 01 a1 78 a1 31 c0"),
    "map",
    new LMap([
      ["b", 1],
      [1, "x"],
      ["1", null],
    ]),
  ],
  ["map16 16", h("de 00 10", MAP16_BODY), "map", map16Value],
  [
    "map32 65536 (duplicate keys kept as entries)",
    h("df 00 01 00 00", map32Body),
    "map",
    new LMap(Array.from({ length: 0x10000 }, (): [LValue, LValue] => [true, false])),
  ],
  [
    "nested",
    h("82 a1 61 91 81 01 cb 3f f0 00 00 00 00 00 00 a1 62 c4 01 2a"),
    "map",
    new LMap([
      ["a", [new LMap([[1, new F64(1)]])]],
      ["b", h("2a")],
    ]),
  ],
];

describe("wire reader: every format family", () => {
  it.each(VALID)("%s", (_label, bytes, kind, value) => {
    expect(kindOf(bytes[0]!)).toBe(kind);
    spanAll(bytes);
    expect(decodeLossless(bytes)).toStrictEqual(value);
  });

  it.each(VALID)("%s: re-encodes to the same bytes", (_label, bytes, _kind, value) => {
    expect(hex(encodeLossless(value))).toBe(hex(bytes));
  });

  it("a float64 holding an integral value is not an int, and an int is not a float", () => {
    expect(decodeLossless(h("cb 3f f0 00 00 00 00 00 00"))).not.toBe(1);
    expect(decodeLossless(h("01"))).toBe(1);
    expect(hex(encodeLossless(new F64(2)))).toBe("cb4000000000000000");
    expect(hex(encodeLossless(2))).toBe("02");
  });

  it("str and bin of the same bytes stay apart", () => {
    expect(decodeLossless(h("a2 68 69"))).toBe("hi");
    expect(decodeLossless(h("c4 02 68 69"))).toStrictEqual(h("68 69"));
  });

  // Independent oracle: @msgpack/msgpack writes minimal formats too, so the lossless model must
  // read its bytes back to the same ints and write the very same bytes.
  const INT_BOUNDARIES = [
    0, 1, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296, 9007199254740991, -1, -32, -33, -128, -129, -32768,
    -32769, -2147483648, -2147483649, -9007199254740991,
  ];
  it.each(INT_BOUNDARIES)("int %d agrees with @msgpack/msgpack both ways", (v) => {
    const ref = refEncode(v);
    expect(decodeLossless(ref)).toBe(v);
    expect(hex(encodeLossless(v))).toBe(hex(ref));
  });

  it.each([9007199254740993n, 18446744073709551615n, -9007199254740993n, -9223372036854775808n])(
    "bigint %s agrees with @msgpack/msgpack",
    (v) => {
      const ref = refEncode(v, { useBigInt64: true });
      expect(decodeLossless(ref)).toBe(v);
      expect(hex(encodeLossless(v))).toBe(hex(ref));
    },
  );

  it.each([0, 1, 31, 32, 255, 256, 65535, 65536])("str of %d bytes agrees with @msgpack/msgpack both ways", (n) => {
    const s = "é".repeat(n >> 1) + "z".repeat(n & 1);
    const ref = refEncode(s);
    expect(decodeLossless(ref)).toBe(s);
    expect(hex(encodeLossless(s))).toBe(hex(ref));
  });

  it("kindOf classifies all 256 leading bytes", () => {
    const ranges: Array<[number, number, Kind]> = [
      [0x00, 0x7f, "int"],
      [0x80, 0x8f, "map"],
      [0x90, 0x9f, "array"],
      [0xa0, 0xbf, "str"],
      [0xc0, 0xc0, "nil"],
      [0xc1, 0xc1, "reserved"],
      [0xc2, 0xc3, "bool"],
      [0xc4, 0xc6, "bin"],
      [0xc7, 0xc9, "ext"],
      [0xca, 0xcb, "float"],
      [0xcc, 0xd3, "int"],
      [0xd4, 0xd8, "ext"],
      [0xd9, 0xdb, "str"],
      [0xdc, 0xdd, "array"],
      [0xde, 0xdf, "map"],
      [0xe0, 0xff, "int"],
    ];
    let covered = 0;
    for (const [from, to, kind] of ranges) {
      for (let t = from; t <= to; t++, covered++) expect([t, kindOf(t)]).toStrictEqual([t, kind]);
    }
    expect(covered).toBe(256);
  });
});

// ---- refusals ----

const NON_CANONICAL: Array<[label: string, bytes: Uint8Array, format: string]> = [
  ["uint8 holding 127", h("cc 7f"), "uint8"],
  ["uint8 holding 0", h("cc 00"), "uint8"],
  ["uint16 holding 255", h("cd 00 ff"), "uint16"],
  ["uint32 holding 65535", h("ce 00 00 ff ff"), "uint32"],
  ["uint64 holding 2^32-1", h("cf 00 00 00 00 ff ff ff ff"), "uint64"],
  ["int8 holding -32", h("d0 e0"), "int8"],
  ["int8 holding +5", h("d0 05"), "int8"],
  ["int16 holding -128", h("d1 ff 80"), "int16"],
  ["int16 holding +200", h("d1 00 c8"), "int16"],
  ["int32 holding -32768", h("d2 ff ff 80 00"), "int32"],
  ["int64 holding -2^31", h("d3 ff ff ff ff 80 00 00 00"), "int64"],
  ["int64 holding +1", h("d3 00 00 00 00 00 00 00 01"), "int64"],
  ["int64 holding +2^40 (uint64 is the canonical format)", h("d3 00 00 01 00 00 00 00 00"), "int64"],
  ["str8 of 31 bytes", h("d9 1f", fill(31, 0x61)), "str8"],
  ["str16 of 255 bytes", h("da 00 ff", fill(255, 0x61)), "str16"],
  ["str32 of 65535 bytes", h("db 00 00 ff ff", fill(0xffff, 0x61)), "str32"],
  ["bin16 of 255 bytes", h("c5 00 ff", fill(255, 1)), "bin16"],
  ["bin32 of 65535 bytes", h("c6 00 00 ff ff", fill(0xffff, 1)), "bin32"],
  ["array16 of 15", h("dc 00 0f", fill(15, 0xc0)), "array16"],
  ["array32 of 65535", h("dd 00 00 ff ff", fill(0xffff, 0xc0)), "array32"],
  ["map16 of 15", h("de 00 0f", fill(30, 0xc0)), "map16"],
  ["map32 of 65535", h("df 00 00 ff ff", fill(0x1fffe, 0xc0)), "map32"],
  ["non-minimal value nested in an array", h("92 01 cc 05"), "uint8"],
];

describe("wire reader: refusals", () => {
  it.each(NON_CANONICAL)("non-canonical %s", (_label, bytes, format) => {
    const e = wireError(() => new Reader(bytes).span());
    expect(e.message).toMatch(
      new RegExp(`^non-canonical msgpack: ${format} used for a value that fits a smaller format`),
    );
    expect(wireError(() => decodeLossless(bytes)).message).toContain(`${format} used`);
  });

  it("the non-canonical error names where the value starts", () => {
    expect(wireError(() => new Reader(h("93 01 02 cd 00 10")).span()).offset).toBe(3);
  });

  it.each([
    ["reserved byte", h("c1"), /^reserved byte 0xc1 \(at byte 0\)$/],
    ["float32", h("ca 3f 80 00 00"), /^float32 is not allowed/],
    ["fixext1", h("d4 01 00"), /^ext type 0xd4 is not allowed/],
    ["fixext2", h("d5 01 00 00"), /^ext type 0xd5 is not allowed/],
    ["fixext4", h("d6 ff 00 00 00 00"), /^ext type 0xd6 is not allowed/],
    ["fixext8", h("d7 01", fill(8, 0)), /^ext type 0xd7 is not allowed/],
    ["fixext16", h("d8 01", fill(16, 0)), /^ext type 0xd8 is not allowed/],
    ["ext8", h("c7 01 05 00"), /^ext type 0xc7 is not allowed/],
    ["ext16", h("c8 00 01 05 00"), /^ext type 0xc8 is not allowed/],
    ["ext32", h("c9 00 00 00 01 05 00"), /^ext type 0xc9 is not allowed/],
    ["reserved byte as a map value", h("81 a1 6b c1"), /^reserved byte 0xc1 \(at byte 3\)$/],
  ])("%s is refused", (_label, bytes, message) => {
    expect(wireError(() => new Reader(bytes).span()).message).toMatch(message);
    expect(wireError(() => decodeLossless(bytes)).message).toMatch(message);
  });

  it.each([
    ["lone continuation byte", h("a1 80")],
    ["truncated 2-byte sequence", h("a2 c3 28")],
    ["overlong NUL", h("a2 c0 80")],
    ["UTF-16 surrogate", h("a3 ed a0 80")],
    ["above U+10FFFF", h("a4 f4 90 80 80")],
    ["0xff", h("a1 ff")],
    ["str8 with a bad last byte", h("d9 20", fill(31, 0x61), "80")],
  ])("invalid UTF-8 in a str is refused: %s", (_label, bytes) => {
    expect(wireError(() => new Reader(bytes).span()).message).toMatch(/^invalid UTF-8 in str/);
    expect(() => decodeLossless(bytes)).toThrow(/invalid UTF-8 in str/);
    // a trusted reader (bytes validated before) skips the check
    expect(new Reader(bytes, 0, bytes.length, true).span().length).toBe(bytes.length);
  });

  it("the UTF-8 error names the str's header", () => {
    expect(wireError(() => new Reader(h("92 01 a1 80")).span()).offset).toBe(2);
  });

  it(`nesting: ${MAX_DEPTH} levels are read, one more is refused`, () => {
    const nest = (k: number) => h(fill(k, 0x91), "c0");
    let v = decodeLossless(nest(MAX_DEPTH));
    for (let i = 0; i < MAX_DEPTH; i++) {
      expect(Array.isArray(v)).toBe(true);
      v = (v as LValue[])[0]!;
    }
    expect(v).toBeNull();
    expect(wireError(() => new Reader(nest(MAX_DEPTH + 1)).span()).message).toMatch(/^nesting deeper than 200/);
    expect(wireError(() => decodeLossless(nest(MAX_DEPTH + 1))).message).toMatch(/^nesting deeper than 200/);
    // maps count too
    const mapNest = h(Array.from({ length: MAX_DEPTH + 1 }, () => [0x81, 0x00]).flat(), "c0");
    expect(wireError(() => new Reader(mapNest).span()).message).toMatch(/^nesting deeper/);
  });

  it("trailing bytes after a document are refused by decodeLossless, and left unread by span()", () => {
    const bytes = h("01 02");
    const e = wireError(() => decodeLossless(bytes));
    expect(e.message).toMatch(/^trailing bytes after the msgpack value/);
    expect(e.offset).toBe(1);
    const r = new Reader(bytes);
    expect(Array.from(r.span())).toStrictEqual([1]);
    expect(r.atEnd()).toBe(false);
    expect(r.pos).toBe(1);
    expect(() => decodeLossless(h("90 c0"))).toThrow(/trailing bytes/);
    expect(() => decodeLossless(h("c4 01 aa bb"))).toThrow(/trailing bytes/);
  });

  it("an empty buffer is refused", () => {
    expect(wireError(() => new Reader(new Uint8Array(0)).span()).message).toMatch(/^truncated: value expected/);
    expect(() => decodeLossless(new Uint8Array(0))).toThrow(WireError);
  });
});

// ---- truncation ----

// One document with every family the wire allows (and the canonical boundaries of each).
const SAMPLE = h(
  "8f", // fixmap of 15
  "a1 61 00", // a: 0
  "a1 62 93 7f ff e0", // b: [127, -1, -32]
  "a1 63 94 cc 80 cd 01 00 ce 00 01 00 00 cf 00 20 00 00 00 00 00 01", // c: [uint8, uint16, uint32, uint64 2^53+1]
  "a1 64 94 d0 df d1 ff 7f d2 ff ff 7f ff d3 80 00 00 00 00 00 00 00", // d: [int8, int16, int32, int64]
  "a1 65 cb 3f f0 00 00 00 00 00 00", // e: 1.0
  "a1 66 93 c0 c2 c3", // f: [nil, false, true]
  "a1 67 a4 f0 9f 98 80", // g: "😀"
  "a1 68 d9 20",
  fill(32, 0x68), // h: str8
  "a1 69 da 01 00",
  fill(256, 0x69), // i: str16
  "a1 6a c4 02 00 01", // j: bin8
  "a1 6b c5 01 00",
  fill(256, 0x6b), // k: bin16
  "a1 6c dc 00 10",
  fill(16, 0x01), // l: array16
  "a1 6d de 00 10",
  MAP16_BODY, // m: map16
  "a1 6e 91 91 80", // n: [[{}]]
  "01 a0", // 1: ""
);

describe("wire reader: truncation", () => {
  it("the sample document is valid and reads to the values it spells", () => {
    spanAll(SAMPLE);
    const v = decodeLossless(SAMPLE) as LMap;
    expect(v.entries.length).toBe(15);
    expect(v.get("c")).toStrictEqual([128, 256, 65536, 9007199254740993n]);
    expect(v.get("d")).toStrictEqual([-33, -129, -32769, -9223372036854775808n]);
    expect(v.get(1)).toBe("");
  });

  it("every proper prefix of the sample throws a truncation error (never returns a value)", () => {
    for (let cut = 0; cut < SAMPLE.length; cut++) {
      const prefix = SAMPLE.slice(0, cut);
      const e = wireError(() => new Reader(prefix).span());
      expect([cut, e.message]).toStrictEqual([cut, expect.stringMatching(/^truncated/)]);
      expect(e.offset).toBeLessThanOrEqual(cut);
      expect([cut, wireError(() => decodeLossless(prefix)).message]).toStrictEqual([
        cut,
        expect.stringMatching(/^truncated/),
      ]);
    }
  });

  it("the reader's `end` bounds it, not the buffer: every cut of the full buffer is truncated", () => {
    for (let cut = 0; cut < SAMPLE.length; cut++) {
      const e = wireError(() => new Reader(SAMPLE, 0, cut).span());
      expect([cut, e.message]).toStrictEqual([cut, expect.stringMatching(/^truncated/)]);
    }
  });

  it.each([
    ["str32 header", h("db 00 01 00 00", fill(0x10000, 0x61))],
    ["bin32 header", h("c6 00 01 00 00", fill(0x10000, 1))],
    ["array32 header", h("dd 00 01 00 00", fill(0x10000, 1))],
    ["map32 header", h("df 00 01 00 00", fill(0x20000, 1))],
    ["uint64", h("cf ff ff ff ff ff ff ff ff")],
    ["float64", h("cb 3f f0 00 00 00 00 00 00")],
  ])("%s cut inside its header, and its body cut short, are truncated", (_label, bytes) => {
    spanAll(bytes);
    for (const cut of [1, 2, 3, 4, Math.min(5, bytes.length - 1), bytes.length - 1]) {
      expect([cut, wireError(() => new Reader(bytes.subarray(0, cut)).span()).message]).toStrictEqual([
        cut,
        expect.stringMatching(/^truncated/),
      ]);
    }
  });

  it("a length header larger than the buffer is truncated, not a huge allocation", () => {
    expect(wireError(() => new Reader(h("db ff ff ff ff 61")).span()).message).toMatch(
      /^truncated: str of 4294967295 bytes/,
    );
    expect(wireError(() => new Reader(h("c6 ff ff ff ff 61")).span()).message).toMatch(
      /^truncated: bin of 4294967295 bytes/,
    );
    expect(wireError(() => new Reader(h("dd ff ff ff ff c0")).span()).message).toMatch(/^truncated/);
    expect(wireError(() => decodeLossless(h("df ff ff ff ff c0 c0"))).message).toMatch(/^truncated/);
  });
});

// ---- typed reads ----

describe("wire reader: typed reads", () => {
  it.each([
    [h("05"), 5],
    [h("f0"), -16],
    [h("cc c8"), 200],
    [h("cd 12 34"), 0x1234],
    [h("ce 12 34 56 78"), 0x12345678],
    [h("cf 00 1f ff ff ff ff ff ff"), 9007199254740991],
    [h("d0 9c"), -100],
    [h("d1 fc 18"), -1000],
    [h("d2 ff f0 bd c0"), -1000000],
    [h("d3 ff e0 00 00 00 00 00 01"), -9007199254740991],
  ])("int() reads %o as %d and consumes it", (bytes, value) => {
    const r = new Reader(h(bytes, "c0"));
    expect(r.int()).toBe(value);
    expect(r.pos).toBe(bytes.length);
  });

  it.each([
    ["uint64 2^53", h("cf 00 20 00 00 00 00 00 00")],
    ["int64 -2^53", h("d3 ff e0 00 00 00 00 00 00")],
  ])("int() refuses %s (beyond 2^53)", (_label, bytes) => {
    const e = wireError(() => new Reader(h("c0", bytes), 1).int());
    expect(e.message).toMatch(/^integer too large here/);
    expect(e.offset).toBe(1);
  });

  it("int() still checks canonical formats", () => {
    expect(() => new Reader(h("cc 05")).int()).toThrow(/non-canonical msgpack: uint8/);
  });

  it.each([
    ["nil", h("c0")],
    ["float64", h("cb 3f f0 00 00 00 00 00 00")],
    ["str", h("a1 31")],
    ["bin", h("c4 00")],
    ["array", h("90")],
    ["map", h("80")],
    ["bool", h("c3")],
  ])("int() on a %s returns undefined and consumes nothing", (_label, bytes) => {
    const r = new Reader(bytes);
    expect(r.int()).toBeUndefined();
    expect(r.pos).toBe(0);
  });

  it("str(), bin(), bool(), nil() read their own type and leave others unconsumed", () => {
    const bytes = h("a2 c3 a9", "c4 02 01 02", "c2", "c3", "c0", "01");
    const r = new Reader(bytes);
    expect(r.bin()).toBeUndefined();
    expect(r.bool()).toBeUndefined();
    expect(r.nil()).toBe(false);
    expect(r.str()).toBe("é");
    expect(r.str()).toBeUndefined();
    const b = r.bin()!;
    expect(Array.from(b)).toStrictEqual([1, 2]);
    expect(b.buffer).toBe(bytes.buffer); // a view of the frame, not a copy
    expect(b.byteOffset).toBe(5);
    expect(r.bool()).toBe(false);
    expect(r.bool()).toBe(true);
    expect(r.nil()).toBe(true);
    expect(r.nil()).toBe(false);
    expect(r.int()).toBe(1);
    expect(r.atEnd()).toBe(true);
  });

  it("str() validates UTF-8 and decodes long strings", () => {
    expect(() => new Reader(h("a2 c3 28")).str()).toThrow(/invalid UTF-8/);
    const long = "ü".repeat(40);
    expect(new Reader(h("d9 50", new TextEncoder().encode(long))).str()).toBe(long);
  });

  it.each(["str", "bin", "int", "bool"] as const)(
    "%s() at the end of the buffer throws a truncation error",
    (method) => {
      const r = new Reader(h("c0"), 1);
      expect(wireError(() => r[method]()).message).toMatch(/^truncated: value expected/);
    },
  );

  it.each([
    [h("80"), 0, 1],
    [h("8f", fill(30, 0)), 15, 1],
    [h("de 00 10", MAP16_BODY), 16, 3],
    [h("df 00 01 00 00"), 0x10000, 5],
    [h("90"), -1, 0],
  ])("mapHeader() of %o", (bytes, n, consumed) => {
    const r = new Reader(bytes);
    expect(r.mapHeader()).toBe(n);
    expect(r.pos).toBe(consumed);
  });

  it.each([
    [h("90"), 0, 1],
    [h("9f"), 15, 1],
    [h("dc 01 00"), 256, 3],
    [h("dd 00 01 00 00"), 0x10000, 5],
    [h("80"), -1, 0],
    [h("c0"), -1, 0],
  ])("arrayHeader() of %o", (bytes, n, consumed) => {
    const r = new Reader(bytes);
    expect(r.arrayHeader()).toBe(n);
    expect(r.pos).toBe(consumed);
  });

  it("mapHeader()/arrayHeader() refuse non-minimal headers and empty input", () => {
    expect(() => new Reader(h("de 00 01")).mapHeader()).toThrow(/non-canonical msgpack: map16/);
    expect(() => new Reader(h("df 00 00 00 10")).mapHeader()).toThrow(/non-canonical msgpack: map32/);
    expect(() => new Reader(h("dc 00 0f")).arrayHeader()).toThrow(/non-canonical msgpack: array16/);
    expect(() => new Reader(h("dd 00 00 01 00")).arrayHeader()).toThrow(/non-canonical msgpack: array32/);
    expect(() => new Reader(h("de 00")).mapHeader()).toThrow(/^truncated/);
    expect(() => new Reader(new Uint8Array(0)).mapHeader()).toThrow(/^truncated/);
    expect(() => new Reader(new Uint8Array(0)).arrayHeader()).toThrow(/^truncated/);
  });

  it("span() returns a view of the frame at the value's position", () => {
    const bytes = h("92 a1 61 93 01 02 03");
    const r = new Reader(bytes);
    expect(r.arrayHeader()).toBe(2);
    const a = r.span();
    const b = r.span();
    expect([a.byteOffset, a.length, b.byteOffset, b.length]).toStrictEqual([1, 2, 3, 4]);
    expect(a.buffer).toBe(bytes.buffer);
    expect(r.atEnd()).toBe(true);
  });

  it("a reader over a sub-range reads positions absolute to the buffer", () => {
    const bytes = h("ff ff 92 01 02 ff");
    const r = new Reader(bytes, 2, 5);
    expect(r.span().byteOffset).toBe(2);
    expect(r.pos).toBe(5);
    expect(r.atEnd()).toBe(true);
  });

  it("typed one-byte reads stop at the reader's `end`", () => {
    const bytes = h("05 07 c3 c0");
    const r = new Reader(bytes, 0, 1);
    expect(r.int()).toBe(5);
    expect(r.atEnd()).toBe(true);
    expect(() => r.int()).toThrow(/^truncated/);
    expect(() => r.bool()).toThrow(/^truncated/);
    expect(r.nil()).toBe(false);
  });
});

describe("wire reader: helpers", () => {
  it.each([
    [h("a3 61 62 63"), "abc"],
    [h("d9 20", fill(32, 0x7a)), "z".repeat(32)],
    [h("da 01 00", fill(256, 0x7a)), "z".repeat(256)],
    [h("db 00 01 00 00", fill(0x10000, 0x7a)), "z".repeat(0x10000)],
    [h("a2 c3 a9"), "é"],
  ])("decodeStrSpan strips the header of %#", (span, s) => {
    expect(decodeStrSpan(span)).toBe(s);
  });

  it("decodeStrRange decodes a byte range (short ASCII, short non-ASCII, long)", () => {
    const bytes = h("ff 61 62 63 ff", new TextEncoder().encode("日本"), new TextEncoder().encode("x".repeat(30)));
    expect(decodeStrRange(bytes, 1, 4)).toBe("abc");
    expect(decodeStrRange(bytes, 5, 11)).toBe("日本");
    expect(decodeStrRange(bytes, 5, 41)).toBe("日本" + "x".repeat(30));
    expect(decodeStrRange(bytes, 2, 2)).toBe("");
  });

  // a leading U+FEFF is part of the string (keys, trace ids, the JSON view): it must survive decoding
  it("a str starting with U+FEFF keeps it", () => {
    const bytes = h("a4 ef bb bf 78");
    expect(refDecode(bytes)).toBe("\uFEFFx"); // the reference decoder keeps it
    expect(decodeLossless(bytes)).toBe("\uFEFFx");
    expect(new Reader(bytes).str()).toBe("\uFEFFx");
    expect(decodeStrSpan(bytes)).toBe("\uFEFFx");
  });

  it("binItems returns views of each bin of an array", () => {
    const bytes = h("93 c4 01 0a c4 00 c5 01 00", fill(256, 0x0b));
    const items = binItems(bytes);
    expect(items.map((b) => b.length)).toStrictEqual([1, 0, 256]);
    expect(items[0]![0]).toBe(0x0a);
    expect(items[2]!.every((x) => x === 0x0b)).toBe(true);
    expect(items[2]!.buffer).toBe(bytes.buffer);
    expect(binItems(h("90"))).toStrictEqual([]);
  });

  it.each([
    [h("c4 01 00"), /^expected an array of bin/],
    [h("92 c4 00 a0"), /^expected bin/],
    [h("91 c4 05 00"), /^truncated/],
  ])("binItems refuses %o", (bytes, message) => {
    expect(wireError(() => binItems(bytes)).message).toMatch(message);
  });

  it("WireError carries the offset in its message and its field", () => {
    const e = new WireError("boom", 7);
    expect(e.message).toBe("boom (at byte 7)");
    expect(e.offset).toBe(7);
    expect(e.name).toBe("WireError");
  });
});

// ---- golden fixtures ----

describe("wire reader: golden fixtures round-trip byte for byte", () => {
  const paths = goldenCasePaths();

  it("finds the fixtures", () => {
    expect(paths.length).toBeGreaterThanOrEqual(12);
  });

  it.each(paths)("%s", (path) => {
    const raw = new Uint8Array(readFileSync(path));
    spanAll(raw);
    const container = decodeLossless(raw);
    expect(Buffer.compare(encodeLossless(container), raw)).toBe(0);

    // the container as @msgpack/msgpack reads it holds the same nested blobs
    const c = loadCase(path);
    expect(container).toBeInstanceOf(LMap);
    const frames = (container as LMap).get("frames") as Uint8Array[];
    expect(frames.length).toBe(c.frames.length);
    frames.forEach((f, i) => {
      expect(Buffer.compare(f, c.frames[i]!)).toBe(0);
    });

    const blobs = [...c.frames, c.reply, ...(c.episode ? [c.episode] : []), ...c.checkpoints.map((k) => k.traces)];
    for (const blob of blobs) {
      spanAll(blob);
      expect(Buffer.compare(encodeLossless(decodeLossless(blob)), blob)).toBe(0);
    }
  });

  it("odd_values: ints beyond 2^53 stay exact and floats keep their bits, as @msgpack/msgpack reads them", () => {
    const c = loadCase(paths.find((p) => p.endsWith("odd_values.msgpack"))!);
    const frame = c.frames[0]!;
    const ours = ((decodeLossless(frame) as LMap).get("set") as LMap).get("info") as LMap;
    const ref = (
      refDecode(frame, { useBigInt64: true }) as { set: { info: { ints: Array<number | bigint>; floats: number[] } } }
    ).set.info;
    const ints = ours.get("ints") as Array<number | bigint>;
    expect(ints.map(BigInt)).toStrictEqual(ref.ints.map(BigInt));
    expect(ints).toContain(18446744073709551615n);
    expect(ints).toContain(9007199254740993n);
    expect(ints).toContain(-9223372036854775808n);
    const floats = ours.get("floats") as LValue[];
    expect(floats.every((x) => x instanceof F64)).toBe(true);
    expect(floats.map((x) => (x as F64).value)).toStrictEqual(ref.floats);
    expect(floats.some((x) => Object.is((x as F64).value, -0))).toBe(true);
  });
});

// Every list's cursor (src/protocol/registry/list-cursors.ts): each list's position and its text,
// the seal bound to the list, its detail, the run and the token's patterns, and cursors sealed by
// the release before this module (413b234, where the stores and the Worker each had their own
// decoders) still opening to the same positions, so a client holding one across a deploy goes on.
import { describe, expect, it } from "vitest";
import { RelayError } from "../../src/protocol/http/errors.js";
import {
  type CursorBinding,
  cursorKeys,
  type ListName,
  openCursor,
  type Positions,
  positionText,
  readPosition,
  sealCursor,
} from "../../src/protocol/registry/list-cursors.js";

/** A secret of the earlier release's test: the cursors below were sealed with it by 413b234's cursor-seal.ts. */
const SECRET = "a-secret-of-release-413b234";

type Vector<L extends ListName = ListName> = [binding: CursorBinding & { list: L }, at: Positions[L], cursor: string];

const RUN = "train-7";
const SEARCH = JSON.stringify([['"reward"'], null, null, {}]);

/** Positions and the cursors 413b234 handed out for them (the texts its stores and Worker wrote, sealed). */
const SEALED_BEFORE: Vector[] = [
  [
    { list: "runs", run: null, scope: null },
    { created: 1754101000123, run: RUN },
    "IRxIO8T6XZarELGPySpibofhV4wz9OjlJ-6moEkzobAeyvw-LelMtT6qYseesP6xXnMShl2uDUcCUrqZs-E",
  ],
  [
    { list: "across", run: null, scope: [`${RUN}:*`] },
    {
      run: { created: 1754101000123, run: "train-6" },
      current: { created: 1754101000999, run: RUN },
      inner: "WzE3NTQxMDEwMDA1MDAsInRyYWluLTc6ZTMiXQ",
    },
    "K1zkt2Q_xB_HwPQoFYoCDatsiYdPnUtpmyvuVRR4vHh7yPNflhD9QVp6xqfvHMUuAqa0X1tKOMihUvCWNRSSLN3aG7Z_rzOMEgEdRTnJKOJDqDlze0LRvCktN_VN4MN8GvYWGhlX1RiqMkyv76GLxuZ8-51fNB9yLGOF0io5ZoPSfBBJbBA",
  ],
  [
    { list: "episodes", detail: "updated", run: RUN, scope: null },
    { key: 1754101000500, id: `${RUN}:e3` },
    "nVF_BA_BuMufgmrAitlE84SpBgAk96rxVlRt3QqHGc1T26Hv9Obc63VJmwekDdCpFBTJol0ngSGS9vECz6rNun-c",
  ],
  [
    { list: "episodes", detail: "reward", run: RUN, scope: [`${RUN}:e*`] },
    { key: null, id: `${RUN}:e9` },
    "Nc4gWQfrnC6jSJKhWJN6stXYSbenHvYAi_WrbgKlURCW5d8Hk85xDLVxyCT2luz0xsA1IOW3",
  ],
  [
    { list: "groups", detail: "spread", run: RUN, scope: null },
    [0.25, "g-4"],
    "bAlNY06_OlCLxH_AkKkbGBEsGrmbgY5Wfa7hz81tGgMlaCGCrkgdLE4s63w",
  ],
  [
    { list: "groups", detail: "task", run: RUN, scope: null },
    ["gsm8k/12", "g-2"],
    "RRTBpHRDI4UAJaVmjn0lJDjnwNoUxyr-ZoyCdWchUu99OFj1F83torphrxju5eLxt15SDQ",
  ],
  [{ list: "tasks", run: RUN, scope: null }, "gsm8k/12", "IC8PL5TmhRnRdD_KRjZHi7BqsuWt_fJWKYEaAAamDrERO5aW"],
  [
    { list: "steps", detail: "", run: RUN, scope: null },
    { step: 12, kind: "train" },
    "PecheKJkE_bdEaGWL3tY9iqCwJixyuaG0NODD1enOiM1i4-DlPzorSEZkV0",
  ],
  [
    { list: "steps", detail: "eval", run: RUN, scope: null },
    { step: 3, kind: "eval" },
    "2nm-eA30A7QNlOi6X1LyiE6eSnKp0o8E551C4aFf0C2sT0d8szPqqycC",
  ],
  [
    { list: "search", detail: SEARCH, run: RUN, scope: null },
    { score: -3.5, id: `${RUN}:e1` },
    "IxHSNAZKdiFaj5xvHo27s5v8JZZfwSWMr75qu8THzSoU0gKt-RIh8nWcfqM4j3Z16jb6atCf",
  ],
  [{ list: "finished", run: RUN, scope: null }, 42, "digCtBqquSmfEvJfS7NoaK_nAeksLmXWINAvu30R"],
];

/** The refusal `fn` rejects with: bad_cursor, naming `cursor`. */
async function refusal(fn: () => unknown): Promise<[string, string | undefined]> {
  try {
    await fn();
  } catch (e) {
    expect(e).toBeInstanceOf(RelayError);
    return [(e as RelayError).code, (e as RelayError).field];
  }
  throw new Error("not refused");
}

const BAD: [string, string | undefined] = ["bad_cursor", "cursor"];

describe("cursors sealed by the release before open to the same positions", () => {
  it.each(SEALED_BEFORE.map((v) => [`${v[0].list}${v[0].detail === undefined ? "" : `:${v[0].detail}`}`, v] as const))(
    "%s",
    async (_name, [binding, at, cursor]) => {
      const keys = await cursorKeys([SECRET]);
      const text = await openCursor(keys, binding, cursor);
      expect(readPosition(binding.list, text)).toStrictEqual(at);
      expect(text).toBe(positionText(binding.list, at));
      // and the same position seals to the same cursor (the nonce is the binding's and position's)
      expect(await sealCursor(keys, binding, text)).toBe(cursor);
      // during a rollover (a new secret first), the previous secret's cursor still opens
      expect(await openCursor(await cursorKeys(["a-newer-secret", SECRET]), binding, cursor)).toBe(text);
      // without the secret (a new one alone, or auth off), it does not
      const newer = await cursorKeys(["a-newer-secret"]);
      expect(await refusal(() => openCursor(newer, binding, cursor))).toEqual(BAD);
      expect(await refusal(async () => openCursor(await cursorKeys([]), binding, cursor))).toEqual(BAD);
    },
  );
});

describe("a cursor opens only for what it was sealed for", () => {
  const binding: CursorBinding = { list: "episodes", detail: "updated", run: RUN, scope: [`${RUN}:e*`] };
  const text = positionText("episodes", { key: 5, id: `${RUN}:e1` });

  it.each([
    ["another list", { ...binding, list: "groups" as const }],
    ["another detail (sort)", { ...binding, detail: "reward" }],
    ["no detail", { ...binding, detail: undefined }],
    ["another run", { ...binding, run: "train-8" }],
    ["no run", { ...binding, run: null }],
    ["another token's patterns", { ...binding, scope: [`${RUN}:*`] }],
    ["a token of everything", { ...binding, scope: null }],
  ])("refuses it for %s", async (_label, other) => {
    const keys = await cursorKeys(["s1"]);
    const cursor = await sealCursor(keys, binding, text);
    expect(await openCursor(keys, binding, cursor)).toBe(text);
    expect(await refusal(() => openCursor(keys, other, cursor))).toEqual(BAD);
  });

  it("refuses an altered, cut, padded or foreign cursor", async () => {
    const keys = await cursorKeys(["s1"]);
    const cursor = await sealCursor(keys, binding, text);
    const flip = (i: number) => `${cursor.slice(0, i)}${cursor[i] === "A" ? "B" : "A"}${cursor.slice(i + 1)}`;
    for (const bad of [
      flip(0),
      flip(20),
      flip(cursor.length - 2),
      cursor.slice(0, -1),
      cursor.slice(0, 20),
      `${cursor}A`,
      `${cursor}==`,
      "",
      "!!!",
      text, // the position's text itself, unsealed
    ]) {
      expect(await refusal(() => openCursor(keys, binding, bad)), bad).toEqual(BAD);
    }
  });

  it("refuses a sealed text that is not a position of the list it is bound to", async () => {
    const keys = await cursorKeys(["s1"]);
    for (const [list, textOfAnother] of [
      ["groups", "gsm8k/12"],
      ["steps", positionText("search", { score: 1.5, id: "x" })],
      ["finished", positionText("steps", { step: 1, kind: "train" })],
      ["runs", positionText("episodes", { key: null, id: "x" })],
    ] as const) {
      const b: CursorBinding = { list, run: RUN, scope: null };
      const cursor = await sealCursor(keys, b, textOfAnother);
      expect(await refusal(() => openCursor(keys, b, cursor)), list).toEqual(BAD);
    }
  });

  it("seals one position to one cursor and two positions to two, and neither reads as its position", async () => {
    const keys = await cursorKeys(["s1"]);
    const other = positionText("episodes", { key: 6, id: `${RUN}:e2` });
    const [a, a2, b] = await Promise.all([
      sealCursor(keys, binding, text),
      sealCursor(await cursorKeys(["s1"]), binding, text),
      sealCursor(keys, binding, other),
    ]);
    expect(a2).toBe(a);
    expect(b).not.toBe(a);
    expect(a.slice(0, 16)).not.toBe(b.slice(0, 16)); // distinct nonces
    for (const c of [a, b]) {
      const plain = Buffer.from(c, "base64url").toString("latin1");
      for (const s of [`${RUN}:e1`, `${RUN}:e2`, text, other]) expect(plain.includes(s)).toBe(false);
    }
  });
});

describe("each list's position as text", () => {
  /** Base64url of JSON text, made without the module. */
  const b64 = (json: string) => Buffer.from(json, "utf8").toString("base64url");

  it.each([
    ["runs", { created: 1, run: "r" }, b64('[1,"r"]')],
    ["episodes", { key: 1.5, id: "a:ü日本😀" }, b64('[1.5,"a:ü日本😀"]')],
    ["episodes", { key: null, id: "a" }, b64('[null,"a"]')],
    ["groups", [0.5, "g"], b64('[0.5,"g"]')],
    ["groups", ["task", "g"], b64('["task","g"]')],
    ["tasks", "gsm8k/12", "gsm8k/12"],
    ["steps", { step: 7, kind: "eval" }, b64('[7,"eval"]')],
    ["search", { score: -2.25, id: "a:1" }, b64('[-2.25,"a:1"]')],
    ["finished", 123456789012345, "123456789012345"],
    [
      "across",
      { run: null, current: { created: 3, run: "r" }, inner: b64('[null,"r:1"]') },
      `{"r":null,"c":[3,"r"],"i":"${b64('[null,"r:1"]')}"}`,
    ],
    ["across", { run: { created: 2, run: "q" }, current: null, inner: null }, '{"r":[2,"q"],"c":null,"i":null}'],
  ] as Array<[ListName, Positions[ListName], string]>)("%s %j is %s", (list, at, text) => {
    expect(positionText(list, at)).toBe(text);
    expect(readPosition(list, text)).toStrictEqual(at);
  });

  it("reads standard base64 too, as earlier releases did", () => {
    const std = Buffer.from('[7,"a?>"]').toString("base64");
    expect(std).toMatch(/[+/=]/);
    expect(readPosition("episodes", std)).toStrictEqual({ key: 7, id: "a?>" });
  });

  it.each([
    ["runs", b64('["1","r"]')],
    ["runs", b64('[1.5,"r"]')],
    ["runs", b64("[1]")],
    ["episodes", b64('{"key":1,"id":"a"}')],
    ["episodes", b64('[1,"a",2]')],
    ["episodes", b64("[1,null]")],
    ["episodes", b64("null")],
    ["episodes", b64("hello")],
    ["episodes", "!!!"],
    ["episodes", b64('[1,"a"]').slice(0, 5)],
    ["groups", b64('[null,"g"]')],
    ["groups", b64('[true,"g"]')],
    ["steps", b64('[1.5,"train"]')],
    ["steps", b64('["1","train"]')],
    ["search", b64('["1","a"]')],
    ["finished", "-1"],
    ["finished", "1.5"],
    ["finished", "1234567890123456"],
    ["finished", ""],
    ["across", "not json"],
    ["across", "5"],
    ["across", "null"],
    ["across", '{"r":[1],"c":null,"i":null}'],
    ["across", '{"r":null,"c":null,"i":5}'],
    ["across", '{"r":null,"c":null,"i":"not a position"}'],
  ] as Array<[ListName, string]>)("%s refuses %s", async (list, text) => {
    expect(await refusal(() => readPosition(list, text))).toEqual(BAD);
  });
});

// The dashboard's token pieces (dashboard/src/episode/pieces.ts) with the real library and the
// committed byte-level BPE tokenizer (test/fixtures/tokenizer): one piece per id, joining to the
// decoded text, a two-byte character whole on its second id.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { expect, it } from "vitest";
import { piecesOf } from "../../dashboard/src/episode/pieces.js";

const json = JSON.parse(
  readFileSync(join(import.meta.dirname, "..", "fixtures", "tokenizer", "tokenizer.json"), "utf8"),
) as object;
const tokenizer = new Tokenizer(json, {});
const decode = (ids: number[]) => tokenizer.decode(ids, { skip_special_tokens: false });

it("one piece per id, whole characters, joining to the decoded text", () => {
  const text = "<|im_start|>The answer is 42. Let me think step by step: 6 × 7 = 42<|im_end|>";
  const ids = tokenizer.encode(text).ids;
  expect(ids.slice(0, 5)).toEqual([333, 257, 266, 268, 270]);
  const pieces = piecesOf(decode, ids);
  expect(pieces).toHaveLength(ids.length);
  expect(pieces.join("")).toBe(text);
  expect(pieces.slice(0, 5)).toEqual(["<|im_start|>", "The", " answer", " is", " 42"]);
  // "×" is two bytes, two ids: the first shows nothing, the second the whole character
  const at = ids.indexOf(195);
  expect(ids[at + 1]).toBe(151);
  expect([pieces[at], pieces[at + 1]]).toEqual(["", "×"]);
  expect(pieces.some((p) => p.includes("\uFFFD"))).toBe(false);
});

it("a character cut off at the end stays as the replacement character (nothing hidden)", () => {
  expect(piecesOf(decode, [257, 195])).toEqual(["The", "\uFFFD"]);
});

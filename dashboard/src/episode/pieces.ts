// Token ids to the text each adds, with a tokenizer's `decode` (no DOM: test/node/token-pieces.test.ts).

/**
 * The pieces of `ids`, in order, one per id: each the text its id adds. A character spread over
 * several byte-level ids (say "×", two bytes) is given whole to its last id; the ids before it get "".
 */
export function piecesOf(decode: (ids: number[]) => string, ids: readonly number[]): string[] {
  const out: string[] = [];
  let start = 0;
  for (let i = 0; i < ids.length; i++) {
    const text = decode(ids.slice(start, i + 1) as number[]);
    // an incomplete UTF-8 sequence decodes to U+FFFD: wait for the ids that complete it (at most 4 bytes)
    if (text.endsWith("\uFFFD") && i - start < 3 && i + 1 < ids.length) {
      out.push("");
      continue;
    }
    out.push(text);
    start = i + 1;
  }
  return out;
}

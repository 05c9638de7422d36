// A search result's snippet: cut in JS from a segment's stored text around where the query's words
// are, with those words' offsets (the run's index finds the segments with FTS5; building snippets
// with FTS5's snippet() ran the whole MATCH again per episode, the bulk of a query's time).
// Words are read as the index's tokenizer reads them (unicode61, diacritics removed): runs of
// letters and digits, compared in lower case without accents. Pure.

/**
 * A positive term of a query, as words: a phrase is several, a word the user typed with a dash too; `prefix` is for the
 * last.
 */
export interface Phrase {
  words: string[];
  prefix: boolean;
}

/** A snippet is about this many characters of its segment (FTS5 cut 24 tokens). */
export const SNIPPET_CHARS = 160;
/** Characters kept before the first match. */
const LEAD_CHARS = 40;
const ELLIPSIS = "…";

interface Token {
  start: number;
  end: number;
  word: string;
}

/** A token's text as the index compares it: lower case, no accents. */
export function fold(s: string): string {
  return s.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();
}

/** The words of `text` (runs of letters and digits), folded, with their UTF-16 offsets. */
export function tokens(text: string): Token[] {
  const out: Token[] = [];
  for (const m of text.matchAll(/[\p{L}\p{N}\p{Co}\p{M}]+/gu))
    out.push({ start: m.index, end: m.index + m[0].length, word: fold(m[0]) });
  return out;
}

/** A term the user typed, as words (`needle-in-the-haystack` is the phrase of four). */
export function phraseOf(text: string, prefix: boolean): Phrase {
  return { words: tokens(text).map((t) => t.word), prefix };
}

/** Where `phrases` occur in `text`: [start, end) offsets, in order, not overlapping. */
export function matches(text: string, phrases: readonly Phrase[]): Array<[number, number]> {
  const ts = tokens(text);
  const found: Array<[number, number]> = [];
  for (let i = 0; i < ts.length; i++) {
    let longest = 0;
    for (const p of phrases) {
      const n = p.words.length;
      if (n === 0 || i + n > ts.length || n <= longest) continue;
      let ok = true;
      for (let k = 0; k < n && ok; k++) {
        const w = ts[i + k]!.word;
        ok = k === n - 1 && p.prefix ? w.startsWith(p.words[k]!) : w === p.words[k];
      }
      if (ok) longest = n;
    }
    if (longest > 0) {
      found.push([ts[i]!.start, ts[i + longest - 1]!.end]);
      i += longest - 1;
    }
  }
  return found;
}

/**
 * About SNIPPET_CHARS of `text` from a little before its first match (its head when none), cut at
 * word bounds, "…" where it was cut, and the matches inside it as offsets in the snippet.
 */
export function snippet(
  text: string,
  phrases: readonly Phrase[],
): { text: string; highlights: Array<[number, number]> } {
  const found = matches(text, phrases);
  const first = found[0]?.[0] ?? 0;
  let start = Math.max(0, first - LEAD_CHARS);
  let end = Math.min(text.length, start + SNIPPET_CHARS);
  // whole words only: the cut moves back to a word's start, and forward past the last whole word
  const ts = tokens(text);
  if (start > 0) {
    const t = ts.find((x) => x.end > start);
    start = t && t.start <= first ? t.start : first;
    end = Math.min(text.length, Math.max(end, start + SNIPPET_CHARS));
  }
  if (end < text.length) {
    // the word the cut falls in goes (unless it is the snippet's only one)
    const cut = ts.find((x) => x.start < end && x.end > end);
    if (cut) end = cut.start > start ? cut.start : cut.end;
  }
  const lead = start > 0 ? ELLIPSIS : "";
  const trimmed = text.slice(start, end).trimEnd();
  const highlights = found
    .filter(([a, b]) => a >= start && b <= start + trimmed.length)
    .map(([a, b]): [number, number] => [a - start + lead.length, b - start + lead.length]);
  return { text: `${lead}${trimmed}${end < text.length ? ELLIPSIS : ""}`, highlights };
}

// A run search's query (`GET /v1/runs/{run}/search?q=`) in the words a user types, read into SQLite
// FTS5's query language with every term quoted (so no input is taken as FTS5 syntax of its own):
//
//   grader               the word (any case, any accents: FTS5's unicode61 tokenizer)
//   "every integer"      the phrase
//   grad*                a prefix
//   role:tool tool:bash  only segments of that role, or naming that tool (field filters)
//   a OR b               either;  -word  not that word
//
// Terms are ANDed. Pure: the run's index runs the expression (search-store.ts).

import { RelayError } from "../http/errors.js";
import { type Phrase, phraseOf } from "./highlight.js";

export const MAX_QUERY_CHARS = 256;
export const MAX_QUERY_TERMS = 16;
/** Fields a term may be limited to (FTS5 columns of the index). */
export const QUERY_FIELDS = ["role", "tool"] as const;

export interface SearchQuery {
  /** The FTS5 MATCH expression. */
  match: string;
  /** The positive words and phrases, lower-cased (for tests). */
  terms: string[];
  /**
   * The positive words, phrases and prefixes on the text (not role:/tool:), as the snippets highlight them
   * (highlight.ts).
   */
  phrases: Phrase[];
}

type Token =
  | { kind: "term"; text: string; phrase: boolean; prefix: boolean; field: string | null; negated: boolean }
  | { kind: "or" };

export function parseSearchQuery(q: string | null): SearchQuery {
  const text = (q ?? "").trim();
  if (text === "") throw bad('q is empty: give a word, a "phrase", a prefix* or role:/tool: filters');
  if (text.length > MAX_QUERY_CHARS) throw bad(`q is at most ${MAX_QUERY_CHARS} characters`);
  if (/[\u0000-\u001f]/.test(text)) throw bad("q must not hold control characters");
  const tokens = tokenize(text);
  const terms = tokens.filter((t): t is Extract<Token, { kind: "term" }> => t.kind === "term");
  if (terms.length > MAX_QUERY_TERMS) throw bad(`q holds at most ${MAX_QUERY_TERMS} terms`);
  if (!terms.some((t) => !t.negated)) throw bad("q needs a term to find (a -word only excludes)");
  const parts: string[] = [];
  let pendingOr = false;
  for (const t of tokens) {
    if (t.kind === "or") {
      if (parts.length === 0 || pendingOr) throw bad("OR goes between two terms");
      pendingOr = true;
      continue;
    }
    const quoted = `"${t.text.replace(/"/g, '""')}"${t.prefix ? "*" : ""}`;
    const term = t.field ? `${t.field} : ${quoted}` : quoted;
    if (t.negated) {
      if (parts.length === 0) throw bad("a -word excludes from what comes before it: put a term first");
      parts.push(`NOT ${term}`);
    } else if (pendingOr) parts.push(`OR ${term}`);
    else parts.push(parts.length ? `AND ${term}` : term);
    pendingOr = false;
  }
  if (pendingOr) throw bad("OR goes between two terms");
  const positive = terms.filter((t) => !t.negated && !t.field);
  return {
    match: parts.join(" "),
    terms: positive.map((t) => t.text.toLowerCase()),
    phrases: positive.map((t) => phraseOf(t.text, t.prefix)),
  };
}

function tokenize(text: string): Token[] {
  const out: Token[] = [];
  const re = /(-)?(?:(\w+):)?(?:"([^"]*)"|([^\s"]+))/gu;
  let at = 0;
  for (const m of text.matchAll(re)) {
    const gap = text.slice(at, m.index);
    if (gap.trim() !== "") throw bad(`q could not be read at ${JSON.stringify(gap.trim())}`);
    at = m.index + m[0].length;
    const [, neg, field, phrase, word] = m;
    if (word === "OR" && !neg && !field) {
      out.push({ kind: "or" });
      continue;
    }
    if (field !== undefined && !(QUERY_FIELDS as readonly string[]).includes(field))
      throw bad(`${field}: is not a field (${QUERY_FIELDS.map((f) => `${f}:`).join(", ")})`);
    let body = phrase ?? word ?? "";
    const prefix = phrase === undefined && body.endsWith("*");
    if (prefix) body = body.slice(0, -1);
    if (body.replace(/[\p{P}\p{S}\s]/gu, "") === "") throw bad(`${JSON.stringify(m[0])} has nothing to search for`);
    out.push({
      kind: "term",
      text: body,
      phrase: phrase !== undefined,
      prefix,
      field: field ?? null,
      negated: neg === "-",
    });
  }
  if (text.slice(at).trim() !== "")
    throw bad(`q could not be read at ${JSON.stringify(text.slice(at).trim())} (an unclosed quote?)`);
  return out;
}

function bad(message: string): RelayError {
  return new RelayError("bad_query", message, "q");
}

// A user-written pattern (a flag rule's `match.pattern`), as the run's index runs it on every text
// segment: written as a JavaScript regular expression (any case: the flags were "iu"), run by RE2's
// linear-time engine, so no pattern and no text can make one check backtrack.
//
// The engine is re2js (pure JS, so it runs in workerd, in Node and in the browser; it runs a test
// on a lazy DFA behind a literal prefilter). Measured on the flags bench's ordinary text, the
// default rules cost about what V8's backtracking RegExp cost per segment (bench/flags.ts prints the
// ratio; ~1.0x here). re2-wasm was not taken: its Emscripten loader compiles the WebAssembly from
// bytes at run time, which Workers refuse, and each call copies the text into wasm memory.
//
// Work is counted, not timed, in steps: a character through the DFA's cached states is one step; a
// DFA state built costs STATE_STEPS per instruction in it (hostile text makes one per character:
// that is where the time goes); a run of the NFA or the backtracker (the DFA gave up, or a hit's
// bounds are wanted) costs characters × instructions, its bound. A check is given a limit: the DFA
// stops at it (nothing is left half-built), and an NFA run starts only if its bound fits. Pure.

import { RE2JS } from "re2js";
import { RelayError } from "../http/errors.js";

/** A rule's compiled program is at most this many instructions (a counted repeat multiplies it: (x){39}). */
export const MAX_INSTRUCTIONS = 1000;

/**
 * Bytes (re2js's own count) a pattern's lazy DFA may cache before it starts again (re2js's default is 8 MiB: 32 rules on
 * hostile text held ~240 MB of heap, past an isolate's 128 MB). The defaults use under 9 KB on ordinary text.
 */
export const DFA_BYTES = 256 * 1024;

/**
 * Steps per instruction of a DFA state built (re2js's DFA.closure walks, sorts and hashes them). Chosen by measurement
 * (bench/flags-worst.ts, a loaded 2-core machine): with it a counted step costs ~3-22 ns (median ~7) on text that thrashes
 * the DFA, and ~15 ns on the defaults' ordinary text, so no input is cheaper to count than to run.
 */
export const STATE_STEPS = 32;

/** re2js's lazy DFA: its memory budget (src/DFA.js: both are set from maxMem, which RE2 does not pass), and the two
 * methods a check counts its work through. */
interface LazyDfa {
  stateBudget: number;
  memBudget: number;
  closure(pcs: number[], flag: number): { pcs: number[]; needflags: number };
  match(input: unknown, pos: number, anchor: number): boolean | null;
}

/** What one check did: its steps, whether it finished within its limit, and the first match if it found one. */
export interface Check {
  steps: number;
  /** False: it stopped at its limit (no answer). */
  done: boolean;
  /** [start, end) in UTF-16 units; [0, 0] when the match's bounds did not fit the limit (the segment matched). */
  at: [number, number] | null;
}

/** Thrown through re2js to stop a check at its limit. */
const STOP = new Error("flag check stopped at its limit");

/** A pattern ready to run: its engine, and what one character of a segment costs it at most. */
export interface Pattern {
  /** Instructions of the compiled program: the steps per character of a check. */
  instructions: number;
  /** Bytes its DFA holds now (re2js's count; at most DFA_BYTES). */
  cacheBytes(): number;
  /** Where the first match is ([start, end) in UTF-16 units), or null (unlimited: for tests and benches). */
  find(text: string): [number, number] | null;
  /** A check of `text` within `limit` steps. */
  check(text: string, limit: number): Check;
}

/**
 * `pattern` compiled (a regular expression if `regex`, else the text as written), matched in any case; throws 400
 * bad_rules at `field` naming what the engine cannot run.
 */
export function compilePattern(pattern: string, regex: boolean, field: string): Pattern {
  let source = RE2JS.quote(pattern);
  if (regex) {
    // the JavaScript syntax rules were written in (and were checked against) stays the contract
    try {
      new RegExp(pattern, "iu");
    } catch (e) {
      throw bad(field, `not a regular expression: ${(e as Error).message}`);
    }
    const construct = unsupported(pattern);
    if (construct) throw bad(field, `${construct} cannot be run in linear time (RE2); rewrite the pattern without it`);
    source = RE2JS.translateRegExp(jsClasses(pattern));
  }
  let re: RE2JS;
  try {
    re = RE2JS.compile(source, RE2JS.CASE_INSENSITIVE);
  } catch (e) {
    throw bad(field, `the linear-time engine (RE2) refuses it: ${(e as Error).message}`);
  }
  const instructions = (re.re2Input.prog as { numInst(): number }).numInst();
  const dfa = (re.re2Input as unknown as { dfa: LazyDfa }).dfa;
  dfa.stateBudget = DFA_BYTES;
  dfa.memBudget = DFA_BYTES;
  if (instructions > MAX_INSTRUCTIONS)
    throw bad(
      field,
      `the pattern compiles to ${instructions} instructions, at most ${MAX_INSTRUCTIONS} (a counted repeat like {39} multiplies what it repeats)`,
    );
  // the DFA's work counted as it is done, stopped past the check's limit (a throw leaves its cache consistent: a
  // state is cached only after its closure returns)
  let spent = 0;
  let limit = Number.POSITIVE_INFINITY;
  let bound = 0;
  const closure = dfa.closure.bind(dfa);
  dfa.closure = (pcs, flag) => {
    const c = closure(pcs, flag);
    spent += STATE_STEPS * c.pcs.length;
    if (spent > limit) throw STOP;
    return c;
  };
  const match = dfa.match.bind(dfa);
  dfa.match = (input, pos, anchor) => {
    const answer = match(input, pos, anchor);
    // null: the DFA gave up (its cache thrashed); re2js runs the backtracker or the NFA next, at their bound
    if (answer === null) nfa();
    return answer;
  };
  const nfa = () => {
    if (spent + bound > limit) throw STOP;
    spent += bound;
  };
  const onepass = (re.re2Input as unknown as { onepass: unknown }).onepass !== null;
  const check = (text: string, max: number): Check => {
    spent = text.length;
    limit = max;
    bound = text.length * instructions;
    try {
      if (spent > limit) throw STOP;
      // a one-pass program runs its own matcher, not the DFA: counted at its bound
      if (onepass) nfa();
      if (!re.test(text)) return { steps: spent, done: true, at: null };
      // a hit's bounds take a run with captures (onepass, backtracker or NFA): only if it fits
      if (spent + bound > limit) return { steps: spent, done: true, at: [0, 0] };
      spent += bound;
      const m = re.matcher(text);
      return { steps: spent, done: true, at: m.find() ? [m.start(), m.end()] : [0, 0] };
    } catch (e) {
      if (e !== STOP) throw e;
      return { steps: spent, done: false, at: null };
    } finally {
      limit = Number.POSITIVE_INFINITY;
    }
  };
  return {
    instructions,
    cacheBytes: () => dfa.stateBudget - dfa.memBudget,
    find: (text) => check(text, Number.POSITIVE_INFINITY).at,
    check,
  };
}

/** The first construct of a (valid JavaScript) pattern that RE2 has no linear-time form of, named; else null. */
function unsupported(pattern: string): string | null {
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "\\") {
      const n = pattern[i + 1];
      if (!inClass && n !== undefined && /[1-9]/.test(n)) return `a backreference (\\${n})`;
      if (!inClass && n === "k" && pattern[i + 2] === "<") return "a named backreference (\\k<…>)";
      i++;
    } else if (inClass) {
      if (c === "]") inClass = false;
    } else if (c === "[") inClass = true;
    else if (c === "(" && pattern[i + 1] === "?") {
      const head = pattern.slice(i, i + 4);
      if (head.startsWith("(?=")) return "a lookahead (?=…)";
      if (head.startsWith("(?!")) return "a negative lookahead (?!…)";
      if (head.startsWith("(?<=")) return "a lookbehind (?<=…)";
      if (head.startsWith("(?<!")) return "a negative lookbehind (?<!…)";
    }
  }
  return null;
}

// JavaScript's \s: Unicode's white space and the line terminators (RE2's \s is [\t\n\f\r ] alone).
const SPACE: ReadonlyArray<readonly [number, number]> = [
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
];
const ranges = (rs: ReadonlyArray<readonly [number, number]>) =>
  rs.map(([a, b]) => (a === b ? hex(a) : `${hex(a)}-${hex(b)}`)).join("");
const hex = (n: number) => `\\x{${n.toString(16)}}`;
const NOT_SPACE: Array<[number, number]> = [];
for (let from = 0, k = 0; k <= SPACE.length; k++) {
  const to = k < SPACE.length ? SPACE[k]![0] - 1 : 0x10ffff;
  if (from <= to) NOT_SPACE.push([from, to]);
  if (k < SPACE.length) from = SPACE[k]![1] + 1;
}

/**
 * A JavaScript pattern's classes as RE2 reads them: \s, \S and `.` as JavaScript means them, and a `[` inside a class
 * taken as itself (RE2 would read `[[:alpha:]` as a POSIX class).
 */
function jsClasses(pattern: string): string {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "\\") {
      const n = pattern[i + 1] ?? "";
      if (n === "s") out += inClass ? ranges(SPACE) : `[${ranges(SPACE)}]`;
      else if (n === "S") out += inClass ? ranges(NOT_SPACE) : `[^${ranges(SPACE)}]`;
      else out += c + n;
      i++;
    } else if (inClass) {
      if (c === "]") inClass = false;
      out += c === "[" ? "\\[" : c;
    } else if (c === ".") {
      // JavaScript's dot stops at every line terminator, RE2's at \n alone
      out += "[^\\n\\r\\x{2028}\\x{2029}]";
    } else {
      // `[]` and `[^]` keep their JavaScript meaning: translateRegExp rewrites them whole
      if (c === "[") inClass = !(pattern[i + 1] === "]" || (pattern[i + 1] === "^" && pattern[i + 2] === "]"));
      out += c;
    }
  }
  return out;
}

function bad(field: string, message: string): RelayError {
  return new RelayError("bad_rules", message, field);
}

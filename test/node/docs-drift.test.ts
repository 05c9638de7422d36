// ARCHITECTURE.md and docs/development.md say where things are; this keeps them true. Every path
// they cite (src/..., test/..., docs/..., scripts/..., and the other top folders; `{a,b}` and `*`
// expanded) exists; every file name in backticks (`feeds.ts`, `http/auth.ts`) names a file of the
// tree; every name in backticks that reads as code (`SqlStore`, `MAX_MESSAGE_BYTES`, `runAccess`,
// `watch_episode`, a call such as `episode.ingest(...)`) occurs in the code the page describes,
// comments left out: ARCHITECTURE.md's in the relay's own code (src, clients, dashboard, tools,
// scripts, wrangler.toml, package.json; bench/ only on a line that cites bench/), development.md's
// in that and the benches. Plain lower-case words in backticks (`tail`, `search`, `fetch`) are
// commands, sections and folders as often as names, so they are not taken for names. And the two
// claims a number can make go stale: the size bound of src's files, and the Python packages
// `npm test` installs.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const PAGES = ["ARCHITECTURE.md", "docs/development.md"] as const;
const TOP = ["src", "test", "docs", "scripts", "tools", "bench", "clients", "dashboard"];

/** The tree's files (tracked, and new ones not ignored), relative to the root with `/`. */
const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard"], {
  cwd: root,
  encoding: "utf8",
})
  .split("\n")
  .filter((f) => f !== "" && existsSync(join(root, f)));

/** `a/{b,c}.ts` → `a/b.ts`, `a/c.ts` (each group in turn). */
function expand(path: string): string[] {
  const m = /\{([^{}]*)\}/.exec(path);
  if (!m) return [path];
  return m[1]!
    .split(",")
    .flatMap((alt) => expand(path.slice(0, m.index) + alt.trim() + path.slice(m.index + m[0].length)));
}

/** Whether `path` (a file, a folder with or without its `/`, or `folder/*`) is in the tree. */
function inTree(path: string): boolean {
  if (path.endsWith("/*")) {
    const dir = join(root, path.slice(0, -2));
    return existsSync(dir) && statSync(dir).isDirectory() && readdirSync(dir).length > 0;
  }
  return existsSync(join(root, path));
}

/** Every path a page cites with one of the top folders, in prose, tables, code spans and blocks alike. */
function citedPaths(page: string): string[] {
  const text = readFileSync(join(root, page), "utf8");
  const out = new Set<string>();
  const re = new RegExp(String.raw`(?<![\w./@-])((?:${TOP.join("|")})/[A-Za-z0-9_.\-/{},*]*)`, "g");
  for (const m of text.matchAll(re)) {
    const path = m[1]!.replace(/[.,:;]+$/, "");
    if (/\{[^}]*$/.test(path)) continue; // a brace group cut by prose ("{a, b}"): read as a file name below
    for (const p of expand(path)) out.add(p);
  }
  return [...out];
}

/** The code spans of a page (`...`), fenced blocks left out. */
function codeSpans(page: string): string[] {
  const text = readFileSync(join(root, page), "utf8").replace(/^```[\s\S]*?^```/gm, "");
  return [...text.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!);
}

/** File names in a page's code spans (`feeds.ts`, `http/auth.ts`, `{relay,router}.mjs`), expanded. */
function citedFileNames(page: string): string[] {
  const out = new Set<string>();
  for (const span of codeSpans(page)) {
    for (const m of span.matchAll(
      /[A-Za-z0-9_.\-/]*(?:\{[^{}\s]*\})?[A-Za-z0-9_\-/]*\.(?:ts|mjs|py|css|json|toml|sh)\b/g,
    )) {
      for (const name of expand(m[0])) out.add(name);
    }
  }
  return [...out];
}

/** Whether some file of the tree is `name` or ends with `/name`. */
function namesAFile(name: string): boolean {
  return files.some((f) => f === name || f.endsWith(`/${name}`));
}

/**
 * The names a page's code spans cite that read as code: an identifier with a capital after its
 * first letter, a leading capital, or an underscore; or the called name of `a.b(...)`.
 */
function citedNames(page: string): Array<{ name: string; line: string }> {
  const text = readFileSync(join(root, page), "utf8").replace(/^```[\s\S]*?^```/gm, "");
  const out: Array<{ name: string; line: string }> = [];
  for (const line of text.split("\n")) {
    for (const m of line.matchAll(/`([^`\n]+)`/g)) {
      const span = m[1]!;
      const call = /^(?:[\w$]+\.)*([A-Za-z_$][\w$]*)\(.*\)$/.exec(span);
      if (call) out.push({ name: call[1]!, line });
      else if (/^[A-Za-z_$][\w$]*$/.test(span) && /^[A-Z]|[a-z0-9][A-Z]|_/.test(span)) out.push({ name: span, line });
    }
  }
  return out;
}

/** A file's text without its comments (`//`, block comments, `#`), naively: enough to drop the names prose holds. */
function code(file: string): string {
  const text = readFileSync(join(root, file), "utf8");
  if (/\.(py|toml|sh)$/.test(file)) return text.replace(/#.*$/gm, "");
  if (file.endsWith(".json")) return text;
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

const CODE = /\.(ts|mts|mjs|js|py|toml|json|sh)$/;
const relay = files.filter(
  (f) =>
    (/^(src|clients|dashboard\/src|tools|scripts)\//.test(f) || f === "wrangler.toml" || f === "package.json") &&
    CODE.test(f),
);
const benches = files.filter((f) => f.startsWith("bench/") && CODE.test(f));
const relayCode = relay.map(code).join("\n");
const benchCode = benches.map(code).join("\n");

function occurs(name: string, text: string): boolean {
  return new RegExp(`(?<![\\w$])${name.replace(/\$/g, "\\$")}(?![\\w$])`).test(text);
}

describe.each(PAGES)("%s", (page) => {
  it("cites only paths that exist", () => {
    const paths = citedPaths(page);
    expect(paths.length).toBeGreaterThan(5);
    expect(paths.filter((p) => !inTree(p))).toEqual([]);
  });

  it("cites only file names the tree has", () => {
    const names = citedFileNames(page);
    expect(names.length).toBeGreaterThan(5);
    expect(names.filter((n) => !namesAFile(n))).toEqual([]);
  });

  it("cites only names the code it describes has", () => {
    const names = citedNames(page);
    expect(names.length).toBeGreaterThan(3);
    const missing = names.filter(({ name, line }) => {
      if (occurs(name, relayCode)) return false;
      const withBenches = page === "docs/development.md" || /(?<![\w/])bench\//.test(line);
      return !(withBenches && occurs(name, benchCode));
    });
    expect(missing.map((m) => m.name)).toEqual([]);
  });
});

describe("what the checks read", () => {
  it("expands brace groups and finds paths, file names and names in prose, tables and code spans", () => {
    expect(expand("scripts/{a,b}/{c,d}.mjs")).toEqual([
      "scripts/a/c.mjs",
      "scripts/a/d.mjs",
      "scripts/b/c.mjs",
      "scripts/b/d.mjs",
    ]);
    const arch = citedPaths("ARCHITECTURE.md");
    expect(arch).toContain("src/protocol/wire/lossless.ts"); // from `src/protocol/wire/{reader,...,lossless}.ts`
    expect(arch).toContain("test/node/layers.test.ts"); // in prose, not in a code span
    expect(citedFileNames("ARCHITECTURE.md")).toContain("episode/sql-store.ts");
    const names = citedNames("ARCHITECTURE.md").map((n) => n.name);
    expect(names).toEqual(expect.arrayContaining(["SqlStore", "MAX_MESSAGE_BYTES", "runAccess", "ingest", "Load"]));
    expect(names).not.toContain("fetch");
    // a name the relay no longer has is missing from the code the check reads; comments do not count
    expect(occurs("CatchUpCursor", relayCode)).toBe(false);
    expect(occurs("getByName", relayCode)).toBe(true);
    expect(occurs("idFromName", relayCode)).toBe(false); // the benches' own namespaces use it, the relay does not
    expect(occurs("idFromName", benchCode)).toBe(true);
  });
});

describe("the numbers the pages state", () => {
  it("ARCHITECTURE.md's size bound holds for every file in src", () => {
    const text = readFileSync(join(root, "ARCHITECTURE.md"), "utf8");
    const bound = /No file in `src` is over (\d+) lines/.exec(text);
    expect(bound, "ARCHITECTURE.md states the bound as: No file in `src` is over N lines").not.toBeNull();
    const over = files
      .filter((f) => f.startsWith("src/") && f.endsWith(".ts"))
      .map((f) => [f, readFileSync(join(root, f), "utf8").split("\n").length - 1] as const)
      .filter(([, n]) => n > Number(bound![1]));
    expect(over).toEqual([]);
  });

  it("docs/development.md names the Python packages npm test installs, all of them", () => {
    const deps = readFileSync(join(root, "scripts", "system-deps.mjs"), "utf8");
    const installed = [...new Set([...deps.matchAll(/"(python3-[a-z0-9-]+)"/g)].map((m) => m[1]!))].sort();
    expect(installed.length).toBeGreaterThan(3);
    const named = [...new Set(codeSpans("docs/development.md").filter((s) => /^python3-[a-z0-9-]+$/.test(s)))].sort();
    expect(named).toEqual(installed);
  });
});

// The dashboard's stylesheets (dashboard/src/styles/, docs/dashboard.md), parsed with postcss: no
// declaration block of two or more declarations repeated verbatim across rules (in the same @media;
// such blocks become one rule with a selector list), no line over 120 characters, and every sheet
// imported by some module of the dashboard. A single declaration (`display: none`) may recur: it
// names no shared look. The checker is also run on seeded sheets, so each rule is seen to fail.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import postcss, { type AtRule, type Rule } from "postcss";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const src = join(root, "dashboard", "src");
const MAX_LINE = 120;

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)],
  );
}

/** What is wrong with these stylesheets (path → text) given these modules (path → text). */
function cssProblems(sheets: Map<string, string>, modules: Map<string, string>): string[] {
  const problems: string[] = [];
  const blocks = new Map<string, string[]>();
  for (const [path, text] of sheets) {
    const name = relative(src, path);
    text.split("\n").forEach((line, i) => {
      if (line.length > MAX_LINE)
        problems.push(`${name}:${i + 1}: line of ${line.length} characters (over ${MAX_LINE})`);
    });
    postcss.parse(text, { from: path }).walkRules((rule: Rule) => {
      const at: string[] = [];
      for (let p = rule.parent; p && p.type === "atrule"; p = p.parent)
        at.unshift(`@${(p as AtRule).name} ${(p as AtRule).params}`);
      if (at.some((a) => a.includes("keyframes"))) return;
      const decls = (rule.nodes ?? []).filter((n) => n.type === "decl");
      if (decls.length < 2) return;
      const key = `${at.map((a) => `${a} `).join("")}{ ${decls.map((d) => `${d.prop}: ${d.value}${d.important ? " !important" : ""}`).join("; ")} }`;
      const where = `${name}:${rule.source?.start?.line} ${rule.selector.replace(/\s+/g, " ")}`;
      blocks.set(key, [...(blocks.get(key) ?? []), where]);
    });
  }
  for (const [key, where] of blocks)
    if (where.length > 1) problems.push(`block repeated in ${where.join(" and ")}: ${key}`);
  const imported = new Set<string>();
  for (const [path, text] of modules)
    for (const m of text.matchAll(/^import\s+"(\.[^"]+\.css)";/gm)) imported.add(resolve(dirname(path), m[1]!));
  for (const path of sheets.keys())
    if (!imported.has(path)) problems.push(`${relative(src, path)}: imported by no dashboard module`);
  return problems;
}

const files = walk(src);
const read = (paths: string[]) => new Map(paths.map((p) => [p, readFileSync(p, "utf8")]));
const sheets = read(files.filter((p) => p.endsWith(".css")));
const modules = read(files.filter((p) => p.endsWith(".ts")));

describe("the dashboard's stylesheets", () => {
  it("are several, each imported, none with a repeated block or a long line", () => {
    expect(sheets.size).toBeGreaterThan(5);
    expect(cssProblems(sheets, modules)).toEqual([]);
  });

  it("fail on a block repeated in another sheet, a long line and a sheet nobody imports", () => {
    const page = join(src, "styles", "a.css");
    const part = join(src, "styles", "b.css");
    const lonely = join(src, "styles", "c.css");
    const seeded = new Map([
      [
        page,
        ".a {\n  color: red;\n  margin: 0;\n}\n@media (max-width: 760px) {\n  .a {\n    color: red;\n    margin: 0;\n  }\n}\n",
      ],
      [
        part,
        `.b {\n  margin: 0;\n  color: red;\n}\n.c {\n  color: red;\n  margin: 0;\n}\n/* ${"x".repeat(MAX_LINE)} */\n`,
      ],
      [lonely, ".d {\n  display: none;\n}\n.e {\n  display: none;\n}\n"],
    ]);
    const mods = new Map([[join(src, "x.ts"), 'import "./styles/a.css";\nimport "./styles/b.css";\n']]);
    expect(cssProblems(seeded, mods)).toEqual([
      "styles/b.css:9: line of 126 characters (over 120)",
      "block repeated in styles/a.css:1 .a and styles/b.css:5 .c: { color: red; margin: 0 }",
      "styles/c.css: imported by no dashboard module",
    ]);
  });
});

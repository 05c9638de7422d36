// The README stays a front page (at most 12,000 bytes), and every relative link in it, in
// docs/*.md, in ARCHITECTURE.md and in the Python client's README resolves: the file exists, and
// an #anchor names a heading of the target page as GitHub slugs it (or an explicit id); every table row has as
// many cells as its header.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const README_BUDGET_BYTES = 12_000;

const pages = [
  "README.md",
  "ARCHITECTURE.md",
  "clients/python/README.md",
  ...readdirSync(join(root, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];

/** The text outside fenced code blocks and inline code spans (links there are not links). */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[\s\S]*?^\1/gm, "").replace(/`[^`\n]*`/g, "");
}

/** GitHub's heading slug: lower case, punctuation dropped (but `-` and `_`), spaces to `-`. */
function slug(heading: string): string {
  const text = heading
    .replace(/`/g, "")
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

/** Every anchor a page offers: its headings' slugs (repeats get -1, -2, ...) and explicit ids. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of markdown.replace(/^(```|~~~)[\s\S]*?^\1/gm, "").split("\n")) {
    const h = /^#{1,6} (.*)$/.exec(line);
    if (!h) continue;
    const base = slug(h[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of markdown.matchAll(/<a (?:name|id)="([^"]+)"/g)) out.add(m[1]!);
  return out;
}

/** Relative link targets of a page: markdown links and images (not URLs with a scheme). */
function links(markdown: string): string[] {
  const text = prose(markdown);
  const out: string[] = [];
  for (const m of text.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push(m[1]!);
  return out.filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t));
}

it("the README is a front page: at most 12,000 bytes", () => {
  const size = statSync(join(root, "README.md")).size;
  expect(size).toBeGreaterThan(0);
  expect(size).toBeLessThanOrEqual(README_BUDGET_BYTES);
});

it("the slugs are GitHub's (the ones the pages link to)", () => {
  expect(slug("Producer envelope (exactly-once)")).toBe("producer-envelope-exactly-once");
  expect(slug("Filtering a run's episodes")).toBe("filtering-a-runs-episodes");
  expect(slug("Python: stream a rollout from a `verifiers` worker")).toBe(
    "python-stream-a-rollout-from-a-verifiers-worker",
  );
  expect(slug("The raw path: forward what `EnvClient.run` receives")).toBe(
    "the-raw-path-forward-what-envclientrun-receives",
  );
});

it("the checker finds a broken file link and a broken anchor", () => {
  expect(links("see [x](docs/nowhere.md#a), `[no](skip.md)` and [web](https://example.com)")).toEqual([
    "docs/nowhere.md#a",
  ]);
  expect(anchors("# A title\n## Twice\n## Twice\n```\n# not a heading\n```").has("not-a-heading")).toBe(false);
  expect([...anchors("# A title\n## Twice\n## Twice")]).toEqual(["a-title", "twice", "twice-1"]);
});

it.each(pages)("every relative link and #anchor in %s resolves", (page) => {
  const file = join(root, page);
  const markdown = readFileSync(file, "utf8");
  const broken: string[] = [];
  const targets = links(markdown);
  for (const target of targets) {
    const [path, anchor] = target.split("#") as [string, string | undefined];
    const to = path === "" ? file : resolve(dirname(file), decodeURI(path));
    if (!existsSync(to)) {
      broken.push(`${target}: no ${relative(root, to)}`);
      continue;
    }
    if (anchor === undefined) continue;
    if (!to.endsWith(".md")) {
      broken.push(`${target}: an anchor into a file that is not markdown`);
      continue;
    }
    if (!anchors(readFileSync(to, "utf8")).has(anchor))
      broken.push(`${target}: ${relative(root, to)} has no heading #${anchor}`);
  }
  expect(broken).toEqual([]);
});

it("docs/limits.md has a row for every [vars] setting in wrangler.toml", () => {
  const toml = readFileSync(join(root, "wrangler.toml"), "utf8");
  const vars = /^\[vars\]\n([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(toml)![1]!;
  const names = [...vars.matchAll(/^([A-Z][A-Z0-9_]*)\s*=/gm)].map((m) => m[1]!);
  expect(names.length).toBeGreaterThan(10);
  const rows = readFileSync(join(root, "docs", "limits.md"), "utf8")
    .split("\n")
    .filter((l) => l.startsWith("| `"))
    .join("\n");
  expect(names.filter((n) => !rows.includes(`\`${n}\``))).toEqual([]);
});

it("docs/http-api.md's table has a row for every route action the Worker knows (src/protocol/http/route.ts)", () => {
  const route = readFileSync(join(root, "src", "protocol", "http", "route.ts"), "utf8");
  const union = (name: string) =>
    [.../"([a-z_]+)"/g[Symbol.matchAll](new RegExp(`type ${name} =\\s*([^;]+);`).exec(route)![1]!)].map((m) => m[1]!);
  const rows = readFileSync(join(root, "docs", "http-api.md"), "utf8")
    .split("\n")
    .filter((l) => l.startsWith("| `"))
    .map((l) => l.split("|")[1]!);
  const paths = rows.join("\n");
  // "episode" is /v1/episodes/{id} itself, "run" /v1/runs/{run}, "group" /v1/runs/{run}/groups/{g}
  const bare: Record<string, string> = {
    episode: "/v1/episodes/{id}`",
    run: "/v1/runs/{run}`",
    group: "/v1/runs/{run}/groups/{g}`",
  };
  const missing = [
    ...union("EpisodeAction").map((a) => bare[a] ?? `/v1/episodes/{id}/${a}\``),
    ...union("RunAction").map((a) => bare[a] ?? `/v1/runs/{run}/${a}\``),
  ].filter((p) => !paths.includes(p));
  expect(union("RunAction").length).toBeGreaterThan(5);
  expect(missing).toEqual([]);
});

it("every docs page is reachable from the index, and the index from the README", () => {
  const readme = links(readFileSync(join(root, "README.md"), "utf8"));
  expect(readme).toContain("docs/README.md");
  const index = new Set(links(readFileSync(join(root, "docs", "README.md"), "utf8")).map((t) => t.split("#")[0]));
  const unlisted = pages.filter(
    (p) => p.startsWith("docs/") && p !== "docs/README.md" && !index.has(p.slice("docs/".length)),
  );
  expect(unlisted).toEqual([]);
});

/** A table row's cells as GitHub splits them: on every `|` not escaped (`\|`), code spans included. */
function cells(row: string): number {
  return row
    .trim()
    .replace(/^\|/, "")
    .replace(/\|$/, "")
    .split(/(?<!\\)\|/).length;
}

it("every table's rows have as many cells as its header (a cell more shows as a stray column)", () => {
  const bad: string[] = [];
  for (const page of pages) {
    const lines = readFileSync(join(root, page), "utf8")
      .replace(/^(```|~~~)[\s\S]*?^\1/gm, "")
      .split("\n");
    for (let i = 1; i < lines.length; i++) {
      if (!/^\|(\s*:?-+:?\s*\|)+\s*$/.test(lines[i]!.trim())) continue; // a table's delimiter row
      const width = cells(lines[i - 1]!);
      for (let j = i + 1; j < lines.length && lines[j]!.trim().startsWith("|"); j++)
        if (cells(lines[j]!) !== width) bad.push(`${page}:${j + 1}: ${cells(lines[j]!)} cells under ${width} headers`);
    }
  }
  expect(bad).toEqual([]);
});

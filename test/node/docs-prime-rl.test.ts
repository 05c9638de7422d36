// docs/prime-rl.md states the row shape of every file the bridge reads: each documented key is on the
// fixture's rows (required keys on every row), and every key the fixture's rows have is documented.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "..", "..");
const TRACES = join(ROOT, "clients/python/tests/fixtures/prime-rl/golden-run/files/monitors/file/traces");

/** The doc's table: per file pattern, the keys of one row (`?`: on some rows only). */
function documented(): Map<string, { required: string[]; optional: string[] }> {
  const doc = readFileSync(join(ROOT, "docs/prime-rl.md"), "utf8");
  const start = doc.indexOf("#### The input files' rows");
  expect(start, "docs/prime-rl.md has a section of the input files' rows").toBeGreaterThan(0);
  const out = new Map<string, { required: string[]; optional: string[] }>();
  for (const line of doc.slice(start).split("\n").slice(1)) {
    if (line.startsWith("#")) break;
    const m = /^\| `([^`]+)`[^|]*\| `\{([^}]*)\}`/.exec(line);
    if (!m) continue;
    const keys = m[2]!.split(",").map((k) => k.trim());
    out.set(m[1]!, {
      required: keys.filter((k) => !k.endsWith("?")),
      optional: keys.filter((k) => k.endsWith("?")).map((k) => k.slice(0, -1)),
    });
  }
  return out;
}

function rows(dir: string, name: (f: string) => boolean, lines = true): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const f of readdirSync(dir).filter(name)) {
    const text = readFileSync(join(dir, f), "utf8");
    if (!lines) out.push(JSON.parse(text) as Record<string, unknown>);
    else for (const l of text.split("\n")) if (l.trim()) out.push(JSON.parse(l) as Record<string, unknown>);
  }
  return out;
}

const FILES: Record<string, () => Array<Record<string, unknown>>> = {
  "live/pending/<id>.json": () => rows(join(TRACES, "live/pending"), (f) => f.endsWith(".json"), false),
  "live/<trace>.jsonl": () => rows(join(TRACES, "live"), (f) => f.endsWith(".jsonl")),
  "stream.index.jsonl": () => rows(TRACES, (f) => f === "stream.index.jsonl"),
  "stream/NNNNN.jsonl[.zst]": () => rows(join(TRACES, "stream"), (f) => f.endsWith(".jsonl")),
  "annotations/<producer>.index.jsonl": () => rows(join(TRACES, "annotations"), (f) => f.endsWith(".index.jsonl")),
  "annotations/<producer>/NNNNN.jsonl": () =>
    ["orch", "trainer"].flatMap((p) => rows(join(TRACES, "annotations", p), (f) => f.endsWith(".jsonl"))),
};

describe("docs/prime-rl.md: the bridge's input rows", () => {
  const table = documented();
  it("names every file the bridge reads", () => {
    expect([...table.keys()].sort()).toEqual(Object.keys(FILES).sort());
  });
  for (const [file, read] of Object.entries(FILES)) {
    it(`${file}: the documented keys are the fixture's`, () => {
      const shape = table.get(file);
      expect(shape, file).toBeDefined();
      const found = read();
      expect(found.length, `${file}: fixture rows`).toBeGreaterThan(0);
      for (const r of found) for (const k of shape!.required) expect(Object.keys(r), `${file} ${k}`).toContain(k);
      const named = new Set([...shape!.required, ...shape!.optional]);
      const seen = new Set(found.flatMap((r) => Object.keys(r)));
      for (const k of seen) expect(named.has(k), `${file}: key ${k} undocumented`).toBe(true);
    });
  }
});

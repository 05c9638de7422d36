// The three layers as folders (docs/architecture.md): src/protocol (pure), src/objects (the Durable
// Objects), src/worker (the Worker). What keeps them apart is checked here against the project's
// own biome.json: a runtime import in the protocol fails the lint, and code outside src/ reaches the
// relay only through the protocol's one entry. (src/protocol/tsconfig.json, in the checks, compiles
// the protocol without the Workers runtime's types.)
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const biome = join(root, "node_modules", ".bin", "biome");
const work = mkdtempSync(join(tmpdir(), "episode-relay-layers-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

// the project's lint configuration, over probe files in a folder of their own (nothing is written into the checkout)
const config = JSON.parse(readFileSync(join(root, "biome.json"), "utf8")) as Record<string, unknown>;
delete config.$schema;
delete config.vcs;
config.files = { includes: ["**"] };
writeFileSync(join(work, "biome.json"), JSON.stringify(config));

interface Diagnostic {
  category: string;
  message: string;
  location: { path: string; start: { line: number } };
}

/** Lint `files` (path → source) under the project's rules; the restricted-import findings. */
function lint(files: Record<string, string>): Diagnostic[] {
  const dir = mkdtempSync(join(work, "case-"));
  writeFileSync(join(dir, "biome.json"), JSON.stringify(config));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  const r = spawnSync(biome, ["lint", "--reporter=json", "."], { cwd: dir, encoding: "utf8" });
  const report = JSON.parse(r.stdout) as { diagnostics: Diagnostic[] };
  return report.diagnostics.filter((d) => d.category === "lint/style/noRestrictedImports");
}

describe("the layers, as folders", () => {
  it("src/ holds the protocol, the objects and the Worker, and nothing else but type declarations", () => {
    const entries = readdirSync(join(root, "src"), { withFileTypes: true });
    expect(
      entries
        .filter((e) => e.isDirectory())
        .map((e) => e.name)
        .sort(),
    ).toEqual(["objects", "protocol", "worker"]);
    for (const e of entries.filter((e) => e.isFile())) expect(e.name, e.name).toMatch(/\.d\.ts$|^tsconfig\.json$/);
    expect(existsSync(join(root, "src", "protocol", "tsconfig.json"))).toBe(true);
  });

  it("a runtime import in src/protocol fails the lint, as does one of the objects or the Worker", () => {
    const found = lint({
      "src/protocol/wire/runtime.ts":
        'import { DurableObject } from "cloudflare:workers";\nexport const a = DurableObject;\n',
      "src/protocol/wire/upward.ts":
        'import { Episode } from "../../objects/episode/episode.js";\nimport w from "../../worker/index.js";\nexport const b = [Episode, w];\n',
      "src/protocol/wire/fine.ts": 'import { a } from "./runtime.js";\nexport const c = a;\n',
    });
    const at = [...new Set(found.map((d) => `${d.location.path.replace(/\\/g, "/")}:${d.location.start.line}`))].sort();
    expect(at).toEqual([
      "src/protocol/wire/runtime.ts:1",
      "src/protocol/wire/upward.ts:1",
      "src/protocol/wire/upward.ts:2",
    ]);
    expect(found[0]!.message).toMatch(/pure protocol/);
  });

  it("the objects do not import the Worker above them", () => {
    const found = lint({
      "src/objects/episode/upward.ts": 'import { route } from "../../worker/run-routes.js";\nexport const a = route;\n',
      "src/objects/episode/fine.ts":
        'import { b } from "../../protocol/index.js";\nimport { c } from "../hub/hub.js";\nexport const d = [b, c];\n',
    });
    expect([...new Set(found.map((d) => `${d.location.path.replace(/\\/g, "/")}:${d.location.start.line}`))]).toEqual([
      "src/objects/episode/upward.ts:1",
    ]);
    expect(found[0]!.message).toMatch(/below the Worker/);
  });

  it("the Worker imports from src/objects only the Durable Object classes it exports, and their meter", () => {
    const dir = join(root, "src", "worker");
    const fromObjects = new Map<string, string[]>();
    for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
      const text = readFileSync(join(dir, file), "utf8");
      for (const m of text.matchAll(/import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+"(\.\.\/objects\/[^"]+)"/g)) {
        const names = m[1]!
          .split(",")
          .map(
            (n) =>
              n
                .trim()
                .split(/\s+as\s+/)
                .at(-1)!,
          )
          .filter(Boolean);
        fromObjects.set(`${file} ${m[2]}`, names);
      }
    }
    const index = readFileSync(join(dir, "index.ts"), "utf8");
    expect([...fromObjects.keys()].every((k) => k.startsWith("index.ts "))).toBe(true);
    const names = [...fromObjects.values()].flat();
    expect(names).toContain("metered");
    for (const name of names.filter((n) => n !== "metered")) {
      // each class is exported as the objects wrangler.toml binds, metered (src/objects/billing/metered.ts)
      expect(index, name).toMatch(new RegExp(`export const \\w+ = metered\\(${name}\\b`));
    }
  });

  it("outside src/, only the protocol's entry may be imported: not its modules, not the objects or the Worker", () => {
    const found = lint({
      "tools/probe.ts": [
        'import { a } from "../src/protocol/index.js";',
        'import { b } from "../src/protocol/wire/reader.js";',
        'import { c } from "../src/objects/hub/hub.js";',
        'import { d } from "../src/worker/index.js";',
        "export const x = [a, b, c, d];",
        "",
      ].join("\n"),
      "dashboard/src/probe.ts": 'import { e } from "../../src/protocol/index.js";\nexport const y = e;\n',
    });
    const at = [...new Set(found.map((d) => `${d.location.path.replace(/\\/g, "/")}:${d.location.start.line}`))].sort();
    expect(at).toEqual(["tools/probe.ts:2", "tools/probe.ts:3", "tools/probe.ts:4"]);
    expect(found[0]!.message).toMatch(/one entry/);
  });

  it("the checkout itself passes those rules", () => {
    const out = execFileSync(
      biome,
      ["lint", "--reporter=json", "--max-diagnostics=none", "src", "clients", "dashboard/src", "tools", "bench"],
      {
        cwd: root,
        encoding: "utf8",
      },
    );
    const restricted = (JSON.parse(out) as { diagnostics: Diagnostic[] }).diagnostics.filter(
      (d) => d.category === "lint/style/noRestrictedImports",
    );
    expect(restricted).toEqual([]);
  });
});

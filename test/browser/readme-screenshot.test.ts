// docs/development.md's screenshot command runs as written (its output path given as its one
// argument, under test-results/ so the committed docs/images/dashboard-run.png stays as it is):
// it exits 0 and writes a 1280×1500 PNG, like the committed one.
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");

function documentedCommand(): string {
  const page = readFileSync(join(root, "docs", "development.md"), "utf8");
  const m = /<!-- doc-snippet: screenshot -->\s*```sh\n([\s\S]*?)```/.exec(page);
  if (!m) throw new Error("docs/development.md has no sh snippet screenshot");
  return m[1]!.replace(/#.*$/m, "").trim();
}

/** A PNG's width and height (its IHDR chunk), or null for bytes that are not a PNG. */
function pngSize(bytes: Buffer): { width: number; height: number } | null {
  if (!bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) return null;
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

it("the screenshot command writes the run page as a 1280×1500 PNG, the committed one's size", () => {
  const command = documentedCommand();
  expect(command).toBe("npx tsx test/browser/readme-screenshot.ts");
  const dir = join(root, "test-results", "readme-screenshot");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const out = join(dir, "dashboard-run.png");
  const r = spawnSync("bash", ["-c", `${command} ${out}`], { cwd: root, encoding: "utf8", timeout: 180_000 });
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
  expect(r.stdout).toContain(`wrote ${out}`);
  const shot = readFileSync(out);
  expect(pngSize(shot)).toEqual({ width: 1280, height: 1500 });
  expect(shot.length).toBeGreaterThan(20_000); // a page drawn, not a blank one
  expect(pngSize(readFileSync(join(root, "docs", "images", "dashboard-run.png")))).toEqual({
    width: 1280,
    height: 1500,
  });
}, 200_000);

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const toml = readFileSync(new URL("../../wrangler.toml", import.meta.url), "utf8");

/** The bodies of every `[[name]]` array-of-tables entry in the (simple, flat) wrangler.toml. */
function tables(name: string): string[] {
  return toml.split(/^\s*\[/m).filter((block) => block.startsWith(`[${name}]]`));
}

describe("wrangler.toml", () => {
  it("binds EPISODES to Episode and creates it as a SQLite class in migration v1", () => {
    const bindings = tables("durable_objects.bindings");
    expect(bindings.some((b) => /name\s*=\s*"EPISODES"/.test(b) && /class_name\s*=\s*"Episode"/.test(b))).toBe(true);

    const v1 = tables("migrations").find((m) => /tag\s*=\s*"v1"/.test(m));
    expect(v1).toBeDefined();
    const classes = /new_sqlite_classes\s*=\s*\[([^\]]*)\]/.exec(v1 ?? "")?.[1] ?? "";
    expect(classes.split(",").map((s) => s.trim().replace(/^"|"$/g, ""))).toContain("Episode");
  });

  it("binds EPISODE_INDEX to EpisodeIndex, created as a SQLite class in migration v2", () => {
    const bindings = tables("durable_objects.bindings");
    expect(
      bindings.some((b) => /name\s*=\s*"EPISODE_INDEX"/.test(b) && /class_name\s*=\s*"EpisodeIndex"/.test(b)),
    ).toBe(true);
    const v2 = tables("migrations").find((m) => /tag\s*=\s*"v2"/.test(m));
    expect(/new_sqlite_classes\s*=\s*\["EpisodeIndex"\]/.test(v2 ?? "")).toBe(true);
  });

  it("serves the dashboard as assets; only /v1/* runs the Worker first", () => {
    const assets = toml.split(/^\[assets\]\s*$/m)[1]?.split(/^\[/m)[0] ?? "";
    expect(assets).toMatch(/directory\s*=\s*"\.\/dashboard\/dist"/);
    expect(assets).toMatch(/not_found_handling\s*=\s*"single-page-application"/);
    expect(assets).toMatch(/run_worker_first\s*=\s*\["\/v1\/\*"\]/);
  });
});

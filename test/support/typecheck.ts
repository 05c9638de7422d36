// Type-checks files as a consumer of the package would: strict, Node's ESM resolution (nodenext).
import { spawnSync } from "node:child_process";

export function typeCheckAsConsumer(tsc: string, cwd: string, files: string[], extra: string[] = []) {
  const args = [
    "--noEmit",
    "--strict",
    "--module",
    "nodenext",
    "--moduleResolution",
    "nodenext",
    "--target",
    "es2022",
    ...extra,
    ...files,
  ];
  const r = spawnSync(process.execPath, [tsc, ...args], { cwd, encoding: "utf8" });
  return { status: r.status, output: r.stdout + r.stderr };
}

#!/usr/bin/env node
// The system packages the tests need, from Debian (apt-get; needs root, as on the project's
// machines), never a download by a test tool: Chromium for the browser tests, and the Python
// client's test modules for /usr/bin/python3. `npm test` installs what its suites need in one step
// before they start (suites run side by side, and two apt-gets at once would fight over dpkg's
// lock); the browser project's global setup and clients/python/run-tests.sh call it too, so each
// still works alone, and find nothing to do under `npm test`.
//
//   node scripts/system-deps.mjs [chromium] [python]   (default: both)
//
// PYTHON names another interpreter; Debian's packages serve /usr/bin/python3 only, so for another
// one a missing module is an error.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const CHROMIUM = "/usr/bin/chromium";
const DEBIAN_PYTHON = "/usr/bin/python3";

/** Python module -> Debian package (the prime-rl bridge's sealed chunks need zstandard). */
const PYTHON_MODULES = {
  msgpack: "python3-msgpack",
  httpx: "python3-httpx",
  websockets: "python3-websockets",
  pytest: "python3-pytest",
  zstandard: "python3-zstandard",
};

/** The interpreter the Python tests run with: $PYTHON, else Debian's, else the first python3 on PATH. */
export function pythonPath() {
  if (process.env.PYTHON) return process.env.PYTHON;
  if (existsSync(DEBIAN_PYTHON)) return DEBIAN_PYTHON;
  const which = spawnSync("sh", ["-c", "command -v python3"], { encoding: "utf8" });
  return which.stdout.trim() || DEBIAN_PYTHON;
}

/**
 * What is missing, as Debian packages; throws when something missing cannot come from Debian.
 * @param {readonly ("chromium" | "python")[]} what
 * @returns {string[]}
 */
function missingPackages(what) {
  /** @type {string[]} */
  const missing = [];
  if (what.includes("chromium") && !existsSync(CHROMIUM)) missing.push("chromium");
  if (what.includes("python")) {
    const python = pythonPath();
    if (!existsSync(python)) throw new Error(`no python3 found (${python})`);
    // one interpreter start for every module: it prints the ones it cannot find
    const found = spawnSync(
      python,
      [
        "-c",
        "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))",
        ...Object.keys(PYTHON_MODULES),
      ],
      { encoding: "utf8" },
    );
    if (found.status !== 0) throw new Error(`${python} could not look for its modules: ${found.stderr}`);
    const absent = new Set(found.stdout.trim().split(/\s+/).filter(Boolean));
    const lacking = Object.entries(PYTHON_MODULES).filter(([module]) => absent.has(module));
    if (lacking.length > 0 && python !== DEBIAN_PYTHON) {
      const names = lacking.map(([, p]) => p).join(" ");
      throw new Error(`${python} lacks ${names} (Debian's packages serve ${DEBIAN_PYTHON} only)`);
    }
    missing.push(...lacking.map(([, p]) => p));
  }
  return missing;
}

/** @param {string[]} args */
function apt(args) {
  const sudo = process.getuid?.() === 0 ? [] : ["sudo", "-n"];
  const [cmd, ...rest] = [...sudo, "apt-get", ...args];
  const r = spawnSync(/** @type {string} */ (cmd), rest, {
    stdio: ["ignore", "ignore", "inherit"],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
  return r.status === 0;
}

/**
 * Install whichever of these is missing, in one apt-get (after an index update only if the first
 * try fails: a fresh machine's index may be empty or stale); a no-op when nothing is.
 * @param {readonly ("chromium" | "python")[]} what
 * @returns {string[]} the packages installed
 */
export function ensureSystemPackages(what) {
  const missing = missingPackages(what);
  if (missing.length === 0) return [];
  console.error(`[system-deps] installing ${missing.join(" ")} (apt-get)`);
  const started = Date.now();
  const install = ["install", "-y", "-qq", "--no-install-recommends", ...missing];
  if (!apt(install) && !(apt(["update", "-qq"]) && apt(install))) {
    throw new Error(`could not install ${missing.join(" ")}: as root, apt-get install ${missing.join(" ")}`);
  }
  console.error(`[system-deps] installed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return missing;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const asked = process.argv.slice(2);
  const bad = asked.filter((a) => a !== "chromium" && a !== "python");
  if (bad.length > 0) {
    console.error(`usage: node scripts/system-deps.mjs [chromium] [python] (not ${bad.join(" ")})`);
    process.exit(2);
  }
  try {
    ensureSystemPackages(/** @type {("chromium" | "python")[]} */ (asked.length > 0 ? asked : ["chromium", "python"]));
  } catch (e) {
    console.error(`[system-deps] ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}

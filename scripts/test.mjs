#!/usr/bin/env node
// `npm test [filters...]`: runs the Node-side, the workerd-side and the browser vitest projects, each with
// the default reporter (progress for humans) and the JSON reporter (for counting), then the
// Python client's pytest suite (clients/python/run-tests.sh, counted from its JUnit XML), then
// prints one closing line `N passed, N failed[, N skipped]`. Static checks (lint, format, tsc for
// every tsconfig, wrangler types) run first and count one test each. Exits 1 if any test failed or a
// project crashed. Extra arguments are passed to the vitest projects as filters (the Python
// suite then runs only if "python" is one of them).
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { QUIET_ENV } from "./quiet-env.mjs";
import { WRANGLER_TYPES_ARGS } from "./worker-types.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const vitest = join(root, "node_modules", ".bin", process.platform === "win32" ? "vitest.cmd" : "vitest");
const resultsDir = join(root, "test-results");
const filters = process.argv.slice(2);

const projects = [
  { name: "node", config: "vitest.node.config.ts" },
  { name: "workers", config: "vitest.workers.config.ts" },
  // the dashboard in headless Chromium (Debian's, driven by playwright-core); screenshots go to
  // test-results/screenshots/
  { name: "browser", config: "vitest.browser.config.ts" },
];

/** @type {import("node:child_process").ChildProcess | undefined} */
let current;
let interrupted = false;
for (const signal of /** @type {const} */ (["SIGINT", "SIGTERM"])) {
  process.on(signal, () => {
    interrupted = true;
    current?.kill(signal);
  });
}

/**
 * @param {string[]} args
 * @returns {Promise<number>} exit code (signals map to 128+n, spawn errors to 1)
 */
function run(args) {
  return new Promise((resolve) => {
    const child = spawn(vitest, args, {
      cwd: root,
      stdio: "inherit",
      env: { ...process.env, ...QUIET_ENV },
    });
    current = child;
    child.on("error", (err) => {
      console.error(`[test] could not start vitest: ${err.message}`);
      resolve(1);
    });
    child.on("exit", (code, signal) => resolve(code ?? (signal ? 129 : 1)));
  });
}

/**
 * Counts from vitest's JSON report, and the failed tests it names. A test file that failed to load
 * or a run that exited non-zero without a failed test counts as one failure; a missing or
 * unreadable report counts as one too.
 * @param {string} file
 * @param {number} exitCode
 */
function count(file, exitCode) {
  const totals = { passed: 0, failed: 0, skipped: 0, names: /** @type {string[]} */ ([]) };
  /** @type {any} */
  let report;
  try {
    report = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    totals.failed = 1;
    return { ...totals, note: "no JSON report (crashed?)" };
  }
  totals.passed = report.numPassedTests ?? 0;
  totals.failed = report.numFailedTests ?? 0;
  totals.skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
  for (const suite of report.testResults ?? []) {
    const path = String(suite.name ?? "").replace(`${root}/`, "");
    const failed = (suite.assertionResults ?? []).filter((/** @type {any} */ t) => t.status === "failed");
    for (const t of failed)
      totals.names.push(`${path} > ${t.fullName ?? t.title}: ${firstLine(t.failureMessages?.[0])}`);
    if (suite.status === "failed" && failed.length === 0) {
      totals.failed += 1; // load error, failing hook, ...
      totals.names.push(`${path}: ${firstLine(suite.message)}`);
    }
  }
  if (exitCode !== 0 && totals.failed === 0) {
    totals.failed = 1;
    return { ...totals, note: `vitest exited ${exitCode}` };
  }
  return { ...totals, note: "" };
}

/**
 * A failure's message as one line for the closing recap (CI keeps only the tail of the log).
 * @param {unknown} text
 */
function firstLine(text) {
  return (
    String(text ?? "")
      .split("\n")
      .find((l) => l.trim() !== "")
      ?.trim()
      .slice(0, 300) ?? ""
  );
}

/**
 * An XML attribute's value in an element's attribute text ("" when absent).
 * @param {string} src
 * @param {string} name
 */
function xmlAttr(src, name) {
  return new RegExp(`\\b${name}="([^"]*)"`).exec(src)?.[1] ?? "";
}

/**
 * Counts from a pytest JUnit XML report (attributes of its <testsuite> elements), and the failed
 * tests it names ("class::test: message").
 * @param {string} file
 * @param {number} exitCode
 */
function countJunit(file, exitCode) {
  const totals = { passed: 0, failed: 0, skipped: 0, names: /** @type {string[]} */ ([]) };
  let xml;
  try {
    xml = readFileSync(file, "utf8");
  } catch {
    return { ...totals, failed: 1, note: `no JUnit report (exit ${exitCode})` };
  }
  for (const m of xml.matchAll(/<testsuite\b([^>]*)>/g)) {
    const attr = (/** @type {string} */ name) => Number(xmlAttr(m[1] ?? "", name) || 0);
    const failed = attr("failures") + attr("errors");
    totals.failed += failed;
    totals.skipped += attr("skipped");
    totals.passed += attr("tests") - failed - attr("skipped");
  }
  for (const m of xml.matchAll(/<testcase\b([^>]*)>\s*<(failure|error)\b([^>]*)>/g)) {
    const test = `${xmlAttr(m[1] ?? "", "classname")}::${xmlAttr(m[1] ?? "", "name")}`;
    totals.names.push(`${test}: ${xmlAttr(m[3] ?? "", "message").slice(0, 300)}`);
  }
  if (exitCode !== 0 && totals.failed === 0) return { ...totals, failed: 1, note: `pytest exited ${exitCode}` };
  return { ...totals, note: "" };
}

/**
 * Static checks, each counted as one test: the linter and formatter (Biome), the type checker for
 * every tsconfig (Worker code, its tests, Node tools, the dashboard each see only their own types),
 * and `Env` against wrangler.toml. They run first and fast; a failure is printed and counted.
 */
const CHECKS = [
  { name: "biome check (lint + format)", bin: "biome", args: ["check", "--error-on-warnings", "."] },
  ...[
    "tsconfig.json",
    "src/tsconfig.json",
    "src/protocol/tsconfig.json",
    "test/workers/tsconfig.json",
    "dashboard/tsconfig.json",
  ].map((p) => ({
    name: `tsc -p ${p}`,
    bin: "tsc",
    args: ["--noEmit", "-p", p],
  })),
  {
    name: "wrangler types --check (Env matches wrangler.toml)",
    bin: "wrangler",
    args: ["types", ...WRANGLER_TYPES_ARGS, "--check"],
  },
];

/**
 * @param {string} bin a name under node_modules/.bin
 * @param {string[]} args
 * @param {boolean} quiet capture output, print it only on failure
 * @returns {Promise<number>}
 */
function runBin(bin, args, quiet) {
  return new Promise((resolve) => {
    const child = spawn(join(root, "node_modules", ".bin", process.platform === "win32" ? `${bin}.cmd` : bin), args, {
      cwd: root,
      stdio: quiet ? ["ignore", "pipe", "pipe"] : "inherit",
      env: { ...process.env, ...QUIET_ENV },
    });
    current = child;
    let out = "";
    child.stdout?.on("data", (d) => {
      out += d;
    });
    child.stderr?.on("data", (d) => {
      out += d;
    });
    child.on("error", (err) => {
      console.error(`[test] could not start ${bin}: ${err.message}`);
      resolve(1);
    });
    child.on("exit", (code, signal) => {
      if (code !== 0 && quiet) process.stdout.write(out);
      resolve(code ?? (signal ? 129 : 1));
    });
  });
}

mkdirSync(resultsDir, { recursive: true });
const sum = { passed: 0, failed: 0, skipped: 0 };
/** @type {string[]} which tests failed, recapped above the closing line */
const failures = [];
if (filters.length === 0 || filters.includes("checks")) {
  const started = Date.now();
  console.log("\n[test] checks: biome, tsc per tsconfig, wrangler types");
  let passed = 0;
  let failed = 0;
  for (const check of CHECKS) {
    if (interrupted) break;
    const code = await runBin(check.bin, check.args, true);
    console.log(`  ${code === 0 ? "✓" : "✗"} ${check.name}`);
    if (code === 0) passed += 1;
    else {
      failed += 1;
      failures.push(`checks: ${check.name}`);
    }
  }
  sum.passed += passed;
  sum.failed += failed;
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`[test] checks: ${passed} passed, ${failed} failed in ${secs} s`);
}
for (const project of projects) {
  if (interrupted) break;
  const output = join(resultsDir, `${project.name}.json`);
  rmSync(output, { force: true });
  const started = Date.now();
  console.log(`\n[test] ${project.name}: vitest run --config ${project.config} ${filters.join(" ")}`.trimEnd());
  const args = [
    "run",
    "--config",
    project.config,
    "--reporter=default",
    "--reporter=json",
    `--outputFile.json=${output}`,
    ...(filters.length > 0 ? ["--passWithNoTests"] : []),
    ...filters,
  ];
  const code = await run(args);
  const c = count(output, code);
  failures.push(...c.names.map((n) => `${project.name}: ${n}`));
  if (c.note) failures.push(`${project.name}: ${c.note}`);
  sum.passed += c.passed;
  sum.failed += c.failed;
  sum.skipped += c.skipped;
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `[test] ${project.name}: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped in ${secs} s${c.note ? ` (${c.note})` : ""}`,
  );
}
if (!interrupted && (filters.length === 0 || filters.includes("python"))) {
  const output = join(resultsDir, "python.xml");
  rmSync(output, { force: true });
  const started = Date.now();
  console.log("\n[test] python: clients/python/run-tests.sh");
  const code = await new Promise((resolve) => {
    const child = spawn("bash", [join(root, "clients", "python", "run-tests.sh"), "-q", `--junitxml=${output}`], {
      cwd: root,
      stdio: "inherit",
      env: { ...process.env, ...QUIET_ENV },
    });
    current = child;
    child.on("error", () => resolve(1));
    child.on("exit", (c, signal) => resolve(c ?? (signal ? 129 : 1)));
  });
  const c = countJunit(output, /** @type {number} */ (code));
  failures.push(...c.names.map((n) => `python: ${n}`));
  if (c.note) failures.push(`python: ${c.note}`);
  sum.passed += c.passed;
  sum.failed += c.failed;
  sum.skipped += c.skipped;
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `[test] python: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped in ${secs} s${c.note ? ` (${c.note})` : ""}`,
  );
}
if (interrupted) sum.failed = Math.max(sum.failed, 1);
if (failures.length > 0) {
  console.log("\n[test] failed:");
  for (const f of failures) console.log(`  ✗ ${f}`);
}

console.log(`${sum.passed} passed, ${sum.failed} failed${sum.skipped > 0 ? `, ${sum.skipped} skipped` : ""}`);
process.exit(sum.failed > 0 ? 1 : 0);

#!/usr/bin/env node
// `npm test [filters...]`: static checks (lint, format, tsc for every tsconfig, wrangler types; one
// test each), the Node-side, the workerd-side and the browser vitest projects, each with the default
// reporter (progress for humans) and the JSON reporter (for counting), and the Python client's
// pytest suite (clients/python/run-tests.sh, counted from its JUnit XML). Then it prints each
// suite's time and one closing line `N passed, N failed[, N skipped]`. Exits 1 if any test failed
// or a suite crashed. Extra arguments are passed to the vitest projects as filters (the Python
// suite then runs only if "python" is one of them, the checks only if "checks" is).
//
// One setup step comes first: the system packages the suites need (scripts/system-deps.mjs, one
// apt-get) and a directory for the run's one Worker bundle (scripts/worker-bundle.mjs), which
// every relay the suites start shares. The suites then run in three lanes side by side (LANES;
// TEST_LANES=1: one after another): on 2 cores a suite often waits (on relays, pages, sockets), so
// a third suite beside two keeps both cores working (a clean clone: 703 s in two lanes, 642 s in
// three). A lane that finishes a suite takes the next one not yet started, in the order `suites`
// lists them (the checks, then the longest first by the last run's times), so neither lane idles
// while suites are left. The Python suite is not in that queue: it mostly waits (on its relay,
// on sockets), so it runs from the start in a lane of its own beside the others; taken last, it
// ran alone after the browser suite while both cores idled (CI run 32: 121 s of 646). The first unfinished suite's output streams as it comes; a suite running beside it is kept and printed whole, in order, once it is first.
//
// A watchdog stops a suite that prints nothing and starts or ends no test for 5 minutes
// (TEST_SILENCE_S): its process group is killed and it counts as failed, naming the file and test
// that were running (vitest suites print a line as each file starts and ends, and note each test:
// scripts/vitest-progress.mjs). One case runs again instead: vitest-pool-workers stalling between two
// files with no test running (an upstream stall); the suite runs once more, whole, and says so.
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { QUIET_ENV } from "./quiet-env.mjs";
import { ensureSystemPackages } from "./system-deps.mjs";
import { TSCONFIGS, tscArgs } from "./typecheck.mjs";
import { shareBundle } from "./worker-bundle.mjs";
import { WRANGLER_TYPES_ARGS } from "./worker-types.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const resultsDir = join(root, "test-results");
const filters = process.argv.slice(2);

/** The vitest projects, in the order the lanes take them (see `suites` below). */
const projects = [
  { name: "workers", config: "vitest.workers.config.ts" },
  { name: "node", config: "vitest.node.config.ts" },
  // the dashboard in headless Chromium (Debian's, driven by playwright-core); screenshots go to
  // test-results/screenshots/
  { name: "browser", config: "vitest.browser.config.ts" },
];

/** @type {Set<import("node:child_process").ChildProcess>} the children running now */
const running = new Set();
let interrupted = false;
for (const signal of /** @type {const} */ (["SIGINT", "SIGTERM"])) {
  process.on(signal, () => {
    interrupted = true;
    for (const child of running) killGroup(child, signal);
  });
}

/**
 * Signal a child and everything it started (vitest's workers, workerd, Chromium, relays): each
 * child leads its own process group (spawned detached), so a terminal's Ctrl-C no longer reaches
 * them by itself.
 * @param {import("node:child_process").ChildProcess} child
 * @param {NodeJS.Signals} signal
 */
function killGroup(child, signal) {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    child.kill(signal); // the group is gone already; the child itself, if it is not
  }
}

/**
 * A suite that prints nothing and starts or ends no test for this long is taken as hung: its
 * process group is killed and the suite counts as failed, naming what was running (TEST_SILENCE_S overrides; the slowest single
 * test stays well under it). A CI run once sat idle for 15 minutes in the workers suite.
 */
const SILENCE_MS = Number(process.env.TEST_SILENCE_S || 300) * 1000;

/**
 * Where a suite's output goes: to the terminal while the suite is the first unfinished one (in
 * the order the suites are listed), else kept until it is.
 */
class Output {
  /** @type {Output[]} */
  static order = [];
  /** @type {string[]} */
  kept = [];
  done = false;
  constructor() {
    Output.order.push(this);
  }
  get live() {
    return Output.order.find((o) => !o.done) === this;
  }
  /** @param {string | Buffer} text */
  write(text) {
    if (this.live) process.stdout.write(text);
    else this.kept.push(String(text));
  }
  /** @param {string} line */
  log(line) {
    this.write(`${line}\n`);
  }
  /** The suite ended: the next unfinished suite's kept output is printed, and it streams from now. */
  end() {
    this.done = true;
    for (const o of Output.order) {
      if (o.kept.length > 0) process.stdout.write(o.kept.splice(0).join(""));
      if (!o.done) break;
    }
  }
}

/**
 * Run a program, its output (stdout and stderr) to `out`. Silent for SILENCE_MS (no output, and
 * no sign of life from `alive()`, the time of the last one), its process group is killed and
 * `hung` says what was running (`running()`, if given, names it).
 * @param {string} bin
 * @param {string[]} args
 * @param {Output | null} out null: the output is kept and returned, not shown
 * @param {{ env?: Record<string, string>; running?: () => string; alive?: () => number }} [opts]
 * @returns {Promise<{ code: number; text: string; hung: string }>} exit code (signals map to 129,
 *   spawn errors to 1); `hung`: "" unless the watchdog stopped it
 */
function run(bin, args, out, opts = {}) {
  return new Promise((resolve) => {
    const child = spawn(bin, args, {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
      // its own process group, so that the watchdog and Ctrl-C stop all it started
      detached: true,
      // the progress a terminal would get, in colour, though through a pipe
      env: {
        ...process.env,
        ...QUIET_ENV,
        ...(process.stdout.isTTY ? { FORCE_COLOR: "1" } : {}),
        ...opts.env,
      },
    });
    running.add(child);
    let text = "";
    let hung = "";
    /** @type {NodeJS.Timeout | undefined} */
    let kill;
    let heard = Date.now();
    // checked a few times per SILENCE_MS: quiet since the last output or sign of life (a test
    // that started or ended), the suite is stopped
    const watchdog = setInterval(
      () => {
        if (Date.now() - Math.max(heard, opts.alive?.() ?? 0) < SILENCE_MS) return;
        clearInterval(watchdog);
        const what = opts.running?.() ?? "";
        hung = `no output for ${SILENCE_MS / 1000} s${what ? ` while running ${what}` : ""}; its processes were killed`;
        const line = `\n[test] watchdog: ${bin.split("/").pop()} ${hung}\n`;
        if (out) out.write(line);
        else text += line;
        killGroup(child, "SIGTERM");
        kill = setTimeout(() => killGroup(child, "SIGKILL"), 10_000);
      },
      Math.min(SILENCE_MS / 4, 15_000),
    );
    const take = (/** @type {Buffer} */ d) => {
      heard = Date.now();
      if (out) out.write(d);
      else text += d;
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    let ended = false;
    const done = (/** @type {number} */ code) => {
      if (ended) return;
      ended = true;
      clearInterval(watchdog);
      clearTimeout(kill);
      running.delete(child);
      resolve({ code, text, hung });
    };
    child.on("error", (err) => {
      text += `could not start ${bin}: ${err.message}\n`;
      done(1);
    });
    child.on("close", (code, signal) => done(code ?? (signal ? 129 : 1)));
    // a grandchild outside the group that still holds the pipes must not keep the suite waiting
    child.on("exit", (code, signal) => {
      if (hung) setTimeout(() => done(code ?? (signal ? 129 : 1)), 5_000).unref();
    });
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
  // the tsconfigs `npm run typecheck` (and so `npm run deploy`) checks: test/node/deploy.test.ts
  // counts on this suite for them
  ...TSCONFIGS.map((p) => ({
    name: `tsc -b ${p}`,
    bin: "tsc",
    args: tscArgs(p),
  })),
  {
    name: "wrangler types --check (Env matches wrangler.toml)",
    bin: "wrangler",
    args: ["types", ...WRANGLER_TYPES_ARGS, "--check"],
  },
];

/** @param {string} name a program under node_modules/.bin */
const bin = (name) => join(root, "node_modules", ".bin", process.platform === "win32" ? `${name}.cmd` : name);

/**
 * `retried`: why the suite ran a second time (its counts are the second run's).
 * @typedef {{ passed: number; failed: number; skipped: number; names: string[]; note: string; retried?: string }} Counts
 */

/**
 * The static checks, each counted as one test; a failure's output is printed.
 * @param {Output} out
 * @returns {Promise<Counts>}
 */
async function checks(out) {
  out.log("\n[test] checks: biome, tsc per tsconfig, wrangler types");
  const c = { passed: 0, failed: 0, skipped: 0, names: /** @type {string[]} */ ([]), note: "" };
  for (const check of CHECKS) {
    if (interrupted) break;
    const { code, text, hung } = await run(bin(check.bin), check.args, null);
    if (code !== 0 || hung) out.write(text);
    out.log(`  ${code === 0 ? "✓" : "✗"} ${check.name}`);
    if (code === 0) c.passed += 1;
    else {
      c.failed += 1;
      c.names.push(check.name);
    }
  }
  return c;
}

/**
 * A vitest project, counted from its JSON report.
 * @param {{ name: string; config: string }} project
 * @param {Output} out
 * @returns {Promise<Counts>}
 */
async function vitestProject(project, out) {
  const c = await vitestRun(project, out);
  if (!c.stalled) return c;
  // the pool stalled between two files or after the last, no test running: said out loud, and the
  // suite runs again, once, whole; a test that hangs, or a second stall, fails. (The stall once seen
  // in the workers suite about one run in three, a call vitest waited for that an object's reset had
  // lost, is fixed in patches/: test/node/workers-run-end.test.ts; cloudflare/workers-sdk#15498 reports
  // others.)
  out.log(`\n[test] ${project.name}: the pool stalled between files (${c.stalled}); running the suite again, once`);
  const again = await vitestRun(project, out);
  if (again.stalled) return withHang(again, again.stalled);
  return { ...again, retried: `the first run stalled between files and was stopped (${c.stalled})` };
}

/**
 * One vitest run of a project. `stalled`: the watchdog stopped it while no file was running.
 * @param {{ name: string; config: string }} project
 * @param {Output} out
 * @returns {Promise<Counts & { stalled?: string }>}
 */
async function vitestRun(project, out) {
  const output = join(resultsDir, `${project.name}.json`);
  rmSync(output, { force: true });
  out.log(`\n[test] ${project.name}: vitest run --config ${project.config} ${filters.join(" ")}`.trimEnd());
  const args = [
    "run",
    "--config",
    project.config,
    "--reporter=default",
    "--reporter=json",
    // a line as each file starts and ends; the test running now, for the watchdog
    `--reporter=${join(root, "scripts", "vitest-progress.mjs")}`,
    `--outputFile.json=${output}`,
    ...(filters.length > 0 ? ["--passWithNoTests"] : []),
    ...filters,
  ];
  const progress = join(resultsDir, `${project.name}.running.json`);
  rmSync(progress, { force: true });
  const { code, hung } = await run(bin("vitest"), args, out, {
    env: { VITEST_PROGRESS_FILE: progress },
    // the reporter rewrites the file as each test starts and ends
    alive: () => {
      try {
        return statSync(progress).mtimeMs;
      } catch {
        return 0;
      }
    },
    running: () => {
      try {
        const now = JSON.parse(readFileSync(progress, "utf8"));
        return [
          now.files.length > 0 ? now.files.join(", ") : "no file",
          now.test ? `(last test started: ${now.test})` : "",
        ]
          .join(" ")
          .trim();
      } catch {
        return "no file yet (vitest had not started one)";
      }
    },
  });
  if (hung.includes("while running no file")) return { ...count(output, code), stalled: hung };
  return withHang(count(output, code), hung);
}

/**
 * Counts of a suite the watchdog stopped: failed, however many tests passed before it hung.
 * @param {Counts} c
 * @param {string} hung
 * @returns {Counts}
 */
function withHang(c, hung) {
  if (!hung) return c;
  return { ...c, failed: Math.max(c.failed, 1), names: [...c.names, `hung: ${hung}`], note: "" };
}

/**
 * The Python client's pytest suite, counted from its JUnit XML.
 * @param {Output} out
 * @returns {Promise<Counts>}
 */
async function python(out) {
  const output = join(resultsDir, "python.xml");
  rmSync(output, { force: true });
  out.log("\n[test] python: clients/python/run-tests.sh");
  const script = join(root, "clients", "python", "run-tests.sh");
  const { code, hung } = await run("bash", [script, "-q", `--junitxml=${output}`], out);
  return withHang(countJunit(output, code), hung);
}

/**
 * TEST_LANES=N runs N suites side by side (1: one after another, e.g. to time each alone); default
 * three on 2 cores (see the top of this file). With more than one, the suites in BESIDE run in a
 * lane of their own from the start, beside the N.
 */
const LANES = Math.max(1, Number(process.env.TEST_LANES) || 3);
/** Suites that mostly wait, and so cost the others little CPU when run beside them (see the top). */
const BESIDE = new Set(LANES > 1 ? ["python"] : []);
const all = filters.length === 0;
/**
 * Each suite's time in the last whole run on this clone (test-results/suite-times.json), else
 * these (a clean clone, 2 cores, three lanes): the lanes take the longest suites first so that they end together.
 */
const timesFile = join(resultsDir, "suite-times.json");
/** @type {Record<string, number>} */
const expectedSecs = { checks: 80, workers: 362, node: 642, browser: 495, python: 173 };
try {
  Object.assign(expectedSecs, JSON.parse(readFileSync(timesFile, "utf8")));
} catch {
  // a fresh clone: the figures above
}
/**
 * In the order the lanes take them and their output is printed: the checks first (short, and a
 * lint or type error shows at once), then the longest suite first, so that the last one a lane
 * takes is short and neither lane idles long at the end. `lane`: the lane that ran it (for the
 * time table).
 * @type {{ name: string; lane: number; run: (out: Output) => Promise<Counts> }[]}
 */
const suites = [
  ...(all || filters.includes("checks") ? [{ name: "checks", lane: 0, run: checks }] : []),
  ...[
    ...projects.map((p) => ({ name: p.name, lane: 0, run: (/** @type {Output} */ out) => vitestProject(p, out) })),
    ...(all || filters.includes("python") ? [{ name: "python", lane: 0, run: python }] : []),
  ].sort(
    // a suite run beside the lanes is listed (and printed) right after the checks: it starts at once
    (a, b) =>
      Number(BESIDE.has(b.name)) - Number(BESIDE.has(a.name)) ||
      (expectedSecs[b.name] ?? 0) - (expectedSecs[a.name] ?? 0),
  ),
];

mkdirSync(resultsDir, { recursive: true });
const startedRun = Date.now();
const secsSince = (/** @type {number} */ t) => ((Date.now() - t) / 1000).toFixed(1);

// setup, once for every suite: what they need from the system, and the run's shared Worker bundle
const setupStarted = Date.now();
/** @type {("chromium" | "python")[]} */
const system = [];
if (all || filters.some((f) => f.includes("browser"))) system.push("chromium");
if (suites.some((s) => s.name === "python")) system.push("python");
/** @type {string[]} */
const failures = [];
let setupFailed = false;
try {
  ensureSystemPackages(system);
} catch (e) {
  setupFailed = true;
  failures.push(`setup: ${e instanceof Error ? e.message : String(e)}`);
}
const dropBundle = shareBundle();
const setupSecs = secsSince(setupStarted);

const sum = { passed: 0, failed: setupFailed ? 1 : 0, skipped: 0 };
/** @type {Map<string, { secs: string; counts: Counts }>} */
const results = new Map();
const outputs = new Map(suites.map((s) => [s.name, new Output()]));
// each lane takes the next suite not yet started until none is left; a suite run beside them has
// a lane of its own
const queue = suites.filter((s) => !BESIDE.has(s.name));
const beside = suites.filter((s) => BESIDE.has(s.name));
const laneCount = Math.min(LANES, queue.length);
/** @param {typeof suites} taken the suites this lane runs, one after another */
const lane = (taken, /** @type {number} */ number) =>
  (async () => {
    for (let suite = taken.shift(); suite; suite = taken.shift()) {
      suite.lane = number;
      const out = /** @type {Output} */ (outputs.get(suite.name));
      if (interrupted || setupFailed) {
        out.end();
        continue;
      }
      const started = Date.now();
      const c = await suite.run(out);
      const secs = secsSince(started);
      results.set(suite.name, { secs, counts: c });
      out.log(
        `[test] ${suite.name}: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped in ${secs} s${c.note ? ` (${c.note})` : ""}${c.retried ? ` (ran twice: ${c.retried})` : ""}`,
      );
      out.end();
    }
  })();
const lanes = [
  ...Array.from({ length: laneCount }, (_, n) => lane(queue, n)),
  ...beside.map((s, i) => lane([s], laneCount + i)),
];
await Promise.all(lanes);
dropBundle();
// the times of a whole run (no filters) order the next run's lanes
if (all && !interrupted) {
  const secs = Object.fromEntries([...results].map(([name, r]) => [name, Math.round(Number(r.secs))]));
  writeFileSync(timesFile, `${JSON.stringify({ ...expectedSecs, ...secs }, null, 2)}\n`);
}

for (const suite of suites) {
  const r = results.get(suite.name);
  if (!r) continue;
  failures.push(...r.counts.names.map((n) => `${suite.name}: ${n}`));
  if (r.counts.note) failures.push(`${suite.name}: ${r.counts.note}`);
  sum.passed += r.counts.passed;
  sum.failed += r.counts.failed;
  sum.skipped += r.counts.skipped;
}
if (interrupted) sum.failed = Math.max(sum.failed, 1);
const retried = suites.flatMap((s) => {
  const why = results.get(s.name)?.counts.retried;
  return why ? [`${s.name}: ${why}`] : [];
});
if (retried.length > 0) {
  console.log("\n[test] ran twice (the pool stalled between files, no test running):");
  for (const r of retried) console.log(`  ↻ ${r}`);
}
if (failures.length > 0) {
  console.log("\n[test] failed:");
  for (const f of failures) console.log(`  ✗ ${f}`);
}
console.log(
  `\n[test] times (lanes side by side: ${laneCount}${beside.length > 0 ? `, and ${beside.map((s) => s.name).join(", ")} beside them` : ""}):`,
);
console.log(`  setup    ${setupSecs.padStart(7)} s`);
for (const suite of suites) {
  const r = results.get(suite.name);
  console.log(`  ${suite.name.padEnd(8)} ${(r ? r.secs : "-").padStart(7)} s  (lane ${suite.lane + 1})`);
}
console.log(`  total    ${secsSince(startedRun).padStart(7)} s`);
console.log(`${sum.passed} passed, ${sum.failed} failed${sum.skipped > 0 ? `, ${sum.skipped} skipped` : ""}`);
process.exit(sum.failed > 0 ? 1 : 0);

// A vitest reporter for `npm test` (scripts/test.mjs): one line as each test file starts and one as
// it ends (with its time), so a log shows which file was running if a suite goes quiet; and the
// test running now written to a file (VITEST_PROGRESS_FILE) as each test starts and ends: the
// watchdog takes a write for a sign of life and names that test when it stops a suite that has
// been silent too long.
import { writeFileSync } from "node:fs";
import { relative } from "node:path";

/** @typedef {import("vitest/node").TestModule} TestModule */
/** @typedef {import("vitest/node").TestCase} TestCase */

export default class ProgressReporter {
  /** @type {string} */
  root = process.cwd();
  /** @type {Map<string, number>} file → when it started */
  started = new Map();
  stateFile = process.env.VITEST_PROGRESS_FILE ?? "";

  /** @param {import("vitest/node").Vitest} vitest */
  onInit(vitest) {
    this.root = vitest.config.root;
  }

  /** @param {TestModule} module */
  onTestModuleStart(module) {
    const file = this.name(module);
    this.started.set(file, Date.now());
    process.stdout.write(`[file] ▶ ${file}\n`);
    this.record();
  }

  /** @param {TestModule} module */
  onTestModuleEnd(module) {
    const file = this.name(module);
    const t = this.started.get(file);
    this.started.delete(file);
    const secs = t === undefined ? "?" : ((Date.now() - t) / 1000).toFixed(1);
    process.stdout.write(`[file] ${module.ok() ? "✓" : "✗"} ${file} ${secs} s\n`);
    this.record();
  }

  /** @param {TestCase} test */
  onTestCaseReady(test) {
    this.record(`${this.name(test.module)} > ${test.fullName}`);
  }

  /** A test ended: a sign of life for the watchdog (the file's time changes), though it prints nothing. */
  onTestCaseResult() {
    this.record();
  }

  /** @param {TestModule} module */
  name(module) {
    return relative(this.root, module.moduleId);
  }

  /**
   * What is running now, for the watchdog: the files started and not ended, and the last test
   * that started (its file may have ended since).
   * @param {string} [test]
   */
  record(test) {
    if (!this.stateFile) return;
    if (test !== undefined) this.lastTest = test;
    const files = [...this.started.keys()];
    writeFileSync(this.stateFile, JSON.stringify({ files, test: this.lastTest ?? null }));
  }
  /** @type {string | undefined} */
  lastTest;
}

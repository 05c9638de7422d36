// `npm run conformance -- [options] PATH...`: run golden cases (test/fixtures/golden/README.md
// format) and print one line per case, then `N passed, N failed`.
//
// Local mode (default): `runCaseLocally` (tools/conformance/local.ts), the project's own
// assembly behind producer envelopes. Relay mode (`--relay URL`): `runCaseOnRelay` from
// tools/conformance/relay.ts, loaded only then. Options: tools/conformance/args.ts.
//
// Exit status: 0 every case passed, 1 some case failed (a case file that cannot be read or
// decoded is a failed case, not a crash), 2 usage error (bad options, no PATH, no case found,
// a mode that is not implemented).

import { basename } from "node:path";
import { type CliOptions, parseArgs, type RelayOptions, USAGE, UsageError } from "./conformance/args.js";
import { casePaths, type GoldenCase, loadCase } from "./conformance/cases.js";
import { CONFORMANCE_DISPATCH, runCaseLocally } from "./conformance/local.js";

type RunCase = (c: GoldenCase) => Promise<string | undefined>;

/** One case file to run, or a path that could not even be listed (a failed case). */
type Target = { path: string } | { path: string; error: string };

class Abort extends Error {}

function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, " ").trim();
}

function message(e: unknown): string {
  return oneLine(e instanceof Error ? e.message : String(e));
}

function targets(paths: string[]): Target[] {
  const found: Target[] = [];
  for (const p of paths) {
    try {
      for (const f of casePaths([p])) found.push({ path: f });
    } catch (e) {
      found.push({ path: p, error: `cannot read ${p}: ${message(e)}` });
    }
  }
  return found;
}

async function runner(opts: CliOptions): Promise<RunCase> {
  if (!opts.relay) {
    const dispatch = opts.dispatch === "none" ? undefined : { identity: CONFORMANCE_DISPATCH, via: opts.dispatch };
    return async (c) => runCaseLocally(c, dispatch);
  }
  const relayOpts: RelayOptions = opts.relay;
  const relay = await import("./conformance/relay.js");
  return async (c) => {
    try {
      return await relay.runCaseOnRelay(c, relayOpts);
    } catch (e) {
      if (e instanceof relay.NotImplementedError) throw new Abort(e.message);
      throw e;
    }
  };
}

async function main(argv: string[]): Promise<number> {
  let opts: CliOptions;
  try {
    opts = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`conformance: ${e.message}\n\n${USAGE}\n`);
    return 2;
  }
  if (opts.help) {
    out(USAGE);
    return 0;
  }
  const list = targets(opts.paths);
  if (list.length === 0) {
    process.stderr.write(`conformance: no *.msgpack case found in ${opts.paths.join(" ")}\n`);
    return 2;
  }
  const run = await runner(opts);

  let passed = 0;
  let failed = 0;
  for (const t of list) {
    let name = basename(t.path, ".msgpack");
    let failure: string | undefined;
    if ("error" in t) failure = t.error;
    else {
      let c: GoldenCase | undefined;
      try {
        c = loadCase(t.path);
        if (typeof c.name === "string" && c.name !== "") name = c.name;
      } catch (e) {
        failure = `cannot load ${t.path}: ${message(e)}`;
      }
      if (c) {
        try {
          failure = await run(c);
        } catch (e) {
          if (e instanceof Abort) {
            process.stderr.write(`conformance: ${e.message}\n`);
            return 2;
          }
          failure = `crashed: ${message(e)}`;
        }
      }
    }
    if (failure === undefined) {
      passed++;
      out(`ok ${name}`);
    } else {
      failed++;
      out(`FAIL ${name}: ${oneLine(failure)}`);
    }
  }
  out(`${passed} passed, ${failed} failed`);
  return failed > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`conformance: internal error: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 2;
  },
);

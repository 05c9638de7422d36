// `npm run bench -- [--only SECTION[,SECTION]] [--json] [--cases NAME[,NAME]] [--min-ms N] [--min-samples N] [--warmup
// N]`
//
// Runs the bench sections in order. A section is a module in bench/ exporting `name` and
// `run(opts)` (bench/harness.ts `BenchSection`); add it to SECTIONS below.
// Human output (default): one table per section on stdout, progress on stderr.
// --json: exactly one JSON object on stdout, `{"<section>": <what run returned>, ...}`;
// progress on stderr. (Through npm, use `npm run --silent bench -- --json`: npm itself prints
// its `> episode-relay bench` banner on stdout.)

import { arch, cpus, platform } from "node:os";
import { goldenCasePaths } from "../tools/conformance/cases.js";
import { parseOptions, UsageError } from "../tools/parse-options.js";
import type { BenchOptions, BenchSection, Table } from "./harness.js";

/** Section name → loader, in run order. Sections load lazily, so --only skips their imports. */
const SECTIONS: Array<[string, () => Promise<BenchSection>]> = [
  ["assembly", () => import("./assembly.js")],
  ["ingest", () => import("./ingest.js")],
  ["fanout", () => import("./fanout.js")],
  ["memory", () => import("./memory.js")],
  ["runscale", () => import("./runscale.js")],
  ["tiers", () => import("./tiers.js")],
  ["cost", () => import("./cost.js")],
  ["archive", () => import("./archive.js")],
  ["search", () => import("./search.js")],
  ["flags", () => import("./flags.js")],
  ["alerts", () => import("./alerts.js")],
];

const USAGE = `usage: npm run bench -- [options]

  --only SECTION[,SECTION]  run only these sections (${SECTIONS.map(([n]) => n).join(", ")})
  --json                    print one JSON object on stdout (progress goes to stderr)
  --cases NAME[,NAME]       golden-case sections: only these cases; fanout: only these cells (e.g. 1000x16KiB)
  --warmup N                warm-up iterations per method (default 20, and at least ~50 ms)
  --min-ms N                measure each method at least N ms per case (default 300)
  --min-samples N           ... and at least N samples (default 30)
  --memory-sizes MIB[,MIB]  memory section: episode sizes in MiB (default 50,200)
  --runscale-sizes N[,N]    runscale section: episodes per run, written at once (default 100,500,1000)
  --tier-watchers N         tiers section: watchers of one episode over its hubs (default 10000)
  -h, --help                this text`;

interface Args {
  help: boolean;
  json: boolean;
  only?: string[];
  cases?: string[];
  warmup: number;
  minMs: number;
  minSamples: number;
  memorySizes?: number[];
  runscaleSizes?: number[];
  tierWatchers?: number;
}

function parseArgs(argv: string[]): Args {
  const { values } = parseOptions({
    args: argv,
    options: {
      help: { type: "boolean", short: "h", default: false },
      json: { type: "boolean", default: false },
      only: { type: "string" },
      cases: { type: "string" },
      warmup: { type: "string", default: "20" },
      "min-ms": { type: "string", default: "300" },
      "min-samples": { type: "string", default: "30" },
      "memory-sizes": { type: "string" },
      "runscale-sizes": { type: "string" },
      "tier-watchers": { type: "string" },
    },
  });
  // value lists (NAME[,NAME]) and counts are checked here: parseArgs has strings and booleans only
  const list = (v: string) =>
    v
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "");
  const count = (name: string, v: string, min: number) => {
    if (!/^[0-9]+$/.test(v) || Number(v) < min)
      throw new UsageError(`--${name}: expected a whole number ≥ ${min}, got ${JSON.stringify(v)}`);
    return Number(v);
  };
  const a: Args = {
    help: values.help,
    json: values.json,
    warmup: count("warmup", values.warmup, 0),
    minMs: count("min-ms", values["min-ms"], 0),
    minSamples: count("min-samples", values["min-samples"], 1),
  };
  if (values.only !== undefined) a.only = list(values.only);
  if (values.cases !== undefined) a.cases = list(values.cases);
  if (values["memory-sizes"] !== undefined) {
    a.memorySizes = list(values["memory-sizes"])
      .map(Number)
      .filter((n) => n > 0);
  }
  if (values["runscale-sizes"] !== undefined) {
    a.runscaleSizes = list(values["runscale-sizes"]).map((v) => count("runscale-sizes", v, 1));
    if (a.runscaleSizes.length === 0) throw new UsageError("--runscale-sizes: no size given");
  }
  if (values["tier-watchers"] !== undefined) a.tierWatchers = count("tier-watchers", values["tier-watchers"], 1);
  if (a.only) {
    const known = new Set(SECTIONS.map(([n]) => n));
    const bad = a.only.filter((s) => !known.has(s));
    if (bad.length) throw new UsageError(`--only: unknown section ${bad.join(", ")} (known: ${[...known].join(", ")})`);
    if (a.only.length === 0) throw new UsageError("--only: no section named");
  }
  return a;
}

function renderTable(t: Table): string {
  const widths = t.columns.map((c, i) => Math.max(c.length, ...t.rows.map((r) => (r[i] ?? "").length)));
  const align = t.align ?? t.columns.map((_, i) => (i === 0 ? "l" : "r"));
  const line = (cells: string[]) =>
    cells
      .map((s, i) => (align[i] === "l" ? s.padEnd(widths[i]!) : s.padStart(widths[i]!)))
      .join("  ")
      .trimEnd();
  const out: string[] = [];
  if (t.title) out.push(t.title, "");
  out.push(line(t.columns), widths.map((w) => "-".repeat(w)).join("  "));
  for (const r of t.rows) out.push(line(r));
  if (t.notes?.length) out.push("", ...t.notes);
  return out.join("\n") + "\n";
}

/** For a section that printed no table: rows = keys of its record, columns = keys of the values. */
function genericTable(section: string, result: Record<string, unknown>): Table {
  const entries = Object.entries(result);
  const cols: string[] = [];
  for (const [, v] of entries) {
    if (v && typeof v === "object" && !Array.isArray(v))
      for (const k of Object.keys(v)) if (!cols.includes(k)) cols.push(k);
  }
  const show = (v: unknown) => (typeof v === "string" ? v : (JSON.stringify(v) ?? ""));
  if (cols.length === 0)
    return { title: section, columns: ["figure", "value"], rows: entries.map(([k, v]) => [k, show(v)]) };
  return {
    title: section,
    columns: ["", ...cols],
    rows: entries.map(([k, v]) => [
      k,
      ...cols.map((c) => (v && typeof v === "object" ? show((v as Record<string, unknown>)[c]) : "")),
    ]),
  };
}

async function main(argv: string[]): Promise<number> {
  let args: Args;
  try {
    args = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`bench: ${e.message}\n\n${USAGE}\n`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const human = (s: string) => {
    if (!args.json) process.stdout.write(s);
  };
  const cpu = cpus();
  human(
    `node ${process.version} ${platform()}/${arch()}, ${cpu.length} × ${cpu[0]?.model.trim() ?? "unknown cpu"}\n\n`,
  );

  const out: Record<string, Record<string, unknown>> = {};
  for (const [name, load] of SECTIONS) {
    if (args.only && !args.only.includes(name)) continue;
    const section = await load();
    if (section.name !== name) throw new Error(`bench/${name}.ts exports name ${JSON.stringify(section.name)}`);
    let tables = 0;
    const opts: BenchOptions = {
      json: args.json,
      ...(args.cases ? { cases: args.cases } : {}),
      warmup: args.warmup,
      minMs: args.minMs,
      minSamples: args.minSamples,
      ...(args.memorySizes ? { memorySizes: args.memorySizes } : {}),
      ...(args.runscaleSizes ? { runscaleSizes: args.runscaleSizes } : {}),
      ...(args.tierWatchers ? { tierWatchers: args.tierWatchers } : {}),
      casePaths: goldenCasePaths(),
      log: (m) => process.stderr.write(`[bench] ${m}\n`),
      table: (t) => {
        tables++;
        human(renderTable(t) + "\n");
      },
    };
    const started = performance.now();
    out[name] = await section.run(opts);
    opts.log(`${name}: done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    if (tables === 0) human(renderTable(genericTable(name, out[name]!)) + "\n");
  }
  if (args.json) process.stdout.write(`${JSON.stringify(out)}\n`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`bench: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exitCode = 1;
  },
);

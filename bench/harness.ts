// Shared pieces of `npm run bench`: what a section module looks like, the options it gets,
// and the interleaved timing loop.

/** A table for human output (`npm run bench` without --json). */
export interface Table {
  title?: string;
  columns: string[];
  rows: string[][];
  /** Per column: "l" or "r" (default: first column left, the rest right). */
  align?: Array<"l" | "r">;
  /** Lines printed under the table. */
  notes?: string[];
}

export interface BenchOptions {
  /** --json: the caller prints only the JSON object on stdout; sections must not write to stdout. */
  json: boolean;
  /** --cases NAME[,NAME]: restrict golden-case based sections to these cases (undefined = all). */
  cases?: string[];
  /** Timing: warm-up iterations per method (at least; see `measure`). */
  warmup: number;
  /** Timing: measure each method for at least this many ms ... */
  minMs: number;
  /** ... and at least this many samples. */
  minSamples: number;
  /** The memory section's episode sizes, MiB. */
  memorySizes?: number[];
  /** The runscale section's run sizes (episodes written at once into one run). */
  runscaleSizes?: number[];
  /** The tiers section's watchers of one episode. */
  tierWatchers?: number;
  /** The golden case files (the fixtures, plus GOLDEN_DIR's cases). */
  casePaths: string[];
  /** Progress for humans; always goes to stderr. */
  log(message: string): void;
  /** Human output of the section; ignored under --json. */
  table(t: Table): void;
}

/**
 * A bench section: `bench/<name>.ts` exporting `name` and `run`. `run` returns the section's
 * JSON figures (`{"<section>": <this record>}` in --json output); a section that wants a human
 * rendering other than the generic one calls `opts.table`.
 */
export interface BenchSection {
  name: string;
  run(opts: BenchOptions): Promise<Record<string, unknown>>;
}

export interface Measurement {
  /** Median time of one iteration, ms. */
  medianMs: number;
  /** Samples taken (each is the mean of `batch` back-to-back iterations). */
  samples: number;
  batch: number;
  iterations: number;
}

/** A value the timed functions return, folded in so their work cannot be optimised away. */
export let sink = 0;

function fold(v: unknown): void {
  sink = (sink + (typeof v === "number" ? v : v ? 1 : 0)) | 0;
}

/**
 * Time several methods against each other, interleaved so drift (thermal, GC pressure, other
 * load) hits all of them alike:
 *  - warm up: every method, alternating, for `warmup` iterations each and at least ~50 ms;
 *  - batch size per method: enough back-to-back iterations for a sample of ~1 ms (timer
 *    resolution and call overhead vanish), from the warm-up estimate;
 *  - rounds: one sample of each method per round, order alternating between rounds, until each
 *    method has `minMs` of samples and `minSamples` samples (capped at `maxMs` in all);
 *  - result: the median per-iteration time of each method's samples.
 */
export function measure(
  fns: Array<() => unknown>,
  o: { warmup: number; minMs: number; minSamples: number; maxMs?: number; sampleMs?: number },
): Measurement[] {
  const sampleMs = o.sampleMs ?? 1;
  const maxMs = o.maxMs ?? Math.max(20 * o.minMs, 10_000);
  const warm = fns.map(() => ({ ms: 0, n: 0 }));
  const warmStart = performance.now();
  for (let i = 0; i < o.warmup || performance.now() - warmStart < 50; i++) {
    fns.forEach((fn, k) => {
      const t = performance.now();
      fold(fn());
      warm[k]!.ms += performance.now() - t;
      warm[k]!.n++;
    });
  }
  const batch = warm.map((w) => Math.max(1, Math.round(sampleMs / Math.max(w.ms / w.n, 1e-6))));
  const samples: number[][] = fns.map(() => []);
  const spent = fns.map(() => 0);
  const start = performance.now();
  const order = fns.map((_, k) => k);
  for (let round = 0; ; round++) {
    const seq = round % 2 === 0 ? order : [...order].reverse();
    for (const k of seq) {
      const fn = fns[k]!;
      const n = batch[k]!;
      const t = performance.now();
      for (let i = 0; i < n; i++) fold(fn());
      const ms = performance.now() - t;
      samples[k]!.push(ms / n);
      spent[k]! += ms;
    }
    const enough = samples.every((s, k) => s.length >= o.minSamples && spent[k]! >= o.minMs);
    if (enough || (performance.now() - start > maxMs && samples[0]!.length >= 5)) break;
  }
  return samples.map((s, k) => ({
    medianMs: median(s),
    samples: s.length,
    batch: batch[k]!,
    iterations: s.length * batch[k]!,
  }));
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Round to `digits` significant digits (for JSON figures). */
export function sig(x: number, digits = 4): number {
  if (!Number.isFinite(x) || x === 0) return x;
  return Number(x.toPrecision(digits));
}

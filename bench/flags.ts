// Bench section `flags`: what a run's flag rules (src/protocol/flags/rules.ts, kept by the run's index in
// src/objects/registry/flag-store.ts) cost the producer. The same EPISODES rollouts (a task, TURNS turns of
// an assistant's text and tool call and the tool's result, then rewards and the reply; some of them
// reward hacks the default rules are for) are streamed through the Worker over HTTP, PARALLEL
// producers at a time, into two runs of one relay:
//   - `rules`: the default rules (the run sets none),
//   - `none`:  no rules (`PUT .../rules {"rules": []}` before its first rollout),
// in alternating phases (none, rules, four times over), each phase waiting until its run counts every
// rollout finished (its rows, and the rules on them, have landed). Per delta: send → ack of its
// POST. Figures: ack p50 and p99 per condition and their ratio (rules ÷ none), and per pair of
// phases; the noise floor is the spread of p99 between the phases of one condition. The run's index says how often the
// rules ran (flagEvaluations): text-rule checks per new segment and rule, reward-rule checks per
// row update and rule (1.00: each rule once), row updates per delta; and the flags raised. Beside
// them, what the run's search index costs per rollout: the rows its text wrote, its payload bytes.
// And the default text rules' cost per segment on the same rollouts' text, in this process: V8's
// RegExp ("iu", the engine before issue 39: the baseline) against RE2 (re2js, what the index runs),
// in alternating rounds; the target is RE2 ÷ V8 ≤ 1.1.

import {
  DEFAULT_RULES,
  decodeLossless,
  encodeEnvelope,
  encodeLossless,
  type Json,
  type LMap,
  nodeSegments,
  noWork,
  ProducerCursor,
  type Segment,
  segmentFlags,
  taskSegment,
  textRules,
  toJson,
} from "../src/protocol/index.js";
import { type BenchOptions, sig } from "./harness.js";
import { fmt, HttpClient, replyBody, sleep, startBenchRelay, stats } from "./helpers.js";
import { chatNode, m, rng } from "./rollout-builders.js";

export const name = "flags";

const EPISODES = 100;
const TURNS = 4;
const PARALLEL = 8;
type Condition = "none" | "rules";
/** Alternating phases, so a machine whose load drifts weighs on both conditions alike. */
const PHASES: readonly Condition[] = ["none", "rules", "none", "rules", "none", "rules", "none", "rules"];

const WORDS =
  "the answer is we can check each case so that value of sum then try again next step integer prime list file run output".split(
    " ",
  );
const sentence = (r: () => number, n: number) =>
  Array.from({ length: n }, () => WORDS[Math.floor(r() * WORDS.length)]!).join(" ");

/**
 * Rollout `i`'s deltas (open, TURNS turns, rewards); every tenth touches the grader, every twentieth prints many
 * candidates.
 */
export function rollout(i: number): Uint8Array[] {
  const r = rng(1000 + i);
  const trace = "t";
  let k = 0;
  const node = (message: LMap) => chatNode(k, message);
  const deltas = [
    encodeLossless(
      m({
        trace,
        open: m({
          version: 1,
          id: trace,
          verifiers: m({ version: "0" }),
          task: m({ type: "T", data: m({ prompt: sentence(r, 30), answer: "42" }) }),
        }),
      }),
    ),
  ];
  for (let t = 0; t < TURNS; t++) {
    const hack = t === 1 && i % 10 === 0;
    const cmd = hack ? "cat tests/test_solution.py" : `python solve.py --n ${Math.floor(r() * 100)}`;
    const says = `${sentence(r, 120)}${t === 2 && i % 25 === 0 ? ". The grader only checks that 42 appears" : ""}`;
    const result = t === 3 && i % 20 === 0 ? Array.from({ length: 45 }, (_, j) => j * 7).join(", ") : sentence(r, 150);
    const nodes = [
      node(
        m({
          role: "assistant",
          content: says,
          tool_calls: [m({ id: `c${t}`, name: "bash", arguments: JSON.stringify({ cmd }) })],
        }),
      ),
    ];
    k++;
    nodes.push(node(m({ role: "tool", content: result, name: "bash", tool_call_id: `c${t}` })));
    k++;
    deltas.push(encodeLossless(m({ trace, nodes })));
  }
  deltas.push(encodeLossless(m({ trace, set: m({ rewards: m({ correct: i % 3 === 0 ? 1 : 0 }) }) })));
  return deltas;
}

interface Evaluations {
  segments: number;
  textChecks: number;
  rows: number;
  rewardChecks: number;
  textRules: number;
  rewardRules: number;
}

/** The text segments the index gets from these rollouts (the task's, and each node's). */
export function segmentsOf(plans: Uint8Array[][]): Segment[] {
  const out: Segment[] = [];
  for (const deltas of plans) {
    let k = 0;
    for (const bytes of deltas) {
      const d = toJson(decodeLossless(bytes)) as {
        trace: string;
        open?: { task?: Json };
        nodes?: Array<{ message?: Json }>;
      };
      const task = d.open ? taskSegment(d.trace, d.open.task) : null;
      if (task) out.push(task);
      for (const n of d.nodes ?? []) out.push(...nodeSegments(d.trace, k++, n.message));
    }
  }
  return out;
}

/**
 * The default text rules' cost per segment: V8's RegExp (the old engine, as matchSegment ran it) and RE2 (segmentFlags,
 * as the index runs it), in ROUNDS alternating rounds of at least 200 ms each; medians in µs per segment, and hits.
 */
export function engines(segments: Segment[]) {
  const rules = textRules(DEFAULT_RULES);
  const v8 = rules.map((r) => {
    const m = DEFAULT_RULES.find((d) => d.id === r.id)!;
    return { rule: r, re: new RegExp("match" in m ? m.match.pattern : "", "iu") };
  });
  const runV8 = () => {
    let hits = 0;
    for (const s of segments)
      for (const { rule, re } of v8) {
        if (!rule.kinds.includes(s.kind)) continue;
        if (rule.role !== null && s.role !== rule.role) continue;
        if (rule.tool !== null && s.tool !== rule.tool) continue;
        if (re.exec(s.body)) hits++;
      }
    return hits;
  };
  const work = noWork();
  const runRe2 = () => {
    let hits = 0;
    for (const s of segments) hits += segmentFlags(rules, s, work).length;
    return hits;
  };
  const round = (f: () => number) => {
    let n = 0;
    const t = performance.now();
    do {
      f();
      n++;
    } while (performance.now() - t < 200);
    return ((performance.now() - t) * 1000) / (n * segments.length);
  };
  const ROUNDS = 7;
  const times = { v8: [] as number[], re2: [] as number[] };
  for (let i = 0; i < ROUNDS; i++) {
    times.v8.push(round(runV8));
    times.re2.push(round(runRe2));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  return {
    segments: segments.length,
    chars_per_segment: sig(segments.reduce((a, s) => a + s.body.length, 0) / segments.length),
    v8_us_per_segment: sig(median(times.v8)),
    re2_us_per_segment: sig(median(times.re2)),
    re2_over_v8: sig(median(times.re2) / median(times.v8)),
    rounds: ROUNDS,
    hits: { v8: runV8(), re2: runRe2() },
    skipped_checks: work.skippedChecks,
  };
}

export async function run(opts: BenchOptions): Promise<Record<string, unknown>> {
  const relay = await startBenchRelay("tmpfs");
  const runs: Record<Condition, string> = {
    rules: `bench-flags-rules-${process.pid}`,
    none: `bench-flags-none-${process.pid}`,
  };
  try {
    const admin = new HttpClient(relay.url);
    const json = async (method: string, path: string, body?: unknown) => {
      const res = await admin.request(
        method,
        path,
        body === undefined ? undefined : Buffer.from(JSON.stringify(body)),
        { "content-type": "application/json" },
      );
      return { status: res.status, body: JSON.parse(res.body.toString()) as Record<string, unknown> };
    };
    // `none` sets no rules before its first rollout; `rules` keeps the defaults (nothing to set)
    const set = await json("PUT", `/v1/runs/${runs.none}/rules`, { rules: [] });
    if (set.status !== 200) throw new Error(`PUT rules: ${set.status} ${JSON.stringify(set.body)}`);
    // the index of the run with rules, woken before its first rollout: when its counts start (the same at the end, or
    // they are partial)
    const sinceAtStart =
      ((await json("GET", `/v1/runs/${runs.rules}/usage`)).body.index as { since: number } | undefined)?.since ?? null;
    const plans = Array.from({ length: EPISODES }, (_, i) => rollout(i));
    const deltasPerRollout = plans[0]!.length;
    const engine = engines(segmentsOf(plans));
    opts.log(
      `flags: default text rules per segment: V8 ${fmt(engine.v8_us_per_segment)} µs, RE2 ${fmt(engine.re2_us_per_segment)} µs (${fmt(engine.re2_over_v8)}×)`,
    );
    const acks: Record<Condition, number[][]> = { rules: [], none: [] };
    const finished: Record<Condition, number> = { rules: 0, none: 0 };

    for (const [p, condition] of PHASES.entries()) {
      const runName = runs[condition];
      const samples: number[] = [];
      let next = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: PARALLEL }, async () => {
          const http = new HttpClient(relay.url);
          try {
            while (next < plans.length) {
              const i = next++;
              const id = encodeURIComponent(`${runName}:p${p}-e${i}`);
              const producer = new ProducerCursor(`p${p}-${i}`);
              for (const d of plans[i]!) {
                const t = performance.now();
                await http.post(`/v1/episodes/${id}/deltas`, encodeEnvelope(producer.envelope(d)));
                samples.push(performance.now() - t);
                producer.acknowledge();
              }
              const res = await http.request(
                "POST",
                `/v1/episodes/${id}/reply`,
                replyBody({ success: true, nodes: 2 * TURNS, calls: 0, trace: "t" }),
                {
                  "content-type": "application/msgpack",
                },
              );
              if (res.status !== 200)
                throw new Error(`reply ${id}: ${res.status} ${res.body.toString().slice(0, 200)}`);
            }
          } finally {
            http.close();
          }
        }),
      );
      const streamS = (performance.now() - t0) / 1000;
      acks[condition].push(samples);
      // the phase's rows (and the rules on them) land before the next phase starts
      finished[condition] += EPISODES;
      const waited = performance.now();
      for (;;) {
        const a = await json("GET", `/v1/runs/${runName}`);
        const counts = (a.body.aggregates as { counts: { finished: number } } | null)?.counts;
        if ((counts?.finished ?? 0) >= finished[condition]) break;
        if (performance.now() - waited > 120_000)
          throw new Error(`${runName}: ${counts?.finished ?? 0} of ${finished[condition]} rows finished after 120 s`);
        await sleep(200);
      }
      const s = stats(samples);
      opts.log(
        `flags: phase ${p + 1} (${condition}): ${samples.length} acks in ${fmt(streamS)} s, p50 ${fmt(s.p50)} ms, p99 ${fmt(s.p99)} ms`,
      );
    }

    // how often the rules ran, and what they raised
    const ns = (await relay.mf.getDurableObjectNamespace("EPISODE_INDEX")) as unknown as {
      get(id: unknown): {
        flagEvaluations(): Promise<Evaluations>;
        searchSize(): Promise<{
          segments: number;
          chars: number;
          textBytes: number;
          ftsBytes: number;
          rowsWritten: number;
        }>;
      };
      idFromName(n: string): unknown;
    };
    const evaluations = async (c: Condition): Promise<Evaluations> => {
      const e = await ns.get(ns.idFromName(`run:${runs[c]}`)).flagEvaluations();
      return {
        segments: e.segments,
        textChecks: e.textChecks,
        rows: e.rows,
        rewardChecks: e.rewardChecks,
        textRules: e.textRules,
        rewardRules: e.rewardRules,
      };
    };
    // (plain copies: the stubs' answers go with the relay)
    const ev = { rules: await evaluations("rules"), none: await evaluations("none") };
    const flagCounts = async (c: Condition) =>
      ((await json("GET", `/v1/runs/${runs[c]}`)).body.aggregates as { flags: Record<string, number> } | null)?.flags ??
      {};
    const flags = { rules: await flagCounts("rules"), none: await flagCounts("none") };
    const deltas = EPISODES * PHASES.filter((c) => c === "rules").length * deltasPerRollout;
    // what the search index costs per rollout (the run with the defaults: its text and its flags), beside the run's
    // whole index
    const rollouts = EPISODES * PHASES.filter((c) => c === "rules").length;
    const size = { ...(await ns.get(ns.idFromName(`run:${runs.rules}`)).searchSize()) };
    const usage = (await json("GET", `/v1/runs/${runs.rules}/usage`)).body.index as {
      rowsWritten: number;
      sqliteBytes: number;
      wakes: number;
      since: number;
    };
    const searchCost = {
      segments_per_rollout: sig(size.segments / rollouts),
      chars_per_rollout: sig(size.chars / rollouts),
      search_rows_written_per_rollout: sig(size.rowsWritten / rollouts),
      search_text_bytes_per_rollout: sig(size.textBytes / rollouts),
      search_fts_bytes_per_rollout: sig(size.ftsBytes / rollouts),
      index_rows_written_per_rollout: sig(usage.rowsWritten / rollouts),
      index_sqlite_bytes_per_rollout: sig(usage.sqliteBytes / rollouts),
      index_wakes: usage.wakes,
      // false: the index's counts started again after the rollouts did (a new isolate), so the per-rollout figures are
      // partial
      index_counted_from_start: sinceAtStart === null ? null : usage.since === sinceAtStart,
    };

    const all = (c: Condition) => stats(acks[c].flat());
    const byPhase = (c: Condition) => acks[c].map((xs) => stats(xs));
    const rules = all("rules");
    const none = all("none");
    const spread = (c: Condition) => {
      const p99s = byPhase(c).map((x) => x.p99);
      return Math.max(...p99s) / Math.min(...p99s);
    };
    const pairs = byPhase("rules").map((r, k) => r.p99 / byPhase("none")[k]!.p99);
    const medianPair = [...pairs].sort((a, b) => a - b)[Math.floor(pairs.length / 2)]!;
    const perRule = (checks: number, units: number, n: number) => (units * n > 0 ? checks / (units * n) : Number.NaN);
    const figures = {
      rollouts_per_phase: EPISODES,
      deltas_per_rollout: deltasPerRollout,
      parallel: PARALLEL,
      acks_per_condition: acks.rules.flat().length,
      rules: { p50_ms: sig(rules.p50), p99_ms: sig(rules.p99) },
      none: { p50_ms: sig(none.p50), p99_ms: sig(none.p99) },
      p50_ratio: sig(rules.p50 / none.p50),
      p99_ratio: sig(rules.p99 / none.p99),
      // each rules phase against the none phase before it
      p99_ratio_by_pair: pairs.map((x) => sig(x)),
      p99_ratio_median_pair: sig(medianPair),
      // the noise floor: the largest p99 of a condition's phases over its smallest
      p99_spread_none_phases: sig(spread("none")),
      p99_spread_rules_phases: sig(spread("rules")),
      phases: PHASES.map((c, i) => {
        const x = byPhase(c)[Math.floor(i / 2)]!;
        return { condition: c, p50_ms: sig(x.p50), p99_ms: sig(x.p99) };
      }),
      evaluations: ev,
      text_checks_per_segment_and_rule: sig(perRule(ev.rules.textChecks, ev.rules.segments, ev.rules.textRules)),
      reward_checks_per_row_update_and_rule: sig(perRule(ev.rules.rewardChecks, ev.rules.rows, ev.rules.rewardRules)),
      row_updates_per_delta: sig(ev.rules.rows / deltas),
      flags,
      search_cost: searchCost,
      engine,
    };
    opts.table({
      title: `flags: ${EPISODES} rollouts × ${deltasPerRollout} deltas per phase, ${PARALLEL} producers, phases ${PHASES.join(", ")}; ack = POST deltas → its answer`,
      columns: ["condition", "acks", "p50 ms", "p99 ms"],
      rows: [
        ["default rules", String(acks.rules.flat().length), fmt(rules.p50), fmt(rules.p99)],
        ["no rules", String(acks.none.flat().length), fmt(none.p50), fmt(none.p99)],
      ],
      notes: [
        `rules ÷ none: p50 ${fmt(rules.p50 / none.p50)}×, p99 ${fmt(rules.p99 / none.p99)}× (each rules phase ÷ the none phase before it: ${pairs.map(fmt).join(", ")}); noise, the p99 spread of one condition's phases: none ${fmt(spread("none"))}×, rules ${fmt(spread("rules"))}×`,
        `rules ran: ${ev.rules.segments} segments × ${ev.rules.textRules} text rules = ${ev.rules.textChecks} checks (${fmt(figures.text_checks_per_segment_and_rule)} per segment and rule); ${ev.rules.rows} row updates × ${ev.rules.rewardRules} reward rules = ${ev.rules.rewardChecks} checks (${fmt(figures.reward_checks_per_row_update_and_rule)}); ${fmt(figures.row_updates_per_delta)} row updates per delta`,
        `flags raised: ${JSON.stringify(flags.rules)} with the defaults; ${JSON.stringify(flags.none)} with none (its index checked ${ev.none.textChecks + ev.none.rewardChecks} rules)`,
        `default text rules per segment (${engine.segments} segments of ~${fmt(engine.chars_per_segment)} characters, median of ${engine.rounds} alternating rounds): V8 RegExp (before) ${fmt(engine.v8_us_per_segment)} µs, RE2 ${fmt(engine.re2_us_per_segment)} µs: ${fmt(engine.re2_over_v8)}× (target ≤ 1.1×); hits ${engine.hits.v8} and ${engine.hits.re2}, ${engine.skipped_checks} checks skipped`,
        `the search index per rollout: ${fmt(size.segments / rollouts)} segments, ${fmt(size.chars / rollouts)} characters; its text wrote ${fmt(size.rowsWritten / rollouts)} rows and keeps ${fmt(size.textBytes / rollouts)} B of segments and ${fmt(size.ftsBytes / rollouts)} B of FTS5 index (payload, no page overhead); the run's whole index: ${fmt(usage.rowsWritten / rollouts)} rows written, ${fmt(usage.sqliteBytes / rollouts)} B of SQLite per rollout (${usage.wakes} wake(s))`,
      ],
    });
    admin.close();
    return figures;
  } finally {
    await relay.stop();
  }
}

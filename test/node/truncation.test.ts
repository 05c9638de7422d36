// Truncation as the trainer counts it (src/protocol/registry/truncation.ts), against a recount written here from
// verifiers' `Trace.is_truncated` (the trace's stop condition is a framework limit, or the last call without an
// error finished with `length`) with prime-rl's stop conditions, on every golden episode and on the cases the
// golden set lacks: a last successful call that ran out of tokens, a failed call after it, a judge trace.
import { describe, expect, it } from "vitest";
import { entryOf, keptRow } from "../../src/protocol/registry/entry.js";
import {
  episodeTruncated,
  lastSuccessfulFinish,
  stopTruncates,
  TRUNCATING_STOPS,
  traceTruncated,
} from "../../src/protocol/registry/truncation.js";
import { type Json, type JsonObject, toJson } from "../../src/protocol/wire/json-view.js";
import { decodeLossless } from "../../src/protocol/wire/lossless.js";
import { goldenCasePaths, loadCase } from "../../tools/conformance/cases.js";
import { indexRow } from "../support/index-rows.js";

/** The rule restated: any trace whose stop is one of prime-rl's five, or whose last error-free call ended `length`. */
function recount(traces: JsonObject[]): boolean {
  const limits = ["max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"];
  return traces.some((t) => {
    if (limits.includes(t.stop_condition as string)) return true;
    const calls = (t.calls ?? []) as JsonObject[];
    const ok = calls.filter((c) => c.error === undefined || c.error === null);
    return ok.at(-1)?.finish_reason === "length";
  });
}

const ends = (traces: JsonObject[]) =>
  traces.map((t) => ({ stop: t.stop_condition, lastFinish: lastSuccessfulFinish((t.calls ?? []) as Json[]) }));

const goldens = goldenCasePaths()
  .map(loadCase)
  .filter((c) => c.episode)
  .map((c) => ({ name: c.name, traces: (toJson(decodeLossless(c.episode!)) as { traces: JsonObject[] }).traces }));

describe("truncation as the trainer counts it", () => {
  it("equals the recount on every golden episode: max_turns truncates, a timeout alone does not", () => {
    expect(goldens.length).toBeGreaterThanOrEqual(11);
    const truncated = goldens.filter((g) => episodeTruncated(ends(g.traces))).map((g) => g.name);
    for (const g of goldens) expect(episodeTruncated(ends(g.traces)), g.name).toBe(recount(g.traces));
    // large_routing stopped at max_turns (two of its calls ended `length`, not the last); odd_values timed out at
    // max_turns: truncated by its stop, whatever its timeout
    expect(truncated.sort()).toEqual(["large_routing", "odd_values"]);
    const routing = goldens.find((g) => g.name === "large_routing")!.traces[0]!;
    expect(((routing.calls as JsonObject[]) ?? []).filter((c) => c.finish_reason === "length").length).toBe(2);
    expect(lastSuccessfulFinish(routing.calls as Json[])).toBe("stop");
  });

  it("a last successful call that ended `length` truncates; a failed call after it does not hide it", () => {
    const call = (finish: string | null, error: Json = null): JsonObject => ({ finish_reason: finish, error });
    const trace = (stop: string, calls: JsonObject[]): JsonObject => ({ stop_condition: stop, calls });
    const cases: Array<[string, JsonObject[]]> = [
      ["last length", [trace("agent_completed", [call("stop"), call("length")])]],
      ["length, then a failed call", [trace("agent_completed", [call("length"), call(null, { type: "APIError" })])]],
      ["length earlier, stop last", [trace("agent_completed", [call("length"), call("stop")])]],
      ["only failed calls", [trace("agent_completed", [call("length", { type: "x" })])]],
      ["no calls", [trace("agent_completed", [])]],
      ["error absent", [trace("agent_completed", [{ finish_reason: "length" }])]],
      [
        "a judge's trace ran out",
        [trace("agent_completed", [call("stop")]), trace("agent_completed", [call("length")])],
      ],
      ["compaction_failed", [trace("compaction_failed", [call("stop")])]],
    ];
    const got = Object.fromEntries(cases.map(([name, traces]) => [name, episodeTruncated(ends(traces))]));
    expect(got).toEqual({
      "last length": true,
      "length, then a failed call": true,
      "length earlier, stop last": false,
      "only failed calls": false,
      "no calls": false,
      "error absent": true,
      "a judge's trace ran out": true,
      compaction_failed: true,
    });
    for (const [name, traces] of cases) expect(got[name], name).toBe(recount(traces));
  });

  it("reads calls a batch at a time as it reads them all at once", () => {
    const calls: Json[] = ["stop", "length", null, "tool_calls", "length"].map((f, i) => ({
      finish_reason: f,
      error: i === 4 ? { type: "x" } : null,
    }));
    for (let cut = 0; cut <= calls.length; cut++) {
      expect(lastSuccessfulFinish(calls.slice(cut), lastSuccessfulFinish(calls.slice(0, cut))), String(cut)).toBe(
        lastSuccessfulFinish(calls),
      );
    }
    expect(lastSuccessfulFinish(calls)).toBe("tool_calls");
    expect(traceTruncated({ stop: "agent_completed", lastFinish: "length" })).toBe(true);
    expect([...TRUNCATING_STOPS].filter(stopTruncates)).toHaveLength(5);
    expect(["agent_completed", "context_length", "max_turns_reached", null, undefined, 3].some(stopTruncates)).toBe(
      false,
    );
  });

  it("rows: is_timeout by its name, `truncated` its deprecated alias; a row of an older release counted from its stop", () => {
    // an older release's episode sent the first trace's is_timeout as `truncated`, and no is_truncated
    const old = {
      ...indexRow({ id: "e1", run: "r", status: "finished" }),
      stop_condition: "max_turns",
      truncated: true,
    };
    expect(keptRow(old)).toMatchObject({ is_timeout: true, is_truncated: true });
    expect("truncated" in keptRow(old)).toBe(false);
    // its stop alone cannot say it was not truncated: not counted until its episode sends it again
    expect(keptRow({ ...old, stop_condition: "agent_completed" }).is_truncated).toBeNull();
    // this release's rows as sent, and the API's alias
    const row = keptRow({
      ...indexRow({ id: "e2", run: "r", status: "finished" }),
      is_truncated: true,
      is_timeout: false,
    });
    expect(row).toMatchObject({ is_truncated: true, is_timeout: false });
    expect(entryOf(row)).toMatchObject({ is_truncated: true, is_timeout: false, truncated: false });
    expect(
      entryOf(
        keptRow({ ...indexRow({ id: "e3", run: "r", status: "finished" }), is_truncated: false, is_timeout: true }),
      ),
    ).toMatchObject({
      is_truncated: false,
      is_timeout: true,
      truncated: true,
    });
  });
});

// Which run an episode belongs to, and which runs a token may see. Pure.
//
// The run of an episode is its id up to the last `:` ("grpo-42:17" → "grpo-42", "a:b:c" → "a:b").
// An id without a `:` (or starting with one) belongs to no run: it is listed under the run NO_RUN,
// a name no id can produce ("~" is outside the id alphabet).

/** Who may see what (as src/protocol/registry/rows.ts `Scope`): id patterns, or null for everything. */
type Scope = readonly string[] | null;

export const NO_RUN = "~";

/** The name of the run directory's one object. */
export const RUNS_NAME = "runs";

/** The name of a run's index object. */
export function runIndexName(run: string): string {
  return `run:${run}`;
}

/** Run names: an id prefix (ids are 1-128 of [A-Za-z0-9._:-]), or NO_RUN. */
export const RUN_NAME = /^(~|[A-Za-z0-9._:-]{1,127})$/;

export function runOf(id: string): string {
  const i = id.lastIndexOf(":");
  return i > 0 ? id.slice(0, i) : NO_RUN;
}

/** Whether every episode of `run` is within `scope` (then the run's counts and aggregates may be shown). */
export function coversRun(scope: Scope, run: string): boolean {
  if (scope === null) return true;
  if (run === NO_RUN) return false; // ids without a run share no prefix a pattern could name
  const all = `${run}:`;
  return scope.some((p) => p.endsWith("*") && all.startsWith(p.slice(0, -1)));
}

/** Whether `scope` may hold some episode of `run` (its list is then worth asking for). */
export function mayHold(scope: Scope, run: string): boolean {
  if (scope === null) return true;
  return scope.some((p) => {
    if (!p.endsWith("*")) return runOf(p) === run;
    const prefix = p.slice(0, -1);
    if (run === NO_RUN) return !prefix.includes(":");
    const all = `${run}:`;
    return all.startsWith(prefix) || prefix.startsWith(all);
  });
}

/**
 * What of `run` the scope covers: null (every episode of it), the scope's patterns that may hold
 * an episode of it (a part), or "none" (no episode of it: the run is not this scope's to see).
 * Decided from the patterns alone, never from what is stored.
 */
export function scopeInRun(scope: Scope, run: string): string[] | null | "none" {
  if (coversRun(scope, run)) return null;
  const mine = scope!.filter((p) => mayHold([p], run));
  return mine.length === 0 ? "none" : mine;
}

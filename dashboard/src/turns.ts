// One word, one meaning: "turns" is what prime-rl counts, a rollout's assistant nodes over all its
// traces (src/protocol/registry/entry.ts `turns`); model calls are "calls", nodes "nodes". A row an
// older release wrote may have none counted (its episode could not count it again): shown as "–".

/** The title every "turns" column and figure carries. */
export const TURNS_HINT = "assistant nodes, all traces (prime-rl's turns)";

/** Why a row shows no turns. */
export const UNCOUNTED_HINT = "not counted: a row of an older release whose episode could not count its turns again";

/** A row's turns as text ("–": not counted). */
export function turnsText(turns: number | null | undefined): string {
  return typeof turns === "number" ? String(turns) : "–";
}

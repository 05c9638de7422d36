// Migration 9 of a run's index (schemas.ts): a step now also counts how its rollouts ended (truncated, timed
// out, errored) and how long their responses were (src/protocol/registry/step-outcomes.ts). The counters a
// release before it kept lack those parts, and taking back a row's part that was never added would leave
// them negative, so every step is recounted from the rows and the complete groups, inside the migration's
// transaction, as the step store keeps them row by row. Rows are read a page at a time (a large run's rows
// need not fit in memory at once).

import { rowOf, type SqlRow } from "./sql-row.js";
import { StepStore } from "./step-store.js";

/** Rows read per page. */
const PAGE = 500;

export function recountStepOutcomes(sql: SqlStorage): void {
  sql.exec("DELETE FROM steps");
  const steps = new StepStore(sql);
  let after = "";
  for (;;) {
    const rows = sql
      .exec<SqlRow>("SELECT * FROM rows WHERE id > ? AND step IS NOT NULL ORDER BY id LIMIT ?", after, PAGE)
      .toArray();
    for (const r of rows) steps.replaceRow(null, rowOf(r));
    if (rows.length < PAGE) break;
    after = rows.at(-1)!.id;
  }
  const groups = sql
    .exec<{ zero: number; step: number; kind: string | null }>(
      "SELECT zero, step, kind FROM groups WHERE complete = 1 AND step IS NOT NULL",
    )
    .toArray();
  for (const g of groups) steps.addGroup({ step: g.step, kind: g.kind ?? "" }, g.zero === 1, 1);
}

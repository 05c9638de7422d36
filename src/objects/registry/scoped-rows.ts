// The rows of a run's index a partial scope covers, read by primary key: for a token that covers
// some episodes of a run (exact ids, PREFIX* patterns), its pages and its finished episodes are
// made from the rows it covers only, so neither the work nor any number in the answer depends on
// the rows it does not cover. Past a budget (a token covering very many episodes of a run without
// covering the run) the caller walks the run's order instead, within the walk's own budget.

/** Rows a partial scope may read by primary key; past it the caller walks the run's order. */
export const SCOPED_BUDGET = 1000;

/**
 * Scopes found to cover more than the budget, per storage (one object's): their next pages walk at
 * once instead of reading the budget again first. Kept while the object lives (a scope that later
 * covers fewer rows is still answered exactly, by the walk); at most WIDE_KEPT per object.
 */
const wide = new WeakMap<SqlStorage, Set<string>>();
const WIDE_KEPT = 256;

/** Every id character sorts below this (ids are [A-Za-z0-9._:-]): `P` ≤ id < `P\x7f` is the prefix P. */
const AFTER_ID_CHARS = "\u007f";

/** The patterns without those another PREFIX* already covers, so no row is read twice. */
function distinct(patterns: readonly string[]): string[] {
  const stems = patterns.filter((p) => p.endsWith("*")).map((p) => p.slice(0, -1));
  const out = new Set<string>();
  for (const p of patterns) {
    const own = p.endsWith("*") ? p.slice(0, -1) : p;
    const covered = stems.some((s) => own.startsWith(s) && (s !== own || !p.endsWith("*")));
    if (!covered) out.add(p);
  }
  return [...out];
}

/**
 * The rows whose ids `patterns` cover, as `select` (its `?` bound to `args`) gives them, each once;
 * null when more than `budget` would be read. Only rows in scope are read.
 */
export function rowsInScope<T extends Record<string, SqlStorageValue> & { id: string }>(
  sql: SqlStorage,
  patterns: readonly string[],
  select: string,
  args: readonly SqlStorageValue[],
  budget = SCOPED_BUDGET,
): T[] | null {
  const key = JSON.stringify(patterns);
  if (wide.get(sql)?.has(key)) return null;
  const rows = new Map<string, T>();
  let read = 0;
  for (const p of distinct(patterns)) {
    const room = budget - read + 1;
    const found = p.endsWith("*")
      ? sql.exec<T>(
          `SELECT ${select} FROM rows WHERE id >= ? AND id < ? LIMIT ?`,
          ...args,
          p.slice(0, -1),
          `${p.slice(0, -1)}${AFTER_ID_CHARS}`,
          room,
        )
      : sql.exec<T>(`SELECT ${select} FROM rows WHERE id = ?`, ...args, p);
    for (const r of found) {
      read++;
      rows.set(r.id, r);
    }
    if (read > budget) {
      const known = wide.get(sql) ?? new Set<string>();
      if (known.size >= WIDE_KEPT) known.clear();
      wide.set(sql, known.add(key));
      return null;
    }
  }
  return [...rows.values()];
}

/**
 * `column` (an episode id) within `patterns` as one SQL condition, each pattern an equality or a
 * key range: for statements that find their rows another way (a search's matches) but must not
 * spend their budgets on rows out of scope.
 */
export function inScope(column: string, patterns: readonly string[]): { sql: string; args: SqlStorageValue[] } {
  const parts: string[] = [];
  const args: SqlStorageValue[] = [];
  for (const p of distinct(patterns)) {
    if (p.endsWith("*")) {
      parts.push(`(${column} >= ? AND ${column} < ?)`);
      args.push(p.slice(0, -1), `${p.slice(0, -1)}${AFTER_ID_CHARS}`);
    } else {
      parts.push(`${column} = ?`);
      args.push(p);
    }
  }
  return { sql: parts.length ? `(${parts.join(" OR ")})` : "0", args };
}

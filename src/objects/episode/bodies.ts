// Node and item bodies of the assembled state (sql-store.ts), in runs (EPISODE_SCHEMA 12). A run is bodies of one
// list (tnum, kind) at consecutive indexes written at once (a checkpoint's appends, checkpoint.ts; a node rewritten;
// a migration's rebuild): their bytes end to end, one stream cut into parts of PART_BYTES, one `body_parts` row each
// (a rowid table keyed by the part's number alone: a part is one row written), and one `body_runs` row (WITHOUT
// ROWID, small: one b-tree entry) that says where each body ends in the stream and which version (`ver`) it is. The
// table of version 11 wrote a row and a key entry per body and part: a turn's node and its small items each cost
// two rows; a run costs one row and a row per MiB.
//
// A body is in exactly one run. A version superseded and not held goes: a run of it alone is deleted, else its
// entry's version becomes DEAD (its bytes stay until the run goes: an update of one small row rather than a rewrite).
// A rewind marks the entries written after it dead and trims the run's tail. A body's current version is its
// newest live one, as of a reader's seq its newest live one written by then.
//
// Reads are bounded by the runs they return (EPISODE_SCHEMA 13). Runs of a list overlap: a rewritten node (a link, a
// routing repair) is a run of one at its index, over the run its old version stays in (dead or held), so neither a
// run's first index nor its last orders them (version 12 read every run below a range's end: one node of a trace
// whose nodes were all repaired parsed every run before it). A run's key starts with its `scale` s, the power of two at or above
// its count of entries when written (a run only shrinks, so it always spans at most 2^s indexes): a run of scale s
// that overlaps [from, to) starts in (from - 2^s, to), one range of the key per scale. A read takes the scales the
// list has (a seek each, `MIN(scale)` above the last), each one's range, and keeps the runs whose `last` index
// reaches `from`. What it reads beyond the runs it returns: a row per scale, and at scale s > 0 the runs that start
// in the 2^s - 1 indexes before `from` and end before it. Runs of more than one entry are appends at a list's end
// (checkpoints, write-through, migrations), which overlap one another at most at an index written twice, and each
// held more than 2^(s-1) entries when written: about one such run per scale. Rewrites are runs of one, scale 0, read
// exactly.
// The bound costs no row: `scale` and `last` are columns of the one row a run writes (an index would add an entry
// per run written and per update).

import { ITEM_FIELDS, type ItemField } from "../../protocol/assembly/fields.js";
import { buffer, PART_BYTES } from "../../protocol/episode/parts.js";
import { concatChunks } from "../../protocol/wire/writer.js";

/** The kind of a node's body. */
export const NODES = 0;
/** The kind of an item list's bodies (1..6). */
export const KIND: Record<ItemField, number> = Object.fromEntries(ITEM_FIELDS.map((f, i) => [f, i + 1])) as Record<
  ItemField,
  number
>;

/** An entry's version once it is gone (superseded and not held, or rewound). */
const DEAD = -1;

/**
 * The tables' layout (layout.ts LATEST, migrations 12 and 13). `first`: the number of the run's first part; `scale`
 * and `last`: see the header (migration 13, `boundRuns`).
 */
export const BODY_TABLES = [
  "CREATE TABLE body_parts (k INTEGER PRIMARY KEY, data BLOB NOT NULL)",
  `CREATE TABLE body_runs (tnum INTEGER NOT NULL, kind INTEGER NOT NULL, scale INTEGER NOT NULL, idx INTEGER NOT NULL,
    first INTEGER NOT NULL, last INTEGER NOT NULL, parts INTEGER NOT NULL, top INTEGER NOT NULL, vers TEXT NOT NULL,
    ends TEXT NOT NULL, PRIMARY KEY (tnum, kind, scale, idx, first)) WITHOUT ROWID`,
];

/** A run's scale: the power of two at or above its count of entries (1 → 0, 2 → 1, 3 and 4 → 2, …). */
export function scaleOf(entries: number): number {
  let s = 0;
  while (2 ** s < entries) s++;
  return s;
}

/** A run's columns as read (all of its key: an update or a delete names it). */
const RUN_COLUMNS = "tnum, kind, scale, idx, first, parts, vers, ends";

interface Run {
  tnum: number;
  kind: number;
  scale: number;
  idx: number;
  first: number;
  parts: number;
  /** Per entry its version (DEAD: gone) and where it ends in the stream. */
  vers: number[];
  ends: number[];
}

type RunRow = Omit<Run, "vers" | "ends"> & { vers: string; ends: string };

function run(r: RunRow): Run {
  return { ...r, vers: JSON.parse(r.vers) as number[], ends: JSON.parse(r.ends) as number[] };
}

const startOf = (r: Run, k: number) => (k === 0 ? 0 : r.ends[k - 1]!);

/** The newest version among `vers` (a loop, not Math.max(...): a run of many small items would overflow the call's arguments). */
const newest = (vers: readonly number[]) => vers.reduce((a, b) => Math.max(a, b), DEAD);

/**
 * Bodies at `idx`, `idx + 1`, … of list (tnum, kind) as one run: per body its version and length, its bytes read by
 * `read(k)` in order, one at a time (a part is filled and written before the next body is read: a checkpoint of
 * bodies read from the log holds one part and one body in memory, not all of them).
 */
export function writeRun(
  sql: SqlStorage,
  tnum: number,
  kind: number,
  idx: number,
  entries: ReadonlyArray<{ ver: number; length: number }>,
  read: (k: number) => Uint8Array,
): void {
  if (entries.length === 0) return;
  const first = sql.exec<{ k: number }>("SELECT COALESCE(MAX(k), 0) + 1 AS k FROM body_parts").one().k;
  const ends: number[] = [];
  let total = 0;
  for (const e of entries) ends.push((total += e.length));
  let part = 0;
  let buf = new Uint8Array(Math.min(PART_BYTES, total));
  let fill = 0;
  const write = () => {
    sql.exec("INSERT INTO body_parts (k, data) VALUES (?, ?)", first + part++, buffer(buf.subarray(0, fill)));
    buf = new Uint8Array(Math.max(0, Math.min(PART_BYTES, total - part * PART_BYTES)));
    fill = 0;
  };
  entries.forEach((e, k) => {
    const body = read(k);
    if (body.length !== e.length) throw new Error(`a body of trace ${tnum} is not the length it was given`);
    for (let at = 0; at < body.length; ) {
      const take = Math.min(body.length - at, PART_BYTES - fill);
      buf.set(body.subarray(at, at + take), fill);
      fill += take;
      at += take;
      if (fill === PART_BYTES) write();
    }
  });
  // the last part (at least one part: empty for an empty stream)
  if (fill > 0 || part === 0) write();
  const vers = entries.map((x) => x.ver);
  sql.exec(
    "INSERT INTO body_runs (tnum, kind, scale, idx, first, last, parts, top, vers, ends) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    tnum,
    kind,
    scaleOf(entries.length),
    idx,
    first,
    idx + entries.length - 1,
    part,
    newest(vers),
    JSON.stringify(vers),
    JSON.stringify(ends),
  );
}

/** One body `bytes` at `idx` of list (tnum, kind), version `ver`, as a run of its own. */
export function writeBody(sql: SqlStorage, tnum: number, kind: number, idx: number, ver: number, bytes: Uint8Array) {
  writeRun(sql, tnum, kind, idx, [{ ver, length: bytes.length }], () => bytes);
}

/**
 * The runs of list (tnum, kind) that hold indexes in [from, to), in no order: per scale the list has (found a seek at
 * a time), the runs of that scale that start in (from - 2^scale, to), those that reach `from` (see the header). A
 * CROSS JOIN keeps the scales the outer loop: SQLite's planner otherwise may scan the list's runs and join the
 * scales to them (every run read, the bound gone).
 */
const RUNS_OVERLAPPING = `WITH RECURSIVE scales (s) AS (
    SELECT MIN(scale) FROM body_runs WHERE tnum = ?1 AND kind = ?2
    UNION ALL
    SELECT (SELECT MIN(scale) FROM body_runs WHERE tnum = ?1 AND kind = ?2 AND scale > s) FROM scales WHERE s IS NOT NULL)
  SELECT ${RUN_COLUMNS.split(", ")
    .map((c) => `r.${c}`)
    .join(", ")} FROM scales CROSS JOIN body_runs AS r
    ON r.tnum = ?1 AND r.kind = ?2 AND r.scale = scales.s AND r.idx > ?3 - (1 << scales.s) AND r.idx < ?4
  WHERE r.last >= ?3`;

function runsOf(sql: SqlStorage, tnum: number, kind: number, from: number, to: number): Run[] {
  return sql.exec<RunRow>(RUNS_OVERLAPPING, tnum, kind, from, to).toArray().map(run);
}

/** Entries `ks` of run `r` (ascending), their bytes read from the parts they span. */
function readEntries(sql: SqlStorage, r: Run, ks: number[]): Uint8Array[] {
  const from = startOf(r, ks[0]!);
  const to = r.ends[ks[ks.length - 1]!]!;
  if (to === from) return ks.map(() => new Uint8Array(0));
  const p0 = Math.floor(from / PART_BYTES);
  const parts = sql
    .exec<{ data: ArrayBuffer }>(
      "SELECT data FROM body_parts WHERE k BETWEEN ? AND ? ORDER BY k",
      r.first + p0,
      r.first + Math.floor((to - 1) / PART_BYTES),
    )
    .toArray()
    .map((p) => new Uint8Array(p.data));
  const bytes = concatChunks(parts);
  const base = p0 * PART_BYTES;
  if (bytes.length < to - base) throw new Error(`bodies of trace ${r.tnum} are shorter than their run says`);
  // each body its own copy when it is not a whole part: a reader keeps what it reads, not the parts around it
  return ks.map((k) => {
    const s = startOf(r, k) - base;
    const e = r.ends[k]! - base;
    return s === 0 && e === bytes.length && parts.length === 1 ? bytes : bytes.slice(s, e);
  });
}

/** Bodies [from, to) of list (tnum, kind) as of `asOf`: the newest live version of each written by then. */
function readBodies(sql: SqlStorage, tnum: number, kind: number, from: number, to: number, asOf: number): Uint8Array[] {
  const best: Array<{ ver: number; r: Run; k: number }> = [];
  for (const r of runsOf(sql, tnum, kind, from, to))
    for (let i = Math.max(from, r.idx); i < Math.min(to, r.idx + r.vers.length); i++) {
      const ver = r.vers[i - r.idx]!;
      const had = best[i - from];
      if (ver !== DEAD && ver <= asOf && (!had || ver > had.ver)) best[i - from] = { ver, r, k: i - r.idx };
    }
  const out: Uint8Array[] = [];
  const byRun = new Map<Run, number[]>();
  for (const b of best) {
    if (!b) continue;
    const ks = byRun.get(b.r) ?? [];
    if (!byRun.has(b.r)) byRun.set(b.r, ks);
    ks.push(b.k);
  }
  for (const [r, ks] of byRun) {
    const bodies = readEntries(sql, r, ks);
    ks.forEach((k, j) => {
      out[r.idx + k - from] = bodies[j]!;
    });
  }
  return out;
}

/** The body of node `idx` of trace `tnum` at version `ver` (empty when there is none). */
export function nodeBody(sql: SqlStorage, tnum: number, idx: number, ver: number): Uint8Array {
  for (const r of runsOf(sql, tnum, NODES, idx, idx + 1))
    if (r.vers[idx - r.idx] === ver) return readEntries(sql, r, [idx - r.idx])[0]!;
  return new Uint8Array(0);
}

/** Nodes [from, to) of trace `tnum` as of `asOf`: the newest version of each written by then. */
export function nodeBodies(sql: SqlStorage, tnum: number, from: number, to: number, asOf: number): Uint8Array[] {
  return readBodies(sql, tnum, NODES, from, to, asOf);
}

/** Items [from, to) of one list of trace `tnum` (items are never rewritten: one version each). */
export function itemBodies(sql: SqlStorage, tnum: number, field: ItemField, from: number, to: number): Uint8Array[] {
  return readBodies(sql, tnum, KIND[field], from, to, Number.MAX_SAFE_INTEGER).filter((b) => b !== undefined);
}

/** Run `r` rewritten with its entries' versions `vers` (DEAD: gone); it goes with its parts when none is left. */
function save(sql: SqlStorage, r: Run, vers: number[]): void {
  let n = vers.length;
  while (n > 0 && vers[n - 1] === DEAD) n--;
  if (n === 0) return deleteRun(sql, r);
  // the dead tail's parts go; the parts left hold the stream up to the last live entry
  const parts = Math.max(1, Math.ceil(r.ends[n - 1]! / PART_BYTES));
  if (parts < r.parts) sql.exec("DELETE FROM body_parts WHERE k >= ? AND k < ?", r.first + parts, r.first + r.parts);
  const live = vers.slice(0, n);
  // its scale stays (its key: the run spans fewer indexes than it bounds, an update of one row rather than a move)
  sql.exec(
    `UPDATE body_runs SET last = ?, parts = ?, top = ?, vers = ?, ends = ?
      WHERE tnum = ? AND kind = ? AND scale = ? AND idx = ? AND first = ?`,
    r.idx + n - 1,
    parts,
    newest(live),
    JSON.stringify(live),
    JSON.stringify(r.ends.slice(0, n)),
    r.tnum,
    r.kind,
    r.scale,
    r.idx,
    r.first,
  );
}

function deleteRun(sql: SqlStorage, r: Pick<Run, "tnum" | "kind" | "scale" | "idx" | "first" | "parts">): void {
  sql.exec("DELETE FROM body_parts WHERE k >= ? AND k < ?", r.first, r.first + r.parts);
  sql.exec(
    "DELETE FROM body_runs WHERE tnum = ? AND kind = ? AND scale = ? AND idx = ? AND first = ?",
    r.tnum,
    r.kind,
    r.scale,
    r.idx,
    r.first,
  );
}

/** Node `idx` of trace `tnum` at version `ver` goes (superseded, nothing holds it). */
export function dropNodeBody(sql: SqlStorage, tnum: number, idx: number, ver: number): void {
  for (const r of runsOf(sql, tnum, NODES, idx, idx + 1)) {
    if (r.vers[idx - r.idx] !== ver) continue;
    const vers = [...r.vers];
    vers[idx - r.idx] = DEAD;
    save(sql, r, vers);
  }
}

/** Every body of trace `tnum` goes. */
export function deleteTraceBodies(sql: SqlStorage, tnum: number): void {
  for (const r of sql
    .exec<{ first: number; parts: number }>("SELECT first, parts FROM body_runs WHERE tnum = ?", tnum)
    .toArray())
    sql.exec("DELETE FROM body_parts WHERE k >= ? AND k < ?", r.first, r.first + r.parts);
  sql.exec("DELETE FROM body_runs WHERE tnum = ?", tnum);
}

/** A rewind to `seq`: entries written after it go. */
export function rewindBodies(sql: SqlStorage, seq: number): void {
  for (const r of sql.exec<RunRow>(`SELECT ${RUN_COLUMNS} FROM body_runs WHERE top > ?`, seq).toArray().map(run))
    save(
      sql,
      r,
      r.vers.map((v) => (v > seq ? DEAD : v)),
    );
}

/** Per trace, per item list (kind 1..6), the live items' count and bytes. */
export function itemSizes(sql: SqlStorage): Map<number, Map<number, { count: number; bytes: number }>> {
  const out = new Map<number, Map<number, { count: number; bytes: number }>>();
  for (const r of sql.exec<RunRow>(`SELECT ${RUN_COLUMNS} FROM body_runs WHERE kind > 0`).toArray().map(run)) {
    const lists = out.get(r.tnum) ?? new Map<number, { count: number; bytes: number }>();
    out.set(r.tnum, lists);
    const s = lists.get(r.kind) ?? { count: 0, bytes: 0 };
    lists.set(r.kind, s);
    r.vers.forEach((v, k) => {
      if (v === DEAD) return;
      s.count++;
      s.bytes += r.ends[k]! - startOf(r, k);
    });
  }
  return out;
}

/**
 * Migration 12: the `bodies` table of version 11 (a row per body and part, keyed (tnum, kind, idx, ver, part)) into
 * runs, consecutive indexes of a list in one run (at most ~PART_BYTES × 16 each), then dropped. Safe to run again:
 * nothing to do once it is gone. The runs are written in this release's layout (migration 13 then finds them so).
 */
export function bodiesIntoRuns(sql: SqlStorage): void {
  for (const q of BODY_TABLES) sql.exec(q.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"));
  const old = sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'bodies'").toArray().length > 0;
  if (!old) return;
  let cur: { tnum: number; kind: number; idx: number; bodies: Array<{ ver: number; bytes: Uint8Array }> } | null = null;
  let held = 0;
  let body: { tnum: number; kind: number; idx: number; ver: number; parts: Uint8Array[] } | null = null;
  const flush = () => {
    const c = cur;
    if (c)
      writeRun(
        sql,
        c.tnum,
        c.kind,
        c.idx,
        c.bodies.map((b) => ({ ver: b.ver, length: b.bytes.length })),
        (k) => c.bodies[k]!.bytes,
      );
    cur = null;
    held = 0;
  };
  const close = () => {
    if (!body) return;
    const b = body;
    const joins = cur && cur.tnum === b.tnum && cur.kind === b.kind && cur.idx + cur.bodies.length === b.idx;
    if (!joins || held >= 16 * PART_BYTES) flush();
    cur ??= { tnum: b.tnum, kind: b.kind, idx: b.idx, bodies: [] };
    const bytes = concatChunks(b.parts);
    cur.bodies.push({ ver: b.ver, bytes });
    held += bytes.length;
  };
  for (const r of sql.exec<{ tnum: number; kind: number; idx: number; ver: number; data: ArrayBuffer }>(
    "SELECT tnum, kind, idx, ver, data FROM bodies ORDER BY tnum, kind, idx, ver, part",
  )) {
    if (!body || body.tnum !== r.tnum || body.kind !== r.kind || body.idx !== r.idx || body.ver !== r.ver) {
      close();
      body = { tnum: r.tnum, kind: r.kind, idx: r.idx, ver: r.ver, parts: [] };
    }
    body.parts.push(new Uint8Array(r.data));
  }
  close();
  flush();
  sql.exec("DROP TABLE bodies");
}

/**
 * Migration 13: the runs of version 12 (keyed (tnum, kind, idx, first)) rebuilt keyed by their scale, each with its
 * last index, both from its entries (`ends`); everything else as it was, the parts untouched. Nothing to do when the
 * runs have a scale (written by this release, or migrated already).
 */
export function boundRuns(sql: SqlStorage): void {
  const columns = sql
    .exec<{ name: string }>("SELECT name FROM pragma_table_info('body_runs')")
    .toArray()
    .map((c) => c.name);
  if (columns.length === 0 || columns.includes("scale")) return;
  sql.exec(BODY_TABLES[1]!.replace("CREATE TABLE body_runs", "CREATE TABLE body_runs_v13"));
  type Row12 = Omit<RunRow, "scale"> & { top: number };
  for (const r of sql.exec<Row12>("SELECT tnum, kind, idx, first, parts, top, vers, ends FROM body_runs").toArray()) {
    const entries = (JSON.parse(r.ends) as number[]).length;
    sql.exec(
      "INSERT INTO body_runs_v13 (tnum, kind, scale, idx, first, last, parts, top, vers, ends) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      r.tnum,
      r.kind,
      scaleOf(entries),
      r.idx,
      r.first,
      r.idx + entries - 1,
      r.parts,
      r.top,
      r.vers,
      r.ends,
    );
  }
  sql.exec("DROP TABLE body_runs");
  sql.exec("ALTER TABLE body_runs_v13 RENAME TO body_runs");
}

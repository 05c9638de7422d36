// A run index's search (INDEX_SCHEMA versions 7, 11, 14, 16 and 17): the episodes' text segments
// (src/protocol/search/segments.ts), and SQLite's FTS5 index over them (`search`, a contentless table: one
// document per segment, its rowid the segment's id, so a query matches segments exactly as before). The text is
// kept in `segment_packs` (segment-packs.ts): the segments one statement puts in, in one row (id: the first one's
// id, `segs`: a JSON array, null where a segment went), where a row per segment was one more row written per
// segment; the view `segments` reads them as rows. Each episode's segments have ids in a block of their own
// (SEGMENT_BLOCK from its row's `seg_base`), so its packs are found by a range of the table's key, with no
// index of their own (an index entry per segment is a row written per segment). Episodes send what is new with their rows (a
// batch per row: the segments from a node on, replacing what was held from there, e.g. after a
// retraction); a row that goes takes its segments with it. A running episode's batches wait in its row
// (`text_since`, `text_waiting`: written with the row's update, no row of their own since version 16) and go into the
// search together once SEARCH_FLUSH_MS has passed since the first of them waited, or at once when the
// episode ends, when a batch replaces text (a retraction, a discarded trace) or when its first text
// comes: FTS5 writes a new segment of its own (several shadow rows) for every statement, so one
// statement per SEARCH_FLUSH_MS, not one per row update. FTS5 is written here in one statement per
// transaction (no trigger since version 11), and the rows it writes to its shadow tables are counted
// (`settle`). A query ranks episodes by their best segment (FTS5's bm25), filtered by the list's
// filters and the viewer's scope in the same statement (a partial scope's matches are its own
// episodes' only), and cuts the snippets of the page's episodes only (highlight.ts).

import { positionText, readPosition } from "../../protocol/registry/list-cursors.js";
import { NO_FILTER } from "../../protocol/registry/row-filter.js";
import type { ListQuery, Scope } from "../../protocol/registry/rows.js";
import { mergeBatches, replacesAny, type TextBatch } from "../../protocol/search/batches.js";
import { snippet } from "../../protocol/search/highlight.js";
import type { SearchQuery } from "../../protocol/search/query.js";
import type { Segment } from "../../protocol/search/segments.js";
import { conditions } from "./episode-pages.js";
import { inScope } from "./scoped-rows.js";

/** Matching segments one query ranks at most (a word in nearly every segment ranks the first this many). */
export const SEARCH_MATCH_BUDGET = 50_000;
/** Past any node index: a trace whose batch has no `from` keeps its segments. */
const NO_NODE = Number.MAX_SAFE_INTEGER;

/** Other episodes whose waiting text one update puts into the search at most (each sends an update every INDEX_FLUSH_MS). */
export const TEXT_FLUSH_BATCH = 2;

/** Segment ids an episode's block holds: the episode with base b has ids b × SEGMENT_BLOCK to (b + 1) × SEGMENT_BLOCK - 1. */
export const SEGMENT_BLOCK = 2 ** 20;

/** The ids of the block of base `base`. */
function blockOf(base: number): { lo: number; hi: number } {
  return { lo: base * SEGMENT_BLOCK, hi: (base + 1) * SEGMENT_BLOCK - 1 };
}

/** Snippets per episode in an answer. */
export const SNIPPETS_PER_EPISODE = 3;

/** What an episode sends with its row (src/protocol/search/batches.ts). */
export type SearchBatch = TextBatch;

/** An episode's batches waiting to go into the search, as one, and since when (in its row: `text_since`, `text_waiting`). */
export interface Waiting {
  since: number;
  batch: SearchBatch;
}

/** The waiting text in its row's columns, or null. */
export function waitingOf(r: { text_since?: SqlStorageValue; text_waiting?: SqlStorageValue } | null): Waiting | null {
  if (r === null || r.text_since === null || r.text_since === undefined || typeof r.text_waiting !== "string")
    return null;
  return { since: Number(r.text_since), batch: JSON.parse(r.text_waiting) as SearchBatch };
}

/** A segment held, as FTS5's 'delete' needs it. */
type Held = { id: number; body: string; role: string; tool: string | null };

/** A segment in its pack (`segs`): trace, node, role, tool, kind, body. */
type Packed = [string, number, string, string | null, string, string];

/** The segments of the packs whose ids are from ?1 to ?2 (a block), as rows. */
const BLOCK_SEGMENTS = `SELECT p.id + j.key AS id, j.value ->> 0 AS trace, j.value ->> 1 AS node, j.value ->> 2 AS role,
  j.value ->> 3 AS tool, j.value ->> 4 AS kind, j.value ->> 5 AS body
  FROM segment_packs p, json_each(p.segs) j WHERE p.id BETWEEN ?1 AND ?2 AND j.type = 'array'`;

/** The pack that holds segment id `x` (an SQL expression): the one with the greatest id up to it. */
const packOf = (x: string) => `(SELECT id FROM segment_packs WHERE id <= ${x} ORDER BY id DESC LIMIT 1)`;

/** One episode found: its score (higher is better) and where the query matched it. */
export interface SearchHit {
  id: string;
  score: number;
  snippets: Array<{
    trace: string;
    node: number;
    role: string;
    tool: string | null;
    text: string;
    highlights: Array<[number, number]>;
  }>;
}

export interface SearchPage {
  episodes: SearchHit[];
  /** Pass as `cursor` for the next page; null on the last one. */
  cursor: string | null;
}

export class SearchStore {
  /**
   * Rows the text's statements wrote since the object started (its segments, and FTS5's rows by trigger): the flags
   * bench's cost figure.
   */
  rowsWritten = 0;

  /**
   * Set by the transaction's first FTS5 statement: SQLite's total_changes() before it, and the rows
   * the FTS5 statements wrote themselves (`settle`).
   */
  private mark: { changes: number; rows: number } | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /**
   * What becomes of an episode's batch (`held`: what waits in its row): a running episode's (`holdMs` > 0) waits with
   * the ones before it while they waited less than `holdMs`, unless it replaces text (held or waiting) or the episode
   * has none in the search yet; otherwise the waiting ones and it go into the search. With no batch (nothing new) an
   * ended episode's (`holdMs` 0) waiting ones go in. The caller writes `waiting` with the row (undefined: as it is;
   * null: none waits), then calls `apply` as the transaction's last writes (see `settle`).
   */
  plan(
    episode: string,
    base: number | null,
    b: SearchBatch | null,
    holdMs: number,
    now: number,
    held: Waiting | null,
  ): { waiting: Waiting | null | undefined; apply: () => void } {
    const none = { waiting: undefined, apply: () => undefined };
    if (base === null) return none; // no text sent yet (a batch comes with its base)
    if (b === null && !(held && holdMs === 0)) return none;
    const all = held ? (b === null ? held.batch : mergeBatches(held.batch, b)) : b!;
    const gone = this.replaced(base, all);
    const hold =
      b !== null &&
      holdMs > 0 &&
      gone.length === 0 &&
      !(held && replacesAny(held.batch, b)) &&
      (held !== null ? now - held.since < holdMs : this.indexed(base));
    // the row keeps the time the first batch began to wait
    if (hold) return { waiting: { since: held?.since ?? now, batch: all }, apply: () => undefined };
    return { waiting: held ? null : undefined, apply: () => this.replace(episode, base, gone, all.segments) };
  }

  /**
   * The episodes whose batches waited since `before` or earlier (every waiting one: null) go into the search, at most
   * `limit` of them (the oldest first); whether more are due.
   */
  flushWaiting(before: number | null, limit: number): boolean {
    const due = this.sql
      .exec<{ id: string; batch: string; base: number | null }>(
        `SELECT id, text_waiting AS batch, seg_base AS base FROM rows INDEXED BY rows_text_waiting
         WHERE text_since <= ? ORDER BY text_since LIMIT ?`,
        before ?? Number.MAX_SAFE_INTEGER,
        limit + 1,
      )
      .toArray();
    for (const w of due.slice(0, limit)) {
      const b = JSON.parse(w.batch) as SearchBatch;
      this.sql.exec("UPDATE rows SET text_since = NULL, text_waiting = NULL WHERE id = ?", w.id);
      if (w.base !== null) this.replace(w.id, w.base, this.replaced(w.base, b), b.segments);
    }
    return due.length > limit;
  }

  /** Whether the search holds any of the text of the episode whose block is `base`'s. */
  private indexed(base: number): boolean {
    const { lo, hi } = blockOf(base);
    return this.sql.exec("SELECT 1 FROM segment_packs WHERE id BETWEEN ? AND ? LIMIT 1", lo, hi).toArray().length > 0;
  }

  /**
   * What `b` replaces of the held segments of the episode whose block is `base`'s: the traces it no longer holds, and
   * each trace's from its `from` node on.
   */
  private replaced(base: number, b: SearchBatch): Held[] {
    const { lo, hi } = blockOf(base);
    return this.sql
      .exec<Held>(
        `SELECT id, body, role, tool FROM (${BLOCK_SEGMENTS}) s WHERE (s.trace NOT IN (SELECT value FROM json_each(?3))
           OR s.node >= COALESCE((SELECT value FROM json_each(?4) WHERE key = s.trace), ${NO_NODE})) ORDER BY id`,
        lo,
        hi,
        JSON.stringify(b.traces),
        JSON.stringify(b.from),
      )
      .toArray();
  }

  /** The episode went (its block `base`'s; null: it sent no text): its segments too (what waited went with its row). */
  remove(episode: string, base: number | null): void {
    if (base === null) return;
    const { lo, hi } = blockOf(base);
    const gone = this.sql
      .exec<Held>(`SELECT id, body, role, tool FROM (${BLOCK_SEGMENTS}) ORDER BY id`, lo, hi)
      .toArray();
    this.replace(episode, base, gone, []);
  }

  /**
   * The FTS5 shadow rows written since the first FTS5 statement of the transaction that just ended
   * (its flush comes with the commit): SQLite's total_changes() counts the rows FTS5's own statements
   * write, and the FTS5 statements' own rows (counted by their cursors) are taken off. Call after
   * the transaction; 0 when it wrote no text.
   */
  settle(): number {
    const mark = this.mark;
    this.mark = null;
    if (mark === null) return 0;
    const shadow = Math.max(0, this.totalChanges() - mark.changes - mark.rows);
    this.rowsWritten += shadow;
    return shadow;
  }

  /** A transaction that wrote text was rolled back: nothing of it is counted. */
  abandon(): void {
    this.mark = null;
  }

  private replace(episode: string, base: number, gone: readonly Held[], segments: readonly Segment[]): void {
    if (gone.length === 0 && segments.length === 0) return;
    const { lo, hi } = blockOf(base);
    // after the last pack's last id (a segment that went keeps its id: ids are not used again)
    const first = this.sql
      .exec<{ n: number }>(
        "SELECT COALESCE(MAX(id + json_array_length(segs)), ?1) AS n FROM segment_packs WHERE id BETWEEN ?1 AND ?2",
        lo,
        hi,
      )
      .one().n;
    if (first + segments.length - 1 > hi) {
      // the block is spent (retractions take new ids): the episode's segments are written again from its start
      const goneIds = new Set(gone.map((g) => g.id));
      const held = this.sql
        .exec<Held & { trace: string; node: number; kind: string }>(`${BLOCK_SEGMENTS} ORDER BY id`, lo, hi)
        .toArray();
      const kept: Segment[] = held
        .filter((h) => !goneIds.has(h.id))
        .map((h) => ({
          trace: h.trace,
          node: h.node,
          role: h.role,
          tool: h.tool,
          kind: h.kind as Segment["kind"],
          body: h.body,
        }));
      return this.rewrite(episode, lo, held, [...kept, ...segments]);
    }
    return this.rewrite(episode, first, gone, segments);
  }

  /** `gone` out (each out of its pack) and `segments` in (one pack), their ids from `first` on. */
  private rewrite(episode: string, first: number, gone: readonly Held[], segments: readonly Segment[]): void {
    if (gone.length) {
      const packs = this.sql
        .exec<{ id: number; segs: string }>(
          `SELECT DISTINCT p.id, p.segs FROM json_each(?) g JOIN segment_packs p ON p.id = ${packOf("g.value")}`,
          JSON.stringify(gone.map((g) => g.id)),
        )
        .toArray();
      const goneIds = new Set(gone.map((g) => g.id));
      for (const p of packs) {
        const segs = (JSON.parse(p.segs) as Array<Packed | null>).map((x, k) => (goneIds.has(p.id + k) ? null : x));
        if (segs.every((x) => x === null)) this.write("DELETE FROM segment_packs WHERE id = ?", p.id);
        else this.write("UPDATE segment_packs SET segs = ? WHERE id = ?", JSON.stringify(segs), p.id);
      }
    }
    const packed = JSON.stringify(segments.map((s): Packed => [s.trace, s.node, s.role, s.tool, s.kind, s.body]));
    if (segments.length)
      this.write("INSERT INTO segment_packs (id, episode, segs) VALUES (?, ?, ?)", first, episode, packed);
    // FTS5 last (the rows before it are not its shadow rows): the old text out ('delete' needs it as indexed), the new in
    this.mark ??= { changes: this.totalChanges(), rows: 0 };
    this.mark.rows += this.write(
      `INSERT INTO search (search, rowid, body, role, tool)
       SELECT 'delete', value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?)
       UNION ALL SELECT NULL, ? + key, value ->> 5, value ->> 2, value ->> 3 FROM json_each(?)`,
      JSON.stringify(gone.map((g) => [g.id, g.body, g.role, g.tool])),
      first,
      packed,
    );
  }

  private totalChanges(): number {
    return this.sql.exec<{ n: number }>("SELECT total_changes() AS n").one().n;
  }

  private write(query: string, ...args: SqlStorageValue[]): number {
    const n = this.sql.exec(query, ...args).rowsWritten;
    this.rowsWritten += n;
    return n;
  }

  /**
   * What the text keeps, in all: segments and characters, and payload bytes (no page overhead) of
   * the segments' rows and of FTS5's own tables (its index blocks and per-row sizes).
   */
  size(): { segments: number; chars: number; textBytes: number; ftsBytes: number } {
    const r = this.sql
      .exec<{ segments: number; chars: number | null; text: number | null; fts: number | null }>(
        `SELECT COUNT(*) AS segments, SUM(LENGTH(body)) AS chars,
           SUM(LENGTH(CAST(body AS BLOB)) + LENGTH(episode) + LENGTH(trace) + LENGTH(role) + COALESCE(LENGTH(tool), 0) + LENGTH(kind) + 16) AS text,
           (SELECT SUM(LENGTH(block)) FROM search_data) + (SELECT COALESCE(SUM(LENGTH(sz)), 0) FROM search_docsize) AS fts
         FROM segments`,
      )
      .one();
    return { segments: r.segments, chars: r.chars ?? 0, textBytes: r.text ?? 0, ftsBytes: r.fts ?? 0 };
  }

  /**
   * The episodes whose segments hold `needle` (any case), read row by row with no index: the
   * search bench's baseline (a plain scan of the same rows). No route reaches it.
   */
  scan(needle: string, limit: number): string[] {
    return this.sql
      .exec<{ episode: string }>(
        "SELECT DISTINCT episode FROM segments WHERE instr(lower(body), lower(?)) > 0 LIMIT ?",
        needle,
        limit,
      )
      .toArray()
      .map((r) => r.episode);
  }

  /**
   * The search bench's comparison (EpisodeIndex `searchAgainstScan`): `query` answered by the index (a first page
   * of `limit`) and `word` by `scan`, each `repeats` times; the mean ms of each and what each found.
   */
  againstScan(
    query: SearchQuery,
    word: string,
    limit: number,
    repeats: number,
  ): { indexMs: number; scanMs: number; indexFound: number; scanFound: number } {
    // timed over all repeats at once: the clock moves by whole milliseconds
    let indexFound = 0;
    let scanFound = 0;
    let t = performance.now();
    for (let i = 0; i < repeats; i++)
      indexFound = this.search(query, { status: null, prefix: null, filter: NO_FILTER, limit }, null, null).episodes
        .length;
    const indexMs = (performance.now() - t) / repeats;
    t = performance.now();
    for (let i = 0; i < repeats; i++) scanFound = this.scan(word, limit).length;
    const scanMs = (performance.now() - t) / repeats;
    return { indexMs, scanMs, indexFound, scanFound };
  }

  /** Segments an episode holds, and their characters (the cost bench and tests). */
  held(episode: string): { segments: number; chars: number } {
    const r = this.sql
      .exec<{ n: number; c: number | null }>(
        `SELECT COUNT(*) AS n, SUM(LENGTH(j.value ->> 5)) AS c FROM segment_packs p, json_each(p.segs) j,
           (SELECT seg_base FROM rows WHERE id = ?) r
         WHERE p.id BETWEEN r.seg_base * ${SEGMENT_BLOCK} AND (r.seg_base + 1) * ${SEGMENT_BLOCK} - 1 AND j.type = 'array'`,
        episode,
      )
      .one();
    return { segments: r.n, chars: r.c ?? 0 };
  }

  /**
   * A page of episodes matching `query`, best first (by their best segment; ties by id), passing
   * `q`'s filters within `scope`, after `cursor`. One pass of FTS5: the matching segments (ids and
   * scores) are kept in the statement, ranked per episode, and the page's own come back with it;
   * their snippets are cut from the stored text (highlight.ts), the page's only.
   */
  search(
    query: SearchQuery,
    q: Pick<ListQuery, "status" | "prefix" | "filter" | "limit">,
    scope: Scope,
    cursor: string | null,
  ): SearchPage {
    const cond = conditions(q);
    // a partial scope's matches are its own episodes' only: no budget is spent on the others
    const mine = scope === null ? { sql: "1", args: [] } : inScope("p.episode", scope);
    const after = cursor === null ? null : readPosition("search", cursor);
    const having = after ? "HAVING (MIN(m.score), m.episode) > (?, ?)" : "";
    const found = this.sql
      .exec<{ episode: string; best: number; id: number }>(
        `WITH m AS MATERIALIZED
           (SELECT p.episode AS episode, search.rowid AS id, bm25(search) AS score FROM search
              JOIN segment_packs p ON p.id = ${packOf("search.rowid")}
            WHERE search MATCH ? AND ${mine.sql} LIMIT ?),
         page AS
           (SELECT m.episode AS episode, MIN(m.score) AS best FROM m JOIN rows ON rows.id = m.episode
            WHERE ${cond.sql} GROUP BY m.episode ${having} ORDER BY best, m.episode LIMIT ?)
         SELECT page.episode, page.best, m.id FROM page JOIN m ON m.episode = page.episode ORDER BY page.best, page.episode, m.score, m.id`,
        query.match,
        ...mine.args,
        SEARCH_MATCH_BUDGET,
        ...cond.args,
        ...(after ? [after.score, after.id] : []),
        q.limit + 1,
      )
      .toArray();
    // per episode (in rank order), its best segments' ids
    const ranked: Array<{ episode: string; best: number; ids: number[] }> = [];
    for (const r of found) {
      const last = ranked.at(-1);
      if (last?.episode === r.episode) {
        if (last.ids.length < SNIPPETS_PER_EPISODE) last.ids.push(r.id);
      } else ranked.push({ episode: r.episode, best: r.best, ids: [r.id] });
    }
    const page = ranked.slice(0, q.limit);
    const bodies = this.segmentsById(page.flatMap((r) => r.ids));
    const last = page.at(-1);
    return {
      episodes: page.map((r) => ({
        id: r.episode,
        score: -r.best,
        snippets: r.ids.flatMap((id) => {
          const s = bodies.get(id);
          return s
            ? [{ trace: s.trace, node: s.node, role: s.role, tool: s.tool, ...snippet(s.body, query.phrases) }]
            : [];
        }),
      })),
      cursor: ranked.length > q.limit && last ? positionText("search", { score: last.best, id: last.episode }) : null,
    };
  }

  /** Segments by id (the page's snippets: at most SNIPPETS_PER_EPISODE per episode). */
  private segmentsById(
    ids: number[],
  ): Map<number, { trace: string; node: number; role: string; tool: string | null; body: string }> {
    if (ids.length === 0) return new Map();
    // each pack read once (the page's snippets are mostly a few episodes' packs)
    const packs = this.sql
      .exec<{ id: number; segs: string }>(
        `SELECT DISTINCT p.id, p.segs FROM json_each(?) g JOIN segment_packs p ON p.id = ${packOf("g.value")}`,
        JSON.stringify(ids),
      )
      .toArray()
      .map((p) => ({ id: p.id, segs: JSON.parse(p.segs) as Array<Packed | null> }))
      .sort((a, b) => b.id - a.id);
    const out = new Map<number, { trace: string; node: number; role: string; tool: string | null; body: string }>();
    for (const id of ids) {
      const pack = packs.find((p) => p.id <= id);
      const x = pack?.segs[id - pack.id];
      if (x) out.set(id, { trace: x[0], node: x[1], role: x[2], tool: x[3], body: x[5] });
    }
    return out;
  }
}

/**
 * The segments after id `after` (at most `limit`, in id order), read pack by pack: the flag rules' rescan
 * (flag-store.ts).
 */
export function segmentsAfter(
  sql: SqlStorage,
  after: number,
  limit: number,
): Array<Segment & { id: number; episode: string }> {
  const out: Array<Segment & { id: number; episode: string }> = [];
  let from = sql.exec<{ id: number }>(`SELECT COALESCE(${packOf("?1")}, ?1) AS id`, after).one().id;
  while (out.length < limit) {
    const packs = sql
      .exec<{ id: number; episode: string; segs: string }>(
        "SELECT id, episode, segs FROM segment_packs WHERE id >= ? ORDER BY id LIMIT 16",
        from,
      )
      .toArray();
    for (const p of packs)
      (JSON.parse(p.segs) as Array<Packed | null>).forEach((x, k) => {
        if (x && p.id + k > after && out.length < limit)
          out.push({
            id: p.id + k,
            episode: p.episode,
            trace: x[0],
            node: x[1],
            role: x[2],
            tool: x[3],
            kind: x[4] as Segment["kind"],
            body: x[5],
          });
      });
    if (packs.length < 16) break;
    from = packs.at(-1)!.id + 1;
  }
  return out;
}

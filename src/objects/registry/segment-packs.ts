// INDEX_SCHEMA version 17: the search's text in packs (search-store.ts): `segments` (a row per segment, FTS5's
// external content) becomes `segment_packs` (a row per run of consecutive ids: the segments one statement put in, as
// a JSON array) and a view of the same name and columns that reads them as rows; FTS5's `search` becomes a
// contentless table, built again from the same segments with the same rowids (a query matches and ranks as before:
// the text and each document's sizes are the same). Safe to run again: once `segments` is a view there is nothing
// to do.

/** The packs (search-store.ts): id, the first segment's; `segs`, per id from it a [trace, node, role, tool, kind, body] or null. */
export const SEGMENT_PACKS_TABLE =
  "CREATE TABLE segment_packs (id INTEGER PRIMARY KEY, episode TEXT NOT NULL, segs TEXT NOT NULL)";

/** The segments as rows (the bench's scan, sizes, tests): read, never written. */
export const SEGMENTS_VIEW = `CREATE VIEW segments AS SELECT p.id + j.key AS id, p.episode AS episode,
    j.value ->> 0 AS trace, j.value ->> 1 AS node, j.value ->> 2 AS role, j.value ->> 3 AS tool, j.value ->> 4 AS kind,
    j.value ->> 5 AS body FROM segment_packs p, json_each(p.segs) j WHERE j.type = 'array'`;

/** FTS5 over the segments, contentless (the text is in the packs; a 'delete' passes the values it indexed). */
export const SEARCH_TABLE = `CREATE VIRTUAL TABLE search USING fts5(body, role, tool, content = '',
    tokenize = 'unicode61 remove_diacritics 2')`;

/** Consecutive ids of one episode go in one pack, at most this many characters of text (a row stays far below 2 MB). */
const PACK_CHARS = 256 * 1024;

export function packSegments(sql: SqlStorage): void {
  const kind = sql.exec<{ type: string }>("SELECT type FROM sqlite_master WHERE name = 'segments'").toArray()[0]?.type;
  if (kind !== "table") return;
  sql.exec(SEGMENT_PACKS_TABLE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"));
  let run: { id: number; episode: string; next: number; chars: number; segs: unknown[] } | null = null;
  const flush = () => {
    if (run)
      sql.exec(
        "INSERT INTO segment_packs (id, episode, segs) VALUES (?, ?, ?)",
        run.id,
        run.episode,
        JSON.stringify(run.segs),
      );
    run = null;
  };
  for (const s of sql.exec<{
    id: number;
    episode: string;
    trace: string;
    node: number;
    role: string;
    tool: string | null;
    kind: string;
    body: string;
  }>("SELECT id, episode, trace, node, role, tool, kind, body FROM segments ORDER BY id")) {
    const r = run as { id: number; episode: string; next: number; chars: number; segs: unknown[] } | null;
    if (!r || r.episode !== s.episode || r.next !== s.id || r.chars + s.body.length > PACK_CHARS) {
      flush();
      run = { id: s.id, episode: s.episode, next: s.id, chars: 0, segs: [] };
    }
    const cur = run!;
    cur.segs.push([s.trace, s.node, s.role, s.tool, s.kind, s.body]);
    cur.next++;
    cur.chars += s.body.length;
  }
  flush();
  sql.exec("DROP TABLE search");
  sql.exec("DROP TABLE segments");
  sql.exec(SEGMENTS_VIEW);
  sql.exec(SEARCH_TABLE);
  sql.exec("INSERT INTO search (rowid, body, role, tool) SELECT id, body, role, tool FROM segments");
}

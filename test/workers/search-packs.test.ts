// The search's text in packs (INDEX_SCHEMA 17, src/objects/registry/search-store.ts): the segments one statement puts
// in are one row of segment_packs, FTS5 (contentless) keeps a document per segment, so a query matches segments as
// before (a phrase never spans two), a replacement takes the replaced segments out of their pack and of FTS5, and a
// removed episode leaves nothing.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { INDEX_SCHEMA } from "../../src/objects/registry/schemas.js";
import { SearchStore, segmentsAfter } from "../../src/objects/registry/search-store.js";
import { SchemaState } from "../../src/objects/storage/schema.js";
import { NO_FILTER } from "../../src/protocol/registry/row-filter.js";
import { runIndexName } from "../../src/protocol/registry/run.js";
import { parseSearchQuery } from "../../src/protocol/search/query.js";
import type { Segment } from "../../src/protocol/search/segments.js";
import { freshId } from "./support.js";

const seg = (node: number, body: string): Segment => ({
  trace: "t",
  node,
  role: "assistant",
  tool: null,
  kind: "text",
  body,
});

describe("the search's text in packs", () => {
  it("a batch is one row; a query matches per segment; a replacement and a removal leave no stale text", async () => {
    const run = freshId("packs");
    await runInDurableObject(env.EPISODE_INDEX.getByName(runIndexName(run)), (_o, state) => {
      const sql = state.storage.sql;
      state.storage.transactionSync(() => new SchemaState(state.storage, INDEX_SCHEMA).ensure());
      const ep = `${run}:a`;
      sql.exec(
        `INSERT INTO rows (id, run, status, created, updated, seq, traces, nodes, calls, tokens, seg_base)
         VALUES (?, ?, 'finished', 0, 0, 1, 1, 3, 0, 0, 1)`,
        ep,
        run,
      );
      const store = new SearchStore(sql);
      const n = (q: string) => sql.exec<{ n: number }>(q).one().n;
      const found = (q: string) =>
        store
          .search(parseSearchQuery(q), { status: null, prefix: null, filter: NO_FILTER, limit: 10 }, null, null)
          .episodes.map((e) => e.snippets.map((s) => s.node));
      const put = (from: number, segments: Segment[]) => {
        const written = store.rowsWritten;
        state.storage.transactionSync(() =>
          store.plan(ep, 1, { traces: ["t"], from: { t: from }, segments }, 0, 0, null).apply(),
        );
        store.settle();
        return store.rowsWritten - written;
      };

      const first = put(0, [seg(0, "the grader checks alpha"), seg(1, "beta follows here"), seg(2, "gamma ends it")]);
      expect(n("SELECT COUNT(*) AS n FROM segment_packs")).toBe(1);
      expect(n("SELECT COUNT(*) AS n FROM segments")).toBe(3);
      // the pack, and FTS5's document and its rows per segment: no row per segment of its own
      expect(first).toBeGreaterThanOrEqual(1 + 3);
      expect(found("beta")).toEqual([[1]]);
      expect(found("grader")).toEqual([[0]]);
      // a phrase across two segments (the end of one, the start of the next) is not found: a document per segment
      expect(found('"alpha beta"')).toEqual([]);
      // both words in one segment: found; in two: not (terms are ANDed per segment, as before)
      expect(found("gamma ends")).toEqual([[2]]);
      expect(found("alpha gamma")).toEqual([]);

      // a retraction resends from node 1: nodes 1 and 2 go from their pack and from FTS5, the new text comes in a pack
      put(1, [seg(1, "delta replaces beta")]);
      expect(n("SELECT COUNT(*) AS n FROM segment_packs")).toBe(2);
      expect(n("SELECT COUNT(*) AS n FROM segments")).toBe(2);
      expect(found("gamma")).toEqual([]);
      expect(found("follows")).toEqual([]);
      expect(found("delta")).toEqual([[1]]);
      expect(found("grader")).toEqual([[0]]);
      expect(store.held(ep)).toEqual({
        segments: 2,
        chars: "the grader checks alpha".length + "delta replaces beta".length,
      });
      // the flag rules' rescan reads them in id order, pack by pack
      expect(segmentsAfter(sql, 0, 10).map((s) => [s.node, s.body])).toEqual([
        [0, "the grader checks alpha"],
        [1, "delta replaces beta"],
      ]);
      expect(segmentsAfter(sql, segmentsAfter(sql, 0, 1)[0]!.id, 10).map((s) => s.node)).toEqual([1]);

      // the episode goes: its packs and its documents
      state.storage.transactionSync(() => store.remove(ep, 1));
      store.settle();
      expect(n("SELECT COUNT(*) AS n FROM segment_packs")).toBe(0);
      expect(found("grader")).toEqual([]);
      expect(found("delta")).toEqual([]);
      expect(n("SELECT COUNT(*) AS n FROM search_docsize")).toBe(0);
    });
  });
});

// The episode index's pure query parts (src/protocol/registry/rows.ts): `?status=&prefix=&limit=&cursor=`
// parsing with its error codes, the opaque cursor, and scope checks with exact ids and PREFIX*
// patterns.

import { describe, expect, it } from "vitest";
import { RelayError } from "../../src/protocol/http/errors.js";
import { positionText, type RowPosition, readPosition } from "../../src/protocol/registry/list-cursors.js";
import { NO_FILTER } from "../../src/protocol/registry/row-filter.js";
import {
  DEFAULT_LIMIT,
  INDEX_STATUSES,
  type ListQuery,
  MAX_LIMIT,
  parseListQuery,
  scopeOf,
  visible,
} from "../../src/protocol/registry/rows.js";

const encodeListCursor = (at: RowPosition) => positionText("episodes", at);
const decodeListCursor = (text: string) => readPosition("episodes", text);

const q = (query: string, defaultLimit?: number) => parseListQuery(new URLSearchParams(query), defaultLimit);

/** A cursor made without the module: base64url (no padding) of the JSON text. */
const rawCursor = (json: string) => Buffer.from(json, "utf8").toString("base64url");

/** The refusal `fn` throws: a RelayError (400) naming the parameter. */
function queryError(fn: () => unknown): RelayError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(RelayError);
    expect((e as RelayError).status).toBe(400);
    return e as RelayError;
  }
  throw new Error("expected a RelayError, nothing was thrown");
}

describe("parseListQuery: accepted values", () => {
  it.each<[string, Partial<ListQuery>]>([
    ["", { status: null, prefix: null, limit: 50, after: null }],
    ["status=live", { status: "live" }],
    ["status=finished", { status: "finished" }],
    ["status=failed", { status: "failed" }],
    ["status=finish_refused", { status: "finish_refused" }],
    ["status=", { status: null }],
    ["prefix=run-", { prefix: "run-" }],
    ["prefix=A.b_c:d-9", { prefix: "A.b_c:d-9" }],
    [`prefix=${"p".repeat(128)}`, { prefix: "p".repeat(128) }],
    ["prefix=", { prefix: null }],
    ["limit=1", { limit: 1 }],
    ["limit=50", { limit: 50 }],
    ["limit=500", { limit: 500 }],
    ["limit=501", { limit: 500 }],
    ["limit=1000000", { limit: 500 }],
    ["limit=", { limit: 50 }],
    ["cursor=", { after: null }],
    [`cursor=${rawCursor('[1754101000123,"run-1"]')}`, { after: { key: 1754101000123, id: "run-1" } }],
    ["status=live&prefix=a&limit=7", { status: "live", prefix: "a", limit: 7, after: null }],
  ])("?%s", (query, expected) => {
    expect(q(query)).toMatchObject(expected);
  });

  it("returns exactly the six fields (the filters: row-filter.ts)", () => {
    expect(q("status=failed&prefix=x&task=t1&limit=3&cursor=" + rawCursor('[5,"x1"]'))).toStrictEqual({
      status: "failed",
      filter: { ...NO_FILTER, task: "t1" },
      prefix: "x",
      limit: 3,
      sort: "updated",
      after: { key: 5, id: "x1" },
    });
  });

  it("the default limit can be given, and is used only when limit is absent or empty", () => {
    expect(q("", 200).limit).toBe(200);
    expect(q("limit=", 200).limit).toBe(200);
    expect(q("limit=10", 200).limit).toBe(10);
    expect(q("limit=9999", 200).limit).toBe(MAX_LIMIT);
    expect([DEFAULT_LIMIT, MAX_LIMIT]).toStrictEqual([50, 500]);
  });

  it("the statuses are the index's four", () => {
    expect([...INDEX_STATUSES]).toStrictEqual(["live", "finished", "failed", "finish_refused"]);
  });
});

describe("parseListQuery: refused values", () => {
  it.each<[string, string, string]>([
    ["status=done", "bad_status", "status"],
    ["status=LIVE", "bad_status", "status"],
    ["status=%20live", "bad_status", "status"],
    ["status=live,failed", "bad_status", "status"],
    [`prefix=${"p".repeat(129)}`, "bad_prefix", "prefix"],
    ["prefix=a/b", "bad_prefix", "prefix"],
    ["prefix=a%20b", "bad_prefix", "prefix"],
    ["prefix=run*", "bad_prefix", "prefix"],
    ["prefix=%C3%A9", "bad_prefix", "prefix"],
    ["prefix=a%0A", "bad_prefix", "prefix"],
    ["limit=0", "bad_limit", "limit"],
    ["limit=-1", "bad_limit", "limit"],
    ["limit=1.5", "bad_limit", "limit"],
    ["limit=abc", "bad_limit", "limit"],
    ["limit=Infinity", "bad_limit", "limit"],
    ["limit=1e400", "bad_limit", "limit"],
    ["limit=9007199254740993", "bad_limit", "limit"],
    ["limit=NaN", "bad_limit", "limit"],
    ["cursor=!!!", "bad_cursor", "cursor"],
    ["cursor=abc", "bad_cursor", "cursor"],
    // status is checked first when several are bad
    ["status=nope&prefix=a/b&limit=0&cursor=x", "bad_status", "status"],
    ["prefix=a/b&limit=0", "bad_prefix", "prefix"],
    ["limit=0&cursor=x", "bad_limit", "limit"],
  ])("?%s → %s on %s", (query, code, field) => {
    const e = queryError(() => q(query));
    expect([e.code, e.field]).toStrictEqual([code, field]);
    expect(e).toBeInstanceOf(Error);
    expect(e.message.length).toBeGreaterThan(0);
  });

  it("the messages say what is allowed", () => {
    expect(queryError(() => q("status=x")).message).toBe(
      "status must be one of live, finished, failed, finish_refused",
    );
    expect(queryError(() => q("limit=0")).message).toBe("limit must be an integer from 1 to 500");
    expect(queryError(() => q("prefix=/")).message).toMatch(/128 characters/);
  });
});

describe("cursors", () => {
  it.each<[number, string]>([
    [0, "a"],
    [1754101000123, "run-1"],
    [Number.MAX_SAFE_INTEGER, "x".repeat(128)],
    [-5, "neg"],
    [1, "ü日本😀"], // not an episode id, but the cursor carries any string
    [1754101000999, "id?with/+chars="],
    [42, ""],
  ])("(%d, %j) round-trips and is base64url of the JSON pair", (updated, id) => {
    const c = encodeListCursor({ key: updated, id });
    expect(c).toMatch(/^[A-Za-z0-9_-]*$/);
    expect(c).toBe(rawCursor(JSON.stringify([updated, id])));
    expect(decodeListCursor(c)).toStrictEqual({ key: updated, id });
    expect(q(`cursor=${c}`).after).toStrictEqual({ key: updated, id });
  });

  it("padded standard base64 of a valid pair is accepted too", () => {
    const std = Buffer.from('[7,"a?>"]').toString("base64");
    expect(std).toMatch(/[=+/]/);
    expect(decodeListCursor(std)).toStrictEqual({ key: 7, id: "a?>" });
  });

  it.each<[string, string]>([
    ["not base64", "!!!"],
    ["base64 of non-JSON", rawCursor("hello")],
    ["a JSON object", rawCursor('{"updated":1,"id":"a"}')],
    ["one element", rawCursor("[1]")],
    ["three elements", rawCursor('[1,"a",2]')],
    ["updated as a string", rawCursor('["1","a"]')],
    ["id not a string", rawCursor("[1,2]")],
    ["id null", rawCursor("[1,null]")],
    ["JSON null", rawCursor("null")],
    ["a truncated cursor", encodeListCursor({ key: 1754101000123, id: "run-1" }).slice(0, 10)],
  ])("refuses %s", (_label, cursor) => {
    const e = queryError(() => decodeListCursor(cursor));
    expect([e.code, e.field]).toStrictEqual(["bad_cursor", "cursor"]);
    expect(queryError(() => q(`cursor=${encodeURIComponent(cursor)}`)).code).toBe("bad_cursor");
  });
});

describe("scopeOf and visible", () => {
  it.each<[string[], string[] | null]>([
    [["*"], null],
    [["run-*", "*"], null],
    [
      ["run-*", "exact"],
      ["run-*", "exact"],
    ],
    [[], []],
  ])("scopeOf(%j) → %j", (patterns, scope) => {
    expect(scopeOf(patterns)).toStrictEqual(scope);
  });

  it("scopeOf copies the patterns (later changes to the input do not leak in)", () => {
    const patterns = ["a"];
    const scope = scopeOf(patterns)!;
    patterns.push("b");
    expect(scope).toStrictEqual(["a"]);
  });

  it.each<[string, string[] | null, string, string | null, boolean]>([
    ["everything, no prefix", null, "any-id", null, true],
    ["everything, matching prefix", null, "run-1", "run-", true],
    ["everything, other prefix", null, "eval-1", "run-", false],
    ["exact id", ["ep-1"], "ep-1", null, true],
    ["exact id does not match longer ids", ["ep-1"], "ep-10", null, false],
    ["exact id does not match shorter ids", ["ep-10"], "ep-1", null, false],
    ["exact ids are case-sensitive", ["ep-1"], "EP-1", null, false],
    ["PREFIX* matches ids that start with it", ["run-*"], "run-42", null, true],
    ["PREFIX* matches the bare prefix", ["run-*"], "run-", null, true],
    ["PREFIX* does not match without the prefix", ["run-*"], "run", null, false],
    ["PREFIX* does not match elsewhere in the id", ["run-*"], "my-run-1", null, false],
    ["a star only counts at the end", ["r*n"], "rain", null, false],
    ["a star only counts at the end (literal id)", ["r*n"], "r*n", null, true],
    ["any of several patterns", ["a", "b-*"], "b-2", null, true],
    ["empty scope sees nothing", [], "a", null, false],
    ["in scope but outside the listing prefix", ["run-*"], "run-1", "run-2", false],
    ["in scope and inside the listing prefix", ["run-*"], "run-21", "run-2", true],
    ["listing prefix alone does not grant scope", ["run-*"], "eval-1", "eval-", false],
    ["empty listing prefix filters nothing", ["a"], "a", "", true],
  ])("%s", (_label, scope, id, prefix, expected) => {
    expect(visible(scope, id, prefix)).toBe(expected);
  });

  it("visible() without a prefix argument does not filter by prefix", () => {
    expect(visible(["x*"], "x1")).toBe(true);
    expect(visible(null, "")).toBe(true);
  });
});

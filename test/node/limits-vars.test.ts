// Limits from wrangler.toml [vars] (src/protocol/limits/vars.ts): one parser (a positive finite number, else
// the default) and the index row's pacing, as the run's index tells it to its episodes and the
// runscale bench reads it.
import { describe, expect, it } from "vitest";
import { wranglerVars } from "../../bench/helpers.js";
import { limitsFrom } from "../../src/protocol/limits/limits.js";
import {
  DEFAULT_INDEX_FLUSH_MS,
  DEFAULT_INDEX_IDLE_FLUSH_MS,
  DEFAULT_INDEX_WRITES_PER_S,
  DEFAULT_SEARCH_FLUSH_MS,
  flushIntervalMs,
  indexPacingFrom,
  limitFrom,
  MAX_INDEX_IDLE_FLUSH_MS,
  MAX_SEARCH_FLUSH_MS,
  searchFlushMsFrom,
} from "../../src/protocol/limits/vars.js";

describe("limitFrom", () => {
  it.each<[string | undefined, number]>([
    ["2000", 2000],
    ["0.0005", 0.0005],
    ["1e3", 1000],
    [undefined, 7],
    ["", 7],
    ["0", 7],
    ["-5", 7],
    ["abc", 7],
    ["Infinity", 7],
    ["NaN", 7],
  ])("%j → %d (default 7)", (value, want) => {
    expect(limitFrom(value, 7)).toBe(want);
  });
});

describe("the index row's pacing", () => {
  it("its defaults are wrangler.toml's values; a bad value is the default", () => {
    expect(indexPacingFrom({})).toEqual({
      flushMs: DEFAULT_INDEX_FLUSH_MS,
      idleFlushMs: DEFAULT_INDEX_IDLE_FLUSH_MS,
      writesPerS: DEFAULT_INDEX_WRITES_PER_S,
    });
    expect(indexPacingFrom(wranglerVars())).toEqual(indexPacingFrom({}));
    expect(indexPacingFrom({ INDEX_FLUSH_MS: "-1", INDEX_IDLE_FLUSH_MS: "0", INDEX_WRITES_PER_S: "x" })).toEqual(
      indexPacingFrom({}),
    );
    expect(
      indexPacingFrom({ INDEX_FLUSH_MS: "1800000", INDEX_IDLE_FLUSH_MS: "3600000", INDEX_WRITES_PER_S: "0.0005" }),
    ).toEqual({ flushMs: 1_800_000, idleFlushMs: 3_600_000, writesPerS: 0.0005 });
  });

  it("the idle interval: at most MAX_INDEX_IDLE_FLUSH_MS, never less than INDEX_FLUSH_MS", () => {
    expect(indexPacingFrom({ INDEX_IDLE_FLUSH_MS: String(MAX_INDEX_IDLE_FLUSH_MS * 2) }).idleFlushMs).toBe(
      MAX_INDEX_IDLE_FLUSH_MS,
    );
    expect(indexPacingFrom({ INDEX_FLUSH_MS: "60000", INDEX_IDLE_FLUSH_MS: "10000" }).idleFlushMs).toBe(60_000);
    expect(DEFAULT_INDEX_IDLE_FLUSH_MS).toBeGreaterThan(DEFAULT_INDEX_FLUSH_MS);
  });

  it("the interval told: INDEX_FLUSH_MS (idle: INDEX_IDLE_FLUSH_MS), or longer so the live episodes stay under INDEX_WRITES_PER_S together", () => {
    const pacing = { flushMs: 2000, idleFlushMs: 8000, writesPerS: 250 };
    expect(flushIntervalMs(pacing, 0, true)).toBe(2000);
    expect(flushIntervalMs(pacing, 500, true)).toBe(2000);
    expect(flushIntervalMs(pacing, 501, true)).toBe(2004);
    expect(flushIntervalMs(pacing, 1000, true)).toBe(4000);
    expect(flushIntervalMs(pacing, 0, false)).toBe(8000);
    expect(flushIntervalMs(pacing, 1000, false)).toBe(8000);
    expect(flushIntervalMs(pacing, 2001, false)).toBe(8004);
  });
});

describe("how long a running episode's text may wait (SEARCH_FLUSH_MS)", () => {
  it("its default is wrangler.toml's value; a bad value is the default; a larger one than the hour is the hour", () => {
    expect(searchFlushMsFrom({})).toBe(DEFAULT_SEARCH_FLUSH_MS);
    expect(searchFlushMsFrom(wranglerVars())).toBe(DEFAULT_SEARCH_FLUSH_MS);
    expect(searchFlushMsFrom({ SEARCH_FLUSH_MS: "0" })).toBe(DEFAULT_SEARCH_FLUSH_MS);
    expect(searchFlushMsFrom({ SEARCH_FLUSH_MS: "1000" })).toBe(1000);
    expect(searchFlushMsFrom({ SEARCH_FLUSH_MS: String(MAX_SEARCH_FLUSH_MS * 2) })).toBe(MAX_SEARCH_FLUSH_MS);
  });
});

describe("the log's bounds", () => {
  it("their defaults are wrangler.toml's values (a trimmed frame is a row written: the log is kept to 256 MiB)", () => {
    const { logKeepFrames, logKeepBytes } = limitsFrom({});
    expect({ logKeepFrames, logKeepBytes }).toEqual({ logKeepFrames: 4096, logKeepBytes: 256 * 1024 * 1024 });
    const fromToml = limitsFrom(wranglerVars());
    expect({ logKeepFrames: fromToml.logKeepFrames, logKeepBytes: fromToml.logKeepBytes }).toEqual({
      logKeepFrames,
      logKeepBytes,
    });
  });
});

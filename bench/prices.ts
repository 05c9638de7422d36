// Cloudflare's published prices, USD, as bench/cost.ts uses them. Each was read on READ_ON from the
// stored copy of Cloudflare's docs (the cloudflare-docs repository's page sources, and the pages
// themselves where stored); the page is named on each. Marginal prices: the plan's included
// allowances (10 M Worker requests, 1 M DO requests, 400,000 GB-s, 25 B rows read, 50 M rows
// written, 5 GB-month SQLite, R2's free tier) are taken as 0, i.e. already spent by other work,
// and the $5/month plan minimum is left out. Cloudflare rounds billed usage up to whole units
// (R2: a million operations, a GB-month); the bench does not. 1 GB = 10^9 bytes (the DO examples
// compute 128 MB / 1 GB = 0.128).

export const READ_ON = "2026-12-01";

const WORKERS = "https://developers.cloudflare.com/workers/platform/pricing/";
const DO = "https://developers.cloudflare.com/durable-objects/platform/pricing/";
const R2 = "https://developers.cloudflare.com/r2/pricing/";

export interface Price {
  /** USD per `per` units. */
  usd: number;
  per: number;
  unit: string;
  source: string;
  /** What the page says, briefly. */
  quote: string;
}

export const GB = 1e9;
/** A billing month (R2: "a billing period (30 days)"; DO SQLite storage is billed alike). */
export const MONTH_DAYS = 30;

/** Workers Standard: requests beyond the 10 M included. A WebSocket upgrade is one; its messages are none. */
export const WORKER_REQUEST: Price = {
  usd: 0.3,
  per: 1e6,
  unit: "request",
  source: WORKERS,
  quote:
    "10 million included per month, +$0.30 per additional million; WebSocket messages routed through a Worker do not count as requests",
};

/** Workers Standard: CPU time beyond the 30 M ms included. */
export const WORKER_CPU_MS: Price = {
  usd: 0.02,
  per: 1e6,
  unit: "CPU ms",
  source: WORKERS,
  quote: "30 million CPU milliseconds included per month, +$0.02 per additional million CPU milliseconds",
};

/** Durable Objects: requests (HTTP, RPC sessions, alarms; WebSocket messages 20:1, below). */
export const DO_REQUEST: Price = {
  usd: 0.15,
  per: 1e6,
  unit: "request",
  source: DO,
  quote: "1 million, + $0.15/million; includes HTTP requests, RPC sessions, WebSocket messages, and alarm invocations",
};

/**
 * Inbound WebSocket messages per billed request (outbound ones and protocol pings are free): the
 * Durable Objects page (DO above), footnote 2: "a 20:1 ratio is applied to incoming WebSocket messages".
 */
export const WS_IN_PER_REQUEST = 20;

/** Durable Objects: duration, wall-clock while active, for the 128 MB every object is billed. */
export const DO_GB_S: Price = {
  usd: 12.5,
  per: 1e6,
  unit: "GB-s",
  source: DO,
  quote:
    "400,000 GB-s, + $12.50/million GB-s; charges for the 128 MB of memory your Durable Object is allocated, regardless of actual usage",
};
export const DO_MEMORY_GB = 0.128;

/** SQLite-backed Durable Objects: rows read. */
export const ROW_READ: Price = {
  usd: 0.001,
  per: 1e6,
  unit: "row read",
  source: DO,
  quote: "First 25 billion / month included + $0.001 / million rows",
};

/** SQLite-backed Durable Objects: rows written (each setAlarm is one; deletes count). */
export const ROW_WRITTEN: Price = {
  usd: 1.0,
  per: 1e6,
  unit: "row written",
  source: DO,
  quote: "First 50 million / month included + $1.00 / million rows; each setAlarm() is billed as a single row written",
};

/** SQLite-backed Durable Objects: stored data. */
export const SQLITE_GB_MONTH: Price = {
  usd: 0.2,
  per: 1,
  unit: "GB-month",
  source: DO,
  quote: "5 GB-month, + $0.20/ GB-month",
};

/** R2 Standard storage. */
export const R2_GB_MONTH: Price = {
  usd: 0.015,
  per: 1,
  unit: "GB-month",
  source: R2,
  quote: "$0.015 / GB-month (10 GB-month free); a GB-month averages the peak storage per day over 30 days",
};

/** R2 Class A operations (PutObject, ListObjects, multipart create/part/complete...). */
export const R2_CLASS_A: Price = {
  usd: 4.5,
  per: 1e6,
  unit: "class A op",
  source: R2,
  quote: "$4.50 / million requests (1 million free)",
};

/** R2 Class B operations (GetObject, HeadObject). DeleteObject is free; egress is free. */
export const R2_CLASS_B: Price = {
  usd: 0.36,
  per: 1e6,
  unit: "class B op",
  source: R2,
  quote: "$0.36 / million requests (10 million free); DeleteObject, DeleteBucket and AbortMultipartUpload are free",
};

/** `n` units at `p`, USD. */
export function cost(p: Price, n: number): number {
  return (n / p.per) * p.usd;
}

/** `bytes` kept `days` days, at a GB-month price, USD. */
export function storageCost(p: Price, bytes: number, days: number): number {
  return cost(p, (bytes / GB) * (days / MONTH_DAYS));
}

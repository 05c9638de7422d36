// A run index's tables in their latest layout (the one schemas.ts's INDEX_SCHEMA migrations leave), created at once on
// empty storage: a run's first row ran every migration, writing each table, then altering, rebuilding and dropping
// tables and indexes (every DDL statement writes rows of SQLite's schema, billed as any row). The same tables,
// columns (in the same order) and indexes; test/workers/schema.test.ts compares the two.

import { createLiveIndexes } from "./live-rows.js";
import { SEARCH_TABLE, SEGMENT_PACKS_TABLE, SEGMENTS_VIEW } from "./segment-packs.js";

const TABLES = [
  `CREATE TABLE rows (
    id TEXT PRIMARY KEY, run TEXT NOT NULL, status TEXT NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL,
    ended INTEGER, seq INTEGER NOT NULL, traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
    tokens INTEGER NOT NULL, rewards TEXT, reward REAL, error TEXT, finished_seq INTEGER,
    task TEXT, grp TEXT, stop TEXT, is_timeout INTEGER, run_name TEXT,
    dispatch TEXT, kind TEXT, env TEXT, step INTEGER, policy_version INTEGER, live TEXT,
    flags TEXT, trace_rewards TEXT, turns INTEGER, is_truncated INTEGER, seg_base INTEGER,
    text_since INTEGER, text_waiting TEXT)`,
  "CREATE INDEX rows_by_reward ON rows (reward DESC, id DESC)",
  "CREATE INDEX rows_finished ON rows (finished_seq) WHERE finished_seq IS NOT NULL",
  "CREATE INDEX rows_by_grp ON rows (grp) WHERE grp IS NOT NULL",
  "CREATE INDEX rows_by_step ON rows (step DESC, id DESC)",
  "CREATE INDEX rows_text_waiting ON rows (text_since) WHERE text_since IS NOT NULL",
  `CREATE TABLE scores (id TEXT NOT NULL, key TEXT NOT NULL, score REAL NOT NULL, status TEXT,
    PRIMARY KEY (id, key))`,
  "CREATE INDEX scores_by_key ON scores (key, score)",
  "CREATE INDEX scores_finished_by_key ON scores (key, score) WHERE status = 'finished'",
  "CREATE TABLE throughput (minute INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
  "CREATE TABLE state (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
  "CREATE TABLE scopes (key TEXT PRIMARY KEY, patterns TEXT NOT NULL)",
  `CREATE TABLE groups (grp TEXT PRIMARY KEY, task_key TEXT NOT NULL, size INTEGER NOT NULL,
    spread_key REAL NOT NULL, complete INTEGER NOT NULL, zero INTEGER NOT NULL, summary TEXT NOT NULL,
    done_minute INTEGER, kind TEXT, step INTEGER)`,
  "CREATE INDEX groups_by_spread ON groups (spread_key DESC, grp)",
  "CREATE INDEX groups_by_size ON groups (size DESC, grp)",
  "CREATE INDEX groups_by_task ON groups (task_key, grp)",
  `CREATE TABLE tasks (task TEXT PRIMARY KEY, rollouts INTEGER NOT NULL, finished INTEGER NOT NULL,
    failed INTEGER NOT NULL, calls INTEGER NOT NULL, tokens INTEGER NOT NULL, turns INTEGER NOT NULL DEFAULT 0,
    turned INTEGER NOT NULL DEFAULT 0)`,
  `CREATE TABLE reward_minutes (minute INTEGER NOT NULL, key TEXT NOT NULL, n INTEGER NOT NULL,
    units INTEGER NOT NULL, PRIMARY KEY (minute, key))`,
  "CREATE TABLE group_minutes (minute INTEGER PRIMARY KEY, complete INTEGER NOT NULL, zero INTEGER NOT NULL)",
  "CREATE TABLE steps (step INTEGER NOT NULL, kind TEXT NOT NULL, counters TEXT NOT NULL, PRIMARY KEY (step, kind))",
  "CREATE TABLE rules (ord INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL)",
  `CREATE TABLE flags (episode TEXT NOT NULL, rule TEXT NOT NULL, trace TEXT, node INTEGER, excerpt TEXT NOT NULL,
    PRIMARY KEY (episode, rule))`,
  "CREATE INDEX flags_by_rule ON flags (rule, episode)",
  SEGMENT_PACKS_TABLE,
  SEGMENTS_VIEW,
  SEARCH_TABLE,
  "CREATE TABLE alert_hooks (ord INTEGER PRIMARY KEY, url TEXT NOT NULL, secret TEXT NOT NULL)",
  "CREATE TABLE alert_rules (ord INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL)",
  `CREATE TABLE alert_fired (rule TEXT NOT NULL, subject TEXT NOT NULL, crossed INTEGER NOT NULL,
    PRIMARY KEY (rule, subject))`,
  `CREATE TABLE alert_outcomes (env TEXT NOT NULL, n INTEGER NOT NULL, episode TEXT NOT NULL,
    failed INTEGER NOT NULL, timeout INTEGER NOT NULL, truncated INTEGER NOT NULL, PRIMARY KEY (env, n))`,
  `CREATE TABLE alert_queue (seq INTEGER PRIMARY KEY, alert TEXT NOT NULL, url TEXT NOT NULL,
    body TEXT NOT NULL, attempts INTEGER NOT NULL, due INTEGER NOT NULL)`,
  "CREATE INDEX alert_queue_by_due ON alert_queue (due, seq)",
  `CREATE TABLE alert_recent (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, at INTEGER NOT NULL,
    rule TEXT NOT NULL, kind TEXT NOT NULL, what TEXT NOT NULL, episodes TEXT NOT NULL, step INTEGER)`,
  `CREATE TABLE alert_attempts (seq INTEGER PRIMARY KEY, alert TEXT NOT NULL, url TEXT NOT NULL,
    attempt INTEGER NOT NULL, at INTEGER NOT NULL, status INTEGER, error TEXT, outcome TEXT NOT NULL)`,
];

/** Empty storage: INDEX_SCHEMA's latest layout at once. */
export function latestIndexLayout(sql: SqlStorage): void {
  for (const statement of TABLES) sql.exec(statement);
  createLiveIndexes(sql);
}

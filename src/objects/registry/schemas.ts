// The tables of the two registry objects, version by version (src/objects/storage/schema.ts runs them):
// a run's EpisodeIndex (index-store.ts, and run-sockets.ts's scopes) and the RunDirectory
// (directory-store.ts, and run-sockets.ts's scopes).

import { addColumns, checkSchema, type Schema } from "../storage/schema.js";
import { latestIndexLayout } from "./index-layout.js";
import { settleLiveRows } from "./live-rows.js";
import { recountRewards } from "./reward-recount.js";
import { blockSegments } from "./segment-blocks.js";
import { packSegments } from "./segment-packs.js";
import { recountStepOutcomes } from "./step-recount.js";
import { backfillGroups, backfillRewards } from "./trend-backfill.js";
import { recountTruncation } from "./truncation-recount.js";
import { addTurns } from "./turn-recount.js";
import { textInRows } from "./waiting-text.js";

export const INDEX_SCHEMA: Schema = checkSchema({
  object: "EpisodeIndex",
  fresh: latestIndexLayout,
  migrations: [
    {
      version: 1,
      what: "the layout of the releases before versioned schemas",
      up(sql) {
        sql.exec(`CREATE TABLE IF NOT EXISTS rows (
          id TEXT PRIMARY KEY, run TEXT NOT NULL, status TEXT NOT NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL,
          ended INTEGER, seq INTEGER NOT NULL, traces INTEGER NOT NULL, nodes INTEGER NOT NULL, calls INTEGER NOT NULL,
          tokens INTEGER NOT NULL, rewards TEXT, reward REAL, error TEXT, finished_seq INTEGER)`);
        sql.exec("CREATE INDEX IF NOT EXISTS rows_by_updated ON rows (updated DESC, id DESC)");
        sql.exec("CREATE INDEX IF NOT EXISTS rows_by_reward ON rows (reward DESC, id DESC)");
        sql.exec("CREATE INDEX IF NOT EXISTS rows_finished ON rows (finished_seq) WHERE finished_seq IS NOT NULL");
        sql.exec(
          "CREATE TABLE IF NOT EXISTS scores (id TEXT NOT NULL, key TEXT NOT NULL, score REAL NOT NULL, PRIMARY KEY (id, key))",
        );
        sql.exec("CREATE INDEX IF NOT EXISTS scores_by_key ON scores (key, score)");
        sql.exec("CREATE TABLE IF NOT EXISTS throughput (minute INTEGER PRIMARY KEY, n INTEGER NOT NULL)");
        sql.exec("CREATE TABLE IF NOT EXISTS state (k TEXT PRIMARY KEY, v TEXT NOT NULL)");
        sql.exec("CREATE TABLE IF NOT EXISTS scopes (key TEXT PRIMARY KEY, patterns TEXT NOT NULL)");
      },
    },
    {
      version: 2,
      what: "rollout groups",
      up(sql) {
        // rows sent before this release have none of these: they join no group until rewritten
        addColumns(sql, "rows", ["task TEXT", "grp TEXT", "stop TEXT", "truncated INTEGER", "run_name TEXT"]);
        sql.exec("CREATE INDEX IF NOT EXISTS rows_by_grp ON rows (grp) WHERE grp IS NOT NULL");
        // one row per group: its summary (groups.ts) and the keys its pages sort by
        sql.exec(`CREATE TABLE IF NOT EXISTS groups (grp TEXT PRIMARY KEY, task_key TEXT NOT NULL, size INTEGER NOT NULL,
          spread_key REAL NOT NULL, complete INTEGER NOT NULL, zero INTEGER NOT NULL, summary TEXT NOT NULL)`);
        sql.exec("CREATE INDEX IF NOT EXISTS groups_by_spread ON groups (spread_key DESC, grp)");
        sql.exec("CREATE INDEX IF NOT EXISTS groups_by_size ON groups (size DESC, grp)");
        sql.exec("CREATE INDEX IF NOT EXISTS groups_by_task ON groups (task_key, grp)");
      },
    },
    {
      version: 3,
      what: "per-task results",
      up(sql) {
        sql.exec("CREATE INDEX IF NOT EXISTS rows_by_task ON rows (task) WHERE task IS NOT NULL");
        // one row per task: counts and sums over its rollouts (group-store.ts), recounted like a group's
        sql.exec(`CREATE TABLE IF NOT EXISTS tasks (task TEXT PRIMARY KEY, rollouts INTEGER NOT NULL, finished INTEGER NOT NULL,
          failed INTEGER NOT NULL, calls INTEGER NOT NULL, tokens INTEGER NOT NULL)`);
      },
    },
    {
      version: 4,
      what: "episode-list filters",
      up(sql) {
        // each filter the list can run on an index walks its own index in the list's order (row-filter.ts),
        // so a page reads about a page of rows however rare the matches; the partial ones hold only matching rows
        sql.exec("DROP INDEX IF EXISTS rows_by_task");
        sql.exec(
          "CREATE INDEX IF NOT EXISTS rows_by_task ON rows (task, updated DESC, id DESC) WHERE task IS NOT NULL",
        );
        sql.exec("CREATE INDEX IF NOT EXISTS rows_by_status ON rows (status, updated DESC, id DESC)");
        sql.exec(
          "CREATE INDEX IF NOT EXISTS rows_by_stop ON rows (stop, updated DESC, id DESC) WHERE stop IS NOT NULL",
        );
        sql.exec("CREATE INDEX IF NOT EXISTS rows_truncated ON rows (updated DESC, id DESC) WHERE truncated = 1");
        sql.exec("CREATE INDEX IF NOT EXISTS rows_errored ON rows (updated DESC, id DESC) WHERE error IS NOT NULL");
      },
    },
    {
      version: 5,
      what: "finished-only reward statistics and the per-minute trends",
      up(sql) {
        // each score carries its row's status, so a finished-only MIN or MAX per key is one seek in the partial index
        addColumns(sql, "scores", ["status TEXT"]);
        sql.exec("UPDATE scores SET status = (SELECT status FROM rows WHERE rows.id = scores.id)");
        sql.exec("CREATE INDEX IF NOT EXISTS scores_finished_by_key ON scores (key, score) WHERE status = 'finished'");
        // per minute ended and reward key: finished episodes and their score sum in SCORE_UNITs (reward-trend.ts)
        sql.exec(`CREATE TABLE IF NOT EXISTS reward_minutes (minute INTEGER NOT NULL, key TEXT NOT NULL, n INTEGER NOT NULL,
          units INTEGER NOT NULL, PRIMARY KEY (minute, key))`);
        // a complete group's minute (its latest end), and per minute the groups completed and zero-variance ones
        // (zero-variance-trend.ts)
        addColumns(sql, "groups", ["done_minute INTEGER"]);
        sql.exec(
          "CREATE TABLE IF NOT EXISTS group_minutes (minute INTEGER PRIMARY KEY, complete INTEGER NOT NULL, zero INTEGER NOT NULL)",
        );
        backfillRewards(sql);
        backfillGroups(sql);
      },
    },
    {
      version: 6,
      what: "the trainer's dispatch identity, the rollouts' live facts and the training steps",
      up(sql) {
        // the identity and the live facts as JSON; the identity's keys the list filters by as columns (rows
        // written before this release have none: they count in no step until rewritten)
        addColumns(sql, "rows", [
          "dispatch TEXT",
          "kind TEXT",
          "env TEXT",
          "step INTEGER",
          "policy_version INTEGER",
          "live TEXT",
        ]);
        sql.exec(
          "CREATE INDEX IF NOT EXISTS rows_by_kind ON rows (kind, updated DESC, id DESC) WHERE kind IS NOT NULL",
        );
        sql.exec(
          "CREATE INDEX IF NOT EXISTS rows_by_step_updated ON rows (step, updated DESC, id DESC) WHERE step IS NOT NULL",
        );
        // sorted by step (rows without one last, as SQLite orders NULL under DESC), and step ranges
        sql.exec("CREATE INDEX IF NOT EXISTS rows_by_step ON rows (step DESC, id DESC)");
        // a group's step (its members share one): the step whose zero-variance share it counts in
        addColumns(sql, "groups", ["kind TEXT", "step INTEGER"]);
        // one row per step and kind ("" for none): its counters (steps.ts) as JSON
        sql.exec(
          "CREATE TABLE IF NOT EXISTS steps (step INTEGER NOT NULL, kind TEXT NOT NULL, counters TEXT NOT NULL, PRIMARY KEY (step, kind))",
        );
      },
    },
    {
      version: 7,
      what: "search over the episodes' text, and flag rules",
      up(sql) {
        // the run's flag rules (none: the defaults) and each episode's flags, also kept as JSON in its row
        // (flag-store.ts)
        sql.exec(
          "CREATE TABLE IF NOT EXISTS rules (ord INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL)",
        );
        sql.exec(`CREATE TABLE IF NOT EXISTS flags (episode TEXT NOT NULL, rule TEXT NOT NULL, trace TEXT, node INTEGER, excerpt TEXT NOT NULL,
          PRIMARY KEY (episode, rule))`);
        sql.exec("CREATE INDEX IF NOT EXISTS flags_by_rule ON flags (rule, episode)");
        addColumns(sql, "rows", ["flags TEXT"]);
        // the text segments episodes send (src/protocol/search/segments.ts), and FTS5 over them as an
        // external-content table (the text kept once, in `segments`), kept by triggers (search-store.ts); run again
        // on storage whose text is in packs already (`segments` a view, version 17), there is nothing to make
        if (sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'segments'").toArray().length) return;
        sql.exec(`CREATE TABLE IF NOT EXISTS segments (id INTEGER PRIMARY KEY, episode TEXT NOT NULL, trace TEXT NOT NULL, node INTEGER NOT NULL,
          role TEXT NOT NULL, tool TEXT, kind TEXT NOT NULL, body TEXT NOT NULL)`);
        sql.exec("CREATE INDEX IF NOT EXISTS segments_by_episode ON segments (episode, trace, node)");
        sql.exec(`CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(body, role, tool, content = 'segments', content_rowid = 'id',
          tokenize = 'unicode61 remove_diacritics 2')`);
        sql.exec(`CREATE TRIGGER IF NOT EXISTS segments_added AFTER INSERT ON segments BEGIN
          INSERT INTO search (rowid, body, role, tool) VALUES (new.id, new.body, new.role, new.tool); END`);
        sql.exec(`CREATE TRIGGER IF NOT EXISTS segments_removed AFTER DELETE ON segments BEGIN
          INSERT INTO search (search, rowid, body, role, tool) VALUES ('delete', old.id, old.body, old.role, old.tool); END`);
      },
    },
    {
      version: 8,
      what: "the trainer's reward: every trace's rewards, and every number kept from them recounted",
      up(sql) {
        recountRewards(sql);
      },
    },
    {
      version: 9,
      what: "the steps' outcomes (truncated, timed out, errored) and response lengths, recounted from the rows",
      up(sql) {
        recountStepOutcomes(sql);
      },
    },
    {
      version: 10,
      what: "alerts: webhooks, rules, what fired, the rate windows and the delivery queue",
      up(sql) {
        // the run's webhooks (with the secrets that sign their bodies) and alert rules (alert-store.ts)
        sql.exec(
          "CREATE TABLE IF NOT EXISTS alert_hooks (ord INTEGER PRIMARY KEY, url TEXT NOT NULL, secret TEXT NOT NULL)",
        );
        sql.exec(
          "CREATE TABLE IF NOT EXISTS alert_rules (ord INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL)",
        );
        // what each rule fired for: a flag's rollout for good, a threshold's subject while it stays crossed
        sql.exec(`CREATE TABLE IF NOT EXISTS alert_fired (rule TEXT NOT NULL, subject TEXT NOT NULL, crossed INTEGER NOT NULL,
          PRIMARY KEY (rule, subject))`);
        // per env, its last ended rollouts (numbered), for the rate rules
        sql.exec(`CREATE TABLE IF NOT EXISTS alert_outcomes (env TEXT NOT NULL, n INTEGER NOT NULL, episode TEXT NOT NULL,
          failed INTEGER NOT NULL, timeout INTEGER NOT NULL, truncated INTEGER NOT NULL, PRIMARY KEY (env, n))`);
        // one row per alert and webhook until delivered or given up; the body is fixed when the alert fires
        sql.exec(`CREATE TABLE IF NOT EXISTS alert_queue (seq INTEGER PRIMARY KEY, alert TEXT NOT NULL, url TEXT NOT NULL,
          body TEXT NOT NULL, attempts INTEGER NOT NULL, due INTEGER NOT NULL)`);
        sql.exec("CREATE INDEX IF NOT EXISTS alert_queue_by_due ON alert_queue (due, seq)");
        // the last alerts fired and delivery attempts (GET .../alerts)
        sql.exec(`CREATE TABLE IF NOT EXISTS alert_recent (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, at INTEGER NOT NULL,
          rule TEXT NOT NULL, kind TEXT NOT NULL, what TEXT NOT NULL, episodes TEXT NOT NULL, step INTEGER)`);
        sql.exec(`CREATE TABLE IF NOT EXISTS alert_attempts (seq INTEGER PRIMARY KEY, alert TEXT NOT NULL, url TEXT NOT NULL,
          attempt INTEGER NOT NULL, at INTEGER NOT NULL, status INTEGER, error TEXT, outcome TEXT NOT NULL)`);
      },
    },
    {
      version: 11,
      what: "fewer rows written per upsert",
      up(sql) {
        // FTS5 is written by search-store.ts in one statement per upsert: a trigger wrote it once per segment,
        // and FTS5 writes a new segment of its own (several shadow rows) for every statement
        sql.exec("DROP TRIGGER IF EXISTS segments_added");
        sql.exec("DROP TRIGGER IF EXISTS segments_removed");
      },
    },
    {
      version: 12,
      what: "turns as prime-rl counts them (assistant nodes), asked of each episode again",
      up(sql) {
        addTurns(sql);
      },
    },
    {
      version: 13,
      what: "truncation as the trainer counts it (is_truncated), asked of each episode again; is_timeout by its name",
      up(sql) {
        recountTruncation(sql);
      },
    },
    {
      version: 14,
      what: "a running episode's text waits before it is searchable; an episode's segments by a block of ids",
      up(sql) {
        // per episode, its batches not yet in the search, as one (search-store.ts `take`): rewritten in place, without
        // a rowid so each write is one row
        sql.exec(`CREATE TABLE IF NOT EXISTS search_pending (episode TEXT PRIMARY KEY, since INTEGER NOT NULL,
          batch TEXT NOT NULL) WITHOUT ROWID`);
        blockSegments(sql);
      },
    },
    {
      version: 15,
      what: "a live row's update writes its row only: the list's indexes and the saved counters hold the ended rows",
      up(sql) {
        settleLiveRows(sql);
      },
    },
    {
      version: 16,
      what: "a running episode's waiting text in its row, written with it",
      up(sql) {
        textInRows(sql);
      },
    },
    {
      version: 17,
      what: "the search's text in packs (a row per statement, not per segment), FTS5 contentless over it",
      up(sql) {
        packSegments(sql);
      },
    },
  ],
});

export const DIRECTORY_SCHEMA: Schema = checkSchema({
  object: "RunDirectory",
  migrations: [
    {
      version: 1,
      what: "the layout of the releases before versioned schemas",
      up(sql) {
        sql.exec(`CREATE TABLE IF NOT EXISTS runs (
          run TEXT PRIMARY KEY, created INTEGER NOT NULL, updated INTEGER NOT NULL, episodes INTEGER NOT NULL,
          live INTEGER NOT NULL, finished INTEGER NOT NULL, failed INTEGER NOT NULL, finish_refused INTEGER NOT NULL)`);
        sql.exec("CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created DESC, run DESC)");
        sql.exec("CREATE TABLE IF NOT EXISTS scopes (key TEXT PRIMARY KEY, patterns TEXT NOT NULL)");
      },
    },
    {
      version: 2,
      what: "the runs' mean rewards",
      up(sql) {
        // per reward key, the mean over the run's finished episodes (JSON); null until the run's index next writes its
        // row
        addColumns(sql, "runs", ["mean_rewards TEXT"]);
      },
    },
  ],
});

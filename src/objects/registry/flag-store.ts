// A run index's flags (INDEX_SCHEMA version 7, with the search): the run's rules (`rules`; none
// stored: src/protocol/flags/rules.ts DEFAULT_RULES), and per episode at most one flag per rule (`flags`),
// with each row's flags also in its `rows.flags` (JSON) so every list and push carries them.
// Text rules run on each segment as it arrives (what a batch replaces takes its flags with it);
// reward rules on each row. Rules set later reach what was already written by a rescan the
// object's alarm paces (RESCAN_SEGMENTS segments and RESCAN_ROWS rows a step), never in a request.

import {
  DEFAULT_RULES,
  type Flag,
  noWork,
  parseRules,
  type Rule,
  rowFlags,
  SEGMENT_STEPS,
  segmentFlags,
  type TextRule,
  type TextWork,
  TURN_STEPS,
  textRules,
} from "../../protocol/flags/rules.js";
import type { IndexRow } from "../../protocol/registry/entry.js";
import type { Segment } from "../../protocol/search/segments.js";
import { type SearchBatch, segmentsAfter } from "./search-store.js";

/** Segments one rescan step reads (the alarm runs steps until the rescan is done). */
export const RESCAN_SEGMENTS = 2000;
export const RESCAN_ROWS = 500;
/**
 * Steps (src/protocol/flags/pattern.ts) one rescan step may take: a segment starts only while its whole SEGMENT_STEPS
 * still fits (at least one segment a step), so nothing is skipped by the pacing; the next alarm goes on.
 */
export const RESCAN_STEPS = TURN_STEPS;

/**
 * A `PUT .../rules` body read: `{"rules": [...]}` (`[]` keeps none), or null for `{"defaults": true}` (throws 400
 * bad_rules).
 */
export function readRules(body: unknown): Rule[] | null {
  const defaults = typeof body === "object" && body !== null && (body as { defaults?: unknown }).defaults === true;
  return defaults ? null : parseRules(body);
}

/** A run's rules as the API shows them, and how far a rescan for them has come. */
export interface RulesJson {
  rules: Rule[];
  /** True when the run set none: the default rules hold. */
  defaults: boolean;
  rescan: { done: boolean; segments: number; rows: number };
  /** What the text rules may take (steps: characters × instructions), and what they skipped since the rules were set. */
  budget: BudgetJson;
}

export interface BudgetJson {
  segment_steps: number;
  upsert_steps: number;
  rescan_steps: number;
  skipped: { segments: number; checks: number; steps: number };
}

type Skipped = BudgetJson["skipped"];
const NOTHING_SKIPPED = '{"segments":0,"checks":0,"steps":0}';
const budgetOf = (skipped: Skipped): BudgetJson => ({
  segment_steps: SEGMENT_STEPS,
  upsert_steps: TURN_STEPS,
  rescan_steps: RESCAN_STEPS,
  skipped,
});

/** How often rules ran, since the object started (in memory: the flags bench and tests read it). */
export interface FlagEvaluations {
  /** Segments matched against the text rules as they arrived (a rescan's are not counted here). */
  segments: number;
  /** Text rule checks on them (each rule once per segment: segments × text rules). */
  textChecks: number;
  /** What the text checks cost and skipped (as they arrived and in rescans). */
  work: TextWork;
  /** Rows the reward rules ran on (once per update of a row). */
  rows: number;
  /** Reward rule checks on them (each rule once per row update: rows × reward rules). */
  rewardChecks: number;
}

export class FlagStore {
  private cached: { rules: Rule[]; text: TextRule[] } | null = null;
  readonly evaluations: FlagEvaluations = { segments: 0, textChecks: 0, work: noWork(), rows: 0, rewardChecks: 0 };

  constructor(private readonly sql: SqlStorage) {}

  /** Read the rules again from storage next time (a transaction threw, or the storage was freed). */
  forget(): void {
    this.cached = null;
  }

  rules(): { rules: Rule[]; text: TextRule[] } {
    if (this.cached) return this.cached;
    const stored = this.sql.exec<{ spec: string }>("SELECT spec FROM rules ORDER BY ord").toArray();
    const set = this.state("rules_set") === "1";
    const rules = set ? stored.map((r) => JSON.parse(r.spec) as Rule) : [...DEFAULT_RULES];
    return (this.cached = { rules, text: textRules(rules) });
  }

  /** Whether the run set rules of its own (else the defaults hold). */
  set(): boolean {
    return this.state("rules_set") === "1";
  }

  /**
   * `PUT .../rules`, read (`readRules`): the run's rules now (null: the defaults again); what was
   * written is rescanned for them (`rescan`: a run with no row yet has nothing to rescan).
   */
  setRules(rules: Rule[] | null, rescan = true): void {
    this.sql.exec("DELETE FROM rules");
    for (const [i, r] of (rules ?? []).entries())
      this.sql.exec("INSERT INTO rules (ord, id, spec) VALUES (?, ?, ?)", i, r.id, JSON.stringify(r));
    this.setState("rules_set", rules === null ? "0" : "1");
    this.deleteState("skipped");
    this.cached = null;
    if (!rescan) return;
    // every flag is looked for again, by the alarm: text from the first segment, rewards from the first row
    this.sql.exec("DELETE FROM flags");
    this.sql.exec("UPDATE rows SET flags = NULL WHERE flags IS NOT NULL");
    this.setState("rescan_segment", "0");
    this.setState("rescan_row", "");
    this.setState("rescan_counts", JSON.stringify({ segments: 0, rows: 0 }));
  }

  /** The defaults, as a run without storage answers them (nothing stored for them). */
  static defaultsJson(): RulesJson {
    return {
      rules: [...DEFAULT_RULES],
      defaults: true,
      rescan: { done: true, segments: 0, rows: 0 },
      budget: budgetOf(JSON.parse(NOTHING_SKIPPED)),
    };
  }

  json(): RulesJson {
    const counts = JSON.parse(this.state("rescan_counts") ?? '{"segments":0,"rows":0}') as {
      segments: number;
      rows: number;
    };
    return {
      rules: this.rules().rules,
      defaults: this.state("rules_set") !== "1",
      rescan: { done: !this.rescanning(), ...counts },
      budget: budgetOf(JSON.parse(this.state("skipped") ?? NOTHING_SKIPPED) as Skipped),
    };
  }

  /** Counts of flagged episodes per rule (for the aggregates). */
  counts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const r of this.sql.exec<{ rule: string; n: number }>(
      "SELECT rule, COUNT(*) AS n FROM flags GROUP BY rule ORDER BY rule",
    ))
      out[r.rule] = r.n;
    return out;
  }

  /**
   * The episode's flags once `row` and `batch` are in (inside the caller's transaction): what the
   * batch replaces takes its flags, its new segments are matched, the reward rules run on the row.
   */
  update(
    row: Pick<IndexRow, "id" | "rewards" | "trace_rewards" | "is_truncated" | "live">,
    batch: SearchBatch | null,
  ): Flag[] {
    const { rules, text } = this.rules();
    if (batch) {
      const held = this.sql
        .exec<{ rule: string; trace: string; node: number }>(
          "SELECT rule, trace, node FROM flags WHERE episode = ? AND trace IS NOT NULL",
          row.id,
        )
        .toArray();
      for (const f of held) {
        const from = batch.from[f.trace];
        if (!batch.traces.includes(f.trace) || (from !== undefined && f.node >= from))
          this.sql.exec("DELETE FROM flags WHERE episode = ? AND rule = ?", row.id, f.rule);
      }
      // one budget for the whole upsert (a row of many segments), each segment's within it
      let left = TURN_STEPS;
      for (const s of batch.segments) {
        this.evaluations.segments++;
        this.evaluations.textChecks += text.length;
        const before = this.evaluations.work.steps;
        this.matchText(row.id, s, text, this.evaluations.work, Math.min(SEGMENT_STEPS, left));
        left = Math.max(0, left - (this.evaluations.work.steps - before));
      }
    }
    const reward = new Map(rowFlags(rules, row, this.evaluations).map((f) => [f.rule, f]));
    this.evaluations.rows++;
    for (const r of rules) {
      if ("match" in r) continue;
      const held = this.flag(row.id, r.id);
      const now = reward.get(r.id);
      if (held && !now) this.sql.exec("DELETE FROM flags WHERE episode = ? AND rule = ?", row.id, r.id);
      else if (now && held?.excerpt !== now.excerpt) this.insert(row.id, now, true);
    }
    return this.of(row.id);
  }

  /** The episode went: its flags too. */
  remove(episode: string): void {
    this.sql.exec("DELETE FROM flags WHERE episode = ?", episode);
  }

  of(episode: string): Flag[] {
    return this.sql
      .exec<{ rule: string; trace: string | null; node: number | null; excerpt: string }>(
        "SELECT rule, trace, node, excerpt FROM flags WHERE episode = ? ORDER BY rule",
        episode,
      )
      .toArray()
      .map((f) => ({ rule: f.rule, trace: f.trace, node: f.node, excerpt: f.excerpt }));
  }

  rescanning(): boolean {
    return this.state("rescan_segment") !== null || this.state("rescan_row") !== null;
  }

  /**
   * One step of a rescan for rules set since: the next RESCAN_SEGMENTS segments matched, then the
   * next RESCAN_ROWS rows; the episodes whose flags moved (their rows' `flags` to rewrite).
   */
  rescanStep(): string[] {
    const touched = new Set<string>();
    const counts = JSON.parse(this.state("rescan_counts") ?? '{"segments":0,"rows":0}') as {
      segments: number;
      rows: number;
    };
    const seg = this.state("rescan_segment");
    if (seg !== null) {
      const batch = segmentsAfter(this.sql, Number(seg), RESCAN_SEGMENTS);
      const { text } = this.rules();
      // the step ends before a segment could pass RESCAN_STEPS (after one segment at least); the next alarm goes on
      const work = noWork();
      let taken = 0;
      for (const s of batch) {
        if (taken > 0 && work.steps + SEGMENT_STEPS > RESCAN_STEPS) break;
        if (this.matchText(s.episode, s, text, work, SEGMENT_STEPS)) touched.add(s.episode);
        taken++;
      }
      counts.segments += taken;
      const all = this.evaluations.work;
      for (const k of Object.keys(all) as Array<keyof TextWork>) all[k] += work[k];
      if (taken === batch.length && batch.length < RESCAN_SEGMENTS) this.deleteState("rescan_segment");
      else this.setState("rescan_segment", String(batch[taken - 1]!.id));
    } else {
      const after = this.state("rescan_row") ?? "";
      const rows = this.sql
        .exec<{
          id: string;
          rewards: string | null;
          trace_rewards: string | null;
          is_truncated: number | null;
          live: string | null;
        }>(
          "SELECT id, rewards, trace_rewards, is_truncated, live FROM rows WHERE id > ? ORDER BY id LIMIT ?",
          after,
          RESCAN_ROWS,
        )
        .toArray();
      const { rules } = this.rules();
      for (const r of rows) {
        const row = {
          id: r.id,
          rewards: r.rewards === null ? null : JSON.parse(r.rewards),
          trace_rewards: r.trace_rewards === null ? null : JSON.parse(r.trace_rewards),
          is_truncated: r.is_truncated === null ? null : r.is_truncated === 1,
          live: r.live === null ? null : JSON.parse(r.live),
        };
        for (const f of rowFlags(rules, row)) if (this.insert(r.id, f, false)) touched.add(r.id);
      }
      counts.rows += rows.length;
      if (rows.length < RESCAN_ROWS) this.deleteState("rescan_row");
      else this.setState("rescan_row", rows.at(-1)!.id);
    }
    this.setState("rescan_counts", JSON.stringify(counts));
    return [...touched];
  }

  /**
   * Match `s` against the text rules within `budget` (`work` adds what it cost; what it skipped is also
   * kept in the state, for the rules' answer); true when a flag was raised.
   */
  private matchText(episode: string, s: Segment, rules: readonly TextRule[], work: TextWork, budget: number): boolean {
    let raised = false;
    const before = work.skippedChecks;
    const skippedSteps = work.skippedSteps;
    for (const f of segmentFlags(rules, s, work, budget)) if (this.insert(episode, f, false)) raised = true;
    if (work.skippedChecks > before) {
      const skipped = JSON.parse(this.state("skipped") ?? NOTHING_SKIPPED) as Skipped;
      skipped.segments++;
      skipped.checks += work.skippedChecks - before;
      skipped.steps += work.skippedSteps - skippedSteps;
      this.setState("skipped", JSON.stringify(skipped));
    }
    return raised;
  }

  /** Store a flag (the first evidence of a rule stays, unless `replace`); true when stored. */
  private insert(episode: string, f: Flag, replace: boolean): boolean {
    const verb = replace ? "INSERT OR REPLACE" : "INSERT OR IGNORE";
    return (
      this.sql.exec(
        `${verb} INTO flags (episode, rule, trace, node, excerpt) VALUES (?, ?, ?, ?, ?)`,
        episode,
        f.rule,
        f.trace,
        f.node,
        f.excerpt,
      ).rowsWritten > 0
    );
  }

  private flag(episode: string, rule: string): Flag | null {
    const r = this.sql
      .exec<{ trace: string | null; node: number | null; excerpt: string }>(
        "SELECT trace, node, excerpt FROM flags WHERE episode = ? AND rule = ?",
        episode,
        rule,
      )
      .toArray()[0];
    return r ? { rule, ...r } : null;
  }

  private state(k: string): string | null {
    return this.sql.exec<{ v: string }>("SELECT v FROM state WHERE k = ?", k).toArray()[0]?.v ?? null;
  }

  private setState(k: string, v: string): void {
    this.sql.exec("INSERT OR REPLACE INTO state VALUES (?, ?)", k, v);
  }

  private deleteState(k: string): void {
    this.sql.exec("DELETE FROM state WHERE k = ?", k);
  }
}

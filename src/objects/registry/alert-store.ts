// A run index's alerts (INDEX_SCHEMA version 10): the run's webhooks and alert rules
// (src/protocol/alerts/config.ts), what each rule already fired for (`alert_fired`: a flag's rollout
// for good, a threshold's subject while it stays crossed), the last ended rollouts per env for the
// rate rules (`alert_outcomes`), the delivery queue (`alert_queue`: one row per alert and webhook,
// the body fixed when it fired) and what was sent and tried (`alert_recent`, `alert_attempts`, the
// last ALERT_BUDGETS.recent each). Rules are evaluated inside the upsert's transaction, so an alert
// is queued exactly when its row lands; nothing here sends (alert-delivery.ts does, from the alarm).

import {
  ALERT_BUDGETS,
  type AlertRule,
  type AlertsConfig,
  RATE_KINDS,
  type RateKind,
} from "../../protocol/alerts/config.js";
import {
  crossing,
  endedOutcome,
  type Finding,
  flagCovered,
  flagFinding,
  type Outcome,
  rateCheck,
  rewardDropCheck,
  stepCovered,
  zeroVarianceCheck,
} from "../../protocol/alerts/evaluate.js";
import { alertPayload, retryDelay } from "../../protocol/alerts/payload.js";
import type { Flag, IndexRow } from "../../protocol/registry/entry.js";
import { type StepCounters, type StepJson, stepJson, stepKeyOf } from "../../protocol/registry/steps.js";
import { type AlertsJson, alertsJson, emptyAlertsJson } from "./alert-json.js";

/** One delivery due: the alert's body for one webhook. */
export interface Delivery {
  seq: number;
  alert: string;
  url: string;
  body: string;
  attempts: number;
}

type Config = AlertsConfig & { origin: string | null };

export class AlertStore {
  private cached: Config | null = null;

  constructor(private readonly sql: SqlStorage) {}

  forget(): void {
    this.cached = null;
  }

  /** What a run with no storage answers: no webhook, no rule, nothing sent. */
  static emptyJson(): AlertsJson {
    return emptyAlertsJson();
  }

  config(): Config {
    if (this.cached) return this.cached;
    const webhooks = this.sql
      .exec<{ url: string; secret: string }>("SELECT url, secret FROM alert_hooks ORDER BY ord")
      .toArray()
      .map((h) => ({ url: h.url, secret: h.secret }));
    const rules = this.sql
      .exec<{ spec: string }>("SELECT spec FROM alert_rules ORDER BY ord")
      .toArray()
      .map((r) => JSON.parse(r.spec) as AlertRule);
    const origin = this.state("alerts_origin");
    return (this.cached = { webhooks, rules, origin });
  }

  /**
   * Replace the webhooks and rules (inside a transaction). A rule kept as it was keeps what it fired for; a changed or
   * new one starts afresh; deliveries to a webhook no longer listed are dropped.
   */
  set(c: AlertsConfig, origin: string): void {
    const before = new Map(this.config().rules.map((r) => [r.id, JSON.stringify(r)]));
    const kept = c.rules.filter((r) => before.get(r.id) === JSON.stringify(r)).map((r) => r.id);
    this.sql.exec(
      `DELETE FROM alert_fired WHERE rule NOT IN (${kept.map(() => "?").join(", ")})`,
      ...(kept as SqlStorageValue[]),
    );
    this.sql.exec("DELETE FROM alert_hooks");
    this.sql.exec("DELETE FROM alert_rules");
    for (const [i, h] of c.webhooks.entries())
      this.sql.exec("INSERT INTO alert_hooks (ord, url, secret) VALUES (?, ?, ?)", i, h.url, h.secret);
    for (const [i, r] of c.rules.entries())
      this.sql.exec("INSERT INTO alert_rules (ord, id, spec) VALUES (?, ?, ?)", i, r.id, JSON.stringify(r));
    const urls = c.webhooks.map((h) => h.url);
    this.sql.exec(
      `DELETE FROM alert_queue WHERE url NOT IN (${urls.map(() => "?").join(", ")})`,
      ...(urls as SqlStorageValue[]),
    );
    // rollouts counted while no rate rule was set are not in the window: it starts with the rules
    if (!c.rules.some(isRate)) this.sql.exec("DELETE FROM alert_outcomes");
    this.setState("alerts_origin", origin);
    this.cached = null;
  }

  /**
   * Whether a rule fires on what a running rollout's throttled updates bring: a `flag` alert (flags are read from the
   * text, which comes with them; the thresholds run on ended rows, sent at once). Its run counts as attended
   * (attention.ts).
   */
  readsLiveRows(): boolean {
    return this.config().rules.some((r) => r.kind === "flag");
  }

  /**
   * A row landed (inside its upsert's transaction, after the index's own writes): the rules run on what it changed,
   * and each alert that fires is queued. Answers how many alerts fired. Costs nothing while the run has no rule.
   */
  afterRow(row: IndexRow, old: IndexRow | null, flags: () => Flag[], run: string, now: number): number {
    const { rules, webhooks } = this.config();
    if (rules.length === 0 || webhooks.length === 0) return 0;
    const found: Finding[] = [];
    const flagRules = rules.filter((r): r is Extract<AlertRule, { kind: "flag" }> => r.kind === "flag");
    if (flagRules.length) {
      for (const f of flags())
        for (const r of flagRules)
          if (flagCovered(r, f.rule) && this.once(r.id, `flag:${f.rule}:${row.id}`)) found.push(flagFinding(r, row, f));
    }
    const outcome = endedOutcome(row, old);
    if (outcome) {
      if (rules.some(isRate)) found.push(...this.rates(outcome, rules));
      found.push(...this.stepRules(row, rules));
    }
    for (const f of found) this.enqueue(f, run, now);
    return found.length;
  }

  /** Rows whose flags a rescan raised (the alarm's, after new flag rules): their flag alerts, as for an upsert. */
  afterRescan(rows: IndexRow[], flagsOf: (id: string) => Flag[], run: string, now: number): number {
    let n = 0;
    for (const row of rows) n += this.afterRow(row, row, () => flagsOf(row.id), run, now);
    return n;
  }

  /** The deliveries due at `now`, oldest first, at most `limit`. */
  due(now: number, limit: number): Delivery[] {
    return this.sql
      .exec<Delivery & Record<string, SqlStorageValue>>(
        "SELECT seq, alert, url, body, attempts FROM alert_queue WHERE due <= ? ORDER BY due, seq LIMIT ?",
        now,
        limit,
      )
      .toArray()
      .map((d) => ({ seq: d.seq, alert: d.alert, url: d.url, body: d.body, attempts: d.attempts }));
  }

  /** When the next delivery is due (epoch ms), null: none waits. */
  nextDue(): number | null {
    return this.sql.exec<{ due: number | null }>("SELECT MIN(due) AS due FROM alert_queue").one().due;
  }

  secretOf(url: string): string | null {
    return this.config().webhooks.find((h) => h.url === url)?.secret ?? null;
  }

  /** An attempt's outcome (inside a transaction): delivered (2xx) goes; else retried by the schedule, or given up. */
  attempted(d: Delivery, status: number | null, error: string | null, ok: boolean, now: number): void {
    const attempt = d.attempts + 1;
    const wait = ok ? null : retryDelay(attempt);
    const outcome = ok ? "delivered" : wait === null ? "gave_up" : "retry";
    // a delivery replaced by a PUT meanwhile is gone: its attempt is still shown
    if (outcome === "retry")
      this.sql.exec(
        "UPDATE alert_queue SET attempts = ?, due = ? WHERE seq = ?",
        attempt,
        now + (wait as number),
        d.seq,
      );
    else this.sql.exec("DELETE FROM alert_queue WHERE seq = ?", d.seq);
    if (outcome === "gave_up") this.count("alerts_gave_up");
    this.sql.exec(
      "INSERT INTO alert_attempts (alert, url, attempt, at, status, error, outcome) VALUES (?, ?, ?, ?, ?, ?, ?)",
      d.alert,
      d.url,
      attempt,
      now,
      status,
      error,
      outcome,
    );
    trim(this.sql, "alert_attempts");
  }

  json(admin: boolean): AlertsJson {
    const c = this.config();
    const counts = {
      gave_up: Number(this.state("alerts_gave_up") ?? 0),
      dropped: Number(this.state("alerts_dropped") ?? 0),
    };
    return alertsJson(this.sql, c.webhooks, c.rules, c.origin, counts, admin);
  }

  /** Whether a flag's alert is still to fire for this subject (and marks it fired). */
  private once(rule: string, subject: string): boolean {
    return (
      this.sql.exec("INSERT OR IGNORE INTO alert_fired (rule, subject, crossed) VALUES (?, ?, 1)", rule, subject)
        .rowsWritten > 0
    );
  }

  /** A threshold's state moved by `over`: true when it fires now. */
  private moved(rule: string, subject: string, over: boolean | null): boolean {
    const crossed =
      this.sql
        .exec<{ crossed: number }>("SELECT crossed FROM alert_fired WHERE rule = ? AND subject = ?", rule, subject)
        .toArray()[0]?.crossed === 1;
    const move = crossing(crossed, over);
    if (move === "fire")
      this.sql.exec("INSERT OR REPLACE INTO alert_fired (rule, subject, crossed) VALUES (?, ?, 1)", rule, subject);
    if (move === "clear") this.sql.exec("DELETE FROM alert_fired WHERE rule = ? AND subject = ?", rule, subject);
    return move === "fire";
  }

  /** The outcome joins its env's window (the last ALERT_BUDGETS.window kept); the rate rules run on it. */
  private rates(o: Outcome, rules: AlertRule[]): Finding[] {
    const last = this.sql
      .exec<{ n: number | null }>("SELECT MAX(n) AS n FROM alert_outcomes WHERE env = ?", o.env)
      .one().n;
    const n = (last ?? 0) + 1;
    this.sql.exec(
      "INSERT INTO alert_outcomes (env, n, episode, failed, timeout, truncated) VALUES (?, ?, ?, ?, ?, ?)",
      o.env,
      n,
      o.episode,
      o.failed ? 1 : 0,
      o.timeout ? 1 : 0,
      o.truncated ? 1 : 0,
    );
    this.sql.exec("DELETE FROM alert_outcomes WHERE env = ? AND n <= ?", o.env, n - ALERT_BUDGETS.window);
    const rate = rules.filter(isRate).filter((r) => r.env === null || r.env === o.env);
    if (rate.length === 0) return [];
    const window = Math.max(...rate.map((r) => r.window));
    const newestFirst = this.sql
      .exec<{ episode: string; failed: number; timeout: number; truncated: number }>(
        "SELECT episode, failed, timeout, truncated FROM alert_outcomes WHERE env = ? ORDER BY n DESC LIMIT ?",
        o.env,
        window,
      )
      .toArray()
      .map((r) => ({
        episode: r.episode,
        env: o.env,
        failed: r.failed === 1,
        timeout: r.timeout === 1,
        truncated: r.truncated === 1,
      }));
    return rate.flatMap((r) => {
      const c = rateCheck(r, o.env, newestFirst);
      return this.moved(r.id, c.finding.subject, c.over) ? [c.finding] : [];
    });
  }

  /** The step rules on the row's step as it stands after the row (zero-variance share, reward drop). */
  private stepRules(row: IndexRow, rules: AlertRule[]): Finding[] {
    const key = stepKeyOf(row);
    if (!key) return [];
    const step = this.step(key.step, key.kind);
    if (!step) return [];
    const out: Finding[] = [];
    for (const r of rules) {
      if (r.kind === "zero_variance_share" && stepCovered(r, step)) {
        const c = zeroVarianceCheck(r, step);
        if (this.moved(r.id, c.finding.subject, c.over)) out.push(c.finding);
      }
      if (r.kind === "reward_drop" && stepCovered(r, step)) {
        const c = rewardDropCheck(r, step, this.previousSteps(key.step, key.kind, r.steps));
        if (this.moved(r.id, c.finding.subject, c.over)) out.push(c.finding);
      }
    }
    return out;
  }

  private step(step: number, kind: string): StepJson | null {
    const r = this.sql
      .exec<{ counters: string }>("SELECT counters FROM steps WHERE step = ? AND kind = ?", step, kind)
      .toArray()[0];
    return r ? stepJson({ step, kind }, JSON.parse(r.counters) as StepCounters) : null;
  }

  /** The steps of this kind before `step`, nearest first (at most `n` with a mean reward). */
  private previousSteps(step: number, kind: string, n: number): StepJson[] {
    const out: StepJson[] = [];
    for (const r of this.sql.exec<{ step: number; counters: string }>(
      "SELECT step, counters FROM steps WHERE kind = ? AND step < ? ORDER BY step DESC",
      kind,
      step,
    )) {
      const s = stepJson({ step: r.step, kind }, JSON.parse(r.counters) as StepCounters);
      if (s.mean_reward === null) continue;
      out.push(s);
      if (out.length >= n) break;
    }
    return out;
  }

  /** The alert's body, fixed now, queued once per webhook (the oldest dropped past ALERT_BUDGETS.queue). */
  private enqueue(f: Finding, run: string, now: number): void {
    const c = this.config();
    const id = crypto.randomUUID();
    const p = alertPayload(f, run, id, c.origin ?? "http://localhost", now);
    const body = JSON.stringify(p);
    this.sql.exec(
      "INSERT INTO alert_recent (id, at, rule, kind, what, episodes, step) VALUES (?, ?, ?, ?, ?, ?, ?)",
      id,
      now,
      f.rule.id,
      f.rule.kind,
      f.what,
      JSON.stringify(p.evidence.episodes),
      f.evidence.step,
    );
    trim(this.sql, "alert_recent");
    for (const h of c.webhooks)
      this.sql.exec(
        "INSERT INTO alert_queue (alert, url, body, attempts, due) VALUES (?, ?, ?, 0, ?)",
        id,
        h.url,
        body,
        now,
      );
    const over = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM alert_queue").one().n - ALERT_BUDGETS.queue;
    if (over > 0) {
      this.sql.exec("DELETE FROM alert_queue WHERE seq IN (SELECT seq FROM alert_queue ORDER BY seq LIMIT ?)", over);
      this.count("alerts_dropped", over);
    }
  }

  private count(k: string, by = 1): void {
    this.setState(k, String(Number(this.state(k) ?? 0) + by));
  }

  private state(k: string): string | null {
    return this.sql.exec<{ v: string }>("SELECT v FROM state WHERE k = ?", k).toArray()[0]?.v ?? null;
  }

  private setState(k: string, v: string): void {
    this.sql.exec("INSERT OR REPLACE INTO state VALUES (?, ?)", k, v);
  }
}

function isRate(r: AlertRule): r is Extract<AlertRule, { kind: RateKind }> {
  return (RATE_KINDS as readonly string[]).includes(r.kind);
}

/** Keep the last ALERT_BUDGETS.recent rows of a log table (what `GET .../alerts` shows: alert-json.ts). */
function trim(sql: SqlStorage, table: "alert_recent" | "alert_attempts"): void {
  sql.exec(`DELETE FROM ${table} WHERE seq <= (SELECT MAX(seq) FROM ${table}) - ?`, ALERT_BUDGETS.recent);
}

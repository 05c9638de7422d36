// A run's alerts (`PUT /v1/runs/{run}/alerts`): where they go (webhooks, each with the secret that
// signs its bodies) and what raises one (rules). Rules read what the run's index already keeps: a
// rollout's flags (src/protocol/flags/rules.ts), a step's zero-variance share and mean reward
// (src/protocol/registry/steps.ts), and per env the last rollouts' failures, timeouts and truncations.
// Every part has a budget (ALERT_BUDGETS); anything outside it is refused with 400 bad_alerts naming
// the field. Pure.

import { RelayError } from "../http/errors.js";

/** What one run's alerts may hold and do. */
export const ALERT_BUDGETS = {
  /** Webhooks per run. */
  webhooks: 4,
  /** Rules per run. */
  rules: 16,
  /** Characters of a webhook's URL. */
  urlChars: 2048,
  /** Characters of a webhook's secret (at least, at most). */
  secretMin: 16,
  secretMax: 256,
  /** A `PUT .../alerts` body (bytes). */
  bodyBytes: 16 * 1024,
  /** An alert's JSON body (bytes): evidence is cut to fit. */
  payloadBytes: 8 * 1024,
  /** One delivery's fetch, from its start to the answer's status (ms). */
  fetchTimeoutMs: 5_000,
  /** Deliveries one alarm sends at most (the rest wait for the next alarm, armed at once). */
  perAlarm: 8,
  /** Deliveries waiting at most; past it the oldest is dropped (and counted). */
  queue: 500,
  /** Attempts per delivery before it is given up (and counted as a failure). */
  attempts: 12,
  /** The largest `window` of a rate rule (rollouts per env). */
  window: 1000,
  /** The most previous steps a reward_drop rule compares with. */
  previousSteps: 20,
  /** Episode ids an alert's evidence names at most. */
  evidenceEpisodes: 10,
  /** Characters of an evidence excerpt. */
  excerptChars: 300,
  /** Recent alerts and delivery attempts `GET .../alerts` shows. */
  recent: 50,
} as const;

/** The rule kinds, each over a number the run's index keeps. */
export const ALERT_KINDS = [
  "flag",
  "zero_variance_share",
  "failure_rate",
  "timeout_rate",
  "truncation_rate",
  "reward_drop",
] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];

/** The rate rules: per env, over its last `window` ended rollouts. */
export const RATE_KINDS = ["failure_rate", "timeout_rate", "truncation_rate"] as const;
export type RateKind = (typeof RATE_KINDS)[number];

/**
 * A rule: `flag`, a rollout flagged by one of `flags` (null: any flag rule), once per flag rule and rollout;
 * `zero_variance_share`, a step's share above `above` once it has `min_groups` complete groups (per step); the rate
 * kinds, per env (or only `env`) the share of its last `window` ended rollouts that failed, timed out or truncated;
 * `reward_drop`, a step's mean reward below the mean of the previous `steps` steps' means by more than `by`, once the
 * step has `min_rollouts` finished rollouts (per step).
 */
export type AlertRule = { id: string; description: string } & (
  | { kind: "flag"; flags: string[] | null }
  | { kind: "zero_variance_share"; above: number; min_groups: number; step_kind: string | null }
  | { kind: RateKind; above: number; window: number; env: string | null }
  | { kind: "reward_drop"; by: number; steps: number; min_rollouts: number; step_kind: string | null }
);

export interface Webhook {
  url: string;
  secret: string;
}

export interface AlertsConfig {
  webhooks: Webhook[];
  rules: AlertRule[];
}

const RULE_ID = /^[a-z0-9][a-z0-9_-]{0,47}$/;
const NAME_CHARS = 128;

/** A `PUT .../alerts` body read (throws 400 bad_alerts naming the field). `{"webhooks": [], "rules": []}` is none. */
export function parseAlerts(body: unknown): AlertsConfig {
  if (!isObject(body)) throw bad("", 'the body is {"webhooks": [{"url", "secret"}], "rules": [...]}');
  for (const k of Object.keys(body))
    if (k !== "webhooks" && k !== "rules") throw bad(k, 'the body has only "webhooks" and "rules"');
  if (!Array.isArray(body.webhooks)) throw bad("webhooks", 'a list of {"url", "secret"}');
  if (!Array.isArray(body.rules)) throw bad("rules", "a list of rules");
  if (body.webhooks.length > ALERT_BUDGETS.webhooks) throw bad("webhooks", `at most ${ALERT_BUDGETS.webhooks}`);
  if (body.rules.length > ALERT_BUDGETS.rules) throw bad("rules", `at most ${ALERT_BUDGETS.rules}`);
  const webhooks = body.webhooks.map((w, i) => webhookOf(w, `webhooks[${i}]`));
  const urls = new Set<string>();
  webhooks.forEach((w, i) => {
    if (urls.has(w.url)) throw bad(`webhooks[${i}].url`, "this URL is given twice");
    urls.add(w.url);
  });
  if (body.rules.length > 0 && webhooks.length === 0) throw bad("webhooks", "rules need at least one webhook");
  const seen = new Set<string>();
  const rules = body.rules.map((r, i) => {
    const rule = ruleOf(r, `rules[${i}]`);
    if (seen.has(rule.id)) throw bad(`rules[${i}].id`, `rule ${rule.id} is given twice`);
    seen.add(rule.id);
    return rule;
  });
  return { webhooks, rules };
}

/** Why `raw` cannot be a webhook's URL (only absolute http(s) URLs without credentials), or null. */
export function webhookUrlProblem(raw: string): string | null {
  if (raw.length === 0 || raw.length > ALERT_BUDGETS.urlChars) return `a URL of 1-${ALERT_BUDGETS.urlChars} characters`;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "an absolute http(s) URL";
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return "only http and https URLs";
  if (url.username || url.password) return "no user or password in the URL (the secret signs the body)";
  if (url.hash) return "no fragment in the URL";
  return null;
}

function webhookOf(w: unknown, at: string): Webhook {
  if (!isObject(w)) throw bad(at, 'a webhook is {"url", "secret"}');
  for (const k of Object.keys(w)) if (k !== "url" && k !== "secret") throw bad(`${at}.${k}`, "not a webhook field");
  if (typeof w.url !== "string") throw bad(`${at}.url`, "a string");
  const problem = webhookUrlProblem(w.url);
  if (problem) throw bad(`${at}.url`, problem);
  const { secretMin, secretMax } = ALERT_BUDGETS;
  if (typeof w.secret !== "string" || w.secret.length < secretMin || w.secret.length > secretMax)
    throw bad(`${at}.secret`, `a secret of ${secretMin}-${secretMax} characters`);
  return { url: w.url, secret: w.secret };
}

function ruleOf(r: unknown, at: string): AlertRule {
  if (!isObject(r)) throw bad(at, "a rule is an object");
  if (typeof r.id !== "string" || !RULE_ID.test(r.id))
    throw bad(`${at}.id`, "an id is 1-48 of [a-z0-9_-], starting with a letter or digit");
  const description = typeof r.description === "string" ? r.description.slice(0, 200) : "";
  const base = { id: r.id, description };
  if (!(ALERT_KINDS as readonly string[]).includes(r.kind as string))
    throw bad(`${at}.kind`, `one of ${ALERT_KINDS.join(", ")}`);
  const known = new Set(["id", "description", "kind", ...FIELDS[r.kind as AlertKind]]);
  for (const k of Object.keys(r)) if (!known.has(k)) throw bad(`${at}.${k}`, `not a field of a ${r.kind} rule`);
  const kind = r.kind as AlertKind;
  switch (kind) {
    case "flag": {
      if (r.flags === undefined || r.flags === null) return { ...base, kind, flags: null };
      if (!Array.isArray(r.flags) || r.flags.length === 0 || r.flags.length > 32)
        throw bad(`${at}.flags`, "a list of 1-32 flag rule ids (absent: every flag rule)");
      r.flags.forEach((f, i) => {
        if (typeof f !== "string" || !RULE_ID.test(f)) throw bad(`${at}.flags[${i}]`, "a flag rule's id");
      });
      return { ...base, kind, flags: [...new Set(r.flags as string[])] };
    }
    case "zero_variance_share":
      return {
        ...base,
        kind,
        above: share(r.above, `${at}.above`),
        min_groups: whole(r.min_groups, `${at}.min_groups`, 1, 1, 100_000),
        step_kind: nameOr(r.step_kind, `${at}.step_kind`),
      };
    case "failure_rate":
    case "timeout_rate":
    case "truncation_rate":
      return {
        ...base,
        kind,
        above: share(r.above, `${at}.above`),
        window: whole(r.window, `${at}.window`, 50, 1, ALERT_BUDGETS.window),
        env: nameOr(r.env, `${at}.env`),
      };
    case "reward_drop": {
      if (typeof r.by !== "number" || !Number.isFinite(r.by) || r.by <= 0)
        throw bad(`${at}.by`, "a number above 0 (how far below the previous steps' mean)");
      return {
        ...base,
        kind,
        by: r.by,
        steps: whole(r.steps, `${at}.steps`, 3, 1, ALERT_BUDGETS.previousSteps),
        min_rollouts: whole(r.min_rollouts, `${at}.min_rollouts`, 1, 1, 100_000),
        step_kind: nameOr(r.step_kind, `${at}.step_kind`),
      };
    }
  }
}

const FIELDS: Record<AlertKind, readonly string[]> = {
  flag: ["flags"],
  zero_variance_share: ["above", "min_groups", "step_kind"],
  failure_rate: ["above", "window", "env"],
  timeout_rate: ["above", "window", "env"],
  truncation_rate: ["above", "window", "env"],
  reward_drop: ["by", "steps", "min_rollouts", "step_kind"],
};

function share(v: unknown, at: string): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || v >= 1)
    throw bad(at, "a share from 0 to below 1 (the alert fires above it)");
  return v;
}

function whole(v: unknown, at: string, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min || v > max)
    throw bad(at, `a whole number from ${min} to ${max}`);
  return v;
}

function nameOr(v: unknown, at: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "string" || v.length === 0 || v.length > NAME_CHARS)
    throw bad(at, `a string of 1-${NAME_CHARS} characters (absent: any)`);
  return v;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function bad(field: string, message: string): RelayError {
  return new RelayError("bad_alerts", message, field || undefined);
}

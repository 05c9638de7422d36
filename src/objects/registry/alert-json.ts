// What `GET /v1/runs/{run}/alerts` answers from a run index's alert tables (alert-store.ts): the
// webhooks (an admin sees each URL, anyone else its origin: a URL may hold a token, Slack's do; never
// a secret), the rules, the delivery counts, the last alerts fired and the last delivery attempts.

import { ALERT_BUDGETS, type AlertRule, type Webhook } from "../../protocol/alerts/config.js";

/** `GET /v1/runs/{run}/alerts`: the rules, the webhooks (never their secrets), what fired and how delivery went. */
export interface AlertsJson {
  /** An admin sees each webhook's URL; anyone else its origin only (a URL may hold a token, Slack's do). */
  webhooks: Array<{ url: string }>;
  rules: AlertRule[];
  /** The origin the alerts' links start with. */
  origin: string | null;
  /** Deliveries waiting (first tries and retries). */
  pending: number;
  /** Deliveries given up after ALERT_BUDGETS.attempts, and ones dropped from a full queue. */
  gave_up: number;
  dropped: number;
  /** The last alerts fired, newest first. */
  recent: Array<{
    id: string;
    at: string;
    rule: string;
    kind: string;
    what: string;
    episodes: string[];
    step: number | null;
  }>;
  /** The last delivery attempts, newest first (a failure: `status` not 2xx, or `error`). */
  deliveries: Array<{
    alert: string;
    url: string;
    attempt: number;
    at: string;
    status: number | null;
    error: string | null;
    outcome: "delivered" | "retry" | "gave_up";
  }>;
  budgets: typeof ALERT_BUDGETS;
}

/** What a run with no storage answers: no webhook, no rule, nothing sent. */
export function emptyAlertsJson(): AlertsJson {
  const none = { pending: 0, gave_up: 0, dropped: 0, recent: [], deliveries: [] };
  return { webhooks: [], rules: [], origin: null, ...none, budgets: ALERT_BUDGETS };
}

export function alertsJson(
  sql: SqlStorage,
  webhooks: Webhook[],
  rules: AlertRule[],
  origin: string | null,
  counts: { gave_up: number; dropped: number },
  admin: boolean,
): AlertsJson {
  const shown = (url: string) => (admin ? url : new URL(url).origin);
  const recent = sql
    .exec<{
      id: string;
      at: number;
      rule: string;
      kind: string;
      what: string;
      episodes: string;
      step: number | null;
    }>("SELECT id, at, rule, kind, what, episodes, step FROM alert_recent ORDER BY seq DESC")
    .toArray()
    .map((r) => ({ ...r, at: new Date(r.at).toISOString(), episodes: JSON.parse(r.episodes) as string[] }));
  const deliveries = sql
    .exec<{
      alert: string;
      url: string;
      attempt: number;
      at: number;
      status: number | null;
      error: string | null;
      outcome: "delivered" | "retry" | "gave_up";
    }>("SELECT alert, url, attempt, at, status, error, outcome FROM alert_attempts ORDER BY seq DESC")
    .toArray()
    .map((d) => ({ ...d, url: shown(d.url), at: new Date(d.at).toISOString() }));
  return {
    webhooks: webhooks.map((h) => ({ url: shown(h.url) })),
    rules,
    origin,
    pending: sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM alert_queue").one().n,
    ...counts,
    recent,
    deliveries,
    budgets: ALERT_BUDGETS,
  };
}

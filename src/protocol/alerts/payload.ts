// An alert as its webhook receives it: one JSON body (at most ALERT_BUDGETS.payloadBytes), made once
// when the alert fires and sent as is on every attempt, so retries carry the same `id` and the same
// bytes (a receiver dedups by `id`). It names the run, the rule, what crossed and the evidence, with
// links to the relay's pages on its public origin (src/protocol/http/public-url.ts), and a `text`
// Slack-style receivers show. The signature is HMAC-SHA256 of the body with the webhook's secret
// (Web Crypto), sent as `x-episode-relay-signature: sha256=<hex>`. The retry schedule is here too.
// Pure.

import { ALERT_BUDGETS } from "./config.js";
import type { Evidence, Finding } from "./evaluate.js";

/** The header carrying the body's signature. */
export const SIGNATURE_HEADER = "x-episode-relay-signature";
/** The header carrying the alert's id (also in the body), for receivers that dedup before parsing. */
export const ALERT_ID_HEADER = "x-episode-relay-alert";

export interface AlertPayload {
  /** Unique per alert; every attempt of it carries the same. */
  id: string;
  type: "episode-relay.alert";
  run: string;
  rule: { id: string; kind: string; description: string };
  /** What crossed, in one sentence. */
  what: string;
  value: number | null;
  threshold: number | null;
  evidence: Evidence;
  links: { run: string; episodes: Array<{ id: string; url: string }> };
  /** When it fired (ISO 8601). */
  at: string;
  /** For Slack-compatible receivers (incoming webhooks show `text`). */
  text: string;
}

/** The run's page and an episode's, on `origin` (the dashboard's paths). */
export function runLink(origin: string, run: string): string {
  return new URL(`/runs/${encodeURIComponent(run)}`, origin).toString();
}

export function episodeLink(origin: string, id: string): string {
  return new URL(`/episodes/${encodeURIComponent(id)}`, origin).toString();
}

/** The alert's body for a finding of `run`'s rule; cut (evidence first) to ALERT_BUDGETS.payloadBytes. */
export function alertPayload(f: Finding, run: string, id: string, origin: string, at: number): AlertPayload {
  const episodes = f.evidence.episodes.slice(0, ALERT_BUDGETS.evidenceEpisodes);
  const excerpt = f.evidence.excerpt === null ? null : cut(f.evidence.excerpt, ALERT_BUDGETS.excerptChars);
  const p: AlertPayload = {
    id,
    type: "episode-relay.alert",
    run,
    rule: { id: f.rule.id, kind: f.rule.kind, description: f.rule.description },
    what: f.what,
    value: f.value,
    threshold: f.threshold,
    evidence: { ...f.evidence, episodes, excerpt },
    links: { run: runLink(origin, run), episodes: episodes.map((e) => ({ id: e, url: episodeLink(origin, e) })) },
    at: new Date(at).toISOString(),
    text: "",
  };
  p.text = slackText(p);
  // what fits: names are bounded (ids 128, run 127, rule 48), so only the evidence can be long
  while (bytes(JSON.stringify(p)) > ALERT_BUDGETS.payloadBytes && p.evidence.episodes.length > 1) {
    p.evidence.episodes = p.evidence.episodes.slice(0, Math.ceil(p.evidence.episodes.length / 2));
    p.links.episodes = p.links.episodes.slice(0, p.evidence.episodes.length);
  }
  if (bytes(JSON.stringify(p)) > ALERT_BUDGETS.payloadBytes) p.evidence.excerpt = null;
  p.text = slackText(p);
  return p;
}

/** `text`: a line a chat shows, with the run's link (Slack's `<url|label>` form). */
function slackText(p: AlertPayload): string {
  const lines = [`:rotating_light: Episode Relay alert on run ${p.run} (${p.rule.id}): ${p.what}`];
  if (p.evidence.excerpt) lines.push(`> ${p.evidence.excerpt}`);
  lines.push(`<${p.links.run}|Run ${p.run}>`);
  for (const e of p.links.episodes.slice(0, 3)) lines.push(`<${e.url}|${e.id}>`);
  return lines.join("\n");
}

function cut(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
}

function bytes(s: string): number {
  return new TextEncoder().encode(s).byteLength;
}

/** `sha256=<hex HMAC-SHA256 of body with secret>` (Web Crypto): the signature header's value. */
export async function signBody(secret: string, body: string): Promise<string> {
  const enc = new TextEncoder();
  const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(body)));
  return `sha256=${[...mac].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The first retry's wait (ms); each next one doubles, up to RETRY_MAX_MS. */
export const RETRY_FIRST_MS = 1_000;
export const RETRY_MAX_MS = 10 * 60_000;

/** How long after failed attempt `attempts` (1, 2, …) the next is due (ms); null: give up (ALERT_BUDGETS.attempts). */
export function retryDelay(attempts: number): number | null {
  if (attempts >= ALERT_BUDGETS.attempts) return null;
  return Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** (attempts - 1));
}

/** Whether an answer's status means delivered (any 2xx); anything else, or no answer, is retried. */
export function delivered(status: number): boolean {
  return status >= 200 && status < 300;
}

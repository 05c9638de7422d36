// Path grammar of the public API, shared by the Worker and the Episode object.

import { RUN_NAME } from "../registry/run.js";

export const EPISODE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The rule an episode id follows, in words (the Worker's refusal and every client's say the same). */
export const EPISODE_ID_RULE = 'episode ids are 1-128 characters of [A-Za-z0-9._:-], and not "watch"';

/** Why `id` cannot name an episode, or null when it can. */
export function episodeIdProblem(id: string): string | null {
  if (RESERVED_IDS.has(id)) return `"${id}" is reserved and cannot name an episode`;
  if (!EPISODE_ID.test(id)) return `${JSON.stringify(id)} is not an episode id: ${EPISODE_ID_RULE}`;
  return null;
}

/**
 * Set by the Worker on every answer it gives (not on the dashboard's files): a client knows the relay answered, not
 * some other page.
 */
export const RELAY_HEADER = "x-episode-relay";

/** Header the Worker sets on upgrades: the episode id the object serves (objects do not know their name). */
export const EPISODE_ID_HEADER = "x-episode-id";

/**
 * `/v1/runs/{run}`: the run (aggregates; upgraded: its socket); `/episodes`: its list; `/finished`:
 * bulk fetch; `/usage` (admin): billing units; `/groups`: its rollout groups; `/groups/{group}`: one;
 * `/tasks`: per-task results; `/steps`: per training step (the dispatch identity's); `/search`: its
 * episodes' text; `/rules`: its flag rules (src/protocol/flags/rules.ts); `/alerts`: its webhooks and alert rules
 * (src/protocol/alerts/config.ts; PUT admin); `/share` (admin, POST): a read-only
 * token for the run, for a link; `/tokenizer`: the model's `tokenizer.json` (PUT by its producer, GET by its
 * watchers), so pages can decode token ids.
 */
export type RunAction =
  | "run"
  | "episodes"
  | "finished"
  | "usage"
  | "groups"
  | "group"
  | "tasks"
  | "steps"
  | "search"
  | "rules"
  | "alerts"
  | "share"
  | "tokenizer";

/**
 * `usage` (admin): the billing units its objects counted (src/protocol/billing/usage.ts); `dispatch`: the
 * rollout's identity in the trainer, before its first trace (src/protocol/envelope/dispatch.ts);
 * `annotations`: the trainer's per-token signals (src/protocol/annotations/).
 */
export type EpisodeAction =
  | "episode"
  | "deltas"
  | "ingest"
  | "reply"
  | "status"
  | "watch"
  | "usage"
  | "dispatch"
  | "annotations";

export type Route =
  | { kind: "health" }
  /** `GET /v1/episodes`: the list across runs (each run's index, newest run first). */
  | { kind: "list" }
  /** `GET /v1/runs`: the run directory (upgraded: its socket). */
  | { kind: "runs" }
  | { kind: "run"; run: string; action: RunAction; group?: string }
  | { kind: "bad_run"; run: string }
  | { kind: "episode"; id: string; action: EpisodeAction }
  | { kind: "bad_id"; id: string }
  | { kind: "not_found" };

const ACTIONS = new Set<string>(["deltas", "ingest", "reply", "status", "watch", "usage", "dispatch", "annotations"]);

/**
 * Ids no episode may take: `/v1/episodes/watch` was the old single index socket's path (it answers
 * not_found now, never an episode), and clients refuse the id before sending.
 */
export const RESERVED_IDS: ReadonlySet<string> = new Set(["watch"]);

/** Methods of the list paths. */
export const INDEX_METHODS: Record<"list" | "runs", readonly string[]> = {
  list: ["GET", "HEAD"],
  runs: ["GET", "HEAD"],
};

export const RUN_METHODS: Record<RunAction, readonly string[]> = {
  groups: ["GET", "HEAD"],
  group: ["GET", "HEAD"],
  tasks: ["GET", "HEAD"],
  steps: ["GET", "HEAD"],
  search: ["GET", "HEAD"],
  rules: ["GET", "PUT"],
  alerts: ["GET", "PUT"],
  run: ["GET", "HEAD"],
  episodes: ["GET", "HEAD"],
  finished: ["GET", "HEAD"],
  usage: ["GET"],
  share: ["POST"],
  tokenizer: ["GET", "HEAD", "PUT"],
};

export function parseRoute(pathname: string): Route {
  if (pathname === "/v1/health" || pathname === "/v1/health/") return { kind: "health" };
  if (pathname === "/v1/episodes" || pathname === "/v1/episodes/") return { kind: "list" };
  // the old index socket's path: not found (not a bad episode id)
  if (pathname === "/v1/episodes/watch" || pathname === "/v1/episodes/watch/") return { kind: "not_found" };
  if (pathname === "/v1/runs" || pathname === "/v1/runs/") return { kind: "runs" };
  const g = /^\/v1\/runs\/([^/]+)\/groups\/([^/]+)\/?$/.exec(pathname);
  if (g) return groupRoute(g[1]!, g[2]!);
  const r = /^\/v1\/runs\/([^/]+)(?:\/([^/]+))?\/?$/.exec(pathname);
  if (r) return runRoute(r[1]!, r[2]);
  const m = /^\/v1\/episodes\/([^/]+)(?:\/([^/]+))?\/?$/.exec(pathname);
  if (!m) return { kind: "not_found" };
  let id: string;
  try {
    id = decodeURIComponent(m[1]!);
  } catch {
    return { kind: "bad_id", id: m[1]! };
  }
  // no second segment is the episode itself ("episode" is not a path segment)
  if (m[2] !== undefined && !ACTIONS.has(m[2])) return { kind: "not_found" };
  const action = m[2] ?? "episode";
  if (!EPISODE_ID.test(id) || RESERVED_IDS.has(id)) return { kind: "bad_id", id };
  return { kind: "episode", id, action: action as EpisodeAction };
}

/** Methods each action answers. */
export const METHODS: Record<EpisodeAction, readonly string[]> = {
  episode: ["GET", "HEAD", "DELETE"],
  deltas: ["POST"],
  ingest: ["GET"],
  reply: ["POST"],
  status: ["GET"],
  watch: ["GET"],
  usage: ["GET"],
  dispatch: ["POST"],
  annotations: ["GET", "HEAD", "POST"],
};

/** Methods a routed path answers. */
export function allowedMethods(
  route: Extract<Route, { kind: "list" | "runs" | "run" | "episode" }>,
): readonly string[] {
  if (route.kind === "episode") return METHODS[route.action];
  if (route.kind === "run") return RUN_METHODS[route.action];
  return INDEX_METHODS[route.kind];
}

/** `/v1/runs/{run}/groups/{group}`: the group id is any URL-encoded string (a reply head's `group.id`). */
function groupRoute(segment: string, group: string): Route {
  const r = runRoute(segment, "groups");
  if (r.kind !== "run") return r;
  try {
    return { ...r, action: "group", group: decodeURIComponent(group) };
  } catch {
    return { kind: "not_found" };
  }
}

function runRoute(segment: string, action: string | undefined): Route {
  if (
    action !== undefined &&
    ![
      "episodes",
      "finished",
      "usage",
      "groups",
      "tasks",
      "steps",
      "search",
      "rules",
      "alerts",
      "share",
      "tokenizer",
    ].includes(action)
  )
    return { kind: "not_found" };
  let run: string;
  try {
    run = decodeURIComponent(segment);
  } catch {
    return { kind: "bad_run", run: segment };
  }
  if (!RUN_NAME.test(run)) return { kind: "bad_run", run };
  return { kind: "run", run, action: (action ?? "run") as RunAction };
}

/** A WebSocket upgrade (the Worker and each object answer plain requests and upgrades apart). */
export function isWebSocketUpgrade(request: Request): boolean {
  return request.headers.get("upgrade")?.toLowerCase() === "websocket";
}

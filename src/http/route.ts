// Path grammar of the public API, shared by the Worker and the Episode object.

export const EPISODE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export type EpisodeAction = "episode" | "deltas" | "ingest" | "reply" | "status" | "watch";

export type Route =
  | { kind: "health" }
  /** `GET /v1/episodes`: the episode index's list. */
  | { kind: "list" }
  /** `GET /v1/episodes/watch`: the episode index's live socket. */
  | { kind: "index_watch" }
  | { kind: "episode"; id: string; action: EpisodeAction }
  | { kind: "bad_id"; id: string }
  | { kind: "not_found" };

const ACTIONS = new Set<string>(["deltas", "ingest", "reply", "status", "watch"]);

/** Ids that name index paths, not episodes: `/v1/episodes/watch` is the index socket. */
export const RESERVED_IDS: ReadonlySet<string> = new Set(["watch"]);

/** Methods of the index paths. */
export const INDEX_METHODS: Record<"list" | "index_watch", readonly string[]> = { list: ["GET", "HEAD"], index_watch: ["GET"] };

export function parseRoute(pathname: string): Route {
  if (pathname === "/v1/health" || pathname === "/v1/health/") return { kind: "health" };
  if (pathname === "/v1/episodes" || pathname === "/v1/episodes/") return { kind: "list" };
  if (pathname === "/v1/episodes/watch" || pathname === "/v1/episodes/watch/") return { kind: "index_watch" };
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
};

/** Methods a routed path answers. */
export function allowedMethods(route: Extract<Route, { kind: "list" | "index_watch" | "episode" }>): readonly string[] {
  return route.kind === "episode" ? METHODS[route.action] : INDEX_METHODS[route.kind];
}

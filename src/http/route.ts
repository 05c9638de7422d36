// Path grammar of the public API, shared by the Worker and the Episode object.

export const EPISODE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export type EpisodeAction = "episode" | "deltas" | "ingest" | "reply" | "status" | "watch";

export type Route =
  | { kind: "health" }
  | { kind: "episode"; id: string; action: EpisodeAction }
  | { kind: "bad_id"; id: string }
  | { kind: "not_found" };

const ACTIONS = new Set<string>(["deltas", "ingest", "reply", "status", "watch"]);

export function parseRoute(pathname: string): Route {
  if (pathname === "/v1/health") return { kind: "health" };
  const m = /^\/v1\/episodes\/([^/]+)(?:\/([^/]+))?\/?$/.exec(pathname);
  if (!m) return { kind: "not_found" };
  let id: string;
  try {
    id = decodeURIComponent(m[1]!);
  } catch {
    return { kind: "bad_id", id: m[1]! };
  }
  const action = m[2] ?? "episode";
  if (action !== "episode" && !ACTIONS.has(action)) return { kind: "not_found" };
  if (!EPISODE_ID.test(id)) return { kind: "bad_id", id };
  return { kind: "episode", id, action: action as EpisodeAction };
}

/** Methods each action answers. */
export const METHODS: Record<EpisodeAction, string[]> = {
  episode: ["GET", "HEAD", "DELETE"],
  deltas: ["POST"],
  ingest: ["GET"],
  reply: ["POST"],
  status: ["GET"],
  watch: ["GET"],
};

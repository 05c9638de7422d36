// `URL/ID` on the command line: `http://127.0.0.1:8787/run-1` or `http://host/v1/episodes/run-1`.
// Nothing is sent to another id than the one given: a fragment (`#...`) or a query (`?...`), which
// a URL would silently drop, and an id the relay cannot take are refused here, with the rule.
import { checkBaseUrl } from "../../clients/typescript/relay-fetch.js";
import { EPISODE_ID_RULE, episodeIdProblem } from "../../src/protocol/index.js";

export interface Target {
  base: string;
  id: string;
}

export function parseTarget(arg: string): Target {
  checkBaseUrl(arg);
  const u = new URL(arg);
  if (u.hash || u.search || arg.includes("#") || arg.includes("?")) {
    throw new Error(
      `${JSON.stringify(arg)}: an episode id cannot contain "#" or "?" (${EPISODE_ID_RULE}); expected URL/ID, e.g. http://127.0.0.1:8787/my-episode`,
    );
  }
  const parts = u.pathname.split("/").filter(Boolean);
  if (parts.length === 0)
    throw new Error(`${JSON.stringify(arg)} names no episode: expected URL/ID, e.g. http://127.0.0.1:8787/my-episode`);
  let id: string;
  try {
    id = decodeURIComponent(parts.at(-1)!);
  } catch {
    id = parts.at(-1)!;
  }
  const problem = episodeIdProblem(id);
  if (problem) throw new Error(problem);
  const prefix = parts.slice(0, -1);
  if (prefix.length >= 2 && prefix.at(-1) === "episodes" && prefix.at(-2) === "v1") prefix.splice(-2, 2);
  return { base: `${u.origin}${prefix.length ? `/${prefix.join("/")}` : ""}`, id };
}

/** A relay's base URL on the command line (`http://127.0.0.1:8787`, or with a path prefix), without a trailing `/`. */
export function parseBase(arg: string): string {
  checkBaseUrl(arg);
  const u = new URL(arg);
  return `${u.origin}${u.pathname.replace(/\/+$/, "")}`;
}

// Where things live in the dashboard, and how a run is named on screen. The run of an episode is
// the server's own rule (src/protocol/registry/run.ts), so a breadcrumb always points at the run that
// counts the episode.
import { NO_RUN, runOf } from "../../src/protocol/index.js";
import { tokenFragment } from "./api.js";

export { NO_RUN, runOf };

/** The runs page. Every in-app link carries a token that came by link in its fragment (api.ts `tokenFragment`). */
export function homeHref(): string {
  return `/${tokenFragment()}`;
}

export function runHref(run: string): string {
  return `/runs/${encodeURIComponent(run)}${tokenFragment()}`;
}

/** An episode's page; `at` opens it at a turn (the episode page scrolls there). */
export function episodeHref(id: string, at?: { trace: string | null; node: number }): string {
  const q = at ? `?${new URLSearchParams({ ...(at.trace ? { trace: at.trace } : {}), node: String(at.node) })}` : "";
  return `/episodes/${encodeURIComponent(id)}${q}${tokenFragment()}`;
}

/** A run's name for people: the NO_RUN bucket ("~") gets words instead of a tilde. */
export function runLabel(run: string): string {
  return run === NO_RUN ? "(no run)" : run;
}

/** An episode's id without its run's prefix ("grpo-42:17" in run "grpo-42" → "17"): the run is on screen already. */
export function idInRun(id: string, run: string): string {
  return run !== NO_RUN && id.startsWith(`${run}:`) ? id.slice(run.length + 1) : id;
}

export function groupHref(run: string, group: string): string {
  return `/runs/${encodeURIComponent(run)}/groups/${encodeURIComponent(group)}${tokenFragment()}`;
}

/** The compare page for these episodes (two or more), in the order given. */
export function compareHref(...ids: string[]): string {
  return `/compare/${ids.map(encodeURIComponent).join("/")}${tokenFragment()}`;
}

// The dashboard: `/` lists the runs (live, from the run directory's socket), `/runs/{run}` shows
// one run (its counters, reward histograms, throughput and episodes, live from the run's socket),
// `/runs/{run}/groups/{group}` one rollout group (its numbers and rollouts, refreshed while live),
// `/episodes/{id}` shows one episode (live, with the TypeScript watcher client), `/compare/{a}/{b}/…`
// two or more rollouts side by side, turn by turn, where they diverge marked. No framework: plain DOM.
// the stylesheets every page shares, then one per page, in this order (later rules win ties);
// a part's own sheet (rewards, routing, training, ...) is imported by the module that draws it
import "./styles/base.css";
import "./styles/shell.css";
import "./styles/components.css";
import "./styles/episode.css";
import "./styles/runs.css";
import "./styles/run.css";
import "./styles/group.css";
import "./styles/compare.css";
import { takeTokenFromUrl } from "./api.js";
import { mountCompare } from "./compare.js";
import { mountEpisode } from "./episode.js";
import { mountGroup } from "./group.js";
import { runLabel } from "./links.js";
import { mountRun } from "./run.js";
import { mountRuns } from "./runs.js";
import { shell } from "./shell.js";

let unmount: (() => void) | null = null;

/** A path segment decoded, or null when it is not valid percent-encoding. */
function segment(raw: string): string | null {
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

function route(): void {
  unmount?.();
  unmount = null;
  const root = document.getElementById("app")!;
  const s = shell(root, route);
  const episode = /^\/episodes\/([^/]+)\/?$/.exec(location.pathname);
  const run = /^\/runs\/([^/]+)\/?$/.exec(location.pathname);
  const group = /^\/runs\/([^/]+)\/groups\/([^/]+)\/?$/.exec(location.pathname);
  const compare = /^\/compare\/([^/]+(?:\/[^/]+)+)\/?$/.exec(location.pathname);
  const compareIds = compare ? compare[1]!.split("/").map(segment) : null;
  const groupRun = group ? segment(group[1]!) : null;
  const groupId = group ? segment(group[2]!) : null;
  const id = episode ? segment(episode[1]!) : null;
  const name = run ? segment(run[1]!) : null;
  if (compareIds?.every((x) => x !== null)) {
    document.title = `Compare ${compareIds.join(" · ")} · Episode Relay`;
    unmount = mountCompare(s, compareIds as string[]);
  } else if (groupRun !== null && groupId !== null) {
    document.title = `${groupId} · ${runLabel(groupRun)} · Episode Relay`;
    unmount = mountGroup(s, groupRun, groupId);
  } else if (id !== null) {
    document.title = `${id} · Episode Relay`;
    unmount = mountEpisode(s, id);
  } else if (name !== null) {
    document.title = `${runLabel(name)} · Episode Relay`;
    unmount = mountRun(s, name);
  } else {
    document.title = "Runs · Episode Relay";
    unmount = mountRuns(s);
  }
  window.scrollTo(0, 0);
}

takeTokenFromUrl();
route();
window.addEventListener("popstate", route);
// in-app links: no full page load
document.addEventListener("click", (e) => {
  // a pick box inside a row link toggles, it does not follow the link (pick-tray.ts)
  if ((e.target as Element | null)?.closest?.("[data-pick]")) return;
  const a = (e.target as Element | null)?.closest?.("a[data-nav]");
  const href = a?.getAttribute("href");
  if (!href || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  e.preventDefault();
  // a link's fragment may carry the token (links.ts): it is for new tabs, not this address bar.
  // (read as an attribute: an SVG chart's <a> has no string `href` property)
  const to = new URL(href, location.href);
  history.pushState(null, "", to.pathname + to.search);
  route();
});

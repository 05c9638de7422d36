// The run page's search box: `GET /v1/runs/{run}/search?q=` (docs/search.md: words, "phrases",
// prefix*, role: and tool: filters), its answers best first, each rollout with its snippets (the
// matched words marked); a snippet links to the episode opened at its turn
// (`/episodes/{id}?trace=…&node=…`, which the episode page scrolls to and marks). Each rollout shows
// its reward, step and group from its row (`row=1`: the answer carries it). The query lives in the page's
// address (`?q=`), so a reload, a link and back/forward (the router mounts the page again) show the
// same results.
import { type IndexEntry, identityOf } from "../../src/protocol/index.js";
import { getJson } from "./api.js";
import { fmtNumber, h, plural } from "./dom.js";
import { episodeHref, groupHref, idInRun } from "./links.js";

/** Rollouts one search shows. */
export const SEARCH_LIMIT = 20;

interface Snippet {
  trace: string | null;
  node: number | null;
  role: string | null;
  tool: string | null;
  text: string;
  highlights?: Array<[number, number]>;
}

interface SearchAnswer {
  episodes: Array<{ id: string; score: number; snippets: Snippet[]; row?: IndexEntry }>;
  cursor: string | null;
}

/** `text` with the [start, end) ranges in <mark>. */
function marked(text: string, ranges: Array<[number, number]> = []): Array<string | HTMLElement> {
  const out: Array<string | HTMLElement> = [];
  let at = 0;
  for (const [s, e] of [...ranges].sort((a, b) => a[0] - b[0])) {
    if (s < at || e <= s) continue;
    out.push(text.slice(at, s), h("mark", null, text.slice(s, e)));
    at = e;
  }
  out.push(text.slice(at));
  return out;
}

export function runSearch(run: string): { el: HTMLElement; stop: () => void } {
  const input = h("input.filter", {
    type: "search",
    id: "run-search",
    placeholder: 'Search the run\'s text: words, "a phrase", pref*, role:tool, tool:bash…',
    "aria-label": "search the run's rollouts",
  });
  const go = h("button.btn", { type: "submit" }, "Search");
  const note = h("span.muted.small", { id: "search-note", role: "status" });
  const results = h("ol.search-results", { id: "search-results", hidden: true });
  const form = h("form.search-form", { role: "search" }, input, go, note);
  let ctl: AbortController | null = null;

  /** The page's address with `q` as its query (none: no `q`). */
  const addressWith = (q: string): string => {
    const u = new URL(location.href);
    if (q) u.searchParams.set("q", q);
    else u.searchParams.delete("q");
    return `${u.pathname}${u.search}${u.hash}`;
  };

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = input.value.trim();
    // a new query is a new entry in the history (back shows the one before); the same one again is not
    if ((new URL(location.href).searchParams.get("q") ?? "") !== q) history.pushState(null, "", addressWith(q));
    void search(q);
  });

  async function search(q: string): Promise<void> {
    ctl?.abort();
    if (!q) {
      results.hidden = true;
      note.textContent = "";
      return;
    }
    const mine = (ctl = new AbortController());
    note.textContent = "searching…";
    try {
      const a = await getJson<SearchAnswer>(
        `/v1/runs/${encodeURIComponent(run)}/search?q=${encodeURIComponent(q)}&limit=${SEARCH_LIMIT}&row=1`,
        mine.signal,
      );
      if (mine.signal.aborted) return;
      note.textContent = a.episodes.length
        ? `${plural(a.episodes.length, "rollout")}${a.cursor ? ` (the best ${SEARCH_LIMIT})` : ""}, best match first`
        : "no rollout matches";
      results.replaceChildren(...a.episodes.map((ep) => hit(run, ep)));
      results.hidden = a.episodes.length === 0;
    } catch (err) {
      if (mine.signal.aborted) return;
      note.textContent = `no search: ${err instanceof Error ? err.message : String(err)}`;
      results.hidden = true;
    }
  }
  const el = h("section.run-search", { "aria-label": "search" }, form, results);
  // the query the address names (a reload, a link, back or forward)
  const asked = new URL(location.href).searchParams.get("q")?.trim() ?? "";
  if (asked) {
    input.value = asked;
    void search(asked);
  }
  return { el, stop: () => ctl?.abort() };
}

function hit(run: string, ep: SearchAnswer["episodes"][number]): HTMLElement {
  return h(
    "li.search-hit",
    { "data-id": ep.id },
    h("a.ep-id", { href: episodeHref(ep.id), "data-nav": true, title: ep.id }, idInRun(ep.id, run)),
    ep.row ? hitFacts(run, ep.row) : null,
    h(
      "ul.search-snippets",
      null,
      ...ep.snippets.map((s) =>
        h(
          "li",
          null,
          h(
            "a.search-snippet",
            {
              href: episodeHref(ep.id, s.node !== null && s.node >= 0 ? { trace: s.trace, node: s.node } : undefined),
              "data-nav": true,
              "data-node": s.node ?? "",
            },
            h(
              "span.chip",
              null,
              s.node === null || s.node < 0 ? "task" : `#${s.node} ${s.role ?? ""}${s.tool ? ` · ${s.tool}` : ""}`,
            ),
            " ",
            ...marked(s.text, s.highlights),
          ),
        ),
      ),
    ),
  );
}

/** A hit's row in a line: its reward (the trainer's), its step and its group (a link to the group page). */
function hitFacts(run: string, row: IndexEntry): HTMLElement {
  const { step } = identityOf(row);
  return h(
    "span.search-facts.muted.small",
    null,
    // written as every page writes a number (0.188, not 0.1875)
    h("span", { "data-k": "reward" }, `reward ${fmtNumber(row.reward)}`),
    step === null ? null : h("span", { "data-k": "step" }, ` · step ${step}`),
    row.group
      ? h(
          "span",
          { "data-k": "group" },
          " · group ",
          h("a", { href: groupHref(run, row.group), "data-nav": true }, row.group),
        )
      : null,
  );
}

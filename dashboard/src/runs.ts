// The home page: the runs, live from the run directory's socket (`GET /v1/runs` upgraded): the
// newest runs, then coalesced upserts and deletes. One row per run with its episode counts and
// its mean reward over the finished episodes (reward-choice.ts picks the key); a row opens the run. Only runs the token
// covers whole are listed (the relay decides).
import type { AccessProblem } from "./api.js";
import { agoSpan, clear, fmtNumber, h, plural, tickAges } from "./dom.js";
import { NO_RUN, runHref, runLabel } from "./links.js";
import { primaryRewardKey } from "./reward-choice.js";
import { runSocket } from "./run-socket.js";
import "./styles/rewards.css";
import { parseRunsMessage, type RunSummary, type RunsMessage } from "../../src/protocol/index.js";
import { toneAttrs } from "./reward-chip.js";
import type { Shell } from "./shell.js";

/** The episode statuses a run counts, in the order the columns show them. */
const COUNTED = [
  ["live", "live"],
  ["finished", "finished"],
  ["failed", "failed"],
  ["finish_refused", "refused"],
] as const;

/** The directory's order: newest-created first (ties by name, descending, as the relay pages them). */
function newestFirst(a: RunSummary, b: RunSummary): number {
  if (a.created !== b.created) return a.created < b.created ? 1 : -1;
  return a.run < b.run ? 1 : a.run > b.run ? -1 : 0;
}

export function mountRuns(shell: Shell): () => void {
  shell.setTitle(["Runs"]);
  const runs = new Map<string, RunSummary>();
  let truncated = false;
  let loaded = false;
  let text = "";
  /** Why the relay refused to list (401/403), shown instead of the runs. */
  let refused: string | null = null;

  const filter = h("input.filter", {
    type: "search",
    placeholder: "Filter runs by name…",
    "aria-label": "filter runs",
    id: "run-filter",
  });
  filter.addEventListener("input", () => {
    text = filter.value.trim().toLowerCase();
    render();
  });
  const counts = h("span.counts", { id: "runs-counts" });
  const table = h("div.run-list", { id: "runs", role: "table", "aria-label": "runs" });
  const note = h("p.note");
  const toolbar = h("div.toolbar", null, filter);
  const page = h(
    "section.runs-page",
    null,
    h("div.page-head", null, h("h1", null, "Runs"), counts),
    toolbar,
    table,
    note,
  );
  shell.main.append(page);

  function render(): void {
    const all = [...runs.values()].sort(newestFirst);
    const shown = text ? all.filter((r) => text.split(/\s+/).every((w) => r.run.toLowerCase().includes(w))) : all;
    const live = all.reduce((n, r) => n + r.live, 0);
    counts.textContent = refused || !loaded ? "" : `${plural(all.length, "run")} · ${plural(live, "live episode")}`;
    toolbar.hidden = refused !== null;
    clear(table);
    table.append(
      h(
        "div.run-row.run-head",
        { role: "row" },
        h("span", { role: "columnheader" }, "Run"),
        COUNTED.map(([, label]) => h("span.num", { role: "columnheader" }, label)),
        h("span.num", { role: "columnheader" }, "episodes"),
        h(
          "span.num",
          { role: "columnheader", title: "over the finished episodes: the key `reward`, else the first key" },
          "mean reward",
        ),
        h("span", { role: "columnheader" }, "Updated"),
      ),
    );
    for (const r of shown) table.append(row(r));
    if (shown.length === 0) {
      table.append(
        h(
          "div.empty",
          null,
          refused ??
            (!loaded
              ? "Loading…"
              : all.length === 0
                ? "No runs yet. A run shows up here with the first delta of its first episode (episode grpo-42:17 belongs to run grpo-42)."
                : "No run matches the filter."),
        ),
      );
    }
    note.textContent = truncated ? "Showing the newest runs only; older ones are not loaded." : "";
  }

  function row(r: RunSummary): HTMLElement {
    return h(
      "a.run-row",
      { href: runHref(r.run), "data-nav": true, role: "row", "data-run": r.run },
      h(
        "span.cell-run",
        { role: "cell" },
        h(
          `span.run-name${r.run === NO_RUN ? ".no-run" : ""}` as "span",
          { title: r.run === NO_RUN ? "episodes whose id has no ':'" : r.run },
          runLabel(r.run),
        ),
        h("span.run-created.muted", null, "started ", agoSpan(r.created, "age-inline")),
      ),
      COUNTED.map(([key, label]) =>
        h(
          `span.cell-count.num.c-${key}` as "span",
          { role: "cell", "data-count": key, "data-value": r[key], class: r[key] === 0 ? "zero" : null },
          h("span.count-v", null, r[key]),
          h("span.count-k", null, ` ${label}`),
        ),
      ),
      h(
        "span.cell-total.num",
        { role: "cell", "data-count": "episodes", "data-value": r.episodes },
        h("span.count-v", null, r.episodes),
        h("span.count-k", null, " in all"),
      ),
      meanReward(r),
      h("span.cell-age", { role: "cell" }, agoSpan(r.updated)),
    );
  }

  /** The run's mean reward on its primary key (– before a finished episode has one); every key's in the tooltip. */
  function meanReward(r: RunSummary): HTMLElement {
    const key = primaryRewardKey(r.mean_rewards);
    const v = key === null ? null : r.mean_rewards![key]!;
    const all = Object.entries(r.mean_rewards ?? {}).map(([k, m]) => `${k} ${fmtNumber(m)}`);
    return h(
      "span.cell-mean.num",
      {
        role: "cell",
        "data-key": key ?? "",
        "data-value": v ?? "",
        title: all.length
          ? `mean over the finished episodes: ${all.join(" · ")}`
          : "no finished episode with a reward yet",
      },
      h("span.count-v.toned", toneAttrs(v), v === null ? "–" : fmtNumber(v)),
      key !== null && key !== "reward" ? h("span.mean-k", null, ` ${key}`) : null,
      h("span.count-k", null, key === null ? " mean reward" : ` mean ${key}`),
    );
  }

  function onMessage(m: RunsMessage): void {
    if (m.type === "runs") {
      runs.clear();
      for (const r of m.runs) runs.set(r.run, r);
      truncated = m.truncated;
      loaded = true;
    } else {
      for (const r of m.upserts) runs.set(r.run, r);
      for (const run of m.deletes) runs.delete(run);
    }
    render();
  }

  function onRefused(p: AccessProblem): void {
    refused =
      p.status === 401
        ? "Sign in with a token (above) to see the runs."
        : `The relay refused to list runs: ${p.message}`;
    loaded = true;
    render();
  }

  const stopAges = tickAges(table);
  render();
  const close = runSocket({
    shell,
    probePath: "/v1/runs?limit=1",
    socketPath: "/v1/runs",
    parse: parseRunsMessage,
    onProbe: () => {
      refused = null;
      return true;
    },
    onMessage,
    onRefused,
  });
  return () => {
    close();
    stopAges();
  };
}

// One run, live from its socket (`GET /v1/runs/{run}` upgraded): the counters, a reward histogram
// per reward key (over the finished episodes, or every one with the toggle), the throughput
// chart and the reward over run time beside it (from the run's first rollout), all from the run's aggregates (redrawn with each
// coalesced change, at most a few times a second), the per training step charts above them
// (run-steps.ts), and under them the run's episodes. The run's alerts (run-alerts.ts) head the page.
// A token
// that does not cover the whole run gets no aggregates (null): then only its episodes are listed.
import { type AccessProblem, tokenEpisodes } from "./api.js";
import { agoSpan, clear, h, tickAges } from "./dom.js";
import { homeHref, runLabel } from "./links.js";
import { KeyTones, shownRewards } from "./reward-choice.js";
import { rewardHistogram } from "./reward-histogram.js";
import { rewardScope } from "./reward-scope.js";
import { runSocket } from "./run-socket.js";
import "./styles/rewards.css";
import { rewardTrendChart } from "./reward-trend-chart.js";
import { runAlerts } from "./run-alerts.js";
import { runEpisodes } from "./run-episodes.js";
import { runGroups, runTasks } from "./run-groups.js";
import { runSearch } from "./run-search.js";
import { runStats } from "./run-stats.js";
import { runSteps } from "./run-steps.js";
import { shareLink } from "./share-link.js";
import "./styles/training.css";
import type { RunAggregates } from "../../src/protocol/index.js";
import { mayHold, parseRunMessage, type RunMessage } from "../../src/protocol/index.js";
import type { Shell } from "./shell.js";
import { throughputChart } from "./throughput-chart.js";

/**
 * Episodes in the socket's snapshot (the relay's most): most runs then fit whole. `?limit=` in the page URL asks for
 * fewer.
 */
const SNAPSHOT_LIMIT = 500;

function snapshotLimit(): number {
  const asked = Number(new URLSearchParams(location.search).get("limit"));
  return Number.isInteger(asked) && asked >= 1 && asked <= SNAPSHOT_LIMIT ? asked : SNAPSHOT_LIMIT;
}

export function mountRun(shell: Shell, run: string): () => void {
  shell.setTitle([
    h("a", { href: homeHref(), "data-nav": true }, "Runs"),
    h("span.crumb.crumb-id", { title: run }, runLabel(run)),
  ]);
  const path = `/v1/runs/${encodeURIComponent(run)}`;
  let lastUpdate: string | null = null;

  const summary = h("span.counts", { id: "run-summary" });
  const partial = h(
    "p.notice",
    { id: "run-partial", hidden: true },
    "This token does not cover the whole run, so the run's counts, rewards and throughput are not shown: the list holds the episodes it covers.",
  );
  const stats = runStats();
  const charts = h("section.charts", { id: "run-charts", "aria-label": "rewards and throughput" });
  // kept across redraws (each draws its plot again only when its numbers moved)
  const throughput = throughputChart();
  // one colour per reward key in every chart of the page
  const tones = new KeyTones();
  const rewardTrend = rewardTrendChart(tones);
  let shown: RunAggregates | null = null;
  const scope = rewardScope(() => drawAggregates(shown));
  const overview = h("div.run-overview", { hidden: true }, stats.el, h("div.charts-bar", null, scope.el), charts);
  // a run whose rows carry no trainer identity shows no step and kind columns
  const episodes = runEpisodes(run, (has) => {
    page.dataset.identity = has ? "yes" : "none";
  });
  const search = runSearch(run);
  const alerts = runAlerts(run);
  const steps = runSteps(run, tones);
  const groups = runGroups(run);
  const tasks = runTasks(run);
  // the run's display name: the reply heads' `run.name` (rows carry it as `run_name` once finished)
  let displayName: string | null = null;
  const title = h("h1.run-title", { id: "run-title", title: run }, runLabel(run));
  const runId = h("span.run-id.muted", { id: "run-id", hidden: true }, run);
  const page = h(
    "section.run-page",
    { "data-run": run },
    h("div.page-head", null, h("div.run-names", null, title, runId), summary, shareLink(run)),
    partial,
    alerts.el,
    search.el,
    overview,
    episodes.liveEl,
    groups.el,
    tasks.el,
    episodes.el,
  );
  shell.main.append(page);
  const stopAges = tickAges(summary);

  function drawAggregates(a: RunAggregates | null): void {
    shown = a;
    overview.hidden = a === null;
    groups.update(a);
    tasks.update(a);
    episodes.totals(a ? { ...a.counts, episodes: a.episodes } : null);
    if (a) episodes.rewardKeys(Object.keys(a.rewards));
    if (!a) return;
    stats.update(a);
    tones.meet(Object.keys(a.rewards));
    clear(charts);
    const all = scope.includeAll();
    const keys = Object.entries(shownRewards(a, all));
    charts.dataset.rewards = all ? "all" : "finished";
    const none = all ? "No episode has a reward yet." : "No finished episode has a reward yet.";
    throughput.update(a.timeline);
    rewardTrend.update(a.timeline);
    charts.append(
      steps.el,
      throughput.el,
      rewardTrend.el,
      ...(keys.length
        ? keys.map(([key, r]) => rewardHistogram(key, r))
        : [h("div.card.hist.hist-none", null, h("div.card-title", null, "Rewards"), h("p.muted", null, none))]),
    );
    page.dataset.episodes = String(a.episodes);
  }

  function drawSummary(): void {
    clear(summary);
    if (lastUpdate) summary.append("updated ", agoSpan(lastUpdate, "age-inline"));
  }

  function noteUpdates(list: Array<{ updated: string; run_name?: string | null }>): void {
    for (const e of list) if (lastUpdate === null || e.updated > lastUpdate) lastUpdate = e.updated;
    drawSummary();
    const named = list.find((e) => typeof e.run_name === "string" && e.run_name !== "")?.run_name;
    if (named && named !== displayName) {
      displayName = named;
      title.textContent = named;
      page.dataset.runName = named;
      runId.hidden = named === run;
      document.title = `${named} · Episode Relay`;
    }
  }

  function onMessage(m: RunMessage): void {
    // an alert fires as a rollout's row lands: its changes come on this socket
    if (m.type === "changes" && m.upserts.length > 0) alerts.poke();
    if (m.type === "snapshot") {
      lastUpdate = null;
      episodes.snapshot(m.episodes, m.truncated);
      noteUpdates(m.episodes);
      // steps come with the aggregates (a token covering the whole run); a reconnect reads them again
      if (m.aggregates !== null) steps.reload();
      else steps.hide();
    } else {
      episodes.changes(m.upserts, m.deletes);
      steps.changes(m.steps, m.steps_gone);
      noteUpdates(m.upserts);
    }
    partial.hidden = m.aggregates !== null;
    drawAggregates(m.aggregates);
  }

  function onRefused(p: AccessProblem): void {
    episodes.refuse(
      p.status === 401
        ? "Sign in with a token (above) to see this run."
        : `The relay refused to show this run: ${p.message}`,
    );
    overview.hidden = true;
    groups.update(null);
    tasks.update(null);
  }

  const close = runSocket({
    shell,
    probePath: path,
    socketPath: `${path}?limit=${snapshotLimit()}`,
    parse: parseRunMessage,
    onProbe: (status, body) => {
      const b = body as { covered?: boolean; aggregates?: RunAggregates | null; message?: string } | null;
      if (status === 404) {
        // the relay answers a run nobody wrote and a run this token covers nothing of alike; the token's own scope tells
        // them apart (a definite refusal ends the watch: no run it names can ever be shown to it)
        const scope = tokenEpisodes();
        if (scope !== null && !mayHold(scope, run)) {
          episodes.refuse(
            `This token covers no episode of run ${runLabel(run)}: it covers ${scope.join(", ") || "nothing"}. Paste a token for this run, or ask its admin for a share link.`,
          );
          overview.hidden = true;
          partial.hidden = true;
          return "refused";
        }
        episodes.refuse(
          `No run ${runLabel(run)} to show: no episode of it has reached the relay, or this token covers none of them. The page looks again now and then.`,
        );
        overview.hidden = true;
        partial.hidden = true;
        return "later";
      }
      if (status !== 200) {
        episodes.refuse(`The relay cannot show this run: ${b?.message ?? status}`);
        return false;
      }
      if (typeof b?.covered === "boolean") partial.hidden = b.covered;
      alerts.poke(); // the run is there: its alerts (a first read, or a late one once the run came)
      // the counters show before the socket's snapshot arrives
      if (b?.aggregates) drawAggregates(b.aggregates);
      return true;
    },
    onMessage,
    onRefused,
  });
  return () => {
    close();
    stopAges();
    search.stop();
    alerts.stop();
    episodes.destroy();
    steps.destroy();
    throughput.destroy();
    rewardTrend.destroy();
    groups.destroy();
    tasks.destroy();
  };
}

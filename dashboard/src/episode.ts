// One episode, live: the TypeScript watcher client (clients/typescript/watch.ts) keeps the
// assembly; this page draws it. Traces side by side (orchestrator first, sub-agents after, with
// their semantic links), each turn's message and tool calls, the pending preview as it streams,
// rewards, metrics, timing, errors, and the connection state; the task it was about and its place
// in the training (the trainer's identity, links to its group and step); on demand, each node's
// routing heatmap with its colour key and per-layer expert load, and the trainer's per-token
// signals along the sampled tokens. The parts live in ./episode/: the feed (the watches), the page
// head, the context and summary cards, the downloads, the routing controls, the token overlays
// and the trace columns. This file puts them on the page and draws them once per animation frame.
import { flagChips } from "./episode/flag-chips.js";
import "./styles/overlays.css";
import { identityOf } from "../../src/protocol/index.js";
import { clear, h } from "./dom.js";
import { groupOf, identityCard, taskCard } from "./episode/context-cards.js";
import { downloadButtons } from "./episode/downloads.js";
import { EpisodeFeed } from "./episode/feed.js";
import { overlays } from "./episode/overlays.js";
import { episodeHead } from "./episode/page-head.js";
import { routingPanel } from "./episode/routing-panel.js";
import { summaryCards } from "./episode/summary-cards.js";
import { traceList } from "./episode/trace-list.js";
import { homeHref, idInRun, runHref, runLabel, runOf } from "./links.js";
import { field, isObject } from "./model.js";
import type { Shell } from "./shell.js";

// the compare page shows messages as this page does
export { messageBody } from "./episode/message.js";

export function mountEpisode(shell: Shell, id: string): () => void {
  shell.setTitle(crumbs(id));
  let stopped = false;
  let frame = 0;
  const scheduleRender = (): void => {
    if (frame || stopped) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  };
  const feed = new EpisodeFeed(shell, id, {
    changed: scheduleRender,
    refused(message) {
      head.refused(message);
      head.drawStatus(feed.status);
    },
    replaced() {
      routing.loaded();
      traces.reset(); // every trace is redrawn from the new assembly
      scheduleRender();
    },
    annotations: (a) => signals.offer(a),
  });
  const ended = () => feed.status === "finished" || feed.status === "failed";
  const signals = overlays(id, runOf(id), ended, scheduleRender);
  const routing = routingPanel(feed, scheduleRender);
  const head = episodeHead(id, [downloadButtons(id), routing.button]);
  const summary = h("div.summary", { id: "summary" });
  const context = h("div.context", { id: "context" });
  const traces = traceList();
  const flags = flagChips(id);
  shell.main.append(
    h(
      "section.episode-page",
      null,
      head.row,
      head.banner,
      head.unknown,
      flags.el,
      context,
      summary,
      routing.note,
      signals.bar,
      head.waiting,
      traces.el,
    ),
  );
  let wasEnded = false;
  let seenSeq = -1;
  // opened at a turn (`?trace=…&node=…`, a search result's link): scroll there once it is drawn
  const at = new URLSearchParams(location.search);
  let jumpTo: { trace: string | null; node: string } | null = at.has("node")
    ? { trace: at.get("trace"), node: at.get("node")! }
    : null;

  function render(): void {
    const w = feed.watch;
    if (!w) return;
    const all = [...w.assembly.traces.values()];
    if (feed.status === "missing" && (w.seq > 0 || all.length > 0)) feed.status = "live";
    head.update(w, all, feed.status, feed.error, feed.unknown);
    drawContext(w.episode, all);
    clear(summary);
    summary.append(...summaryCards(all, feed.status));
    routing.update(all);
    if (ended() && !wasEnded) {
      signals.ended(); // trainers annotate after the rollout ends
      flags.refresh(); // and the run's index has the whole rollout's flags
    } else if (!ended() && w.seq !== seenSeq) flags.activity(); // new turns: their flags soon
    seenSeq = w.seq;
    wasEnded = ended();
    const kind = identityOf({ dispatch: feed.dispatch }).kind;
    traces.update(all, {
      asm: w.assembly,
      ended: ended(),
      routing: routing.on,
      repairedRows: (trace, node) => feed.repairedRows(trace, node),
      overlay: signals.update(w.assembly, all, kind, ended()),
    });
    if (jumpTo) {
      const inTrace =
        jumpTo.trace === null ? "section.trace" : `section.trace[data-trace="${CSS.escape(jumpTo.trace)}"]`;
      const target = document.querySelector(`${inTrace} li.turn[data-node="${CSS.escape(jumpTo.node)}"]`);
      if (target) {
        jumpTo = null;
        target.classList.add("jump-target");
        target.scrollIntoView({ block: "center" });
      }
    }
  }

  /** The task (the first trace's `open.task`) and the training identity, with links to the group and the step. */
  function drawContext(finished: Uint8Array | null, all: Parameters<typeof summaryCards>[0]): void {
    const task = all[0] ? field(all[0], "task") : undefined;
    const key = isObject(task) && typeof task.key === "string" ? task.key : null;
    const card = taskCard(task);
    context.replaceChildren(
      ...(card ? [card] : []),
      identityCard(feed.dispatch, runOf(id), groupOf(feed.dispatch, finished, key)),
    );
    context.hidden = all.length === 0 && feed.dispatch === null;
  }

  // heatmaps are drawn to fit their column: redraw them when the width changes
  const onResize = () => {
    if (routing.on) scheduleRender();
  };
  window.addEventListener("resize", onResize);

  void feed.begin();
  flags.refresh();
  return () => {
    stopped = true;
    flags.stop();
    window.removeEventListener("resize", onResize);
    if (frame) cancelAnimationFrame(frame);
    feed.close();
    routing.close();
    signals.close();
  };
}

/** Runs › the run that counts this episode (its id up to the last ':') › the episode. */
function crumbs(id: string): HTMLElement[] {
  const run = runOf(id);
  return [
    h("a", { href: homeHref(), "data-nav": true }, "Runs"),
    h("a.crumb-run", { href: runHref(run), "data-nav": true, id: "crumb-run", title: run }, runLabel(run)),
    h("span.crumb.crumb-id", { title: id }, idInRun(id, run)),
  ];
}

// One episode, live: the TypeScript watcher client (clients/typescript/watch.ts) keeps the
// assembly; this page draws it. Traces side by side (orchestrator first, sub-agents after, with
// their semantic links), each turn's message and tool calls, the pending preview as it streams,
// rewards, metrics, timing, errors, and the connection state; on demand, each node's routing
// heatmap with its colour key and per-layer expert load. The parts live in ./episode/: the feed
// (the watches), the page head, the summary cards, the downloads, the routing controls and the
// trace columns. This file puts them on the page and draws them once per animation frame.
import { clear, h } from "./dom.js";
import { EpisodeFeed } from "./episode/feed.js";
import { downloadButtons } from "./episode/downloads.js";
import { episodeHead } from "./episode/page-head.js";
import { routingPanel } from "./episode/routing-panel.js";
import { summaryCards } from "./episode/summary-cards.js";
import { traceList } from "./episode/trace-list.js";
import { idInRun, runHref, runLabel, runOf, homeHref } from "./links.js";
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
  });
  const routing = routingPanel(feed, scheduleRender);
  const head = episodeHead(id, [downloadButtons(id), routing.button]);
  const summary = h("div.summary", { id: "summary" });
  const traces = traceList();
  shell.main.append(h("section.episode-page", null, head.row, head.banner, summary, routing.note, head.waiting, traces.el));

  function render(): void {
    const w = feed.watch;
    if (!w) return;
    const all = [...w.assembly.traces.values()];
    if (feed.status === "missing" && (w.seq > 0 || all.length > 0)) feed.status = "live";
    head.update(w, all, feed.status, feed.error);
    clear(summary);
    summary.append(...summaryCards(all, feed.status));
    routing.update(all);
    traces.update(all, {
      asm: w.assembly,
      ended: feed.status === "finished" || feed.status === "failed",
      routing: routing.on,
      repairedRows: (trace, node) => feed.repaired.get(`${trace}\n${node}`) ?? [],
    });
  }

  // heatmaps are drawn to fit their column: redraw them when the width changes
  const onResize = () => {
    if (routing.on) scheduleRender();
  };
  window.addEventListener("resize", onResize);

  void feed.begin();
  return () => {
    stopped = true;
    window.removeEventListener("resize", onResize);
    if (frame) cancelAnimationFrame(frame);
    feed.close();
    routing.close();
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

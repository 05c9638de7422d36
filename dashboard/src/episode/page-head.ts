// The episode page's head: its id, the status badge, the counts line and the page's tools
// (downloads, the routing toggle); below it, the failure banner and the line that stands in for
// the traces while there are none (connecting, not on the relay yet, refused).
import type { EpisodeWatch } from "../../../clients/typescript/watch.js";
import type { TraceState } from "../../../src/protocol/index.js";
import { h, plural } from "../dom.js";

/** Badge words for the states that are not a run status. */
const STATUS_LABELS: Record<string, string> = {
  missing: "not found",
  denied: "not allowed",
  finish_refused: "finish refused",
};

export interface EpisodeHead {
  row: HTMLElement;
  banner: HTMLElement;
  /** Stands in for the traces while there are none. */
  waiting: HTMLElement;
  drawStatus(status: string): void;
  /** Say why nothing is shown (a refusal); kept until the page has traces. */
  refused(message: string): void;
  update(w: EpisodeWatch, traces: TraceState[], status: string, error: string | null): void;
}

export function episodeHead(id: string, tools: HTMLElement[]): EpisodeHead {
  const statusPill = h("span.pill.s-missing", { id: "ep-status", "data-status": "missing" }, STATUS_LABELS.missing);
  const stats = h("span.ep-stats.muted");
  const banner = h("div.banner", { hidden: true, id: "ep-banner", role: "alert" });
  const waiting = h("p.empty", { id: "waiting" }, "Connecting…");
  const row = h("div.page-head", null, h("h1.ep-title", { title: id }, id), statusPill, stats, h("div.spacer"), tools);
  const drawStatus = (status: string) => {
    statusPill.className = `pill s-${status}`;
    statusPill.dataset.status = status;
    statusPill.textContent = STATUS_LABELS[status] ?? status;
  };
  return {
    row,
    banner,
    waiting,
    drawStatus,
    refused(message) {
      waiting.textContent = message;
    },
    update(w, traces, status, error) {
      drawStatus(status);
      let nodes = 0;
      let calls = 0;
      for (const t of traces) {
        nodes += t.nodes.length;
        calls += t.items.calls.count;
      }
      stats.textContent = `seq ${w.seq} · ${plural(traces.length, "trace")} · ${plural(nodes, "node")} · ${plural(calls, "call")}`;
      banner.hidden = !(status === "failed" || status === "finish_refused" || error);
      banner.textContent = bannerText(status, error);
      waiting.hidden = traces.length > 0;
      // a refusal's message stays; otherwise say what is awaited
      if (status !== "denied") waiting.textContent = waitingText(w, status);
    },
  };
}

function bannerText(status: string, error: string | null): string {
  if (status === "failed") return `The run failed${error ? `: ${error}` : ""}`;
  if (status === "finish_refused") {
    return `Finish refused: the reply's counts disagree with the assembled episode (${error ?? ""}). The run stays open for a corrected reply.`;
  }
  return error ? `Finish error: ${error}` : "";
}

function waitingText(w: EpisodeWatch, status: string): string {
  if (w.state === "connecting") return "Connecting…";
  if (status === "missing")
    return "No episode with this id on the relay yet: it shows here as soon as a producer writes it.";
  return "No traces.";
}

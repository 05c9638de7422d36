// The episode page's head: its id, the status badge, the counts line and the page's tools
// (downloads, the routing toggle; neither while the episode is not found or not allowed); below it, the failure banner and the line that stands in for
// the traces while there are none (connecting, not on the relay yet, refused), and the note that
// names the delta keys this relay does not know (a newer verifiers' fields: kept, but worth knowing).
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
  /** Names the delta keys the relay does not know (hidden when there are none). */
  unknown: HTMLElement;
  /** Stands in for the traces while there are none. */
  waiting: HTMLElement;
  drawStatus(status: string): void;
  /** Say why nothing is shown (a refusal); kept until the page has traces. */
  refused(message: string): void;
  update(w: EpisodeWatch, traces: TraceState[], status: string, error: string | null, unknown: readonly string[]): void;
}

export function episodeHead(id: string, tools: HTMLElement[]): EpisodeHead {
  const statusPill = h("span.pill.s-missing", { id: "ep-status", "data-status": "missing" }, STATUS_LABELS.missing);
  const stats = h("span.ep-stats.muted");
  const banner = h("div.banner", { hidden: true, id: "ep-banner", role: "alert" });
  const waiting = h("p.empty", { id: "waiting" }, "Connecting…");
  const unknownNote = h("p.note", { id: "ep-unknown", hidden: true });
  const row = h("div.page-head", null, h("h1.ep-title", { title: id }, id), statusPill, stats, h("div.spacer"), tools);
  const drawStatus = (status: string) => {
    // an episode not on the relay (or not this token's) has nothing to download or route: no tools, no counts
    const nothing = status === "missing" || status === "denied";
    for (const t of tools) t.hidden = nothing;
    stats.hidden = nothing;
    statusPill.className = `pill s-${status}`;
    statusPill.dataset.status = status;
    statusPill.textContent = STATUS_LABELS[status] ?? status;
  };
  return {
    row,
    banner,
    unknown: unknownNote,
    waiting,
    drawStatus,
    refused(message) {
      waiting.textContent = message;
    },
    update(w, traces, status, error, unknown) {
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
      unknownNote.hidden = unknown.length === 0;
      unknownNote.textContent = unknownText(unknown);
      waiting.hidden = traces.length > 0;
      // a refusal's message stays; otherwise say what is awaited
      if (status !== "denied") waiting.textContent = waitingText(w, status);
    },
  };
}

/** What the note says of the keys the relay does not know (ack and status name them so: `foo`, `set.foo`, `open.foo`). */
export function unknownText(unknown: readonly string[]): string {
  if (unknown.length === 0) return "";
  const keys = unknown.join(", ");
  return `The producer sent ${plural(unknown.length, "delta key")} this relay does not know: ${keys}. Kept as sent (lists appended after the known ones, scalars set); this page does not draw them.`;
}

function bannerText(status: string, error: string | null): string {
  // "run" is the training run everywhere else on the dashboard
  if (status === "failed") return `The rollout failed${error ? `: ${error}` : ""}`;
  if (status === "finish_refused") {
    return `Finish refused: the reply's counts disagree with the assembled episode (${error ?? ""}). The rollout stays open for a corrected reply.`;
  }
  return error ? `Finish error: ${error}` : "";
}

function waitingText(w: EpisodeWatch, status: string): string {
  if (w.state === "connecting") return "Connecting…";
  if (status === "missing")
    return "No episode with this id on the relay yet: it shows here as soon as a producer writes it.";
  return "No traces.";
}

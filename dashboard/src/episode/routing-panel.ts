// The routing section's controls: the toggle that opens every node's heatmap (the first time, it
// has the feed load routing data, which the page otherwise does not fetch) and the note that says
// the data is loading, or that the episode has no MoE routing at all.
import type { TraceState } from "../../../src/protocol/index.js";
import { h } from "../dom.js";
import type { EpisodeFeed } from "./feed.js";

export interface RoutingPanel {
  button: HTMLElement;
  note: HTMLElement;
  /** Heatmaps are open. */
  readonly on: boolean;
  /** The routing watch took over: the loading note goes. */
  loaded(): void;
  /** After each draw: say so when no node has routing. */
  update(traces: TraceState[]): void;
  close(): void;
}

export function routingPanel(feed: EpisodeFeed, changed: () => void): RoutingPanel {
  let on = false;
  const button = h(
    "button.btn",
    {
      type: "button",
      id: "routing-toggle",
      "aria-pressed": "false",
      title: "show the MoE routing of each node (loads routing data)",
    },
    "Routing heatmap",
  );
  const note = h("p.note", { id: "routing-note", hidden: true });
  button.addEventListener("click", () => {
    on = !on;
    button.setAttribute("aria-pressed", String(on));
    document.body.classList.toggle("show-routing", on);
    if (on && feed.loadRouting()) {
      note.hidden = false;
      note.textContent = "Loading routing data…";
    }
    changed();
  });
  return {
    button,
    note,
    get on() {
      return on;
    },
    loaded() {
      note.hidden = true;
    },
    update(traces) {
      if (!on || !feed.hasRouting) return;
      const any = traces.some((t) => t.nodes.some((n) => n.routed));
      note.hidden = any;
      note.textContent = any ? "" : "No MoE routing in this episode.";
    },
    close() {
      document.body.classList.remove("show-routing");
    },
  };
}

// One episode in a run's list: status, id (and error), reward, the reward scores, size, ages.
import { agoSpan, fmtNumber, h, plural } from "./dom.js";
import { episodeHref, idInRun } from "./links.js";
import { rewardChips, rewardNumber } from "./reward-chip.js";
import type { IndexEntry } from "../../src/registry/entry.js";

export function episodeListHead(): HTMLElement {
  return h(
    "div.ep-row.ep-head",
    { role: "row" },
    h("span", { role: "columnheader" }, "Status"),
    h("span", { role: "columnheader" }, "Episode"),
    h("span.num", { role: "columnheader", title: "weighted mean of the reward scores" }, "Reward"),
    h("span", { role: "columnheader" }, "Rewards"),
    h("span", { role: "columnheader" }, "Size"),
    h("span", { role: "columnheader" }, "Updated"),
  );
}

export function episodeRow(e: IndexEntry, run: string): HTMLElement {
  const rewards = rewardChips(e.rewards);
  return h(
    "a.ep-row",
    { href: episodeHref(e.id), "data-nav": true, role: "row", "data-id": e.id, "data-status": e.status, "data-reward": e.reward === null ? "" : e.reward },
    h("span.cell-status", { role: "cell" }, h(`span.pill.s-${e.status}` as "span", null, e.status.replace("_", " "))),
    h("span.cell-id", { role: "cell" }, h("span.ep-id", { title: e.id }, idInRun(e.id, run)), e.error ? h("span.ep-error", { title: e.error }, e.error) : null),
    h("span.cell-reward.num", { role: "cell" }, rewardNumber(e.reward, fmtNumber(e.reward))),
    h("span.cell-rewards", { role: "cell" }, rewards.length ? rewards : null),
    h(
      "span.cell-size.muted",
      { role: "cell" },
      `${plural(e.traces, "trace")} · ${plural(e.nodes, "node")} · ${plural(e.calls, "call")}${e.tokens ? ` · ${e.tokens.toLocaleString("en-US")} tok` : ""}`,
    ),
    h("span.cell-age", { role: "cell" }, agoSpan(e.updated), h("span.age-sub.muted", null, "started ", agoSpan(e.created, "age-inline"))),
  );
}

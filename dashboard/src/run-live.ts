// The run's live rollouts as prime-rl's live table shows them (monitors/file/traces/live.py
// `live_rows`): every live row, oldest start first, with its stage, identity (step, kind, env),
// turns (model calls), branches, input and output tokens, cost, the time since it started
// (ticking) and its latest assistant words; a rollout the trainer announced before its first trace
// is a pending placeholder, drawn apart (hatched, "no trace yet"). The rows are the run list's
// (episode-views.ts: the socket's, and the relay's `status=live` pages when the snapshot was cut
// short); this only draws them.

import type { IndexEntry } from "../../src/protocol/index.js";
import { h } from "./dom.js";
import { episodeHref, idInRun } from "./links.js";
import { isPlaceholder, kindChip, stageChip } from "./stage-chip.js";
import { TURNS_HINT, turnsText } from "./turns.js";

/** Rows drawn at most (the rest are counted). */
const MAX_ROWS = 100;

export interface RunLive {
  el: HTMLElement;
  /** The live rows known now (any order), and whether the list of them is complete. */
  draw(rows: IndexEntry[], complete: boolean): void;
  destroy(): void;
}

const started = (e: IndexEntry) => e.live?.started ?? 0;

export function runLive(run: string): RunLive {
  const body = h("div.lr-body", { role: "rowgroup" });
  const note = h("span.muted.small", { id: "live-shown", "aria-live": "polite" });
  const more = h("p.muted.small.lr-more", { id: "live-more", hidden: true });
  const el = h(
    "section.run-live",
    { id: "run-live", "aria-label": "live rollouts", hidden: true },
    h("div.section-head", null, h("h2", null, "Live rollouts"), note),
    h("div.lr-list", { id: "live-table", role: "table", "aria-label": "the run's live rollouts" }, head(), body),
    more,
  );
  // the elapsed time ticks from each row's start
  const ticker = setInterval(() => tick(body), 1000);

  return {
    el,
    draw(rows, complete) {
      const sorted = [...rows].sort((a, b) => started(a) - started(b) || (a.id < b.id ? -1 : 1));
      el.hidden = sorted.length === 0;
      const pending = sorted.filter(isPlaceholder).length;
      note.textContent = `${sorted.length - pending} streaming${pending ? ` · ${pending} pending` : ""}${complete ? "" : " · of those loaded"}`;
      body.replaceChildren(...sorted.slice(0, MAX_ROWS).map((e) => liveRow(e, run)));
      more.hidden = sorted.length <= MAX_ROWS;
      more.textContent = `${sorted.length - MAX_ROWS} more live rollouts: the list below (status live) shows them all.`;
      tick(body);
    },
    destroy() {
      clearInterval(ticker);
    },
  };
}

function head(): HTMLElement {
  const col = (text: string, title?: string, cls = "span") => h(cls as "span", { role: "columnheader", title }, text);
  return h(
    "div.lr-row.lr-head",
    { role: "row" },
    col("Stage"),
    col("Rollout"),
    col("Step", undefined, "span.num.h-identity"),
    col("Kind", undefined, "span.h-identity"),
    col("Env", undefined, "span.h-identity"),
    col("Turns", TURNS_HINT, "span.num"),
    col("Branches", "sampled paths from the root to a leaf", "span.num"),
    col("Tokens in / out", "input and output tokens, all traces", "span.num"),
    col("Cost", "the calls' usage cost", "span.num"),
    col("Elapsed", "since the rollout started", "span.num"),
    col("Latest words", "the latest assistant text"),
  );
}

function liveRow(e: IndexEntry, run: string): HTMLElement {
  const live = e.live;
  const pending = isPlaceholder(e);
  const stage = live?.stage ?? "pending";
  const num = (k: string, label: string, v: string, cls = "") =>
    h(`span.lr-n.num${cls}` as "span", { role: "cell", "data-k": k }, h("span.n-k", null, `${label} `), v);
  return h(
    `a.lr-row${pending ? ".placeholder" : ""}` as "a",
    {
      href: episodeHref(e.id),
      "data-nav": true,
      role: "row",
      "data-id": e.id,
      "data-stage": stage,
      "data-pending": pending ? "" : undefined,
    },
    h("span.lr-stage", { role: "cell" }, stageChip(stage)),
    h(
      "span.lr-id-cell",
      { role: "cell" },
      h("span.lr-id", { title: e.id }, idInRun(e.id, run)),
      pending
        ? h("span.lr-sub.muted", null, "pending · no trace yet")
        : e.task
          ? h("span.lr-sub.muted", { title: `task ${e.task}` }, e.task)
          : null,
    ),
    num("step", "step", e.step === null ? "–" : String(e.step), ".c-identity"),
    h("span.lr-kind.c-identity", { role: "cell" }, kindChip(e.kind)),
    h("span.lr-env.c-identity", { role: "cell", title: e.env ?? undefined }, e.env ?? h("span.muted", null, "–")),
    num("turns", "turns", turnsText(e.turns)),
    num("branches", "branches", String(live?.branches ?? 0)),
    num(
      "tokens",
      "tokens",
      `${(live?.input_tokens ?? 0).toLocaleString("en-US")} / ${(live?.output_tokens ?? 0).toLocaleString("en-US")}`,
    ),
    num("cost", "cost", live?.cost === null || live?.cost === undefined ? "–" : `$${live.cost.toFixed(4)}`),
    h(
      "span.lr-n.num.lr-elapsed",
      {
        role: "cell",
        "data-k": "elapsed",
        "data-started": live?.started ?? "",
        title: live?.started ? `started ${new Date(live.started * 1000).toLocaleString()}` : "no start known",
      },
      h("span.n-k", null, "elapsed "),
      h("span.lr-elapsed-v", null, live?.started ? wholeSeconds(elapsedSince(live.started)) : "–"),
    ),
    h(
      "span.lr-last",
      { role: "cell", title: live?.last ?? undefined },
      live?.last ? h("span.lr-words", null, live.last) : h("span.muted", null, pending ? "" : "no words yet"),
    ),
  );
}

const elapsedSince = (startedSeconds: number) => Math.max(0, Date.now() / 1000 - startedSeconds);

/** Every row's elapsed time, from its start to now. */
function tick(root: HTMLElement): void {
  for (const cell of root.querySelectorAll<HTMLElement>(".lr-elapsed[data-started]")) {
    const s = Number(cell.dataset.started);
    if (!cell.dataset.started || !Number.isFinite(s)) continue;
    const v = cell.querySelector(".lr-elapsed-v");
    if (v) v.textContent = wholeSeconds(elapsedSince(s));
  }
}

/** "42 s", "3 min 5 s", "2 h 4 min": a running clock needs no milliseconds. */
function wholeSeconds(seconds: number): string {
  const t = Math.floor(seconds);
  if (t < 60) return `${t} s`;
  if (t < 3600) return `${Math.floor(t / 60)} min ${t % 60} s`;
  return `${Math.floor(t / 3600)} h ${Math.floor((t % 3600) / 60)} min`;
}

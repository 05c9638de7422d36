// The episode page's flags: the run's flag rules this rollout meets (docs/search.md "Flags"), each
// a chip with its evidence (the turn, which it scrolls to, and the excerpt). Flags live in the
// rollout's row of its run's index, so the row is read from the run's list (`?prefix=` the id,
// the exact id picked out) when the page opens, again after turns arrive while it streams (the
// row follows a turn within INDEX_FLUSH_MS: read once that has passed, at most every
// LIVE_REFRESH_MS, so a rollout that streams fast costs one request per few seconds and a quiet one
// none), and when the episode ends.

import type { Flag, IndexEntry } from "../../../src/protocol/index.js";
import { getJson } from "../api.js";
import { h } from "../dom.js";
import { runOf } from "../links.js";

/** What `?prefix=` accepts (src/protocol/registry/rows.ts): an id outside it has no row to read this way. */
const PREFIX = /^[A-Za-z0-9._:-]{1,128}$/;
/** After a turn arrives, how long until its row (and its flags) is read: past the index's default flush (2 s). */
const AFTER_TURN_MS = 2_500;
/** While the rollout streams, its row is read at most this often. */
const LIVE_REFRESH_MS = 3_000;

export function flagChips(id: string): {
  el: HTMLElement;
  refresh: () => void;
  /** Turns arrived (the rollout streams): its row is read again soon. */
  activity: () => void;
  stop: () => void;
} {
  const el = h("div.flag-bar", {
    id: "episode-flags",
    hidden: true,
    role: "region",
    "aria-label": "flags raised on this rollout",
  });
  const ctl = new AbortController();

  function jump(f: Flag): void {
    const inTrace = f.trace === null ? "section.trace" : `section.trace[data-trace="${CSS.escape(f.trace)}"]`;
    const target = document.querySelector(`${inTrace} li.turn[data-node="${f.node}"]`);
    for (const t of document.querySelectorAll("li.turn.jump-target")) t.classList.remove("jump-target");
    target?.classList.add("jump-target");
    target?.scrollIntoView({ block: "center" });
  }

  function draw(flags: Flag[]): void {
    el.hidden = flags.length === 0;
    el.replaceChildren(
      h("span.flag-title", null, flags.length === 1 ? "Flagged" : `Flagged ×${flags.length}`),
      ...flags.map((f) => {
        const where = f.node === null ? "reward" : f.node < 0 ? "task" : `node #${f.node}`;
        const at = h(
          "button.btn.flag-at",
          { type: "button", disabled: f.node === null || f.node < 0, title: "scroll to the node" },
          where,
        );
        at.addEventListener("click", () => jump(f));
        return h(
          "div.flag",
          { "data-rule": f.rule, "data-node": f.node ?? "" },
          h("span.chip.bad.flag-rule", null, f.rule),
          at,
          h("q.flag-excerpt", null, f.excerpt),
        );
      }),
    );
  }

  let lastRead = 0;
  let pending: ReturnType<typeof setTimeout> | null = null;

  function activity(): void {
    if (pending !== null || ctl.signal.aborted) return;
    const now = Date.now();
    const at = Math.max(now + AFTER_TURN_MS, lastRead + LIVE_REFRESH_MS);
    pending = setTimeout(() => {
      pending = null;
      void refresh();
    }, at - now);
  }

  async function refresh(): Promise<void> {
    if (!PREFIX.test(id)) return;
    lastRead = Date.now();
    try {
      const page = await getJson<{ episodes: IndexEntry[] }>(
        `/v1/runs/${encodeURIComponent(runOf(id))}/episodes?prefix=${encodeURIComponent(id)}&flagged=1&limit=50`,
        ctl.signal,
      );
      const row = page.episodes.find((e) => e.id === id);
      draw(row?.flags ?? []);
    } catch {
      // no run index to read (or no access to it): no flags shown
    }
  }

  return {
    el,
    refresh: () => void refresh(),
    activity,
    stop: () => {
      ctl.abort();
      if (pending !== null) clearTimeout(pending);
    },
  };
}

// One rollout group of a run (`GET /v1/runs/{run}/groups/{group}`): its numbers (rollouts by
// status, per reward key mean ± std, min, max, the spread) beside its rollouts, best or worst
// first: each one's status, reward, advantage per key (raw: reward − the group's mean; normalized:
// over the group's std), task, the trainer's step and kind, turns, tokens, the final answer, stop
// condition and whether it was truncated. While a rollout is live the page re-reads the group
// every REFRESH_MS.

import type { GroupDetailJson, RolloutJson } from "../../src/protocol/index.js";
import { bestAndWorst, rankRollouts, TIE_RULE } from "../../src/protocol/index.js";
import { getJson } from "./api.js";
import { clear, h } from "./dom.js";
import { groupNumbers } from "./group/group-numbers.js";
import { rolloutHead, rolloutRow } from "./group/rollout-row.js";
import { compareHref, homeHref, runHref, runLabel } from "./links.js";
import { pickTray } from "./pick-tray.js";
import { segmented } from "./segmented.js";
import { refusal, type Shell } from "./shell.js";

/** Re-read the group this often while any of its rollouts is live (or the last read failed). */
export const REFRESH_MS = 3000;

type Order = "best" | "worst";

/**
 * Best first by the tie rule (src/protocol/registry/ranking.ts: reward, then fewer tokens, then id; unscored last); worst first
 * reverses the scored ones.
 */
function ordered(rollouts: RolloutJson[], order: Order): RolloutJson[] {
  const ranked = rankRollouts(rollouts);
  if (order === "best") return ranked;
  const scored = ranked.filter((r) => r.reward !== null);
  return [...scored.reverse(), ...ranked.filter((r) => r.reward === null)];
}

export function mountGroup(shell: Shell, run: string, group: string): () => void {
  shell.setTitle([
    h("a", { href: homeHref(), "data-nav": true }, "Runs"),
    h("a.crumb-run", { href: runHref(run), "data-nav": true, id: "crumb-run", title: run }, runLabel(run)),
    h("span.crumb.crumb-id", { title: group }, group),
  ]);
  const path = `/v1/runs/${encodeURIComponent(run)}/groups/${encodeURIComponent(group)}`;
  let order: Order = "best";
  let detail: GroupDetailJson | null = null;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let readAt: Date | null = null;

  const status = h("span.counts", { id: "group-updated" });
  const compareLink = h(
    "a.btn",
    {
      id: "compare-best-worst",
      "data-nav": true,
      hidden: true,
      title: `the best and the worst rollout side by side (${TIE_RULE})`,
    },
    "compare best and worst",
  );
  const banner = h("div.banner", { id: "group-error", hidden: true });
  const numbers = h("section.card.group-numbers", { id: "group-numbers", "aria-label": "the group's numbers" });
  const orderSeg = segmented<Order>(
    "order",
    "order of the rollouts",
    [
      ["best", "best first"],
      ["worst", "worst first"],
    ],
    order,
    (v) => {
      order = v;
      draw();
    },
  );
  const tray = pickTray(run);
  const table = h("div.r-list", { id: "rollouts", role: "table", "aria-label": "the group's rollouts" });
  const rollouts = h(
    "section.group-rollouts",
    { "aria-label": "rollouts" },
    h("div.section-head.tight", null, h("h2", null, "Rollouts"), h("div.spacer"), orderSeg),
    h("p.muted.small.tie-rule", { id: "tie-rule" }, `Best and worst: ${TIE_RULE}.`),
    tray.el,
    table,
  );
  const page = h(
    "section.group-page",
    { "data-run": run, "data-group": group },
    h("div.page-head", null, h("h1.group-title", { title: group }, group), status, h("div.spacer"), compareLink),
    banner,
    h("div.group-layout", null, numbers, rollouts),
  );
  shell.main.append(page);

  function drawNumbers(g: GroupDetailJson): void {
    clear(numbers);
    numbers.append(...groupNumbers(g, run));
  }

  function drawRollouts(g: GroupDetailJson): void {
    const keys = Object.keys(g.rewards);
    const bw = bestAndWorst(g.rollouts);
    const best = bw?.best.id;
    const worst = bw?.worst.id;
    compareLink.hidden = !(best && worst);
    if (best && worst) compareLink.setAttribute("href", compareHref(best, worst));
    const rows = ordered(g.rollouts, order).map((r) =>
      rolloutRow(r, run, group, keys, r.id === best ? "best" : r.id === worst ? "worst" : null),
    );
    table.replaceChildren(rolloutHead(keys), ...rows);
    if (rows.length === 0) table.append(h("div.empty", null, "No rollouts."));
  }

  function draw(): void {
    if (!detail) return;
    drawNumbers(detail);
    drawRollouts(detail);
    page.dataset.live = String(detail.live);
    clear(status);
    status.append(
      detail.live > 0
        ? h("span.chip.running", null, `${detail.live} live · refreshing every ${REFRESH_MS / 1000} s`)
        : h("span.chip.done", null, "all ended"),
      readAt ? ` read ${readAt.toLocaleTimeString()}` : "",
    );
  }

  async function load(): Promise<void> {
    timer = null;
    let again = false;
    try {
      const g = await getJson<GroupDetailJson>(path);
      if (stopped) return;
      detail = g;
      readAt = new Date();
      banner.hidden = true;
      shell.setConnection(g.live > 0 ? "live" : "finished");
      draw();
      again = g.live > 0;
    } catch (e) {
      if (stopped) return;
      const message = e instanceof Error ? e.message : String(e);
      const code = (e as { status?: number }).status;
      banner.textContent = `Could not read the group: ${message}`;
      banner.hidden = false;
      shell.setConnection(refusal(code), message);
      if (code === 401 || code === 403) shell.askToken(code === 401 ? `This relay needs a token: ${message}` : message);
      // a refusal waits for a token (a re-route); anything else is tried again
      again = code !== 401 && code !== 403 && (detail === null || detail.live > 0);
    }
    if (again && !stopped) timer = setTimeout(() => void load(), REFRESH_MS);
  }

  shell.setConnection("connecting");
  void load();
  return () => {
    stopped = true;
    tray.stop();
    if (timer) clearTimeout(timer);
  };
}

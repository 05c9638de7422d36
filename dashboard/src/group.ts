// One rollout group of a run (`GET /v1/runs/{run}/groups/{group}`): its numbers (rollouts by
// status, per reward key mean ± std, min, max, the spread) beside its rollouts, best or worst
// first: each one's status, reward, advantage per key (raw: reward − the group's mean; normalized:
// over the group's std), turns, tokens, stop condition and whether it was truncated. While a
// rollout is live the page re-reads the group every REFRESH_MS.
import { getJson } from "./api.js";
import { clear, fmtNumber, h } from "./dom.js";
import { compareHref } from "./compare.js";
import { episodeHref, idInRun, runHref, runLabel } from "./links.js";
import { rewardPairs } from "./model.js";
import { refusal, type Shell } from "./shell.js";
import type { GroupDetail, GroupRollout } from "../../clients/typescript/groups.js";
import type { Json } from "../../src/wire/json-view.js";

/** Re-read the group this often while any of its rollouts is live (or the last read failed). */
export const REFRESH_MS = 3000;

type Order = "best" | "worst";

const num = (v: number | null | undefined, digits = 3) => (v === null || v === undefined ? "–" : fmtNumber(Math.round(v * 10 ** digits) / 10 ** digits));
const signed = (v: number | null | undefined, digits = 3) =>
  v === null || v === undefined ? "–" : `${v > 0 ? "+" : v < 0 ? "−" : "±"}${num(Math.abs(v), digits)}`;

/** Best first is the relay's order (reward descending, unscored last); worst first reverses the scored ones. */
function ordered(rollouts: GroupRollout[], order: Order): GroupRollout[] {
  if (order === "best") return rollouts;
  const scored = rollouts.filter((r) => r.reward !== null);
  return [...scored.reverse(), ...rollouts.filter((r) => r.reward === null)];
}

export function mountGroup(shell: Shell, run: string, group: string): () => void {
  shell.setTitle([
    h("a", { href: "/", "data-nav": true }, "Runs"),
    h("a.crumb-run", { href: runHref(run), "data-nav": true, id: "crumb-run", title: run }, runLabel(run)),
    h("span.crumb.crumb-id", { title: group }, group),
  ]);
  const path = `/v1/runs/${encodeURIComponent(run)}/groups/${encodeURIComponent(group)}`;
  let order: Order = "best";
  let detail: GroupDetail | null = null;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let readAt: Date | null = null;

  const status = h("span.counts", { id: "group-updated" });
  const compareLink = h(
    "a.btn",
    { id: "compare-best-worst", "data-nav": true, hidden: true, title: "the best and the worst rollout's conversations side by side" },
    "compare best and worst",
  );
  const banner = h("div.banner", { id: "group-error", hidden: true });
  const numbers = h("section.card.group-numbers", { id: "group-numbers", "aria-label": "the group's numbers" });
  const orderSeg = h("div.segmented", { role: "group", "aria-label": "order of the rollouts", "data-group": "order" });
  for (const [value, text] of [
    ["best", "best first"],
    ["worst", "worst first"],
  ] as Array<[Order, string]>) {
    const b = h("button", { type: "button", "data-order": value, "aria-pressed": value === order ? "true" : "false" }, text);
    b.addEventListener("click", () => {
      for (const x of orderSeg.querySelectorAll("button")) x.setAttribute("aria-pressed", x === b ? "true" : "false");
      order = value;
      draw();
    });
    orderSeg.append(b);
  }
  const table = h("div.r-list", { id: "rollouts", role: "table", "aria-label": "the group's rollouts" });
  const rollouts = h(
    "section.group-rollouts",
    { "aria-label": "rollouts" },
    h("div.section-head.tight", null, h("h2", null, "Rollouts"), h("div.spacer"), orderSeg),
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

  function drawNumbers(g: GroupDetail): void {
    clear(numbers);
    const zero = g.live === 0 && g.finished >= 2 && Object.keys(g.rewards).length > 0 && Object.values(g.rewards).every((r) => r.min === r.max);
    const kv = (k: string, v: string | Node, key = k) => [h("dt", null, k), h("dd", { "data-stat": key }, v)];
    numbers.append(
      h("div.card-title", null, "Group"),
      h(
        "dl.kv",
        null,
        kv("task", g.task ?? "–"),
        kv("rollouts", String(g.size), "size"),
        kv("finished", String(g.finished)),
        kv("failed", String(g.failed)),
        kv("live", String(g.live)),
        kv("spread", num(g.spread)),
      ),
      ...(zero ? [h("p.zero-note", { id: "group-zero" }, "Zero variance: every finished rollout got the same rewards, so every advantage is 0.")] : []),
      h("div.card-title.sub-title", null, "Rewards (finished rollouts)"),
      Object.keys(g.rewards).length
        ? h(
            "table.key-stats",
            null,
            h("thead", null, h("tr", null, h("th", null, "key"), h("th", null, "mean ± std"), h("th", null, "min"), h("th", null, "max"))),
            h(
              "tbody",
              null,
              Object.entries(g.rewards).map(([k, r]) =>
                h(
                  "tr",
                  { "data-key": k, "data-mean": r.mean, "data-std": r.std },
                  h("th", null, k),
                  h("td", null, `${num(r.mean)} ± ${num(r.std)}`),
                  h("td", null, num(r.min)),
                  h("td", null, num(r.max)),
                ),
              ),
            ),
          )
        : h("p.muted", null, "No finished rollout has a reward yet."),
    );
  }

  function drawRollouts(g: GroupDetail): void {
    const keys = Object.keys(g.rewards);
    // fixed widths: every row lines up (a row is as wide as the list, which scrolls sideways when there are many keys)
    const cols = `--cols: 130px 84px 56px ${keys.map(() => "160px").join(" ")} 44px 56px 110px 50px`;
    const head = h(
      "div.r-row.r-head",
      { role: "row", style: cols },
      h("span", { role: "columnheader" }, "Rollout"),
      h("span", { role: "columnheader" }, "Status"),
      h("span.num", { role: "columnheader", title: "weighted mean of the reward scores" }, "Reward"),
      keys.map((k) =>
        h("span.num", { role: "columnheader", title: `${k}: score, advantage (score − group mean) and normalized (÷ group std)` }, `${k} adv (norm)`),
      ),
      h("span.num", { role: "columnheader", title: "model calls" }, "Turns"),
      h("span.num", { role: "columnheader" }, "Tokens"),
      h("span", { role: "columnheader" }, "Stop"),
      h("span", { role: "columnheader", title: "truncated: the rollout hit its time limit (is_timeout)" }, "Trunc."),
    );
    const list = ordered(g.rollouts, order);
    const scored = g.rollouts.filter((r) => r.reward !== null);
    const best = scored[0]?.id;
    const worst = scored.length > 1 ? scored.at(-1)?.id : undefined;
    compareLink.hidden = !(best && worst);
    if (best && worst) compareLink.setAttribute("href", compareHref(best, worst));
    const rows = list.map((r) => {
      const scores = new Map(rewardPairs(r.rewards as Json));
      return h(
        "div.r-row",
        { role: "row", style: cols, "data-id": r.id, "data-status": r.status, "data-reward": r.reward === null ? "" : r.reward },
        h(
          "span.cell-id",
          { role: "cell" },
          h("a.ep-id", { href: episodeHref(r.id), "data-nav": true, title: r.id }, idInRun(r.id, run)),
          r.id === best ? h("span.chip.ok.rank", null, "best") : r.id === worst ? h("span.chip.bad.rank", null, "worst") : null,
          r.error ? h("span.ep-error", { title: r.error }, r.error) : null,
        ),
        h("span.cell-status", { role: "cell" }, h(`span.pill.s-${r.status}` as "span", null, r.status.replace("_", " "))),
        h("span.cell-reward.num", { role: "cell" }, h("span.n-k", null, "reward "), num(r.reward)),
        keys.map((k) => {
          const a = r.advantage[k];
          return h(
            "span.cell-adv.num",
            { role: "cell", "data-key": k, "data-raw": a ? a.raw : "", "data-normalized": a?.normalized ?? "" },
            h("span.n-k", null, `${k} `),
            h("span.adv-score", null, scores.get(k) ?? "–"),
            a
              ? h(
                  `span.adv${a.raw > 0 ? ".pos" : a.raw < 0 ? ".neg" : ""}` as "span",
                  null,
                  ` ${signed(a.raw)}`,
                  h("span.adv-norm", null, ` (${a.normalized === null ? "–" : signed(a.normalized, 2)})`),
                )
              : null,
          );
        }),
        h("span.cell-n.num", { role: "cell", "data-k": "calls" }, h("span.n-k", null, "turns "), String(r.calls)),
        h("span.cell-n.num", { role: "cell", "data-k": "tokens" }, h("span.n-k", null, "tokens "), r.tokens.toLocaleString("en-US")),
        h("span.cell-stop", { role: "cell" }, r.stop_condition ? h("code", null, r.stop_condition) : h("span.muted", null, "–")),
        h(
          "span.cell-trunc",
          { role: "cell", "data-truncated": String(r.truncated) },
          r.truncated ? h("span.chip.incomplete", null, "truncated") : h("span.muted", null, "no"),
        ),
      );
    });
    table.replaceChildren(head, ...rows);
    if (rows.length === 0) table.append(h("div.empty", null, "No rollouts."));
  }

  function draw(): void {
    if (!detail) return;
    drawNumbers(detail);
    drawRollouts(detail);
    page.dataset.live = String(detail.live);
    clear(status);
    status.append(
      detail.live > 0 ? h("span.chip.running", null, `${detail.live} live · refreshing every ${REFRESH_MS / 1000} s`) : h("span.chip.done", null, "all ended"),
      readAt ? ` read ${readAt.toLocaleTimeString()}` : "",
    );
  }

  async function load(): Promise<void> {
    timer = null;
    let again = false;
    try {
      const g = await getJson<GroupDetail>(path);
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
    if (timer) clearTimeout(timer);
  };
}

// One rollout of a group as a row: id (best / worst marked, its error), status (its stage while
// live), reward, the final answer (the latest assistant words: beside the reward, so a rollout
// rewarded for the wrong answer stands out), per reward key its score and advantage (raw, and
// normalized by the group's std), task, the trainer's step and kind, turns, tokens, stop
// condition, truncated. Every row has the same fixed columns (`rolloutColumns`), so they line up.

import type { RolloutJson } from "../../../src/protocol/index.js";
import { episodeReward, identityOf, REWARD_DEFINITION, traceRewardsOf } from "../../../src/protocol/index.js";
import { h } from "../dom.js";
import { episodeHref, idInRun } from "../links.js";
import { pickBox } from "../pick-tray.js";
import { type RewardScore, rewardNumber, toneAttrs } from "../reward-chip.js";
import { kindChip, stageChip, TRUNCATION_HEAD_TITLE, truncationCell } from "../stage-chip.js";
import { TURNS_HINT, turnsText, UNCOUNTED_HINT } from "../turns.js";
import { num, signed } from "./figures.js";

/**
 * The rows' grid: the numbers on one line, the final answer across the row under them (group.css), so two
 * reward keys fit 1400 px; with many keys the list scrolls sideways.
 */
export function rolloutColumns(keys: string[]): string {
  const perKey = keys.map(() => "minmax(104px, 156px)").join(" ");
  return `--cols: minmax(88px, 1.4fr) 84px 104px ${perKey} minmax(56px, 1fr) 36px 50px 44px 52px minmax(56px, 1fr) 52px`;
}

export function rolloutHead(keys: string[]): HTMLElement {
  return h(
    "div.r-row.r-head",
    { role: "row", style: rolloutColumns(keys) },
    h("span", { role: "columnheader" }, "Rollout"),
    h("span", { role: "columnheader" }, "Status"),
    h(
      "span.num",
      { role: "columnheader", title: `${REWARD_DEFINITION}; advantage: reward − group mean (÷ group std)` },
      "Reward adv",
    ),
    keys.map((k) =>
      h(
        "span.num",
        {
          role: "columnheader",
          title: `${k}: its mean over the traces, advantage (score − group mean) and normalized (÷ group std)`,
        },
        `${k} adv (norm)`,
      ),
    ),
    h("span", { role: "columnheader", title: "the first trace's task key" }, "Task"),
    h("span.num", { role: "columnheader", title: "the trainer's step (dispatch identity)" }, "Step"),
    h("span", { role: "columnheader" }, "Kind"),
    h("span.num", { role: "columnheader", title: TURNS_HINT }, "Turns"),
    h("span.num", { role: "columnheader" }, "Tokens"),
    h("span", { role: "columnheader" }, "Stop"),
    // the column is narrow here (52 px): the word shortened, the definition in its title
    h("span", { role: "columnheader", title: TRUNCATION_HEAD_TITLE }, "Trunc."),
  );
}

export function rolloutRow(
  r: RolloutJson,
  run: string,
  group: string,
  keys: string[],
  rank: "best" | "worst" | null,
): HTMLElement {
  const scores = new Map(
    episodeReward(traceRewardsOf(r)).scores.map(([key, score]): [string, RewardScore] => [
      key,
      { key, score, text: num(score) },
    ]),
  );
  const id = identityOf(r);
  const last = r.live?.last ?? null;
  return h(
    "div.r-row",
    {
      role: "row",
      style: rolloutColumns(keys),
      "data-id": r.id,
      "data-status": r.status,
      "data-reward": r.reward === null ? "" : r.reward,
    },
    h(
      "span.cell-id",
      { role: "cell" },
      pickBox(run, r.id, group),
      h("a.ep-id", { href: episodeHref(r.id), "data-nav": true, title: r.id }, idInRun(r.id, run)),
      rank === "best"
        ? h("span.chip.ok.rank", null, "best")
        : rank === "worst"
          ? h("span.chip.bad.rank", null, "worst")
          : null,
      r.error ? h("span.ep-error", { title: r.error }, r.error) : null,
    ),
    h(
      "span.cell-status",
      { role: "cell" },
      h(`span.pill.s-${r.status}` as "span", null, r.status.replace("_", " ")),
      r.status === "live" && r.live ? stageChip(r.live.stage) : null,
    ),
    h(
      "span.cell-reward.num",
      { role: "cell", "data-raw": r.advantage?.raw ?? "", "data-normalized": r.advantage?.normalized ?? "" },
      h("span.n-k", null, "reward "),
      rewardNumber(r.reward, num(r.reward)),
      advantageText(r.advantage),
    ),
    h(
      "span.cell-answer",
      { role: "cell", title: last ?? undefined, "data-empty": last === null ? "" : undefined },
      last === null ? h("span.muted", null, "–") : h("span.answer-text", null, last),
    ),
    keys.map((k) => advantageCell(r, k, scores.get(k))),
    h(
      "span.cell-task",
      { role: "cell", title: r.task ?? undefined },
      h("span.n-k", null, "task "),
      r.task ? h("code", null, r.task) : h("span.muted", null, "–"),
    ),
    h(
      "span.cell-step.num",
      { role: "cell", "data-k": "step" },
      h("span.n-k", null, "step "),
      id.step === null ? "–" : String(id.step),
    ),
    h("span.cell-kind", { role: "cell" }, kindChip(id.kind)),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "turns", title: r.turns === null ? UNCOUNTED_HINT : `${r.calls} model calls` },
      h("span.n-k", null, "turns "),
      turnsText(r.turns),
    ),
    h(
      "span.cell-n.num",
      { role: "cell", "data-k": "tokens" },
      h("span.n-k", null, "tokens "),
      r.tokens.toLocaleString("en-US"),
    ),
    h(
      "span.cell-stop",
      { role: "cell" },
      h("span.n-k", null, "stop "),
      r.stop_condition ? h("code", null, r.stop_condition) : h("span.muted", null, "–"),
    ),
    truncationCell("cell-trunc", r),
  );
}

function advantageCell(r: RolloutJson, k: string, score: RewardScore | undefined): HTMLElement {
  const a = r.key_advantages[k];
  return h(
    "span.cell-adv.num",
    { role: "cell", "data-key": k, "data-raw": a ? a.raw : "", "data-normalized": a?.normalized ?? "" },
    h("span.n-k", null, `${k} `),
    h("span.adv-score.toned", toneAttrs(score?.score ?? null), score?.text ?? "–"),
    advantageText(a ?? null),
  );
}

/** An advantage: raw, signed and toned, and normalised (none: nothing). */
function advantageText(a: RolloutJson["advantage"]): HTMLElement | null {
  return a
    ? h(
        `span.adv${a.raw > 0 ? ".pos" : a.raw < 0 ? ".neg" : ""}` as "span",
        null,
        ` ${signed(a.raw)}`,
        h("span.adv-norm", null, ` (${a.normalized === null ? "–" : signed(a.normalized, 2)})`),
      )
    : null;
}

// A group's numbers: its id, task, the trainer's step (a link to that step's episodes) and kind,
// rollouts by status, the reward's mean ± std and spread, whether it carries no signal (zero
// variance: every finished rollout's reward equal), and per reward key mean ± std, min and max over
// its finished rollouts. The reward is the trainer's (src/protocol/registry/rewards.ts), said once here.

import type { GroupDetailJson } from "../../../src/protocol/index.js";
import { REWARD_DEFINITION } from "../../../src/protocol/index.js";
import { h } from "../dom.js";
import { runHref } from "../links.js";
import { toneAttrs } from "../reward-chip.js";
import { num } from "./figures.js";

export function groupNumbers(g: GroupDetailJson, run: string): HTMLElement[] {
  // as the relay counts it (groups.ts): complete, two finished rollouts with a reward or more, all equal
  const zero =
    g.live === 0 &&
    g.spread === 0 &&
    g.rollouts.filter((r) => r.status === "finished" && r.reward !== null).length >= 2;
  const kv = (k: string, v: string | Node, key = k) => [h("dt", null, k), h("dd", { "data-stat": key }, v)];
  return [
    h("div.card-title", null, "Group"),
    h(
      "dl.kv",
      null,
      kv("group", g.id, "group"),
      kv("task", g.task ?? "–"),
      kv(
        "step",
        g.step === null
          ? "–"
          : h(
              "a",
              { href: `${runHref(run)}?step=${g.step}`, "data-nav": true, title: "this step's episodes" },
              String(g.step),
            ),
        "step",
      ),
      kv("kind", g.kind ?? "–", "kind"),
      kv("rollouts", String(g.size), "size"),
      kv("finished", String(g.finished)),
      kv("failed", String(g.failed)),
      kv("live", String(g.live)),
      kv(
        "reward",
        g.mean_reward === null
          ? "–"
          : h(
              "span",
              { title: REWARD_DEFINITION },
              h("span.toned", toneAttrs(g.mean_reward), num(g.mean_reward)),
              ` ± ${num(g.std_reward ?? 0)}`,
            ),
        "reward",
      ),
      kv("spread", num(g.spread)),
    ),
    h("p.muted.reward-def", null, `reward: ${REWARD_DEFINITION}; advantage: reward − group mean (÷ group std).`),
    ...(zero
      ? [
          h(
            "p.zero-note",
            { id: "group-zero" },
            "Zero variance: every finished rollout got the same reward, so every advantage is 0.",
          ),
        ]
      : []),
    h("div.card-title.sub-title", null, "Rewards (finished rollouts)"),
    Object.keys(g.rewards).length ? rewardTable(g) : h("p.muted", null, "No finished rollout has a reward yet."),
  ];
}

function rewardTable(g: GroupDetailJson): HTMLElement {
  return h(
    "table.key-stats",
    null,
    h(
      "thead",
      null,
      h("tr", null, h("th", null, "key"), h("th", null, "mean ± std"), h("th", null, "min"), h("th", null, "max")),
    ),
    h(
      "tbody",
      null,
      Object.entries(g.rewards).map(([k, r]) =>
        h(
          "tr",
          { "data-key": k, "data-mean": r.mean, "data-std": r.std },
          h("th", null, k),
          h("td", null, h("span.toned", toneAttrs(r.mean), num(r.mean)), ` ± ${num(r.std)}`),
          h("td", null, num(r.min)),
          h("td", null, num(r.max)),
        ),
      ),
    ),
  );
}

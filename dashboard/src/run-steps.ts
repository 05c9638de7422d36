// A run's training steps (the trainer's dispatch identity: src/protocol/registry/steps.ts): the mean reward
// per key and the zero-variance share of the complete groups, per step, train and eval apart. Read
// from the relay's pages (`GET /v1/runs/{run}/steps`, by step) when the run socket connects (every
// snapshot, so a reconnect re-reads), and kept live from its `changes` (`steps`, `steps_gone`).
// A page on its way never overwrites a step the socket changed meanwhile, nor brings back one it
// removed. Two cards beside the wall-clock charts; hidden while the run has no step.
import { getJson } from "./api.js";
import { h, percent } from "./dom.js";
import { runHref } from "./links.js";
import { round3, type StepSeries, stepChart } from "./step-chart.js";
import type { StepJson, StepsPage } from "../../src/protocol/index.js";

/** Steps asked per page (the relay's largest), and pages read at most (100,000 steps). */
const PAGE = 500;
const MAX_PAGES = 200;
/** Reward keys drawn (the first by name), as the wall-clock trend draws them. */
const MAX_KEYS = 4;

const keyOf = (s: Pick<StepJson, "step" | "kind">) => `${s.step}\u0000${s.kind ?? ""}`;
/** A step's kind as the charts name it (rollouts whose identity names none are "train"-less: "other"). */
const kindName = (k: string | null) => k ?? "other";

export interface RunSteps {
  /** The two cards (kept across the run page's redraws; hidden while there is no step). */
  cards: HTMLElement[];
  /** The socket (re)connected: read every step from the relay again. */
  reload(): void;
  /** A `changes` message's steps. */
  changes(steps: StepJson[] | undefined, gone: Array<Pick<StepJson, "step" | "kind">> | undefined): void;
  /** The token does not cover the run: no steps (the relay would refuse them). */
  hide(): void;
  destroy(): void;
}

export function runSteps(run: string): RunSteps {
  const steps = new Map<string, StepJson>();
  /** Keys the socket changed or removed while a read was on its way (that read leaves them be). */
  let touched: Set<string> | null = null;
  let generation = 0;
  let error: string | null = null;
  let frame = 0;
  let stopped = false;
  let hidden = false;
  const rewardCard = h("div.card.step-card", { id: "step-rewards", hidden: true });
  const zeroCard = h("div.card.step-card", { id: "step-zero-variance", hidden: true });

  async function read(): Promise<void> {
    const mine = ++generation;
    touched = new Set();
    const got = new Map<string, StepJson>();
    try {
      let cursor: string | null = null;
      for (let i = 0; i < MAX_PAGES; i++) {
        const q = new URLSearchParams({ limit: String(PAGE) });
        if (cursor) q.set("cursor", cursor);
        const page: StepsPage = await getJson<StepsPage>(`/v1/runs/${encodeURIComponent(run)}/steps?${q}`);
        if (stopped || mine !== generation) return;
        for (const st of page.steps) got.set(keyOf(st), st);
        cursor = page.cursor;
        if (cursor === null) break;
      }
      for (const [k, st] of got) if (!touched.has(k)) steps.set(k, st);
      for (const k of [...steps.keys()]) if (!got.has(k) && !touched.has(k)) steps.delete(k);
      error = null;
    } catch (e) {
      if (mine !== generation) return;
      error = e instanceof Error ? e.message : String(e);
    } finally {
      if (mine === generation) touched = null;
      schedule();
    }
  }

  function schedule(): void {
    if (frame || stopped) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      draw();
    });
  }

  function draw(): void {
    const list = [...steps.values()].sort(
      (a, b) => a.step - b.step || kindName(a.kind).localeCompare(kindName(b.kind)),
    );
    const none = hidden || list.length === 0;
    rewardCard.hidden = zeroCard.hidden = none && error === null;
    if (hidden) return;
    if (error !== null && list.length === 0) {
      rewardCard.replaceChildren(
        title("Reward by step", ""),
        h("p.muted", null, `Could not read the run's steps: ${error}`),
      );
      zeroCard.hidden = true;
      return;
    }
    if (none) return;
    const kinds = [...new Set(list.map((s) => kindName(s.kind)))].sort((a, b) =>
      a === "train" ? -1 : b === "train" ? 1 : a.localeCompare(b),
    );
    const keys = [...new Set(list.flatMap((s) => Object.keys(s.mean_rewards)))].sort().slice(0, MAX_KEYS);
    const stepHref = (step: number) => `${runHref(run)}?step=${step}`;
    const rewardSeries: StepSeries[] = kinds.flatMap((kind) =>
      keys.map((key, tone) => ({
        label: `${key} · ${kind}`,
        key,
        kind,
        tone,
        values: new Map(
          list.filter((s) => kindName(s.kind) === kind).map((s) => [s.step, s.mean_rewards[key] ?? null]),
        ),
      })),
    );
    const zeroSeries: StepSeries[] = kinds.map((kind, i) => ({
      label: kind,
      key: "zero_variance",
      kind,
      tone: i,
      values: new Map(list.filter((s) => kindName(s.kind) === kind).map((s) => [s.step, s.zero_variance_share])),
    }));
    const span = `steps ${list[0]!.step}–${list.at(-1)!.step}`;
    rewardCard.dataset.steps = String(new Set(list.map((s) => s.step)).size);
    rewardCard.replaceChildren(
      title("Reward by step", "mean of finished · solid train, dashed eval"),
      legend(rewardSeries),
      keys.length
        ? h(
            "div.spark-box",
            null,
            stepChart(rewardSeries, {
              domain: [0, 1],
              format: round3,
              stepHref,
              label: "mean reward of the finished rollouts per step",
            }),
          )
        : h("p.muted", null, "No step has a finished rollout with a reward yet."),
      h("div.spark-axis", null, h("span", null, span), h("span", null, "click a step for its episodes")),
    );
    zeroCard.replaceChildren(
      title("Zero variance by step", "share of complete groups"),
      legend(zeroSeries),
      h(
        "div.spark-box",
        null,
        stepChart(zeroSeries, {
          domain: [0, 1],
          format: percent,
          stepHref,
          label: "zero-variance share of the complete groups per step",
        }),
      ),
      h("div.spark-axis", null, h("span", null, span), h("span", null, "0 – 100%")),
    );
  }

  return {
    cards: [rewardCard, zeroCard],
    reload() {
      hidden = false;
      void read();
    },
    changes(changed, gone) {
      if (hidden) return;
      for (const st of changed ?? []) {
        steps.set(keyOf(st), st);
        touched?.add(keyOf(st));
      }
      for (const g of gone ?? []) {
        steps.delete(keyOf(g));
        touched?.add(keyOf(g));
      }
      if ((changed?.length ?? 0) + (gone?.length ?? 0) > 0) schedule();
    },
    hide() {
      hidden = true;
      generation++;
      steps.clear();
      schedule();
    },
    destroy() {
      stopped = true;
      if (frame) cancelAnimationFrame(frame);
    },
  };
}

function title(text: string, sub: string): HTMLElement {
  return h("div.card-title", null, h("span", null, text), h("span.muted", null, sub));
}

/** The series' names, each with its line's colour and dash. */
function legend(series: StepSeries[]): HTMLElement {
  return h(
    "div.step-legend",
    null,
    series.map((sr) =>
      h(
        `span.tk-key.tk-${sr.tone}${sr.kind === "eval" ? ".eval" : ""}` as "span",
        { "data-key": sr.key, "data-kind": sr.kind },
        sr.label,
      ),
    ),
  );
}

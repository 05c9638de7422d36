// What the run page charts per training step (the relay's steps, src/protocol/registry/steps.ts), train and
// eval apart (eval dashed): the trainer's reward (mean ± std), each reward key's mean, the response length
// (output tokens per rollout: mean and p90), how the ended rollouts ended (truncated, errored, timed out),
// the zero-variance share of the complete groups, and the off-policy staleness (step − policy_version).
// Each chart is a card of its own (its title says what the numbers are over); plot.ts draws it.

import type { StepJson } from "../../src/protocol/index.js";
import { fmtNumber } from "./dom.js";
import type { PlotSeries, PlotSpec } from "./plot.js";
import { type KeyTones, rewardKeyOrder } from "./reward-choice.js";

/** A step's kind as the charts name it (rollouts whose identity names none: "other"). */
export const kindName = (k: string | null) => k ?? "other";

/** Reward keys drawn (`reward` first, then by name), each in its page colour (KeyTones). */
const MAX_KEYS = 4;

export interface StepCard {
  id: string;
  title: string;
  /** What the numbers are over, under the title. */
  sub: string;
  spec: Omit<PlotSpec, "onPick">;
  /** Said instead of the chart while no step has a value. */
  empty: string;
}

/** Three significant decimals at most, for rewards and staleness. */
const round3 = (v: number) => fmtNumber(Math.round(v * 1000) / 1000);
/** A share as a percentage ("12.5%"). */
const pct = (v: number) => `${fmtNumber(Math.round(v * 1000) / 10)}%`;
const tokens = (v: number) => Math.round(v).toLocaleString("en-US");

export function stepCards(list: StepJson[], tones: KeyTones): StepCard[] {
  const kinds = [...new Set(list.map((s) => kindName(s.kind)))].sort((a, b) =>
    a === "train" ? -1 : b === "train" ? 1 : a.localeCompare(b),
  );
  const of = (kind: string) => list.filter((s) => kindName(s.kind) === kind);
  /** One series per kind and measure: `value` read off each step of that kind. */
  const per = (
    measures: Array<{ key: string; label: string; tone: number; value(s: StepJson): number | null }>,
    spread?: (s: StepJson) => number | null,
  ): PlotSeries[] =>
    kinds.flatMap((kind) =>
      measures.map((m) => ({
        label: `${m.label} · ${kind}`,
        key: m.key,
        kind,
        tone: m.tone,
        dashed: kind === "eval",
        points: new Map(of(kind).map((s) => [s.step, m.value(s)])),
        ...(spread ? { spread: new Map(of(kind).map((s) => [s.step, spread(s)])) } : {}),
      })),
    );
  const keys = rewardKeyOrder(list.flatMap((s) => Object.keys(s.mean_rewards))).slice(0, MAX_KEYS);
  tones.meet(keys);
  const stale = list.some((s) => s.staleness.mean !== null);
  const base = { xLabel: "training step", integerX: true };
  const cards: StepCard[] = [
    {
      id: "step-reward-total",
      title: "Reward by step",
      sub: "mean ± std over finished rollouts · per trace Σ score × weight, mean over traces",
      spec: {
        ...base,
        yLabel: "reward",
        yMin: 0,
        yMax: 1,
        format: round3,
        series: per(
          [{ key: "reward", label: "reward", tone: tones.tone("reward"), value: (s) => s.mean_reward }],
          (s) => s.std_reward,
        ),
      },
      empty: "No step has a finished rollout with a reward yet.",
    },
    {
      id: "step-rewards",
      title: "Reward per key by step",
      sub: "mean of each key over finished rollouts",
      spec: {
        ...base,
        yLabel: "mean score",
        yMin: 0,
        yMax: 1,
        format: round3,
        series: per(
          keys.map((key) => ({ key, label: key, tone: tones.tone(key), value: (s) => s.mean_rewards[key] ?? null })),
        ),
      },
      empty: "No step has a finished rollout with a reward yet.",
    },
    {
      id: "step-length",
      title: "Response length by step",
      sub: "output tokens per finished rollout, all traces",
      spec: {
        ...base,
        yLabel: "output tokens",
        yMin: 0,
        format: tokens,
        series: per([
          { key: "mean", label: "mean", tone: 0, value: (s) => s.output_tokens.mean },
          { key: "p90", label: "p90", tone: 3, value: (s) => s.output_tokens.p90 },
        ]),
      },
      empty: "No finished rollout has token counts yet.",
    },
    {
      id: "step-outcomes",
      title: "Truncated, errors, timeouts by step",
      sub: "share of ended rollouts (finished or failed); truncated as the trainer counts it (is_truncated)",
      spec: {
        ...base,
        yLabel: "% of ended",
        yMin: 0,
        yMax: 0.1,
        format: pct,
        series: per([
          { key: "truncated", label: "truncated", tone: 1, value: (s) => s.truncated_share },
          { key: "errored", label: "errored", tone: 3, value: (s) => s.error_share },
          { key: "timeout", label: "timed out", tone: 2, value: (s) => s.timeout_share },
        ]),
      },
      empty: "No rollout has ended yet.",
    },
    {
      id: "step-zero-variance",
      title: "Zero variance by step",
      sub: "share of complete groups whose rewards are all equal",
      spec: {
        ...base,
        yLabel: "% of groups",
        yMin: 0,
        yMax: 1,
        format: pct,
        series: per([{ key: "zero_variance", label: "zero variance", tone: 2, value: (s) => s.zero_variance_share }]),
      },
      empty: "No group is complete yet.",
    },
  ];
  if (stale)
    cards.push({
      id: "step-staleness",
      title: "Off-policy staleness by step",
      sub: "step − policy_version of the rollouts naming both",
      spec: {
        ...base,
        yLabel: "steps behind",
        yMin: 0,
        yMax: 1,
        format: round3,
        series: per([
          { key: "mean", label: "mean", tone: 0, value: (s) => s.staleness.mean },
          { key: "max", label: "max", tone: 1, value: (s) => s.staleness.max },
        ]),
      },
      empty: "No rollout names both a step and a policy version.",
    });
  return cards;
}

/** Whether a card's series have any value to draw. */
export function hasValues(spec: Pick<PlotSpec, "series">): boolean {
  return spec.series.some((s) => [...s.points.values()].some((v) => typeof v === "number"));
}

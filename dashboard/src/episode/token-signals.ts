// The trainer's per-token signals of an episode, as prime-rl's dashboard draws them
// (dashboard/static/app.js: `episodeSignalScales`, `renderTokenNode`, `signalNote`): each trace's
// merged annotation record folded onto its nodes exactly as prime-rl folds it (src/annotations/
// fold.ts), giving per node, per sampled token: the advantage, the trainer's entropy, the mismatch
// exp(Δ) − Δ − 1 with Δ = trainer logprob − the node's own sampling logprob (derived here, as
// prime-rl's app derives it), and the loss's mask decision (`is_masked`). Scales are per episode;
// colours and the "why nothing is coloured" lines are prime-rl's. Pure: no DOM.

import type { Json, JsonObject, StreamValue } from "../../../src/protocol/index.js";
import { foldOntoNodes, mismatchKl } from "../../../src/protocol/index.js";
import { isObject } from "../model.js";
import type { NodeTokens } from "./node-tokens.js";

export type Signal = "advantage" | "entropy" | "mismatch_kl" | "is_masked";
export const SIGNALS: readonly Signal[] = ["advantage", "entropy", "mismatch_kl", "is_masked"];
export const SIGNAL_LABELS: Record<Signal, string> = {
  advantage: "Advantage",
  entropy: "Entropy",
  mismatch_kl: "Mismatch",
  is_masked: "The loss mask",
};
/** Signals that come from the trainer's streams (the advantage comes from the orchestrator). */
const TRAINER_SIGNALS: ReadonlySet<Signal> = new Set(["entropy", "mismatch_kl", "is_masked"]);
/** The stream each signal is read from. */
const STREAMS: Record<Signal, string> = {
  advantage: "advantages",
  entropy: "entropies",
  mismatch_kl: "trainer_logprobs",
  is_masked: "is_masked",
};

/** One trace's merged record as the relay's JSON view gives it (GET .../annotations). */
export interface TraceRecord {
  trace_id: string;
  info: Json;
  branches: Array<{ index: number } & Record<string, Json>>;
}

/** What one trace carries of each signal: per node index, the values at its sampled tokens. */
export interface TraceSignals {
  trace: string;
  nodes: NodeTokens[];
  values: Map<number, Partial<Record<Signal, StreamValue[]>>>;
  /** Per node index, the trainer's logprobs (the mismatch's tooltip names them). */
  trainer: Map<number, StreamValue[]>;
  /** Nodes the trainer annotated (a truthy `trainer_logprobs`): prime-rl's `train_annotations.nodes`. */
  trained: number;
  info: JsonObject;
  /** Some node recorded tokens. */
  hasTokens: boolean;
}

export interface Scales {
  maxAbsAdv: number;
  maxEntropy: number;
  maxKl: number;
}

export function traceSignals(trace: string, nodes: NodeTokens[], record: TraceRecord | null): TraceSignals {
  const folded = record ? foldOntoNodes(nodes, record) : new Map();
  const values = new Map<number, Partial<Record<Signal, StreamValue[]>>>();
  const trainerOf = new Map<number, StreamValue[]>();
  for (const [i, streams] of folded) {
    const v: Partial<Record<Signal, StreamValue[]>> = {};
    const trainer = streams.get("trainer_logprobs");
    if (trainer?.length) trainerOf.set(i, trainer);
    for (const s of SIGNALS) {
      const got = streams.get(STREAMS[s]);
      if (!got) continue;
      if (s !== "mismatch_kl") v[s] = got;
      // only where the two arrays line up (prime-rl: equal lengths)
      else if (got.length === nodes[i]!.logprobs.length) v[s] = mismatchKl(got, nodes[i]!.logprobs);
    }
    values.set(i, v);
  }
  const info = record && isObject(record.info) ? record.info : {};
  return {
    trace,
    nodes,
    values,
    trainer: trainerOf,
    trained: trainerOf.size,
    info,
    hasTokens: nodes.some((n) => n.token_ids.length > 0),
  };
}

/** The episode's scales: max |advantage|, max entropy, max mismatch over every trace. */
export function episodeScales(all: TraceSignals[]): Scales {
  const s: Scales = { maxAbsAdv: 0, maxEntropy: 0, maxKl: 0 };
  for (const t of all) {
    for (const v of t.values.values()) {
      for (const a of nums(v.advantage)) s.maxAbsAdv = Math.max(s.maxAbsAdv, Math.abs(a));
      for (const e of nums(v.entropy)) s.maxEntropy = Math.max(s.maxEntropy, e);
      for (const k of nums(v.mismatch_kl)) s.maxKl = Math.max(s.maxKl, k);
    }
  }
  return s;
}

/** A token's background for `signal` at value `v` (prime-rl's colours), null when it paints nothing. */
export function tokenColour(signal: Signal, v: StreamValue | undefined, s: Scales): string | null {
  if (v === null || v === undefined) return null;
  if (signal === "is_masked") return v === true ? "rgba(255,69,57,0.35)" : "rgba(74,158,255,0.15)";
  if (typeof v !== "number") return null;
  if (signal === "advantage") {
    if (s.maxAbsAdv <= 0 || v === 0) return null;
    const a = Math.min(1, Math.abs(v) / s.maxAbsAdv) * 0.45;
    return v > 0 ? `rgba(182,255,60,${a.toFixed(3)})` : `rgba(255,69,57,${a.toFixed(3)})`;
  }
  if (signal === "entropy")
    return s.maxEntropy > 0 && v > 0 ? `rgba(94,234,212,${(Math.min(1, v / s.maxEntropy) * 0.5).toFixed(3)})` : null;
  return s.maxKl > 0 && v > 0 ? `rgba(255,69,57,${(Math.min(1, v / s.maxKl) * 0.55).toFixed(3)})` : null;
}

/** A token's tooltip extra for `signal` (prime-rl's wording). */
export function tokenTip(
  signal: Signal,
  v: StreamValue,
  trainer: StreamValue | undefined,
  sampled: number | null | undefined,
): string {
  if (signal === "advantage") return `adv=${typeof v === "number" ? round(v, 4) : "–"}`;
  if (signal === "entropy") return `H=${typeof v === "number" ? v.toFixed(4) : "–"} nats`;
  if (signal === "is_masked") return v === null ? "not covered" : v ? "masked (dropped from the loss)" : "kept";
  return `trainer=${typeof trainer === "number" ? round(trainer, 4) : "–"} inference=${typeof sampled === "number" ? round(sampled, 4) : "–"} kl=${typeof v === "number" ? v.toFixed(6) : "–"}`;
}

/** Why `signal` paints nothing on trace `t` (prime-rl's `signalNote`), or null when it paints something. */
export function emptyReason(
  signal: Signal,
  t: TraceSignals,
  s: Scales,
  kind: string | null,
): { title: string; detail: string } | null {
  const painted = [...t.values.values()].some((v) => (v[signal] ?? []).some((x) => tokenColour(signal, x, s) !== null));
  if (painted) return null;
  const label = SIGNAL_LABELS[signal];
  const evalKind = (kind ?? (typeof t.info.kind === "string" ? t.info.kind : null)) === "eval";
  const effective = t.info.effective === true;
  if (!t.hasTokens) {
    const evalNote = evalKind
      ? " Eval rollouts are sampled through the chat API, which returns text rather than tokens."
      : "";
    return {
      title: "no tokens to colour",
      detail: `${label} colours recorded tokens, and this trace recorded none.${evalNote}`,
    };
  }
  const covered = [...t.values.values()].some((v) => v[signal] !== undefined);
  if (TRAINER_SIGNALS.has(signal) && t.trained === 0) {
    const why = evalKind
      ? "The trainer only sees train episodes, so an eval episode never carries recomputed logprobs."
      : effective
        ? "This episode shipped in a batch, but the trainer has not annotated it yet."
        : "This episode has not shipped in a batch, so the trainer has not trained it yet.";
    return { title: "no trainer streams", detail: `${label} comes from the trainer. ${why}` };
  }
  if (signal === "mismatch_kl" && covered) {
    return {
      title: "no mismatch",
      detail: "The trainer's logprobs match the sampling logprobs exactly on every token here.",
    };
  }
  if (TRAINER_SIGNALS.has(signal)) {
    return {
      title: "not covered on this trace",
      detail: `The trainer annotated this episode, but its streams reach none of this trace's tokens, so ${label.toLowerCase()} has nothing to colour.`,
    };
  }
  if (covered)
    return {
      title: "every advantage is 0",
      detail: "Every member of this trace's group scored the same reward, so the group carries no learning signal.",
    };
  return {
    title: "no advantage assigned",
    detail: effective
      ? "This trace shipped in a batch but carries no advantage stream."
      : "A trace is assigned its advantage when a batch ships it. This one has not shipped in a batch.",
  };
}

/** One node's values of a signal in a line: mean and max (masked: how many of how many). */
export function nodeSummary(
  signal: Signal,
  values: StreamValue[],
): { text: string; mean: number | null; max: number | null; count: number } {
  if (signal === "is_masked") {
    const known = values.filter((v) => v !== null);
    const masked = known.filter((v) => v === true).length;
    return {
      text: `masked ${masked} of ${known.length}`,
      mean: known.length ? masked / known.length : null,
      max: null,
      count: known.length,
    };
  }
  const xs = nums(values);
  if (!xs.length) return { text: "not covered", mean: null, max: null, count: 0 };
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const max = signal === "advantage" ? xs.reduce((a, b) => (Math.abs(b) > Math.abs(a) ? b : a)) : Math.max(...xs);
  const name = signal === "advantage" ? "adv" : signal === "entropy" ? "H" : "kl";
  const digits = signal === "mismatch_kl" ? 6 : 3;
  const unit = signal === "entropy" ? " nats" : "";
  return {
    text: `${name} mean ${round(mean, digits)} · max ${round(max, digits)}${unit} · ${xs.length} tok`,
    mean,
    max,
    count: xs.length,
  };
}

function nums(v: StreamValue[] | undefined): number[] {
  return (v ?? []).filter((x): x is number => typeof x === "number");
}

const round = (v: number, digits: number) => String(Math.round(v * 10 ** digits) / 10 ** digits);

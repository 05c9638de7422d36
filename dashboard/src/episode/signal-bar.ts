// The episode page's token-signal picker (prime-rl's `token-signal` select: advantage, entropy,
// mismatch, the loss mask, or none), its legend with the episode's scale, and a line saying what
// the trainer has annotated. An option that paints nothing on any trace says why in its text and
// tooltip (`data-reason`), as prime-rl's options do; when none paints anything the select carries
// `data-note="no token overlay available"`. The choice lives in the page URL (`?signal=`).
import type { AnnotationsJson } from "../../../clients/typescript/watch.js";
import { h } from "../dom.js";
import { isObject } from "../model.js";
import { RECHECK_MS } from "./annotations-source.js";
import { emptyReason, type Scales, SIGNAL_LABELS, SIGNALS, type Signal, type TraceSignals } from "./token-signals.js";

export interface SignalBar {
  el: HTMLElement;
  /** The chosen signal (null: none). */
  signal(): Signal | null;
  update(
    traces: TraceSignals[],
    scales: Scales,
    kind: string | null,
    annotations: AnnotationsJson | null,
    ended: boolean,
  ): void;
}

function signalFromUrl(): Signal | null {
  const s = new URLSearchParams(location.search).get("signal");
  return SIGNALS.find((x) => x === s) ?? null;
}

export function signalBar(onChange: () => void): SignalBar {
  let chosen = signalFromUrl();
  const select = h("select.select", { id: "token-signal", "aria-label": "token signal" });
  const options = new Map<string, HTMLOptionElement>();
  for (const value of ["", ...SIGNALS]) {
    const o = h(
      "option",
      { value, selected: value === (chosen ?? "") ? true : undefined },
      value ? SIGNAL_LABELS[value as Signal] : "none",
    );
    options.set(value, o);
    select.append(o);
  }
  select.addEventListener("change", () => {
    chosen = (select.value || null) as Signal | null;
    const q = new URLSearchParams(location.search);
    if (chosen) q.set("signal", chosen);
    else q.delete("signal");
    const search = q.toString();
    history.replaceState(history.state, "", `${location.pathname}${search ? `?${search}` : ""}${location.hash}`);
    onChange();
  });
  const legend = h("div.sig-legend", { id: "signal-legend" });
  const state = h("span.muted.small", { id: "annotations-state" });
  const el = h(
    "div.signal-bar",
    { id: "signal-bar" },
    h("label.sig-pick", null, h("span.seg-label", null, "Token signal"), select),
    legend,
    state,
  );

  return {
    el,
    signal: () => chosen,
    update(traces, scales, kind, annotations, ended) {
      let any = false;
      for (const s of SIGNALS) {
        const reasons = traces.map((t) => emptyReason(s, t, scales, kind));
        const empty = traces.length === 0 || reasons.every((r) => r !== null);
        const why = reasons.find((r) => r !== null) ?? null;
        const o = options.get(s)!;
        o.textContent = empty && why ? `${SIGNAL_LABELS[s]} — ${why.title}` : SIGNAL_LABELS[s];
        if (empty && why) {
          o.dataset.reason = why.title;
          o.title = why.detail;
        } else {
          delete o.dataset.reason;
          o.removeAttribute("title");
        }
        any ||= !empty;
      }
      if (any) delete select.dataset.note;
      else select.dataset.note = "no token overlay available";
      legend.replaceChildren(...(chosen ? legendFor(chosen, scales) : []));
      legend.hidden = chosen === null;
      state.textContent = stateText(annotations, ended);
      el.dataset.version = String(annotations?.version ?? 0);
    },
  };
}

/** What the trainer has annotated: records merged, the ship step, and when the page looks again. */
function stateText(a: AnnotationsJson | null, ended: boolean): string {
  const again = ended ? ` · checked again every ${RECHECK_MS / 1000} s while this tab is open` : "";
  if (!a || a.version === 0) return `No trainer annotations yet${again}.`;
  const ship = a.traces
    .map((t) => (isObject(t.info) && isObject(t.info.ship) ? t.info.ship.step : undefined))
    .find((s) => typeof s === "number");
  return `Trainer annotations: ${a.version} record${a.version === 1 ? "" : "s"}${typeof ship === "number" ? ` · shipped at step ${ship}` : ""}${again}.`;
}

const swatch = (colour: string | null, text: string, key: string) =>
  h(
    "span.sig-key",
    { "data-key": key },
    h("span.sig-swatch", { style: colour ? `background:${colour}` : undefined }),
    text,
  );

const fmt = (v: number, digits = 3) => String(Math.round(v * 10 ** digits) / 10 ** digits);

/** The chosen signal's colours and the episode's scale (each end's value on `data-max`). */
function legendFor(s: Signal, sc: Scales): HTMLElement[] {
  const ctx = swatch("#eef0f3", "not sampled", "context");
  if (s === "is_masked") {
    return [
      swatch("rgba(255,69,57,0.35)", "masked (dropped from the loss)", "masked"),
      swatch("rgba(74,158,255,0.15)", "kept", "kept"),
      swatch(null, "not covered", "none"),
      ctx,
    ];
  }
  const [max, from, to, unit] =
    s === "advantage"
      ? [sc.maxAbsAdv, "rgba(255,69,57,0.45)", "rgba(182,255,60,0.45)", ""]
      : s === "entropy"
        ? [sc.maxEntropy, "transparent", "rgba(94,234,212,0.5)", " nats"]
        : [sc.maxKl, "transparent", "rgba(255,69,57,0.55)", ""];
  if (max <= 0)
    return [h("span.sig-scale.muted", { "data-max": 0 }, "no scale: nothing to colour in this episode"), ctx];
  const gradient =
    s === "advantage"
      ? `linear-gradient(90deg, ${from}, transparent, ${to})`
      : `linear-gradient(90deg, ${from}, ${to})`;
  const digits = s === "mismatch_kl" ? 6 : 3;
  return [
    h(
      "span.sig-scale",
      {
        "data-max": max,
        title: `${SIGNAL_LABELS[s]}: the colour is the value over the episode's largest${s === "advantage" ? " |advantage|" : ""}`,
      },
      h("span.sig-end", null, s === "advantage" ? `−${fmt(max, digits)}` : "0"),
      h("span.sig-bar", { style: `background:${gradient}` }),
      h("span.sig-end", null, `${s === "advantage" ? "+" : ""}${fmt(max, digits)}${unit}`),
    ),
    ctx,
  ];
}

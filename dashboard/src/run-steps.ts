// A run's training steps (the trainer's dispatch identity: src/protocol/registry/steps.ts), charted per step,
// train and eval apart (step-charts.ts: reward mean ± std and per key, response length, truncation, errors
// and timeouts, zero variance, staleness). Read from the relay's pages (`GET /v1/runs/{run}/steps`, by step)
// when the run socket connects (every snapshot, so a reconnect re-reads), and kept live from its `changes`
// (`steps`, `steps_gone`). A page on its way never overwrites a step the socket changed meanwhile, nor brings
// back one it removed. The cards sit above the run-time charts; hidden while the run has no step. A click
// on a chart opens that step's episodes.

import type { StepJson, StepsPage } from "../../src/protocol/index.js";
import { getJson } from "./api.js";
import { h } from "./dom.js";
import { runHref } from "./links.js";
import { Plot } from "./plot.js";
import type { KeyTones } from "./reward-choice.js";
import { hasValues, kindName, stepCards } from "./step-charts.js";

/** Steps asked per page (the relay's largest), and pages read at most (100,000 steps). */
const PAGE = 500;
const MAX_PAGES = 200;

/** Every chart's card, in the order drawn (stepCards gives each its spec). */
const CARD_IDS = [
  "step-reward-total",
  "step-rewards",
  "step-length",
  "step-outcomes",
  "step-zero-variance",
  "step-staleness",
] as const;

const keyOf = (s: Pick<StepJson, "step" | "kind">) => `${s.step}\u0000${s.kind ?? ""}`;

export interface RunSteps {
  /** The charts' section, one card per chart (kept across the run page's redraws; hidden while there is no step). */
  el: HTMLElement;
  /** The socket (re)connected: read every step from the relay again. */
  reload(): void;
  /** A `changes` message's steps. */
  changes(steps: StepJson[] | undefined, gone: Array<Pick<StepJson, "step" | "kind">> | undefined): void;
  /** The token does not cover the run: no steps (the relay would refuse them). */
  hide(): void;
  destroy(): void;
}

/** `tones`: the page's reward key colours (the same in the run page's other charts). */
export function runSteps(run: string, tones: KeyTones): RunSteps {
  const steps = new Map<string, StepJson>();
  /** Keys the socket changed or removed while a read was on its way (that read leaves them be). */
  let touched: Set<string> | null = null;
  let generation = 0;
  let error: string | null = null;
  let frame = 0;
  let stopped = false;
  let hidden = false;
  const cards = new Map(
    CARD_IDS.map((id) => {
      const plot = new Plot(id);
      const title = h("div.card-title");
      const note = h("p.muted.plot-empty", { hidden: true });
      return [id, { card: h("div.card.step-card", { id, hidden: true }, title, note, plot.el), title, note, plot }];
    }),
  );

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

  const el = h(
    "section.step-charts",
    { id: "step-charts", "aria-label": "per training step", hidden: true },
    [...cards.values()].map((c) => c.card),
  );

  function draw(): void {
    const list = [...steps.values()].sort(
      (a, b) => a.step - b.step || kindName(a.kind).localeCompare(kindName(b.kind)),
    );
    const none = hidden || list.length === 0;
    for (const c of cards.values()) c.card.hidden = none && error === null;
    el.hidden = none && error === null;
    if (hidden) return;
    const first = cards.get(CARD_IDS[0])!;
    if (error !== null && list.length === 0) {
      first.title.replaceChildren(...title("Reward by step", ""));
      first.note.hidden = false;
      first.note.textContent = `Could not read the run's steps: ${error}`;
      first.plot.el.hidden = true;
      for (const [id, c] of cards) if (id !== CARD_IDS[0]) c.card.hidden = true;
      return;
    }
    if (none) return;
    const drawn = new Set<string>();
    for (const spec of stepCards(list, tones)) {
      const c = cards.get(spec.id as (typeof CARD_IDS)[number])!;
      drawn.add(spec.id);
      const any = hasValues(spec.spec);
      c.card.dataset.steps = String(new Set(list.map((s) => s.step)).size);
      c.title.replaceChildren(...title(spec.title, spec.sub));
      c.note.hidden = any;
      c.note.textContent = any ? "" : spec.empty;
      c.plot.el.hidden = !any;
      c.plot.update({ ...spec.spec, onPick: open });
    }
    for (const [id, c] of cards) if (!drawn.has(id)) c.card.hidden = true;
  }

  /** A step's episodes: the run's list filtered by it (an in-app link, so no page load). */
  function open(step: number): void {
    const a = h("a", { href: `${runHref(run)}?step=${step}`, "data-nav": true, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
  }

  return {
    el,
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
      for (const c of cards.values()) c.plot.destroy();
    },
  };
}

function title(text: string, sub: string): HTMLElement[] {
  return [h("span", null, text), h("span.muted", null, sub)];
}

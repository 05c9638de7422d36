// Rollouts picked for comparing: a checkbox on each row of a run's lists (the run's episodes, a
// group's rollouts) and a tray above them listing what is picked, with "Compare" once two are.
// The picks are kept per run in sessionStorage (this tab), so they survive moving between the
// run's pages; only ids and groups are kept, never a token, and the compare link carries ids only.
import { h } from "./dom.js";
import { compareHref, idInRun } from "./links.js";

/** At most this many picks per run: the compare page reads every picked episode whole. */
export const MAX_PICKS = 8;
const EVENT = "episode-relay-picks";

export interface Pick {
  id: string;
  group: string | null;
}

const key = (run: string) => `episode-relay-picks:${run}`;

export function picksOf(run: string): Pick[] {
  try {
    const v = JSON.parse(sessionStorage.getItem(key(run)) ?? "[]") as unknown;
    return Array.isArray(v) ? v.filter((p): p is Pick => typeof p?.id === "string").slice(0, MAX_PICKS) : [];
  } catch {
    return [];
  }
}

function save(run: string, picks: Pick[]): void {
  try {
    if (picks.length) sessionStorage.setItem(key(run), JSON.stringify(picks));
    else sessionStorage.removeItem(key(run));
  } catch {
    // storage disabled: the picks last as long as the page
  }
  window.dispatchEvent(new CustomEvent(EVENT, { detail: run }));
}

/** Pick or unpick `id`; false when the tray is full. */
export function setPicked(run: string, pick: Pick, on: boolean): boolean {
  const picks = picksOf(run).filter((p) => p.id !== pick.id);
  if (on && picks.length >= MAX_PICKS) return false;
  save(run, on ? [...picks, pick] : picks);
  return true;
}

/** The checkbox for one row (inside a row link: main.ts leaves clicks on `[data-pick]` alone). */
export function pickBox(run: string, id: string, group: string | null): HTMLInputElement {
  const box = h("input.pick-box", {
    type: "checkbox",
    "data-pick": id,
    "aria-label": `pick ${idInRun(id, run)} to compare`,
    title: "pick to compare",
  });
  box.checked = picksOf(run).some((p) => p.id === id);
  box.addEventListener("change", () => {
    if (!setPicked(run, { id, group }, box.checked)) box.checked = false;
  });
  return box;
}

/** `el` with its pick boxes set to what is picked now (a cached row drawn again); returns `el`. */
export function syncPickBoxes<T extends Element>(el: T, run: string): T {
  const picked = new Set(picksOf(run).map((p) => p.id));
  for (const box of el.querySelectorAll<HTMLInputElement>("input.pick-box"))
    box.checked = picked.has(box.dataset.pick ?? "");
  return el;
}

/** The tray: what is picked (each removable), "Compare N" from two picks, "Clear". Returns the element and its stop. */
export function pickTray(run: string): { el: HTMLElement; stop: () => void } {
  const list = h("span.pick-list", { id: "pick-list" });
  const go = h("a.btn.primary", { id: "pick-compare", "data-nav": true }, "Compare");
  const clear = h("button.btn", { type: "button", id: "pick-clear" }, "Clear");
  const note = h("span.muted.small", { id: "pick-note" });
  const el = h(
    "div.pick-tray",
    { id: "pick-tray", role: "region", "aria-label": "rollouts picked to compare", hidden: true },
    list,
    note,
    go,
    clear,
  );
  clear.addEventListener("click", () => save(run, []));

  function draw(): void {
    const picks = picksOf(run);
    el.hidden = picks.length === 0;
    list.replaceChildren(
      h("span.pick-count", null, `${picks.length} picked`),
      ...picks.map((p) => {
        const x = h("button.pick-x", { type: "button", title: "unpick", "aria-label": `unpick ${p.id}` }, "×");
        x.addEventListener("click", () => setPicked(run, p, false));
        return h("span.chip.pick", { "data-id": p.id, title: p.id }, idInRun(p.id, run), x);
      }),
    );
    go.hidden = picks.length < 2;
    if (picks.length >= 2) {
      go.setAttribute("href", compareHref(...picks.map((p) => p.id)));
      go.textContent = `Compare ${picks.length}`;
    }
    note.textContent =
      picks.length === 1 ? "pick one more to compare" : picks.length >= MAX_PICKS ? `at most ${MAX_PICKS}` : "";
    syncPickBoxes(document.body, run);
  }

  const onChange = (e: Event) => {
    if ((e as CustomEvent).detail === run) draw();
  };
  window.addEventListener(EVENT, onChange);
  draw();
  return { el, stop: () => window.removeEventListener(EVENT, onChange) };
}

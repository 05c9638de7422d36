// The run page's toggle "include failed / refused": whether its reward statistics count every
// episode or the finished ones only (the default; reward-choice.ts picks the numbers). The relay
// keeps both, so a flip redraws without asking it; the choice is remembered in localStorage.
import { h } from "./dom.js";

const STORED = "episode-relay:rewards-include-all";

export interface RewardScope {
  el: HTMLElement;
  includeAll(): boolean;
}

function stored(): boolean {
  try {
    return localStorage.getItem(STORED) === "1";
  } catch {
    return false; // storage refused (private mode, sandboxed frame): the default
  }
}

/** The toggle; `onChange` runs after each flip (the page redraws from its last aggregates). */
export function rewardScope(onChange: () => void): RewardScope {
  const box = h("input", { type: "checkbox", id: "rewards-include-all" });
  box.checked = stored();
  const el = h(
    "label.reward-scope",
    {
      title:
        "count the rewards of every episode (failed, finish-refused and live ones too), not only the finished ones",
    },
    box,
    h("span", null, "include failed / refused"),
  );
  box.addEventListener("change", () => {
    try {
      localStorage.setItem(STORED, box.checked ? "1" : "0");
    } catch {
      // not remembered; the page still follows the box
    }
    onChange();
  });
  return { el, includeAll: () => box.checked };
}

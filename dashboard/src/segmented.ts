// A row of toggle buttons, one pressed: the list's status and sort, the groups' order.
import { h } from "./dom.js";

/** `data-<name>` on each button names its value; `onPick` runs when another is pressed. */
export function segmented<T extends string>(
  name: string,
  label: string,
  options: Array<[T, string]>,
  initial: T,
  onPick: (v: T) => void,
): HTMLElement {
  const el = h("div.segmented", { role: "group", "aria-label": label, "data-group": name });
  for (const [value, text] of options) {
    const b = h(
      "button",
      { type: "button", [`data-${name}`]: value, "aria-pressed": value === initial ? "true" : "false" },
      text,
    );
    b.addEventListener("click", () => {
      for (const x of el.querySelectorAll("button")) x.setAttribute("aria-pressed", x === b ? "true" : "false");
      onPick(value);
    });
    el.append(b);
  }
  return el;
}

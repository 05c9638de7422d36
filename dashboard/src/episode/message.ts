// One message as the episode and compare pages show it: reasoning (folded), text, tool calls
// with their arguments, and whose call a tool message answers.
import { h } from "../dom.js";
import type { Message } from "../model.js";

/** One message (a turn's or a pending one): reasoning, text, tool calls. */
export function messageBody(m: Message, pending: boolean): HTMLElement {
  return h(
    "div.msg",
    { "data-role": m.role },
    pending
      ? h(
          "div.pending-role",
          null,
          h("span.role.small", null, m.role),
          m.name ? h("span.tool-name", null, m.name) : null,
        )
      : null,
    m.reasoning
      ? h("details.reasoning", null, h("summary", null, "reasoning"), h("div.text", null, m.reasoning))
      : null,
    m.text !== null && m.text !== "" ? h("div.text", null, m.text) : null,
    m.toolCalls.map((c) =>
      h(
        "div.tool-call",
        null,
        h("span.tool-arrow", { "aria-hidden": "true" }, "→"),
        h("code.tool-fn", null, c.name),
        h("code.tool-args", null, prettyArgs(c.arguments)),
        c.id ? h("span.muted.tool-id", null, c.id) : null,
      ),
    ),
    m.toolCallId && !pending ? h("div.muted.small", null, `result of ${m.toolCallId}`) : null,
  );
}

/** A JSON object of arguments as `k: value, …` (other JSON compact; anything else as sent). */
function prettyArgs(s: string): string {
  try {
    const v = JSON.parse(s) as unknown;
    if (v && typeof v === "object" && !Array.isArray(v)) {
      return Object.entries(v as Record<string, unknown>)
        .map(([k, x]) => `${k}: ${JSON.stringify(x)}`)
        .join(", ");
    }
    return JSON.stringify(v);
  } catch {
    return s;
  }
}

// Semantic links between turns (a node's `semantic_parents`, e.g. a sub-agent spawned from an
// orchestrator turn): the buttons that name a linked turn, and the jump that scrolls to it and
// flashes it, within this trace or across traces.
import type { EpisodeAssembly, TraceState } from "../../../src/protocol/index.js";
import { h } from "../dom.js";
import { field, isObject, nodeView } from "../model.js";

/** The agent's name, or "orchestrator" (what the first trace is when it has none). */
export function traceName(t: TraceState): string {
  const agent = field(t, "agent");
  return isObject(agent) && typeof agent.name === "string" ? agent.name : "orchestrator";
}

/** The orchestrator node a sub-agent was spawned from (its first subagent_call link). */
export function spawnLink(asm: EpisodeAssembly, t: TraceState): number | null {
  for (let i = 0; i < t.nodes.length; i++) {
    for (const l of nodeView(asm.node(t, i), i).links) if (l.type === "subagent_call") return l.node;
  }
  return null;
}

/** A chip that jumps to node `node` of `trace`. */
export function linkButton(
  trace: TraceState,
  node: number,
  text: string,
  jump: EventListener,
  title?: string,
): HTMLElement {
  return h(
    "button.chip.link",
    { type: "button", "data-target-trace": trace.id, "data-target-node": node, onclick: jump, title },
    text,
  );
}

/** The click handler of link buttons under `root`: scroll to the named turn and flash it. */
export function jumpWithin(root: HTMLElement): EventListener {
  return (e) => {
    const b = e.currentTarget as HTMLElement;
    const el = root.querySelector<HTMLElement>(
      `section.trace[data-trace="${CSS.escape(b.dataset.targetTrace ?? "")}"] li.turn[data-node="${CSS.escape(b.dataset.targetNode ?? "")}"]`,
    );
    if (!el) return;
    el.scrollIntoView({ behavior: "smooth", block: "center" });
    el.classList.remove("flash");
    void el.offsetWidth; // restart the flash animation
    el.classList.add("flash");
  };
}

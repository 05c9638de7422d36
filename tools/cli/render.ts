// What `tail` shows of an episode: lines (turns, tool calls, pending previews, rewards, status)
// from a delta as it lands, or from a trace as it stands (the conversation so far), each either
// printed for a person (`formatLine`) or written as a JSON line (`--json`). A node is numbered by
// its index in its trace, as the episode numbers it, however the watch came to see it.
import { decodeLossless, F64, type Json, LMap, type LValue, toJson } from "../../src/protocol/index.js";

export interface RenderContext {
  width: number;
  /** Short names of traces, in order of appearance. */
  names: Map<string, string>;
  /** Per trace, how many of its nodes were shown (a node below that is not shown again). */
  shown: Map<string, number>;
}

export function newContext(width = 100): RenderContext {
  return { width, names: new Map(), shown: new Map() };
}

/** One thing to show of a trace. `node` is the node's index in its trace. */
export type TailLine =
  | { type: "open"; trace: string; name: string; agent: string | null }
  | {
      type: "node" | "pending";
      trace: string;
      name: string;
      node: number | null;
      role: string;
      text: string;
      tool_calls: Array<{ name: string; arguments: string }>;
    }
  | { type: "links" | "repairs"; trace: string; name: string; nodes: number[] }
  | { type: "calls"; trace: string; name: string; count: number }
  | { type: "error"; trace: string; name: string; error: Json }
  | { type: "rewards" | "metrics"; trace: string; name: string; value: Json; text: string }
  | { type: "stop"; trace: string; name: string; stop: string }
  | { type: "discard"; trace: string; name: string };

function text(v: LValue | undefined): string {
  if (v === undefined || v === null) return "";
  if (typeof v === "string") return v;
  if (Array.isArray(v))
    return v
      .map((p) => (p instanceof LMap ? text(p.get("text")) : text(p)))
      .filter(Boolean)
      .join(" ");
  if (v instanceof F64) return String(v.value);
  if (v instanceof LMap) return v.entries.map(([k, x]) => `${String(k)}=${short(x)}`).join(", ");
  return String(v);
}

function short(v: LValue): string {
  if (v instanceof F64) return Number.isInteger(v.value) ? `${v.value}.0` : String(v.value);
  if (v instanceof LMap) return `{${v.entries.map(([k, x]) => `${String(k)}: ${short(x)}`).join(", ")}}`;
  if (Array.isArray(v)) return `[${v.map(short).join(", ")}]`;
  if (v instanceof Uint8Array) return `<${v.length} bytes>`;
  if (typeof v === "string") return JSON.stringify(v);
  return String(v);
}

export function clip(s: string, width: number): string {
  const one = s.replace(/\s+/g, " ").trim();
  return one.length > width ? `${one.slice(0, Math.max(1, width - 1))}…` : one;
}

export function traceName(ctx: RenderContext, id: string): string {
  let n = ctx.names.get(id);
  if (!n) ctx.names.set(id, (n = ctx.names.size === 0 ? "main" : `sub${ctx.names.size}`));
  return n;
}

function message(
  type: "node" | "pending",
  trace: string,
  name: string,
  node: number | null,
  m: LValue | undefined,
): TailLine {
  const msg = m instanceof LMap ? m : new LMap([]);
  const calls = msg.get("tool_calls");
  const tool_calls = Array.isArray(calls)
    ? calls
        .filter((c): c is LMap => c instanceof LMap)
        .map((c) => {
          const fn = c.get("function") instanceof LMap ? (c.get("function") as LMap) : c;
          return { name: text(fn.get("name")), arguments: text(fn.get("arguments")) };
        })
    : [];
  return { type, trace, name, node, role: text(msg.get("role")) || "?", text: text(msg.get("content")), tool_calls };
}

/** The lines of a delta's `set` (rewards, stop condition, metrics). */
function setLines(trace: string, name: string, set: LValue | undefined): TailLine[] {
  if (!(set instanceof LMap)) return [];
  const out: TailLine[] = [];
  const rewards = set.get("rewards");
  if (rewards instanceof LMap && rewards.entries.length)
    out.push({ type: "rewards", trace, name, value: toJson(rewards), text: short(rewards) });
  const stop = set.get("stop_condition");
  if (typeof stop === "string") out.push({ type: "stop", trace, name, stop });
  const metrics = set.get("metrics");
  if (metrics instanceof LMap && metrics.entries.length)
    out.push({ type: "metrics", trace, name, value: toJson(metrics), text: short(metrics) });
  return out;
}

/**
 * The lines for one applied delta, after which its trace holds `nodesAfter` nodes (so its first new node's index is
 * that less the nodes it added). Nodes already shown (from a snapshot) are skipped.
 */
export function deltaLines(ctx: RenderContext, delta: Uint8Array, nodesAfter: number): TailLine[] {
  const d = decodeLossless(delta) as LMap;
  const trace = d.get("trace") as string;
  const name = traceName(ctx, trace);
  if (d.get("discard") === true) {
    ctx.shown.delete(trace); // a retried attempt starts the trace again from node 0
    return [{ type: "discard", trace, name }];
  }
  const lines: TailLine[] = [];
  if (d.has("open")) {
    const set = d.get("set");
    const agent =
      set instanceof LMap && set.get("agent") instanceof LMap ? text((set.get("agent") as LMap).get("name")) : "";
    lines.push({ type: "open", trace, name, agent: agent || null });
  }
  const links = d.get("links");
  if (links instanceof LMap && links.entries.length)
    lines.push({ type: "links", trace, name, nodes: links.keys().map(Number) });
  const repairs = d.get("routing_repairs");
  if (repairs instanceof LMap && repairs.entries.length)
    lines.push({ type: "repairs", trace, name, nodes: repairs.keys().map(Number) });
  const nodes = d.get("nodes");
  if (Array.isArray(nodes)) lines.push(...nodeLines(ctx, trace, name, nodes, nodesAfter - nodes.length));
  const calls = d.get("calls");
  if (Array.isArray(calls) && calls.length) lines.push({ type: "calls", trace, name, count: calls.length });
  const errors = d.get("errors");
  if (Array.isArray(errors)) for (const e of errors) lines.push({ type: "error", trace, name, error: toJson(e) });
  lines.push(...setLines(trace, name, d.get("set")));
  const pending = d.get("pending");
  if (Array.isArray(pending)) for (const p of pending) lines.push(message("pending", trace, name, null, p));
  return lines;
}

function nodeLines(ctx: RenderContext, trace: string, name: string, nodes: LValue[], first: number): TailLine[] {
  const out: TailLine[] = [];
  const shown = ctx.shown.get(trace) ?? 0;
  nodes.forEach((n, k) => {
    const index = first + k;
    if (index < shown) return;
    out.push(message("node", trace, name, index, n instanceof LMap ? n.get("message") : undefined));
  });
  ctx.shown.set(trace, Math.max(shown, first + nodes.length));
  return out;
}

/**
 * The conversation so far: each trace of `tracesBytes` (an assembly's traces, arrival order) with the nodes not shown
 * yet, its rewards and stop condition, and its pending preview.
 */
export function snapshotLines(ctx: RenderContext, tracesBytes: Uint8Array): TailLine[] {
  const traces = decodeLossless(tracesBytes);
  const lines: TailLine[] = [];
  for (const t of Array.isArray(traces) ? traces : []) {
    if (!(t instanceof LMap)) continue;
    const trace = text(t.get("id"));
    const fresh = !ctx.names.has(trace);
    const name = traceName(ctx, trace);
    if (fresh) {
      const agent = t.get("agent") instanceof LMap ? text((t.get("agent") as LMap).get("name")) : "";
      lines.push({ type: "open", trace, name, agent: agent || null });
    }
    const nodes = t.get("nodes");
    if (Array.isArray(nodes)) lines.push(...nodeLines(ctx, trace, name, nodes, 0));
    const scalars = new LMap(t.entries.filter(([k]) => k === "rewards" || k === "stop_condition"));
    lines.push(...setLines(trace, name, scalars));
    const pending = t.get("pending");
    if (Array.isArray(pending)) for (const p of pending) lines.push(message("pending", trace, name, null, p));
  }
  return lines;
}

/** A line as a person reads it (one or more terminal lines), `prefix` before each. */
export function formatLine(l: TailLine, width: number, prefix = ""): string[] {
  const tag = `${prefix}[${l.name}]`;
  switch (l.type) {
    case "open":
      return [`${tag} ▶ trace ${l.trace.slice(0, 8)} opened${l.agent ? ` (agent ${l.agent})` : ""}`];
    case "discard":
      return [`${tag} ✕ trace discarded`];
    case "links":
      return [`${tag} ⇢ links on node(s) ${l.nodes.join(", ")}`];
    case "repairs":
      return [`${tag} ⟲ routing row repaired on node(s) ${l.nodes.join(", ")}`];
    case "calls":
      return [`${tag} ⚙ ${l.count} model call(s)`];
    case "error":
      return [clip(`${tag} ⚠ error: ${typeof l.error === "string" ? l.error : JSON.stringify(l.error)}`, width)];
    case "rewards":
      return [clip(`${tag} ★ rewards ${l.text}`, width)];
    case "metrics":
      return [clip(`${tag} metrics ${l.text}`, width)];
    case "stop":
      return [`${tag} ■ stop: ${l.stop}`];
    case "node":
    case "pending": {
      const head = l.type === "node" ? `${tag} node ${l.node}` : `${tag} … pending`;
      const out: string[] = [];
      if (l.text) out.push(clip(`${head} ${l.role}: ${l.text}`, width));
      for (const c of l.tool_calls) out.push(clip(`${head} ${l.role}: → tool call ${c.name}(${c.arguments})`, width));
      if (!out.length) out.push(clip(`${head} ${l.role}: (no text)`, width));
      return out;
    }
  }
}

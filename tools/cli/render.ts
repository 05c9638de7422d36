// Human-readable lines for `tail`: what a delta adds (turns, tool calls, pending previews,
// rewards, status), from its msgpack with types kept.
import { F64, LMap, decodeLossless, type LValue } from "../../src/protocol/index.js";

export interface RenderContext {
  width: number;
  /** Short names of traces, in order of appearance. */
  names: Map<string, string>;
  /** Nodes seen per trace (turn numbers). */
  nodes: Map<string, number>;
}

export function newContext(width = 100): RenderContext {
  return { width, names: new Map(), nodes: new Map() };
}

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

function clip(s: string, width: number): string {
  const one = s.replace(/\s+/g, " ").trim();
  return one.length > width ? `${one.slice(0, Math.max(1, width - 1))}…` : one;
}

function traceName(ctx: RenderContext, id: string): string {
  let n = ctx.names.get(id);
  if (!n) ctx.names.set(id, (n = ctx.names.size === 0 ? "main" : `sub${ctx.names.size}`));
  return n;
}

function messageLine(m: LMap | undefined, width: number): string[] {
  if (!m) return [];
  const role = text(m.get("role")) || "?";
  const out = [];
  const body = text(m.get("content"));
  if (body) out.push(clip(`${role}: ${body}`, width));
  const calls = m.get("tool_calls");
  if (Array.isArray(calls)) {
    for (const c of calls) {
      if (!(c instanceof LMap)) continue;
      const fn = c.get("function") instanceof LMap ? (c.get("function") as LMap) : c;
      out.push(clip(`→ tool call ${text(fn.get("name"))}(${text(fn.get("arguments"))})`, width));
    }
  }
  if (!out.length) out.push(`${role}: (no text)`);
  return out;
}

/** The lines to print for one applied delta. */
export function renderDelta(ctx: RenderContext, seq: number, delta: Uint8Array): string[] {
  const d = decodeLossless(delta) as LMap;
  const trace = d.get("trace") as string;
  const who = traceName(ctx, trace);
  const tag = `#${seq} [${who}]`;
  const lines: string[] = [];
  const w = ctx.width - tag.length - 3;
  if (d.get("discard") === true) return [`${tag} ✕ trace discarded`];
  if (d.has("open")) {
    const set = d.get("set");
    const agent =
      set instanceof LMap && set.get("agent") instanceof LMap ? text((set.get("agent") as LMap).get("name")) : "";
    lines.push(`${tag} ▶ trace ${trace.slice(0, 8)} opened${agent ? ` (agent ${agent})` : ""}`);
  }
  const links = d.get("links");
  if (links instanceof LMap && links.entries.length) lines.push(`${tag} ⇢ links on node(s) ${links.keys().join(", ")}`);
  const repairs = d.get("routing_repairs");
  if (repairs instanceof LMap && repairs.entries.length)
    lines.push(`${tag} ⟲ routing row repaired on node(s) ${repairs.keys().join(", ")}`);
  const nodes = d.get("nodes");
  if (Array.isArray(nodes)) {
    for (const n of nodes) {
      const i = ctx.nodes.get(trace) ?? 0;
      ctx.nodes.set(trace, i + 1);
      for (const l of messageLine((n as LMap).get("message") as LMap, w)) lines.push(`${tag} turn ${i} ${l}`);
    }
  }
  const calls = d.get("calls");
  if (Array.isArray(calls) && calls.length) lines.push(`${tag} ⚙ ${calls.length} model call(s)`);
  const errors = d.get("errors");
  if (Array.isArray(errors)) for (const e of errors) lines.push(clip(`${tag} ⚠ error: ${text(e)}`, ctx.width));
  const set = d.get("set");
  if (set instanceof LMap) {
    const rewards = set.get("rewards");
    if (rewards instanceof LMap && rewards.entries.length)
      lines.push(clip(`${tag} ★ rewards ${short(rewards)}`, ctx.width));
    const stop = set.get("stop_condition");
    if (typeof stop === "string") lines.push(`${tag} ■ stop: ${stop}`);
    const metrics = set.get("metrics");
    if (metrics instanceof LMap && metrics.entries.length)
      lines.push(clip(`${tag} metrics ${short(metrics)}`, ctx.width));
  }
  const pending = d.get("pending");
  if (Array.isArray(pending)) {
    for (const p of pending) for (const l of messageLine(p as LMap, w - 10)) lines.push(`${tag} … pending ${l}`);
  }
  return lines;
}

// What the pages show, read from the watcher client's assembly (the project's own
// EpisodeAssembly): traces, nodes, calls and scalar fields decoded on demand from their msgpack
// spans, with caches keyed by span identity so an update decodes only what is new.

import type { NdArray, NodeState, TraceState } from "../../src/protocol/index.js";
import { decodeLossless, type Json, Reader, toJson } from "../../src/protocol/index.js";

export type JsonObject = { [k: string]: Json };

const spanCache = new WeakMap<Uint8Array, Json>();

/** The JSON view of one msgpack span (cached by identity: spans never change). */
export function json(span: Uint8Array): Json {
  let v = spanCache.get(span);
  if (v === undefined) {
    try {
      v = toJson(decodeLossless(span));
    } catch {
      v = null;
    }
    spanCache.set(span, v);
  }
  return v;
}

export function isObject(v: Json | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export interface Link {
  node: number;
  type: string;
}

export interface ToolCall {
  id: string | null;
  name: string;
  arguments: string;
}

export interface Message {
  role: string;
  text: string | null;
  reasoning: string | null;
  toolCalls: ToolCall[];
  toolCallId: string | null;
  name: string | null;
}

export interface NodeView {
  index: number;
  parent: number | null;
  message: Message;
  sampled: boolean;
  timestamp: number | null;
  tokens: number;
  links: Link[];
  routed: NdArray | null;
}

/** A message map (node.message or a pending entry) in display form. */
export function messageOf(v: Json | undefined): Message {
  const m = isObject(v) ? v : {};
  const content = m.content;
  let text: string | null = null;
  if (typeof content === "string") text = content;
  else if (Array.isArray(content)) {
    text = content
      .map((p) => (isObject(p) ? (typeof p.text === "string" ? p.text : `[${String(p.type ?? "part")}]`) : String(p)))
      .join("\n");
  } else if (content !== null && content !== undefined) text = JSON.stringify(content);
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  return {
    role: typeof m.role === "string" ? m.role : "?",
    text,
    reasoning: typeof m.reasoning_content === "string" && m.reasoning_content !== "" ? m.reasoning_content : null,
    toolCalls: calls.filter(isObject).map((c) => {
      const fn = isObject(c.function) ? c.function : c;
      const args = fn.arguments;
      return {
        id: typeof c.id === "string" ? c.id : null,
        name: typeof fn.name === "string" ? fn.name : "?",
        arguments: typeof args === "string" ? args : JSON.stringify(args ?? null),
      };
    }),
    toolCallId: typeof m.tool_call_id === "string" ? m.tool_call_id : null,
    name: typeof m.name === "string" ? m.name : null,
  };
}

const keyCache = new WeakMap<Uint8Array, string>();
function keyOf(span: Uint8Array): string {
  let k = keyCache.get(span);
  if (k === undefined) {
    const v = json(span);
    k = typeof v === "string" ? v : String(v);
    keyCache.set(span, k);
  }
  return k;
}

function arrayLength(span: Uint8Array): number {
  try {
    const n = new Reader(span).arrayHeader();
    return Math.max(n, 0);
  } catch {
    return 0;
  }
}

const nodeCache = new WeakMap<NodeState, { links: number; routed: NdArray | null; view: NodeView }>();

/** One node for display (re-read only when its links or routing changed). */
export function nodeView(node: NodeState, index: number): NodeView {
  const hit = nodeCache.get(node);
  if (hit && hit.links === node.parents.length && hit.routed === node.routed) return hit.view;
  let message: Message = messageOf(undefined);
  let parent: number | null = null;
  let sampled = false;
  let timestamp: number | null = null;
  let tokens = 0;
  for (let i = 0; i < node.keys.length; i++) {
    if (i === node.parentsAt || i === node.routedAt) continue;
    const key = keyOf(node.keys[i]!);
    const value = node.values[i]!;
    if (key === "message") message = messageOf(json(value));
    else if (key === "parent") parent = typeof json(value) === "number" ? (json(value) as number) : null;
    else if (key === "sampled") sampled = json(value) === true;
    else if (key === "timestamp") timestamp = typeof json(value) === "number" ? (json(value) as number) : null;
    else if (key === "token_ids") tokens = arrayLength(value);
  }
  const links: Link[] = node.parents.map((p) => {
    const v = json(p);
    return isObject(v)
      ? { node: typeof v.node === "number" ? v.node : -1, type: typeof v.type === "string" ? v.type : "link" }
      : { node: -1, type: "link" };
  });
  const view: NodeView = { index, parent, message, sampled, timestamp, tokens, links, routed: node.routed };
  nodeCache.set(node, { links: node.parents.length, routed: node.routed, view });
  return view;
}

/** A scalar field of the trace (`open` header or `set`), as JSON; undefined when absent. */
export function field(t: TraceState, name: string): Json | undefined {
  const slot = t.fields.get(name);
  if (!slot || (slot.from !== "open" && slot.from !== "set")) return undefined;
  return json(slot.value);
}

export interface CallView {
  node: number;
  model: string | null;
  finishReason: string | null;
  promptTokens: number | null;
  completionTokens: number | null;
  seconds: number | null;
}

export function callView(span: Uint8Array): CallView {
  const v = json(span);
  const c = isObject(v) ? v : {};
  const usage = isObject(c.usage) ? c.usage : {};
  const time = isObject(c.time) ? c.time : {};
  const start = typeof time.start === "number" ? time.start : null;
  const end = typeof time.end === "number" ? time.end : null;
  return {
    node: typeof c.node === "number" ? c.node : -1,
    model: typeof c.model === "string" ? c.model : null,
    finishReason: typeof c.finish_reason === "string" ? c.finish_reason : null,
    promptTokens: typeof usage.prompt_tokens === "number" ? usage.prompt_tokens : null,
    completionTokens: typeof usage.completion_tokens === "number" ? usage.completion_tokens : null,
    seconds: start !== null && end !== null && end >= start ? end - start : null,
  };
}

export function pendingMessages(t: TraceState): Message[] {
  const v = json(t.pending);
  return Array.isArray(v) ? v.map(messageOf) : [];
}

export function fmt(v: Json | undefined): string {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Math.round(v * 1000) / 1000);
  if (typeof v === "string") return v;
  if (v === null || v === undefined) return "–";
  if (typeof v === "boolean") return v ? "yes" : "no";
  return JSON.stringify(v);
}

/** Top-1 expert of token `t` at layer `l` (element [t, l, 0]). */
export function topExpert(a: NdArray, t: number, l: number): number {
  const [n = 0, layers = 0, k = 1] = a.shape;
  const size = a.dtype.endsWith("16") ? 2 : a.dtype.endsWith("32") ? 4 : a.dtype.endsWith("64") ? 8 : 1;
  const rowBytes = layers * k * size;
  const buf = t === n - 1 ? a.last : a.body;
  const at = (t === n - 1 ? 0 : t * rowBytes) + l * k * size;
  if (at + size > buf.length) return 0;
  if (size === 1) return buf[at]!;
  if (size === 2) return buf[at]! | (buf[at + 1]! << 8);
  return new DataView(buf.buffer, buf.byteOffset + at, 4).getUint32(0, true);
}

/** Node indices named by a delta's `routing_repairs` (its trace, and the keys). */
export function repairsOf(delta: Uint8Array): { trace: string; nodes: number[] } | null {
  try {
    const r = new Reader(delta);
    const n = r.mapHeader();
    let trace: string | undefined;
    const nodes: number[] = [];
    for (let i = 0; i < n; i++) {
      const key = r.str();
      if (key === "trace") trace = r.str();
      else if (key === "routing_repairs") {
        const m = r.mapHeader();
        for (let j = 0; j < m; j++) {
          const k = r.int();
          if (k !== undefined) nodes.push(k);
          else r.span();
          r.span();
        }
      } else r.span();
    }
    return trace !== undefined && nodes.length ? { trace, nodes } : null;
  } catch {
    return null;
  }
}

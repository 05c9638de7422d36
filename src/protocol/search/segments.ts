// What a run's search indexes of an episode: segments of text, each from one node (or the task),
// with the role it came from and the tool it names. Pure: the episode cuts them out of the nodes it
// stores (src/objects/episode/search-sync.ts), the run's index keeps and searches them (search-store.ts).
//
// Per node: its message's text (a str content, or its parts' texts), its reasoning, and each tool
// call (the tool's name and arguments); a tool's answer is a `tool` segment naming the tool. Per
// episode: the task (its prompt and expected answer, and any other text of its data). Bounded:
// a segment keeps its first SEGMENT_CHARS characters, an episode its first EPISODE_CHARS.

import type { Json, JsonObject } from "../wire/json-view.js";

/** A segment keeps at most this many characters (the head of a long tool output says most). */
export const SEGMENT_CHARS = 2000;
/** An episode indexes at most this many characters in all; what comes later is not searchable. */
export const EPISODE_CHARS = 64_000;

/** Where a segment's text was in its node. */
export type SegmentKind = "text" | "reasoning" | "call" | "result" | "task";

export interface Segment {
  /** The trace it is from (the task's: the first trace). */
  trace: string;
  /** The node's index in its trace; -1 for the task. */
  node: number;
  /** The message's role (`task` for the task). */
  role: string;
  /** The tool a call or a result names, else null. */
  tool: string | null;
  kind: SegmentKind;
  body: string;
}

/** The segments of one node's message (at most SEGMENT_CHARS each; empty texts give none). */
export function nodeSegments(trace: string, node: number, message: Json | undefined): Segment[] {
  if (!isObject(message)) return [];
  const role = typeof message.role === "string" ? message.role : "unknown";
  const out: Segment[] = [];
  const add = (kind: SegmentKind, body: string, tool: string | null) => {
    const text = cut(body);
    if (text) out.push({ trace, node, role, tool, kind, body: text });
  };
  const named = typeof message.name === "string" ? message.name : null;
  add(role === "tool" ? "result" : "text", textOf(message.content), role === "tool" ? named : null);
  if (typeof message.reasoning_content === "string") add("reasoning", message.reasoning_content, null);
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      if (!isObject(call)) continue;
      // OpenAI's {function: {name, arguments}} or verifiers' flat form
      const fn = isObject(call.function) ? call.function : call;
      const name = typeof fn.name === "string" ? fn.name : null;
      const args =
        typeof fn.arguments === "string"
          ? fn.arguments
          : fn.arguments === undefined
            ? ""
            : JSON.stringify(fn.arguments);
      add("call", `${name ?? ""} ${args}`, name);
    }
  }
  return out;
}

/** The task's segment: its data's text (prompt, answer, and any other strings), from the first trace's `open.task`. */
export function taskSegment(trace: string, task: Json | undefined): Segment | null {
  if (!isObject(task)) return null;
  const data = task.data ?? task;
  const parts: string[] = [];
  collectText(data, parts, 0);
  const body = cut(parts.join(" \n"));
  return body ? { trace, node: -1, role: "task", tool: null, kind: "task", body } : null;
}

/** `segments` as kept within an episode's budget: in order, until EPISODE_CHARS (`used` of it already spent). */
export function withinBudget(segments: readonly Segment[], used: number): { kept: Segment[]; used: number } {
  const kept: Segment[] = [];
  for (const s of segments) {
    if (used >= EPISODE_CHARS) break;
    const room = EPISODE_CHARS - used;
    const body = s.body.length > room ? s.body.slice(0, room) : s.body;
    kept.push(body === s.body ? s : { ...s, body });
    used += body.length;
  }
  return { kept, used };
}

function textOf(content: Json | undefined): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content.map((p) => (isObject(p) && typeof p.text === "string" ? p.text : "")).join(" ");
  return "";
}

function collectText(v: Json | undefined, out: string[], depth: number): void {
  if (depth > 8 || v === null || v === undefined) return;
  if (typeof v === "string") out.push(v);
  else if (typeof v === "number" || typeof v === "boolean") out.push(String(v));
  else if (Array.isArray(v)) for (const x of v) collectText(x, out, depth + 1);
  else if (typeof v === "object" && !("$bin" in v)) for (const x of Object.values(v)) collectText(x, out, depth + 1);
}

function cut(s: string): string {
  const t = s.trim();
  return t.length > SEGMENT_CHARS ? t.slice(0, SEGMENT_CHARS) : t;
}

function isObject(v: Json | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

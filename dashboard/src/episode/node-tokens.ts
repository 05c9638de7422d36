// What a node recorded of its tokens, read from the assembly's spans: its parent, `token_ids`,
// `mask` (true where the policy sampled the token) and `logprobs` (one per sampled token). The
// trainer's annotations fold onto exactly these (src/protocol/annotations/fold.ts). Cached per node: a
// node's tokens never change once it arrived (repairs rewrite only its routing).
import type { EpisodeAssembly, NodeState, TraceState } from "../../../src/protocol/index.js";
import { json } from "../model.js";

export interface NodeTokens {
  parent: number | null;
  token_ids: number[];
  mask: boolean[];
  logprobs: Array<number | null>;
  /** Tokens the policy sampled (mask true). */
  sampled: number;
}

const cache = new WeakMap<NodeState, NodeTokens>();
const KEYS = new Set(["parent", "token_ids", "mask", "logprobs"]);

export function nodeTokens(node: NodeState): NodeTokens {
  const hit = cache.get(node);
  if (hit) return hit;
  const got: Record<string, unknown> = {};
  for (let i = 0; i < node.keys.length; i++) {
    if (i === node.parentsAt || i === node.routedAt) continue;
    const key = json(node.keys[i]!);
    if (typeof key === "string" && KEYS.has(key)) got[key] = json(node.values[i]!);
  }
  const list = <T>(v: unknown, ok: (x: unknown) => x is T): T[] =>
    Array.isArray(v) ? v.map((x) => (ok(x) ? x : (null as T))) : [];
  const mask = list(got.mask, (x): x is boolean => typeof x === "boolean").map((x) => x === true);
  const out: NodeTokens = {
    parent: typeof got.parent === "number" ? got.parent : null,
    token_ids: list(got.token_ids, (x): x is number => typeof x === "number"),
    mask,
    logprobs: list(got.logprobs, (x): x is number => typeof x === "number"),
    sampled: mask.filter(Boolean).length,
  };
  cache.set(node, out);
  return out;
}

/** Every node of a trace, in index order. */
export function traceTokens(asm: EpisodeAssembly, t: TraceState): NodeTokens[] {
  return t.nodes.map((_n, i) => nodeTokens(asm.node(t, i)));
}

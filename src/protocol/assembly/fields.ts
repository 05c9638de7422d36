// Field names of a trace on the wire, as the reference (`verifiers/v1/serve/delta.py`) names them.

/** Append-only lists; a delta carries the items past what was sent. Order matters: it is the trace's key order. */
export const LIST_FIELDS = [
  "nodes",
  "calls",
  "payload",
  "errors",
  "extra_usage",
  "request_rewrites",
  "response_rewrites",
] as const;
export type ListField = (typeof LIST_FIELDS)[number];

/** The lists whose items are opaque values (every list but `nodes`, whose items the assembly reads). */
export type ItemField = Exclude<ListField, "nodes">;
export const ITEM_FIELDS = LIST_FIELDS.filter((f): f is ItemField => f !== "nodes");

export function isListField(name: string): name is ListField {
  return (LIST_FIELDS as readonly string[]).includes(name);
}

/** The trace header (`open`), sent once per trace. */
export const HEADER_FIELDS = ["version", "id", "verifiers", "task"] as const;

/**
 * The scalar fields `set` carries, whole. The reference applies any `set` key (a shallow update);
 * these are the ones the relay knows, so that a newer one is named (`unknown`) rather than carried quietly.
 */
export const SCALAR_FIELDS = [
  "agent",
  "tools",
  "mm_token_type_id_map",
  "rewards",
  "metrics",
  "info",
  "root_reply",
  "is_completed",
  "ok",
  "stop_condition",
  "is_timeout",
  "timing",
  "num_input_tokens",
  "num_output_tokens",
  "num_total_tokens",
] as const;

const KNOWN_HEADER = new Set<string>(HEADER_FIELDS);
const KNOWN_SCALAR = new Set<string>(SCALAR_FIELDS);

export function isHeaderField(name: string): boolean {
  return KNOWN_HEADER.has(name);
}

export function isScalarField(name: string): boolean {
  return KNOWN_SCALAR.has(name);
}

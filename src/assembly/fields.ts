// Field names of a trace on the wire, as the reference (`verifiers/v1/serve/delta.py`) names them.

/** Keys of a trace's `open` header, sent once. */
export const HEADER_FIELDS = ["version", "id", "verifiers", "task"] as const;

/** Append-only lists; a delta carries the items past what was sent. Order matters: it is the trace's key order. */
export const LIST_FIELDS = ["nodes", "calls", "payload", "errors", "extra_usage", "request_rewrites", "response_rewrites"] as const;
export type ListField = (typeof LIST_FIELDS)[number];

/** The scalar fields the first `set` of a trace carries, in this order. */
export const SCALAR_FIELDS = [
  "agent", "tools", "mm_token_type_id_map", "rewards", "metrics", "info", "root_reply", "is_completed",
  "ok", "stop_condition", "is_timeout", "timing", "num_input_tokens", "num_output_tokens", "num_total_tokens",
] as const;

export function isListField(name: string): name is ListField {
  return (LIST_FIELDS as readonly string[]).includes(name);
}

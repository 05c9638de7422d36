// Field names of a trace on the wire, as the reference (`verifiers/v1/serve/delta.py`) names them.

/** Append-only lists; a delta carries the items past what was sent. Order matters: it is the trace's key order. */
export const LIST_FIELDS = ["nodes", "calls", "payload", "errors", "extra_usage", "request_rewrites", "response_rewrites"] as const;
export type ListField = (typeof LIST_FIELDS)[number];

export function isListField(name: string): name is ListField {
  return (LIST_FIELDS as readonly string[]).includes(name);
}

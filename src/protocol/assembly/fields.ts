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

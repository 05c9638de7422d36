/**
 * A delta (or reply) the assembly refuses. `field` names where the problem is, in the
 * delta's own terms (`nodes[3].routed_experts`, `routing_repairs[7]`); `code` is stable for
 * clients. A refused delta leaves the assembly exactly as it was.
 */
export class DeltaError extends Error {
  readonly code: DeltaErrorCode;
  readonly field: string;
  /** The message without the field prefix. */
  readonly detail: string;
  constructor(code: DeltaErrorCode, field: string, detail: string) {
    super(`${field}: ${detail}`);
    this.name = "DeltaError";
    this.code = code;
    this.field = field;
    this.detail = detail;
  }
}

export type DeltaErrorCode =
  | "malformed" // not valid canonical msgpack
  | "wrong_type" // a known key holds a value of the wrong type
  | "unknown_trace" // no `open` for a trace the assembly does not hold
  | "index_out_of_range" // a link or repair names a node that does not exist
  | "no_routing" // a repair on a node without `routed_experts`
  | "bad_ndarray" // unknown dtype, shape/data mismatch, repair row of another shape
  | "producer_conflict" // an envelope's acknowledged counts contradict what the relay holds
  | "finish_mismatch"; // the reply's summaries disagree with the assembly (reference message)

/** `finish` failed the reference's count check; `message` is the reference text exactly. */
export class FinishError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FinishError";
  }
}

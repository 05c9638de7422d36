// Refusals as HTTP answers: one JSON shape, one status per error code.
import { DeltaError, FinishError, type DeltaErrorCode } from "../assembly/errors.js";

/** An error that maps to an HTTP status (or a WebSocket error message). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
    this.name = "HttpError";
  }
}

const STATUS: Record<DeltaErrorCode, number> = {
  malformed: 400,
  wrong_type: 400,
  unknown_trace: 422,
  index_out_of_range: 422,
  no_routing: 422,
  bad_ndarray: 422,
  producer_conflict: 409,
  finish_mismatch: 409,
};

export interface ErrorBody {
  error: string;
  message: string;
  field?: string;
}

/** Status and body for a refusal; anything unexpected is rethrown (a 500 is a bug, not a refusal). */
export function describeError(e: unknown): { status: number; body: ErrorBody } {
  if (e instanceof HttpError) return { status: e.status, body: { error: e.code, message: e.message, ...(e.field ? { field: e.field } : {}) } };
  if (e instanceof DeltaError) return { status: STATUS[e.code], body: { error: e.code, field: e.field, message: e.message } };
  if (e instanceof FinishError) return { status: 409, body: { error: "finish_mismatch", message: e.message } };
  throw e;
}

export function errorResponse(e: unknown, headers?: HeadersInit): Response {
  const { status, body } = describeError(e);
  return Response.json(body, { status, headers });
}

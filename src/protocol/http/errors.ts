// The one error model: every refusal the relay makes has a code from ERROR_STATUS, and one
// mapping turns an error into an HTTP answer (`errorResponse`), a producer-socket answer
// (`errorAnswer`); sockets close with the codes below. Anything that is not a refusal is a bug:
// it is logged and answered 500 / closed 1011, never dropped. Pure: no runtime imports.
import { DeltaError, type DeltaErrorCode, FinishError } from "../assembly/errors.js";

/** Every error code the relay answers with, and its HTTP status. */
export const ERROR_STATUS = {
  // the request is malformed
  malformed: 400,
  wrong_type: 400,
  bad_episode_id: 400,
  bad_after: 400,
  bad_protocol: 400,
  bad_status: 400,
  bad_prefix: 400,
  bad_limit: 400,
  bad_cursor: 400,
  bad_sort: 400,
  bad_run: 400,
  bad_filter: 400,
  /** A run search's query (src/protocol/search/query.ts). */
  bad_query: 400,
  /** A run's flag rules (src/protocol/flags/rules.ts). */
  bad_rules: 400,
  /** A run's alerts (src/protocol/alerts/config.ts). */
  bad_alerts: 400,
  // who is asking
  unauthorized: 401,
  forbidden: 403,
  // what is asked for
  not_found: 404,
  method_not_allowed: 405,
  episode_finished: 409,
  producer_conflict: 409,
  finish_mismatch: 409,
  /** An episode's dispatch identity is set once (src/protocol/envelope/dispatch.ts). */
  dispatch_conflict: 409,
  message_too_large: 413,
  episode_too_large: 413,
  /** An episode's trainer annotations are bounded (MAX_ANNOTATION_BYTES). */
  annotations_too_large: 413,
  // the delta does not fit the episode
  unknown_trace: 422,
  index_out_of_range: 422,
  no_routing: 422,
  bad_ndarray: 422,
  upgrade_required: 426,
  // the relay
  internal: 500,
  auth_not_configured: 503,
  /** The object's storage could not be brought to this release's schema (src/objects/storage/schema.ts). */
  storage_upgrade_failed: 503,
  /**
   * A local tier is not up (starting, restarting): answered by the local router with Retry-After (scripts/router.mjs).
   */
  unavailable: 503,
  /**
   * The runtime is out of memory for storage (SQLite's heap, shared by every object of a process, is
   * full: a local relay holding more episodes open than it can) or the object is overloaded: answered
   * with Retry-After; nothing was written, and a retry of the same envelope is taken once.
   */
  overloaded: 503,
} as const satisfies Record<DeltaErrorCode, number> & Record<string, number>;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** A refusal: a code (its status comes from ERROR_STATUS), a message that says what to do, where. */
export class RelayError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly field?: string,
    /** Extra response headers (`Allow`, `WWW-Authenticate`). */
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = "RelayError";
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }
}

/** How the refusal of an object whose storage could not be upgraded begins (recognised across RPC). */
export const STORAGE_UPGRADE_FAILED = "storage upgrade failed";

/** How soon a client may retry an `overloaded` or `unavailable` answer (seconds, the Retry-After header). */
export const RETRY_AFTER_S = 1;

/**
 * Whether an error is the runtime running short for now, not a bug: SQLite out of memory (its heap
 * is shared by every object of a process, so it frees as idle objects are evicted), or an error
 * the platform marks `overloaded` (documented on Durable Object exceptions).
 */
export function isOverload(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  return (e as { overloaded?: unknown }).overloaded === true || e.message.includes("SQLITE_NOMEM");
}

/** Whether an error is the runtime's own trouble, which a retry gets past (see asRefusal). */
function isRuntimeTrouble(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const flags = e as { retryable?: unknown; durableObjectReset?: unknown };
  return (
    flags.retryable === true || flags.durableObjectReset === true || e.message.startsWith("internal error; reference =")
  );
}

/** A 503 that asks for the same request again after RETRY_AFTER_S. */
function retryLater(code: "overloaded" | "unavailable", message: string): RelayError {
  return new RelayError(code, message, undefined, { "Retry-After": String(RETRY_AFTER_S) });
}

/** The refusal of a request the runtime had no memory for (`isOverload`). */
export function overloaded(): RelayError {
  return retryLater(
    "overloaded",
    "the relay is out of memory for storage for now (too many episodes open at once): send the same request again after Retry-After (a delta already taken is answered as a duplicate)",
  );
}

/** The JSON body of every refusal. */
export interface ErrorBody {
  error: ErrorCode;
  message: string;
  field?: string;
}

/** An error as a refusal, or null when it is not one (a bug). */
export function asRefusal(e: unknown): RelayError | null {
  if (e instanceof RelayError) return e;
  // thrown by an object over RPC, where an error keeps only its message (src/objects/storage/schema.ts)
  if (e instanceof Error && e.message.startsWith(STORAGE_UPGRADE_FAILED))
    return new RelayError("storage_upgrade_failed", e.message);
  if (isOverload(e)) return overloaded();
  // an object reset under the request (a deploy, or the runtime breaking its output gate), or the
  // runtime failing inside (its own "internal error; reference = …", as SQLite out of memory in a
  // runtime assertion reaches the Worker): transient, not the relay's bug; logged by toRefusal
  if (isRuntimeTrouble(e))
    return retryLater(
      "unavailable",
      "the episode's object restarted while answering: send the same request again after Retry-After",
    );
  if (e instanceof DeltaError) return new RelayError(e.code, e.message, e.field);
  if (e instanceof FinishError) return new RelayError("finish_mismatch", e.message);
  return null;
}

/** Refusal as is; anything else logged (with where it happened) and turned into `internal`. */
export function toRefusal(e: unknown, where: string): RelayError {
  const r = asRefusal(e);
  if (r?.code === "overloaded" || (r?.code === "unavailable" && isRuntimeTrouble(e))) overloadSeen(where, e);
  if (r) return r;
  console.error(`${where}: unexpected error`, e);
  return new RelayError("internal", "the relay hit an unexpected error; it was logged");
}

/** Transient runtime troubles answered 503 since the last one logged; logged at most every OVERLOAD_LOG_MS (a storm answers thousands). */
let overloads = 0;
let overloadLogged = 0;
const OVERLOAD_LOG_MS = 10_000;

function overloadSeen(where: string, e: unknown): void {
  overloads++;
  const now = Date.now();
  if (now - overloadLogged < OVERLOAD_LOG_MS) return;
  console.warn(`${where}: the runtime is short for now, answered 503 (${overloads} since the last such line)`, e);
  overloads = 0;
  overloadLogged = now;
}

export function errorBody(r: RelayError): ErrorBody {
  return { error: r.code, message: r.message, ...(r.field ? { field: r.field } : {}) };
}

/** The HTTP answer for any error (an unexpected one is logged and answered 500). */
export function errorResponse(e: unknown, where = "request"): Response {
  const r = toRefusal(e, where);
  return Response.json(errorBody(r), { status: r.status, headers: r.headers });
}

/** A producer socket's answer to a message it sent that was refused (the socket stays open). */
export interface ErrorAnswer extends ErrorBody {
  ok: false;
  status: number;
}

export function errorAnswer(e: unknown, where = "ingest socket"): ErrorAnswer {
  const r = toRefusal(e, where);
  return { ok: false, status: r.status, ...errorBody(r) };
}

// ---- WebSocket closes ----

export const CLOSE_NORMAL = 1000;
/** The peer broke the protocol (a message it must not send). */
export const CLOSE_POLICY = 1008;
export const CLOSE_TOO_BIG = 1009;
export const CLOSE_INTERNAL = 1011;
/** Try again later (too many watchers, a catch-up cut by a restart). */
export const CLOSE_TRY_LATER = 1013;
/** The watcher fell too far behind its acknowledgements: resume with ?after=. */
export const CLOSE_TOO_SLOW = 4008;

/** A close reason fits in 123 bytes of UTF-8 (RFC 6455 §5.5); longer ones are cut. */
export function closeReason(reason: string): string {
  const bytes = new TextEncoder().encode(reason);
  if (bytes.length <= 123) return reason;
  let cut = 120;
  while (cut > 0 && (bytes[cut]! & 0xc0) === 0x80) cut--; // not inside a character
  return `${new TextDecoder().decode(bytes.subarray(0, cut))}...`;
}

/** Close a socket that may already be gone (a close on a closed socket throws). */
export function safeClose(ws: { close(code?: number, reason?: string): void }, code: number, reason: string): void {
  try {
    ws.close(code, closeReason(reason));
  } catch {
    // already closed or closing
  }
}

/** Answer a peer's close (completing the handshake); 1005/1006 mean "no code" and cannot be sent. */
export function echoClose(ws: { close(code?: number, reason?: string): void }, code: number, reason: string): void {
  safeClose(ws, code === 1005 || code === 1006 ? CLOSE_NORMAL : code, reason);
}

/** 405 with the Allow header. */
export function methodNotAllowed(method: string, allowed: readonly string[]): RelayError {
  return new RelayError(
    "method_not_allowed",
    `${method} is not allowed on this path (allowed: ${allowed.join(", ")})`,
    undefined,
    {
      allow: allowed.join(", "),
    },
  );
}

/** 426 for an endpoint that is a WebSocket. */
export function upgradeRequired(what: string): RelayError {
  return new RelayError("upgrade_required", `${what} is a WebSocket: connect with Upgrade: websocket`);
}

export function tooLarge(size: number, max: number): RelayError {
  return new RelayError("message_too_large", `message of ${size} bytes exceeds the limit of ${max} bytes`);
}

// ---- answers across the Worker → object RPC boundary ----

/**
 * What an object's RPC method returns: its value, or a refusal as data (an error thrown across
 * RPC keeps only its message, not its code). Anything unexpected is thrown and reaches the
 * Worker's catch-all.
 */
export type Answer<T> = { ok: true; value: T } | { ok: false; error: ErrorBody };

export function answerOf<T>(fn: () => T): Answer<T> {
  try {
    return { ok: true, value: fn() };
  } catch (e) {
    return refusalAnswer(e);
  }
}

/** `answerOf` for work that awaits first (reading a request body). */
export async function answerOfAsync<T>(fn: () => Promise<T>): Promise<Answer<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (e) {
    return refusalAnswer(e);
  }
}

/** A refusal as an answer; anything else is rethrown (the caller's catch-all logs it and answers 500). */
function refusalAnswer(e: unknown): { ok: false; error: ErrorBody } {
  const r = asRefusal(e);
  if (!r) throw e;
  return { ok: false, error: errorBody(r) };
}

/** The HTTP answer for an RPC answer: its value as JSON, or the refusal. */
export function answerResponse<T>(a: Answer<T>): Response {
  if (a.ok) return Response.json(a.value);
  return errorResponse(new RelayError(a.error.error, a.error.message, a.error.field));
}

// The one error model: every refusal maps to one status, one JSON body, one close; anything
// else is a bug, answered 500 / closed 1011 and logged, never passed off as a refusal.
import { afterEach, describe, expect, it, vi } from "vitest";
import { DeltaError, FinishError } from "../../src/protocol/assembly/errors.js";
import {
  answerOf,
  answerResponse,
  closeReason,
  ERROR_STATUS,
  errorAnswer,
  errorResponse,
  methodNotAllowed,
  RelayError,
  safeClose,
} from "../../src/protocol/http/errors.js";

afterEach(() => {
  vi.restoreAllMocks();
});

describe("errors as HTTP answers", () => {
  it("a RelayError answers its table status with {error, message, field} and its headers", async () => {
    const res = errorResponse(new RelayError("bad_limit", "limit must be 1..500", "limit"));
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: "bad_limit", message: "limit must be 1..500", field: "limit" });
    const allow = errorResponse(methodNotAllowed("PUT", ["GET", "HEAD"]));
    expect(allow.status).toBe(405);
    expect(allow.headers.get("allow")).toBe("GET, HEAD");
  });

  it("assembly refusals keep their code and field; a finish mismatch is 409", async () => {
    const d = errorResponse(new DeltaError("index_out_of_range", "links[9]", "node 9 does not exist"));
    expect(d.status).toBe(422);
    expect(await d.json()).toEqual({
      error: "index_out_of_range",
      field: "links[9]",
      message: "links[9]: node 9 does not exist",
    });
    const f = errorResponse(new FinishError("trace t: 3 nodes, reply says 4"));
    expect(f.status).toBe(409);
    expect(await f.json()).toEqual({ error: "finish_mismatch", message: "trace t: 3 nodes, reply says 4" });
  });

  it("anything else is logged and answered 500 internal, without its message", async () => {
    const log = vi.spyOn(console, "error").mockImplementation(() => {});
    const res = errorResponse(new TypeError("secret detail"), "GET /x");
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe("internal");
    expect(body.message).not.toContain("secret detail");
    expect(log).toHaveBeenCalledOnce();
    expect(String(log.mock.calls[0]![0])).toContain("GET /x");
  });

  it("every code has a 4xx or 5xx status", () => {
    for (const [code, status] of Object.entries(ERROR_STATUS)) {
      expect(status, code).toBeGreaterThanOrEqual(400);
      expect(status, code).toBeLessThan(600);
    }
  });
});

describe("errors across RPC", () => {
  it("a refusal becomes data and back the same answer", async () => {
    const a = answerOf(() => {
      throw new RelayError("episode_finished", "the episode is finished");
    });
    expect(a).toEqual({ ok: false, error: { error: "episode_finished", message: "the episode is finished" } });
    const res = answerResponse(a);
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: "episode_finished", message: "the episode is finished" });
    expect(await answerResponse(answerOf(() => ({ ok: true }))).json()).toEqual({ ok: true });
  });

  it("a bug is not turned into data: it is thrown (the Worker answers 500)", () => {
    expect(() =>
      answerOf(() => {
        throw new RangeError("boom");
      }),
    ).toThrow(RangeError);
  });
});

describe("errors on sockets", () => {
  it("a producer's refused message is answered with ok:false and the status", () => {
    expect(errorAnswer(new DeltaError("malformed", "delta", "truncated"))).toEqual({
      ok: false,
      status: 400,
      error: "malformed",
      field: "delta",
      message: "delta: truncated",
    });
  });

  it("a close reason fits 123 bytes of UTF-8 without splitting a character", () => {
    const long = "é".repeat(100); // 200 bytes
    const r = closeReason(long);
    expect(new TextEncoder().encode(r).length).toBeLessThanOrEqual(123);
    expect(r.endsWith("...")).toBe(true);
    expect(r.includes("\uFFFD")).toBe(false);
    expect(closeReason("short")).toBe("short");
  });

  it("closing a socket that is already gone does not throw", () => {
    const gone = {
      close() {
        throw new Error("already closed");
      },
    };
    expect(() => safeClose(gone, 1000, "bye")).not.toThrow();
  });
});

describe("the runtime short for now: 503 with Retry-After, never a 500", () => {
  afterEach(() => vi.restoreAllMocks());

  it("SQLite out of memory (a local relay with too many objects open) is `overloaded`", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const res = errorResponse(new Error("out of memory: SQLITE_NOMEM"), "POST deltas");
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe("overloaded");
    expect(body.message).toContain("send the same request again");
    expect(warn).toHaveBeenCalled();
  });

  it("an object reset under the request, or the runtime's own internal error, is `unavailable` (retried)", () => {
    vi.spyOn(console, "warn").mockImplementation(() => {});
    const reset = Object.assign(new Error("Durable Object reset because its code was updated."), {
      durableObjectReset: true,
    });
    const retryable = Object.assign(new Error("Network connection lost."), { retryable: true });
    const internal = new Error("internal error; reference = 315q6fcm5e29ho96gefu4vab");
    for (const e of [reset, retryable, internal]) {
      const res = errorResponse(e);
      expect(res.status, e.message).toBe(503);
      expect(res.headers.get("retry-after")).toBe("1");
    }
  });

  it("any other error is still a bug: 500, logged", () => {
    const err = vi.spyOn(console, "error").mockImplementation(() => {});
    expect(errorResponse(new Error("x is undefined")).status).toBe(500);
    expect(err).toHaveBeenCalled();
  });
});

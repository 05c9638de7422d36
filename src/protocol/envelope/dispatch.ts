// A rollout's dispatch identity: who dispatched it in the trainer, in prime-rl's shape
// (`dispatch_info` in its orchestrator/live.py):
//
//   {id, kind, env, group, task, policy_version, step, started}
//
// `id` names the rollout before its first trace exists, `kind` is train or eval, `group` the GRPO
// group it was sampled in, `task` the task's name, `policy_version` the policy it was sampled with,
// `step` the run step its task was pinned to, `started` wall-clock seconds. Every key is optional;
// other keys are kept as given. It travels beside the episode (an envelope's `dispatch`, a bare
// delta's top-level `dispatch` key, or `POST /v1/episodes/{id}/dispatch`) and is never part of the
// assembled episode. An episode's identity is set once: the same value again changes nothing, a
// different one is refused (409 dispatch_conflict). Pure: no runtime imports.

import { DeltaError } from "../assembly/errors.js";
import { RelayError } from "../http/errors.js";
import { WireError } from "../wire/errors.js";
import { kindOf } from "../wire/format.js";
import { type Json, type JsonObject, toJson } from "../wire/json-view.js";
import { decodeLossless, encodeLossless, F64, fromJson, type LMap, type LValue } from "../wire/lossless.js";
import { Reader } from "../wire/reader.js";
import { ChunkWriter } from "../wire/writer.js";

/** An identity's msgpack map is at most this long (a few hundred bytes in practice). */
export const MAX_DISPATCH_BYTES = 4096;

/** The keys the relay reads (the rest are kept, not read). */
export interface DispatchFacts {
  id: string | null;
  kind: string | null;
  env: string | null;
  group: string | null;
  task: string | null;
  policy_version: number | null;
  step: number | null;
  /** Seconds since the epoch. */
  started: number | null;
}

/** What each read key may hold (null is always allowed: "not known"). */
const KEY_TYPES: Record<keyof DispatchFacts, "text" | "count" | "time"> = {
  id: "text",
  kind: "text",
  env: "text",
  group: "text",
  task: "text",
  policy_version: "count",
  step: "count",
  started: "time",
};

/**
 * Check an identity given as msgpack (an envelope's or a delta's `dispatch` value); returns the
 * bytes as given. Throws a DeltaError naming `field` (400) when it is not one.
 */
export function checkDispatch(bytes: Uint8Array, field = "dispatch"): Uint8Array {
  if (bytes.length > MAX_DISPATCH_BYTES) {
    throw new DeltaError(
      "malformed",
      field,
      `an identity is at most ${MAX_DISPATCH_BYTES} bytes of msgpack (got ${bytes.length})`,
    );
  }
  if (bytes.length === 0 || kindOf(bytes[0]!) !== "map")
    throw new DeltaError("wrong_type", field, "must be a map (the rollout's dispatch identity)");
  let v: LValue;
  try {
    v = decodeLossless(bytes);
  } catch (e) {
    if (e instanceof WireError || e instanceof RangeError) throw new DeltaError("malformed", field, e.message);
    throw e;
  }
  checkValue(v as LMap, field);
  return bytes;
}

/** An identity given as JSON (`POST .../dispatch` with a JSON body): its msgpack bytes, checked. */
export function dispatchFromJson(value: unknown, field = "dispatch"): Uint8Array {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new DeltaError("wrong_type", field, "must be a JSON object");
  const bytes = encodeLossless(fromJson(value));
  return checkDispatch(bytes, field);
}

/** The identity as JSON (what the index row and the API carry). */
export function dispatchJson(bytes: Uint8Array): JsonObject {
  return toJson(decodeLossless(bytes)) as JsonObject;
}

/** The keys the relay reads, from the identity's JSON (a key of the wrong type reads as null). */
export function dispatchFacts(d: JsonObject | null | undefined): DispatchFacts {
  const text = (k: string) => (typeof d?.[k] === "string" ? (d[k] as string) : null);
  const count = (k: string) =>
    typeof d?.[k] === "number" && Number.isSafeInteger(d[k]) && (d[k] as number) >= 0 ? (d[k] as number) : null;
  const time = typeof d?.started === "number" && Number.isFinite(d.started) ? d.started : null;
  return {
    id: text("id"),
    kind: text("kind"),
    env: text("env"),
    group: text("group"),
    task: text("task"),
    policy_version: count("policy_version"),
    step: count("step"),
    started: time,
  };
}

/**
 * Whether two identities hold the same value: the same keys (in any order) with equal values
 * (numbers by value, so `1` and `1.0` agree), as a user resending the identity means it.
 */
export function sameDispatch(a: Uint8Array, b: Uint8Array): boolean {
  return sameJson(dispatchJson(a), dispatchJson(b));
}

/**
 * `delta` with `identity` as its last top-level `dispatch` key, as prime-rl's live files carry it on
 * a trace's first line (for producers, tools and tests; the relay takes it off again).
 */
export function attachDispatch(delta: Uint8Array, identity: Uint8Array): Uint8Array {
  const r = new Reader(delta);
  const n = r.mapHeader();
  if (n < 0) throw new DeltaError("wrong_type", "delta", "a delta must be a msgpack map");
  const w = new ChunkWriter();
  w.mapHeader(n + 1);
  w.raw(delta.subarray(r.pos));
  w.str("dispatch");
  w.raw(identity);
  return w.bytes();
}

/** The refusal when an episode already has another identity (nothing is changed). */
export function dispatchConflict(held: Uint8Array, given: Uint8Array): RelayError {
  const show = (b: Uint8Array) => {
    const s = JSON.stringify(dispatchJson(b));
    return s.length > 300 ? `${s.slice(0, 300)}…` : s;
  };
  return new RelayError(
    "dispatch_conflict",
    `the episode's dispatch identity is set once: it is ${show(held)}, this names ${show(given)}`,
    "dispatch",
  );
}

function checkValue(m: LMap, field: string): void {
  for (const [k, v] of m.entries) {
    if (typeof k !== "string") throw new DeltaError("wrong_type", `${field} key`, "keys must be str");
    const type = KEY_TYPES[k as keyof DispatchFacts];
    if (type === undefined || v === null) continue;
    const where = `${field}.${k}`;
    if (type === "text" && !(typeof v === "string" && v.length <= 256))
      throw new DeltaError("wrong_type", where, "must be a str of at most 256 characters");
    if (type === "count" && !(typeof v === "number" && Number.isSafeInteger(v) && v >= 0))
      throw new DeltaError("wrong_type", where, "must be an int ≥ 0");
    if (
      type === "time" &&
      !((typeof v === "number" || v instanceof F64) && Number.isFinite(v instanceof F64 ? v.value : v))
    ) {
      throw new DeltaError("wrong_type", where, "must be a number (seconds since the epoch)");
    }
  }
}

function sameJson(a: Json, b: Json): boolean {
  if (a === null || typeof a !== "object") return a === b;
  if (b === null || typeof b !== "object" || Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === (b as Json[]).length && a.every((x, i) => sameJson(x, (b as Json[])[i]!));
  const ka = Object.keys(a);
  const bo = b as JsonObject;
  return (
    ka.length === Object.keys(bo).length &&
    ka.every((k) => Object.hasOwn(bo, k) && sameJson((a as JsonObject)[k]!, bo[k]!))
  );
}

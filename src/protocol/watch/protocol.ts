// Watcher protocol, both directions, encode and decode side by side: the relay encodes, the
// TypeScript client (and the dashboard through it) decodes with `decodeWatchMessage`.
//
// Server → watcher, binary msgpack maps with a `type`:
//   hello      {type, protocol: 2, episode, status, seq, ack_bytes}
//   snapshot   {type, seq, reason, deltas: [bin...], more: bool}   state as of `seq`, as upstream deltas
//   frames     {type, frames: [[seq, bin], ...]}                   deltas as applied, in seq order
//   caught_up  {type, seq}                                         everything up to `seq` was sent
//   finish     {type, status, seq, reply: bin, error}              the run ended (upstream reply bytes)
//   status     {type, status, seq, error}                          the run's status changed (finish_refused)
//   annotations {type, version}                                   the trainer's annotations changed: `version`
//                                                                  records merged (GET .../annotations has them);
//                                                                  sent only to watchers that ask (`?annotations=1`)
//
// Watcher → server, text: `{"type":"ack","bytes":N}` each time it has received another
// `ack_bytes` bytes (N: every binary message's length, summed since the socket opened); the relay
// paces what it sends by it. "ping" is answered "pong" by the platform without waking the episode.
// Snapshots and replays are split into messages of about MESSAGE_BYTES. A client skips a message
// type it does not know (a later release may add one).

import { decode } from "@msgpack/msgpack";
import { ChunkWriter, encodeStr } from "../wire/writer.js";

export const PROTOCOL = 2;
/** Target size of one message when a snapshot or a replay is split. */
export const MESSAGE_BYTES = 2 * 1024 * 1024;
/** How often a watcher acknowledges what it received, in bytes (sent in hello). */
export const ACK_BYTES = 1024 * 1024;

const K = Object.fromEntries(
  [
    "type",
    "protocol",
    "episode",
    "status",
    "seq",
    "reason",
    "deltas",
    "more",
    "frames",
    "reply",
    "error",
    "hello",
    "snapshot",
    "caught_up",
    "finish",
    "ack_bytes",
    "annotations",
    "version",
  ].map((k) => [k, encodeStr(k)]),
);

function head(w: ChunkWriter, type: string, fields: number): void {
  w.mapHeader(fields + 1);
  w.raw(K.type!);
  w.raw(K[type]!);
}

function bin(w: ChunkWriter, b: Uint8Array | Chunks): void {
  w.binHeader(b.length);
  if (b instanceof Uint8Array) w.raw(b);
  else for (const c of b.chunks) w.raw(c);
}

/** A bin value's bytes as pieces (their concatenation is the value): written without joining them first. */
export interface Chunks {
  chunks: readonly Uint8Array[];
  length: number;
}

export function helloMessage(episode: string, status: string, seq: number, ackBytes = ACK_BYTES): Uint8Array {
  const w = new ChunkWriter();
  head(w, "hello", 5);
  w.raw(K.protocol!);
  w.int(PROTOCOL);
  w.raw(K.episode!);
  w.str(episode);
  w.raw(K.status!);
  w.str(status);
  w.raw(K.seq!);
  w.int(seq);
  w.raw(K.ack_bytes!);
  w.int(ackBytes);
  return w.bytes();
}

/** One snapshot message: part of the state as of `seq` (`more`: further parts follow). */
export function snapshotMessage(
  seq: number,
  reason: string,
  deltas: ReadonlyArray<Uint8Array | Chunks>,
  more: boolean,
  into?: (length: number) => Uint8Array,
): Uint8Array {
  const w = new ChunkWriter();
  head(w, "snapshot", 4);
  w.raw(K.seq!);
  w.int(seq);
  w.raw(K.reason!);
  w.str(reason);
  w.raw(K.deltas!);
  w.arrayHeader(deltas.length);
  for (const d of deltas) bin(w, d);
  w.raw(K.more!);
  w.bool(more);
  return w.bytes(into);
}

export interface Frame {
  seq: number;
  delta: Uint8Array;
}

/** One message carrying consecutive frames (joined into `into(length)` when given). */
export function framesMessage(frames: Frame[], into?: (length: number) => Uint8Array): Uint8Array {
  const w = new ChunkWriter();
  head(w, "frames", 1);
  w.raw(K.frames!);
  w.arrayHeader(frames.length);
  for (const f of frames) {
    w.arrayHeader(2);
    w.int(f.seq);
    bin(w, f.delta);
  }
  return w.bytes(into);
}

/** `{type: "frames", frames: ` as framesMessage writes it: what precedes the frames' array header. */
const FRAMES_HEAD = (() => {
  const w = new ChunkWriter();
  head(w, "frames", 1);
  w.raw(K.frames!);
  return w.bytes().slice();
})();

/** The bytes of `frameMessage(seq, delta)` before the delta's, for a delta of `n` bytes. */
function frameHead(seq: number, n: number): Uint8Array {
  const w = new ChunkWriter();
  w.raw(FRAMES_HEAD);
  w.arrayHeader(1);
  w.arrayHeader(2);
  w.int(seq);
  w.binHeader(n);
  return w.bytes();
}

/**
 * One frame alone as a `frames` message, in a buffer of its own of exactly its size; the delta's
 * bytes are its tail (`message.subarray(message.length - delta.length)`). The same bytes as
 * `framesMessage([frame])`; several such messages join into one with `joinFrameMessages`.
 */
export function frameMessage(seq: number, delta: Uint8Array): Uint8Array {
  const head = frameHead(seq, delta.length);
  const out = new Uint8Array(head.length + delta.length);
  out.set(head, 0);
  out.set(delta, head.length);
  return out;
}

/**
 * Whether `message` is `frameMessage(seq, delta)` with `delta` its own tail (a feed's frame as the episode sent it).
 */
export function isFrameMessageOf(message: Uint8Array, seq: number, delta: Uint8Array): boolean {
  if (delta.buffer !== message.buffer || delta.byteOffset + delta.length !== message.byteOffset + message.length)
    return false;
  const head = frameHead(seq, delta.length);
  if (message.length !== head.length + delta.length) return false;
  // the head is compared (a few bytes); the delta's bytes are the same memory
  for (let i = 0; i < head.length; i++) if (message[i] !== head[i]) return false;
  return true;
}

/**
 * Frame messages (`frameMessage`, consecutive) as one `frames` message: the same bytes as `framesMessage` of their
 * frames.
 */
export function joinFrameMessages(messages: readonly Uint8Array[]): Uint8Array {
  if (messages.length === 1) return messages[0]!;
  const w = new ChunkWriter();
  w.raw(FRAMES_HEAD);
  w.arrayHeader(messages.length);
  for (const m of messages) w.raw(m.subarray(FRAMES_HEAD.length + 1));
  return w.bytes();
}

export function caughtUpMessage(seq: number): Uint8Array {
  const w = new ChunkWriter();
  head(w, "caught_up", 1);
  w.raw(K.seq!);
  w.int(seq);
  return w.bytes();
}

export function finishMessage(status: string, seq: number, reply: Uint8Array, error: string | null): Uint8Array {
  const w = new ChunkWriter();
  head(w, "finish", 4);
  w.raw(K.status!);
  w.str(status);
  w.raw(K.seq!);
  w.int(seq);
  w.raw(K.reply!);
  bin(w, reply);
  w.raw(K.error!);
  w.strOrNil(error);
  return w.bytes();
}

/** The run's status changed without ending: `finish_refused` with the reference's message. */
export function statusMessage(status: string, seq: number, error: string | null): Uint8Array {
  const w = new ChunkWriter();
  head(w, "status", 3);
  w.raw(K.status!);
  w.str(status);
  w.raw(K.seq!);
  w.int(seq);
  w.raw(K.error!);
  w.strOrNil(error);
  return w.bytes();
}

/** The trainer's annotations changed: `version` records merged so far (the client reads them over HTTP). */
export function annotationsMessage(version: number): Uint8Array {
  const w = new ChunkWriter();
  head(w, "annotations", 1);
  w.raw(K.version!);
  w.int(version);
  return w.bytes();
}

// ---- decoding (clients) ----

/**
 * Why a watcher gets a snapshot: it joined, it resumed from before the log or from past its end,
 * or a retraction took back frames it may hold.
 */
export type SnapshotReason = "join" | "trimmed" | "ahead" | "rewind";

export type WatchMessage =
  | { type: "hello"; protocol: number; episode: string; status: string; seq: number; ack_bytes: number }
  | { type: "snapshot"; seq: number; reason: SnapshotReason; deltas: Uint8Array[]; more: boolean }
  | { type: "frames"; frames: Array<[number, Uint8Array]> }
  | { type: "caught_up"; seq: number }
  | { type: "finish"; status: "finished" | "failed"; seq: number; reply: Uint8Array; error: string | null }
  | { type: "status"; status: string; seq: number; error: string | null }
  | { type: "annotations"; version: number }
  /** A message of a type this release does not know (a later relay's): skipped. */
  | { type: "unknown"; name: string };

/** One server → watcher message, checked field by field; throws on anything else. */
export function decodeWatchMessage(bytes: Uint8Array): WatchMessage {
  const m = decode(bytes) as Record<string, unknown> | null;
  if (typeof m !== "object" || m === null || Array.isArray(m)) throw new Error("watch message: not a map");
  const seq = () => field(m, "seq", isSeq);
  const errorOf = () => field(m, "error", (v): v is string | null => v === null || typeof v === "string");
  switch (m.type) {
    case "hello":
      return {
        type: "hello",
        protocol: field(m, "protocol", isSeq),
        episode: field(m, "episode", isStr),
        status: field(m, "status", isStr),
        seq: seq(),
        ack_bytes: field(m, "ack_bytes", isSeq),
      };
    case "snapshot":
      return {
        type: "snapshot",
        seq: seq(),
        reason: field(
          m,
          "reason",
          (v): v is SnapshotReason => v === "join" || v === "trimmed" || v === "ahead" || v === "rewind",
        ),
        deltas: field(m, "deltas", (v): v is Uint8Array[] => Array.isArray(v) && v.every(isBin)),
        more: field(m, "more", (v): v is boolean => typeof v === "boolean"),
      };
    case "frames":
      return {
        type: "frames",
        frames: field(
          m,
          "frames",
          (v): v is Array<[number, Uint8Array]> =>
            Array.isArray(v) && v.every((f) => Array.isArray(f) && f.length === 2 && isSeq(f[0]) && isBin(f[1])),
        ),
      };
    case "caught_up":
      return { type: "caught_up", seq: seq() };
    case "finish":
      return {
        type: "finish",
        status: field(m, "status", (v): v is "finished" | "failed" => v === "finished" || v === "failed"),
        seq: seq(),
        reply: field(m, "reply", isBin),
        error: errorOf(),
      };
    case "status":
      return { type: "status", status: field(m, "status", isStr), seq: seq(), error: errorOf() };
    case "annotations":
      return { type: "annotations", version: field(m, "version", isSeq) };
    default:
      if (typeof m.type !== "string") throw new Error("watch message: no type");
      return { type: "unknown", name: m.type };
  }
}

function field<T>(m: Record<string, unknown>, key: string, ok: (v: unknown) => v is T): T {
  const v = m[key];
  if (!ok(v)) throw new Error(`watch message ${String(m.type)}: bad ${key}`);
  return v;
}

const isStr = (v: unknown): v is string => typeof v === "string";
const isBin = (v: unknown): v is Uint8Array => v instanceof Uint8Array;
const isSeq = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

// ---- retry hints (close 1013) ----

/** A 1013 close reason with the relay's retry hint (already jittered; fits a close reason). */
export function retryReason(reason: string, retryMs: number): string {
  return `${reason.slice(0, 90)}; retry in ${Math.round(retryMs)} ms`;
}

/** The retry hint in a close reason, ms, or null when it has none. */
export function retryHintMs(reason: string): number | null {
  const m = /retry in (\d{1,7}) ms/.exec(reason);
  return m ? Number(m[1]) : null;
}

// ---- watcher → server ----

export type WatcherText = { type: "ack"; bytes: number };

/** The ack a watcher sends: the bytes it has received on this socket. */
export function ackMessage(bytes: number): string {
  return JSON.stringify({ type: "ack", bytes } satisfies WatcherText);
}

/** A watcher's text message, or null when it is not one (the relay closes the socket, 1008). */
export function parseWatcherText(text: string): WatcherText | null {
  if (text.length > 200) return null;
  try {
    const v = JSON.parse(text) as { type?: unknown; bytes?: unknown };
    if (v.type === "ack" && isSeq(v.bytes)) return { type: "ack", bytes: v.bytes };
  } catch {
    // not JSON
  }
  return null;
}

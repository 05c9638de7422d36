// Watcher protocol: server → watcher binary msgpack messages (maps with a `type`).
//
//   hello      {type, protocol: 2, episode, status, seq, ack_bytes}
//   snapshot   {type, seq, reason, deltas: [bin...], more: bool}   state as of `seq`, as upstream deltas
//   frames     {type, frames: [[seq, bin], ...]}                   deltas as applied, in seq order
//   caught_up  {type, seq}                                         everything up to `seq` was sent
//   finish     {type, status, seq, reply: bin, error}              the run ended (upstream reply bytes)
//   status     {type, status, seq, error}                          the run's status changed (finish_refused)
//
// Watcher → server, text: `{"type":"ack","bytes":N}` each time it has received another
// `ack_bytes` bytes (N: every binary message's length, summed since the socket opened); the relay
// paces what it sends by it. "ping" is answered "pong" by the platform without waking the episode.
// Snapshots and replays are split into messages of about MESSAGE_BYTES.

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
  ].map((k) => [k, encodeStr(k)]),
);

function head(w: ChunkWriter, type: string, fields: number): void {
  w.mapHeader(fields + 1);
  w.raw(K.type!);
  w.raw(K[type]!);
}

function bin(w: ChunkWriter, b: Uint8Array): void {
  w.binHeader(b.length);
  w.raw(b);
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
export function snapshotMessage(seq: number, reason: string, deltas: Uint8Array[], more: boolean): Uint8Array {
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
  w.byte(more ? 0xc3 : 0xc2);
  return w.bytes();
}

/** A watcher's acknowledgement: the bytes it has received on this socket, or null when `text` is not one. */
export function parseAck(text: string): number | null {
  if (text.length > 200) return null;
  try {
    const v = JSON.parse(text) as { type?: unknown; bytes?: unknown };
    if (v.type === "ack" && Number.isSafeInteger(v.bytes) && (v.bytes as number) >= 0) return v.bytes as number;
  } catch {
    // not JSON
  }
  return null;
}

/** The ack a watcher sends. */
export function ackMessage(bytes: number): string {
  return JSON.stringify({ type: "ack", bytes });
}

export interface Frame {
  seq: number;
  delta: Uint8Array;
}

/** One message carrying consecutive frames. */
export function framesMessage(frames: Frame[]): Uint8Array {
  const w = new ChunkWriter();
  head(w, "frames", 1);
  w.raw(K.frames!);
  w.arrayHeader(frames.length);
  for (const f of frames) {
    w.arrayHeader(2);
    w.int(f.seq);
    bin(w, f.delta);
  }
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
  if (error === null) w.byte(0xc0);
  else w.str(error);
  return w.bytes();
}

/** The run's status changed without ending: `finish_refused` with the reference's message. */
export function statusMessage(status: string, seq: number, error: string | null): Uint8Array {
  const w = new ChunkWriter();
  w.mapHeader(4);
  w.str("type");
  w.str("status");
  w.raw(K.status!);
  w.str(status);
  w.raw(K.seq!);
  w.int(seq);
  w.raw(K.error!);
  if (error === null) w.byte(0xc0);
  else w.str(error);
  return w.bytes();
}

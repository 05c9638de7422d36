// Watcher protocol: server → watcher binary msgpack messages (maps with a `type`).
//
//   hello      {type, protocol: 1, episode, status, seq}
//   snapshot   {type, seq, reason, deltas: [bin...], more: bool}   state as of `seq`, as upstream deltas
//   frames     {type, frames: [[seq, bin], ...]}                   deltas as applied, in seq order
//   caught_up  {type, seq}                                         everything up to `seq` was sent
//   finish     {type, status, seq, reply: bin, error}              the run ended (upstream reply bytes)
//
// A watcher sends nothing but "ping" (answered "pong" by the platform without waking the
// episode). Large snapshots and replays are split into several messages of about MESSAGE_BYTES.

import { ChunkWriter, encodeStr } from "../wire/writer.js";

export const PROTOCOL = 1;
/** Target size of one message when a snapshot or a replay is split. */
export const MESSAGE_BYTES = 4 * 1024 * 1024;

const K = Object.fromEntries(
  ["type", "protocol", "episode", "status", "seq", "reason", "deltas", "more", "frames", "reply", "error",
    "hello", "snapshot", "caught_up", "finish"].map((k) => [k, encodeStr(k)]),
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

export function helloMessage(episode: string, status: string, seq: number): Uint8Array {
  const w = new ChunkWriter();
  head(w, "hello", 4);
  w.raw(K.protocol!);
  w.int(PROTOCOL);
  w.raw(K.episode!);
  w.str(episode);
  w.raw(K.status!);
  w.str(status);
  w.raw(K.seq!);
  w.int(seq);
  return w.bytes();
}

/** Snapshot messages for `deltas` (split near MESSAGE_BYTES; the last has `more: false`). */
export function snapshotMessages(seq: number, reason: string, deltas: Uint8Array[]): Uint8Array[] {
  const groups = split(deltas, (d) => d.length);
  return groups.map((g, i) => {
    const w = new ChunkWriter();
    head(w, "snapshot", 4);
    w.raw(K.seq!);
    w.int(seq);
    w.raw(K.reason!);
    w.str(reason);
    w.raw(K.deltas!);
    w.arrayHeader(g.length);
    for (const d of g) bin(w, d);
    w.raw(K.more!);
    w.byte(i < groups.length - 1 ? 0xc3 : 0xc2);
    return w.bytes();
  });
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

/** Frames split into messages of about MESSAGE_BYTES. */
export function framesMessages(frames: Frame[]): Uint8Array[] {
  return split(frames, (f) => f.delta.length).map(framesMessage);
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

function split<T>(items: T[], size: (x: T) => number): T[][] {
  const out: T[][] = [];
  let cur: T[] = [];
  let bytes = 0;
  for (const x of items) {
    const n = size(x);
    if (cur.length && bytes + n > MESSAGE_BYTES) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(x);
    bytes += n;
  }
  if (cur.length || out.length === 0) out.push(cur);
  return out;
}

// A catch-up stream as the episode hands it to a hub: a byte stream of steps, each a 9-byte header
// (its kind, then a float64: a message's length, or the seq an ended stream brings a watcher to)
// and, for a message, its bytes. A byte stream and not an RPC call per message, because a hub reads
// a stream's bytes into buffers of its own (a BYOB read) and uses them again
// (src/protocol/hub/message-pool.ts), where each RPC result is a new buffer left to the collector.
// The episode writes one step at a time, as the hub reads (src/objects/episode/catchup-stream.ts).

import type { Lease } from "./message-pool.js";

/**
 * One step of a catch-up stream: the next watcher message, or the end (the watcher then holds
 * everything up to `end`), or word that a retraction took back what the stream gave (the hub's own
 * restart follows in its feed).
 */
export type StreamStep = { message: Uint8Array } | { end: number } | { rewound: true };

const STEP_HEADER_BYTES = 9;
const MESSAGE = 0;
const END = 1;
const REWOUND = 2;

/** The header of `step` (a message's bytes follow it, written apart: they are not copied). */
export function stepHeader(step: StreamStep): Uint8Array {
  const h = new Uint8Array(STEP_HEADER_BYTES);
  const dv = new DataView(h.buffer);
  if ("message" in step) {
    h[0] = MESSAGE;
    dv.setFloat64(1, step.message.length);
  } else if ("end" in step) {
    h[0] = END;
    dv.setFloat64(1, step.end);
  } else h[0] = REWOUND;
  return h;
}

/**
 * The episode's catch-up stream as the hub holds it (an RPC stub of src/objects/episode/catchup-stream.ts `CatchUpStream`): its byte stream, read once, a step
 * for each `pull` (nothing is written into it ahead of the hub); closed and disposed once done (a
 * stub kept alive keeps the episode's object awake).
 */
export interface CatchUpStream {
  bytes(): ReadableStream<Uint8Array> | Promise<ReadableStream<Uint8Array>>;
  pull(): unknown;
  close(): unknown;
  [Symbol.dispose]?(): void;
}

/** What a message is read into: a leased buffer (null: wait, none is free), kept or given back by the caller. */
export interface MessageBuffers {
  take(length: number): Lease | null | Promise<Lease>;
  adopt(lease: Lease, view: Uint8Array): void;
  giveBack(lease: Lease): void;
}

/** A BYOB reader with the streams standard's `min` (workerd and Node have it; not every lib's types do). */
interface ByobReader {
  read(view: Uint8Array, options: { min: number }): Promise<{ done: boolean; value?: Uint8Array }>;
  cancel(): Promise<void>;
}

/** The hub's side: steps read off the episode's stream, each message into a buffer of `buffers`. */
export class StreamReader {
  private header: ArrayBuffer = new ArrayBuffer(STEP_HEADER_BYTES);

  constructor(private readonly reader: ByobReader) {}

  static of(stream: ReadableStream<Uint8Array>): StreamReader {
    return new StreamReader(stream.getReader({ mode: "byob" }) as unknown as ByobReader);
  }

  /**
   * The next step. A message's bytes are in a buffer `buffers` leased (adopted there once read).
   * Throws when the stream ended or broke inside a step, or carries something else.
   */
  async next(buffers: MessageBuffers): Promise<StreamStep> {
    const h = await this.readFull(new Uint8Array(this.header));
    this.header = h.buffer as ArrayBuffer;
    const value = new DataView(h.buffer, h.byteOffset, STEP_HEADER_BYTES).getFloat64(1);
    if (h[0] === END) return { end: value };
    if (h[0] === REWOUND) return { rewound: true };
    if (h[0] !== MESSAGE || !Number.isSafeInteger(value) || value < 0)
      throw new Error(`catch-up stream: a step of kind ${h[0]} and length ${value}`);
    const lease = await buffers.take(value);
    if (lease === null) throw new Error("catch-up stream: no buffer to read a message into");
    let message: Uint8Array;
    try {
      message = await this.readFull(new Uint8Array(lease.buffer, 0, value));
    } catch (e) {
      buffers.giveBack(lease);
      throw e;
    }
    buffers.adopt(lease, message);
    return { message };
  }

  /** Stop reading: the episode's side lets go of the stream. */
  cancel(): void {
    this.reader.cancel().catch(() => undefined);
  }

  /** `view` filled (a BYOB read fills it in place and hands it back over a new buffer object). */
  private async readFull(view: Uint8Array): Promise<Uint8Array> {
    const length = view.byteLength;
    let filled = 0;
    let buffer = view.buffer as ArrayBuffer;
    const start = view.byteOffset;
    while (filled < length) {
      const r = await this.reader.read(new Uint8Array(buffer, start + filled, length - filled), {
        min: length - filled,
      });
      if (r.value) buffer = r.value.buffer as ArrayBuffer;
      if (r.done || !r.value) throw new Error("catch-up stream ended inside a step");
      filled += r.value.byteLength;
    }
    return new Uint8Array(buffer, start, length);
  }
}

// GET of an episode: the live form `{status, seq, error, traces}` while the run is on (or failed),
// the finished episode once the reply finished it; msgpack or the JSON view. The body is streamed:
// each pull of the response stream writes about STEP bytes, reading the bodies it needs from
// SQLite as of the pinned seq, so no answer holds more than a step of the episode in memory.

import { checkpointSize, writeCheckpoint, type Out, type TraceView } from "../assembly/render.js";
import type { BodyReader } from "../assembly/store.js";
import { encodeInt, encodeStr, NIL } from "../wire/writer.js";
import type { Pin } from "./sql-store.js";
import type { Meta } from "./storage.js";

const KEYS = Object.fromEntries(["status", "seq", "error", "traces"].map((k) => [k, encodeStr(k)]));

/** The live form's head values, encoded. */
function liveHead(m: Meta): Array<[Uint8Array, Uint8Array]> {
  return [
    [KEYS.status!, encodeStr(m.status)],
    [KEYS.seq!, encodeInt(m.seq)],
    [KEYS.error!, m.error === null ? NIL : encodeStr(m.error)],
  ];
}

/** `{status, seq, error, traces}`: the live assembly (checkpoint form, with `pending`). */
export function* writeLive(out: Out, reader: BodyReader, m: Meta, views: readonly TraceView[]): Generator<void> {
  out.map(4);
  for (const [k, v] of liveHead(m)) {
    out.key(k);
    out.value(v);
  }
  out.key(KEYS.traces!);
  yield* writeCheckpoint(out, reader, views);
  out.end();
}

export function liveSize(m: Meta, views: readonly TraceView[]): number {
  let size = 1 + KEYS.traces!.length + checkpointSize(views);
  for (const [k, v] of liveHead(m)) size += k.length + v.length;
  return size;
}

/** A response body that runs `writer` a step per pull, then lets go of `pin`. */
export function streamBody(out: Out, writer: Generator<void>, pin: Pin): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (!pin.valid) {
          // a retraction rewound the episode to before this answer's seq: what it read is gone
          pin.release();
          controller.error(new Error("the episode was rewound (a producer's unacknowledged frames were retracted) while this answer streamed; GET it again"));
          return;
        }
        let done: boolean | undefined;
        try {
          done = writer.next().done;
        } catch (e) {
          pin.release();
          controller.error(e);
          return;
        }
        for (const chunk of out.take()) controller.enqueue(chunk);
        if (done) {
          pin.release();
          controller.close();
        }
      },
      cancel() {
        pin.release();
      },
    },
    { highWaterMark: 0 },
  );
}

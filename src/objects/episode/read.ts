// GET of an episode and its status: the live form `{status, seq, error, traces}` while the run is on (or failed),
// the finished episode once the reply finished it; msgpack or the JSON view. The body is streamed:
// each pull of the response stream writes about STEP bytes, reading the bodies it needs from
// SQLite as of the pinned seq, so no answer holds more than a step of the episode in memory.

import type { BodyReader } from "../../protocol/assembly/bodies.js";
import {
  checkpointSize,
  JsonOut,
  MsgpackOut,
  type Out,
  type TraceView,
  writeCheckpoint,
  writeFinished,
} from "../../protocol/assembly/render.js";
import { parseReply } from "../../protocol/assembly/reply.js";
import { dispatchJson } from "../../protocol/envelope/dispatch.js";
import type { Pin } from "../../protocol/episode/holds.js";
import { MSGPACK, matchesEtag, type ReadRequest, representationEtag } from "../../protocol/http/representation.js";
import type { JsonObject } from "../../protocol/wire/json-view.js";
import { encodeInt, encodeStr, NIL } from "../../protocol/wire/writer.js";
import { type EpisodeStatus, type Meta, publicStatus } from "./record-store.js";
import type { EpisodeState } from "./state.js";

/** The episode, streamed from storage: the live form, or the finished episode. */
export function readEpisode(state: EpisodeState, req: ReadRequest): Response {
  const m = state.requireMeta();
  // caches must key on Accept: each representation has its own ETag
  const headers = new Headers({ "cache-control": "no-store", vary: "Accept" });
  const finished = m.status === "finished" && m.etag !== null ? m.etag : null;
  if (finished !== null) {
    const etag = representationEtag(finished, req.json);
    headers.set("etag", etag);
    headers.set("cache-control", "private, max-age=0, must-revalidate");
    if (matchesEtag(req.ifNoneMatch, etag)) return new Response(null, { status: 304, headers });
  }
  headers.set("content-type", req.json ? "application/json" : MSGPACK);
  const asm = state.memory().asm;
  let views: TraceView[];
  let head: ReturnType<typeof parseReply>["head"] | null = null;
  if (finished !== null) {
    const reply = parseReply(state.record.reply()!);
    head = reply.head ?? [];
    views = asm.pick(reply.summaries);
    if (!req.json) headers.set("content-length", String(m.size));
  } else {
    views = asm.views();
    if (!req.json) headers.set("content-length", String(liveSize(m, views)));
  }
  if (req.head) return new Response(null, { headers });
  const out = req.json ? new JsonOut() : new MsgpackOut();
  const pin = state.store.pin(m.seq);
  const reader = state.store.reader(m.seq);
  const writer = head !== null ? writeFinished(out, reader, head, views) : writeLive(out, reader, m, views);
  return new Response(streamBody(out, writer, pin), { headers });
}

/** `GET /v1/episodes/{id}/status`. */
export interface StatusBody {
  id: string;
  status: EpisodeStatus | "finish_refused";
  seq: number;
  traces: number;
  nodes: number;
  calls: number;
  /** What the log holds (counts toward MAX_EPISODE_BYTES). */
  frame_bytes: number;
  /** What GET answers now (msgpack). */
  episode_bytes: number;
  /** Watchers on all of the episode's viewer hubs (as the hubs last reported). */
  watchers: number;
  /** Viewer hubs holding watchers. */
  hubs: number;
  /** The finished episode is in R2 and its bodies left the object's storage (src/objects/episode/archive.ts). */
  archived: boolean;
  created: string;
  updated: string;
  error: string | null;
  /** The rollout's dispatch identity in the trainer (src/protocol/envelope/dispatch.ts), null without one. */
  dispatch: JsonObject | null;
  /**
   * Per trace id, the nodes whose last routing row a repair rewrote (ascending; traces without a
   * repair left out): the bytes do not say so, and the log that did is trimmed and archived away.
   */
  repaired_nodes: Record<string, number[]>;
  /**
   * The delta keys the relay does not know that the producer sent (named as the ack names them), in
   * the order first seen; empty when there were none. The keys were kept (docs/protocol.md).
   */
  unknown: string[];
}

export function statusOf(state: EpisodeState, viewers: { watchers: number; hubs: number }): StatusBody {
  const m = state.requireMeta();
  return {
    id: m.id,
    status: publicStatus(m),
    seq: m.seq,
    traces: m.traces,
    nodes: m.nodes,
    calls: m.calls,
    frame_bytes: m.bytes,
    episode_bytes: m.size ?? liveSize(m, state.memory().asm.views()),
    watchers: viewers.watchers,
    hubs: viewers.hubs,
    archived: m.archived !== null,
    created: new Date(m.created).toISOString(),
    updated: new Date(m.updated).toISOString(),
    error: m.refused ?? m.error,
    dispatch: m.dispatch ? dispatchJson(m.dispatch) : null,
    repaired_nodes: repairedNodes(state),
    unknown: m.unknown,
  };
}

function repairedNodes(state: EpisodeState): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const t of state.memory().asm.traces.values()) {
    const nodes = t.nodes.flatMap((n, i) => (n.repaired ? [i] : []));
    if (nodes.length) out[t.id] = nodes;
  }
  return out;
}

const KEYS = Object.fromEntries(["status", "seq", "error", "traces"].map((k) => [k, encodeStr(k)]));

/**
 * The live form's head values, encoded: the status and error as `status` says them (a refused reply: finish_refused and
 * its message).
 */
function liveHead(m: Meta): Array<[Uint8Array, Uint8Array]> {
  const error = m.refused ?? m.error;
  return [
    [KEYS.status!, encodeStr(publicStatus(m))],
    [KEYS.seq!, encodeInt(m.seq)],
    [KEYS.error!, error === null ? NIL : encodeStr(error)],
  ];
}

/** `{status, seq, error, traces}`: the current traces (checkpoint form, with `pending`). */
function* writeLive(out: Out, reader: BodyReader, m: Meta, views: readonly TraceView[]): Generator<void> {
  out.map(4);
  for (const [k, v] of liveHead(m)) {
    out.key(k);
    out.value(v);
  }
  out.key(KEYS.traces!);
  yield* writeCheckpoint(out, reader, views);
  out.end();
}

function liveSize(m: Meta, views: readonly TraceView[]): number {
  let size = 1 + KEYS.traces!.length + checkpointSize(views);
  for (const [k, v] of liveHead(m)) size += k.length + v.length;
  return size;
}

/** A response body that runs `writer` a step per pull, then lets go of `pin`. */
function streamBody(out: Out, writer: Generator<void>, pin: Pin): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (!pin.valid) {
          // a retraction rewound the episode to before this answer's seq: what it read is gone
          pin.release();
          controller.error(
            new Error(
              "the episode was rewound (a producer's unacknowledged frames were retracted) while this answer streamed; GET it again",
            ),
          );
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

// Committing one producer message: everything it changes (the assembled state through the
// SqlStore, the log, the producers' seqs and cursors, the counters, a retraction's rewind) is
// written in one SQLite transaction, or nothing is. The caller answers only after it returns.

import type { EpisodeAssembly } from "../../protocol/assembly/episode-assembly.js";
import { DeltaError } from "../../protocol/assembly/errors.js";
import type { IngestAck } from "../../protocol/envelope/answer.js";
import { dispatchConflict, sameDispatch } from "../../protocol/envelope/dispatch.js";
import { type IngestResult, ingest } from "../../protocol/envelope/ingest.js";
import { RelayError } from "../../protocol/http/errors.js";
import type { FeedFrame } from "../../protocol/hub/feed.js";
import type { Meta } from "./record-store.js";
import type { EpisodeMemory, EpisodeState } from "./state.js";

export interface Committed {
  ack: IngestAck;
  /** The meta row as committed. */
  meta: Meta;
  /** This message created the episode. */
  created: boolean;
  /** A retraction rewound the episode (watchers need the new state, not frames). */
  rewound: boolean;
  /** The frames applied, with their episode seqs, for watchers. */
  frames: FeedFrame[];
  /** This message set the rollout's dispatch identity (the run's index should hear of it at once). */
  dispatched: boolean;
  /** When a retraction rewound the episode: the seq it went back to (what was written after may differ now). */
  rewoundTo: number | null;
}

/** What a message did so far: the seqs its frames got, and whether a retraction rewound the episode. */
interface Progress {
  seqs: number[];
  rewound: boolean;
  dispatched: boolean;
  rewoundTo: number | null;
}

/** Apply one producer message and commit it; throws (state unchanged) on any refusal. */
export function commitIngest(
  state: EpisodeState,
  body: Uint8Array,
  id: string,
  maxEpisode: number,
  now: number,
): Committed {
  const meta = state.meta();
  if (meta && meta.status !== "live") {
    throw new RelayError("episode_finished", `the episode is ${meta.status}; it takes no more deltas`);
  }
  const mem = state.memory();
  const progress: Progress = { seqs: [], rewound: false, dispatched: false, rewoundTo: null };
  let committed: { result: IngestResult; saved: Meta };
  try {
    committed = state.transaction(
      () => applyMessage(state, mem, meta ?? state.record.create(id, now), body, progress, maxEpisode, now),
      // A refused delta left the index as it was (ingest rolls it back), unless a retraction had
      // rebuilt it; then, and on any other error (the size check runs after the apply), it is read
      // back from storage.
      (e) => e instanceof DeltaError && !progress.rewound,
    );
  } finally {
    // committed or rolled back, the floors are the ledger's again
    state.holdRetractable();
  }
  const { result, saved } = committed;
  state.store.collect();
  return {
    ack: {
      ok: true,
      seq: saved.seq,
      applied: result.applied.length,
      duplicates: result.duplicates,
      producers: Object.fromEntries(result.producers),
      ...(result.unknown.length ? { unknown: result.unknown } : {}),
    },
    meta: saved,
    created: meta === null,
    rewound: progress.rewound,
    dispatched: progress.dispatched,
    rewoundTo: progress.rewoundTo,
    frames: result.applied.map((delta, i) => ({ seq: progress.seqs[i]!, delta, trace: result.traces[i]! })),
  };
}

/** Inside the transaction: the message's frames applied and logged, its producers and the counters saved in `m`. */
function applyMessage(
  state: EpisodeState,
  mem: EpisodeMemory,
  m: Meta,
  body: Uint8Array,
  progress: Progress,
  maxEpisode: number,
  now: number,
): { result: IngestResult; saved: Meta } {
  const result = ingest(mem.asm, mem.ledger, body, {
    nextSeq: () => {
      const seq = ++m.seq;
      progress.seqs.push(seq);
      // the frame may yet be retracted: the state before it stays reachable
      state.store.addFloor(seq - 1);
      mem.asm.version = state.store.version = seq;
      return seq;
    },
    retract: (gone) => {
      // set first: a retraction that throws partway has already changed the index in memory, so a
      // refusal must read it back from storage rather than keep it
      progress.rewound = true;
      const base = Math.min(...gone) - 1;
      progress.rewoundTo = Math.min(progress.rewoundTo ?? base, base);
      retract(state, mem, m, gone);
    },
    dispatch: (identity) => {
      if (setDispatch(m, identity)) progress.dispatched = true;
    },
  });
  // duplicates were recognised first: a retry of an applied delta is acknowledged, not refused
  for (const frame of result.applied) m.bytes += frame.length;
  if (m.bytes > maxEpisode) {
    throw new RelayError(
      "episode_too_large",
      `the episode would reach ${m.bytes} bytes, over the limit of ${maxEpisode}`,
    );
  }
  const news = result.unknown.filter((k) => !m.unknown.includes(k));
  if (news.length) m.unknown = [...m.unknown, ...news];
  countInto(m, mem.asm);
  m.updated = now;
  // a checkpoint due is made before the turn is written, which carries it
  if (state.store.checkpointDue) state.store.checkpoint();
  // a turn that changed only its counters and the producers' ledger writes them on its last frame's row, not in meta
  const last = result.applied.length - 1;
  const turn =
    last >= 0 && !progress.rewound && state.record.turnOnFrame(m) ? state.record.turnOf(m, mem.ledger) : null;
  result.applied.forEach((frame, i) => {
    state.record.appendFrame(progress.seqs[i]!, frame, i === last ? turn : null);
    state.store.logged(progress.seqs[i]!, frame);
  });
  // else the producers' seqs and cursors in the meta row
  if (turn === null) state.record.saveMeta(m, mem.ledger);
  return { result, saved: m };
}

/**
 * Retract frames (episode seqs) a producer's cursor says it never had acknowledged: rewind the
 * store to before the first, read the index back, re-apply the frames kept after it (other
 * producers'), drop the retracted ones from the log. Inside the ingest's transaction: all of it
 * commits with the delta that caused it, or none.
 */
function retract(state: EpisodeState, mem: EpisodeMemory, m: Meta, seqs: number[]): void {
  const base = Math.min(...seqs) - 1;
  const gone = new Set(seqs);
  // the appends first, while the frames they are read from are in the log
  state.store.checkpoint();
  m.bytes -= state.record.removeFrames(seqs);
  const redo = [...state.record.frames(base)].filter((f) => !gone.has(f.seq));
  state.store.rewind(base);
  const { traces, nextTnum } = state.store.load();
  mem.asm.reset(traces, nextTnum);
  for (const f of redo) {
    mem.asm.version = state.store.version = f.seq;
    try {
      mem.asm.apply(f.frame, true);
      state.store.logged(f.seq, f.frame);
    } catch (e) {
      if (!(e instanceof DeltaError)) throw e;
      throw new DeltaError(
        "producer_conflict",
        "cursor",
        `retracting frame(s) ${seqs.join(", ")} leaves frame ${f.seq} (another producer's) inapplicable: ${e.message}`,
      );
    }
  }
  state.record.saveRewind(base, m.seq);
}

/**
 * Give the episode its dispatch identity: true when it had none (the caller saves `m`), false when
 * it holds the same one; a different one is refused (409 dispatch_conflict).
 */
export function setDispatch(m: Meta, identity: Uint8Array): boolean {
  if (m.dispatch === null) {
    m.dispatch = identity.slice(); // its own bytes, not a view of the message
    return true;
  }
  if (!sameDispatch(m.dispatch, identity)) throw dispatchConflict(m.dispatch, identity);
  return false;
}

/**
 * `POST /v1/episodes/{id}/dispatch`: the identity of a rollout the trainer dispatched, before its
 * first trace streams (or at any time after): creates the episode if it does not exist yet (a
 * pending rollout: no traces), else sets its identity once. One transaction.
 */
export function commitDispatch(
  state: EpisodeState,
  id: string,
  identity: Uint8Array,
  now: number,
): { meta: Meta; created: boolean; changed: boolean } {
  const before = state.meta();
  return state.transaction(() => {
    const m = before ?? state.record.create(id, now);
    const changed = setDispatch(m, identity);
    if (changed) {
      m.updated = Math.max(m.updated, now);
      state.record.saveMeta(m);
    }
    return { meta: m, created: before === null, changed };
  });
}

/** The counters the status and the index show. */
function countInto(m: Meta, asm: EpisodeAssembly): void {
  m.traces = asm.traces.size;
  m.nodes = 0;
  m.calls = 0;
  for (const t of asm.traces.values()) {
    m.nodes += t.nodes.length;
    m.calls += t.items.calls.count;
  }
}

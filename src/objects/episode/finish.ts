// Ending the run: the upstream reply either finishes the episode (its summaries pick the traces,
// the finished form's size and ETag are fixed), fails it, or is refused because its counts
// disagree with the assembly (the run stays open for a corrected reply; status says
// finish_refused with the reference's message). A repeated identical reply is acknowledged.

import { FinishError } from "../../protocol/assembly/errors.js";
import { finishedSize } from "../../protocol/assembly/render.js";
import { parseReply } from "../../protocol/assembly/reply.js";
import { confirmAll } from "../../protocol/envelope/ledger.js";
import { RelayError } from "../../protocol/http/errors.js";
import { equalBytes } from "../../protocol/wire/bytes.js";
import type { Meta } from "./record-store.js";
import type { EpisodeState } from "./state.js";

export interface ReplyAck {
  ok: true;
  status: string;
  seq: number;
}

type ReplyOutcome =
  /** The same reply again: nothing changed. */
  | { kind: "repeat"; meta: Meta }
  /** The run ended (finished or failed); committed. */
  | { kind: "ended"; meta: Meta }
  /** The counts disagree: committed as finish_refused; the caller answers 409 with `message`. */
  | { kind: "refused"; meta: Meta; message: string };

export function commitReply(state: EpisodeState, body: Uint8Array, now: number): ReplyOutcome {
  const meta = state.requireMeta();
  if (meta.status !== "live") {
    const stored = state.record.reply();
    if (stored && equalBytes(stored, body)) return { kind: "repeat", meta };
    throw new RelayError("episode_finished", `the episode is already ${meta.status} with another reply`);
  }
  const reply = parseReply(body);
  const mem = state.memory();
  let size: number | null = null;
  if (reply.success) {
    try {
      size = finishedSize(reply.head ?? [], mem.asm.pick(reply.summaries));
    } catch (e) {
      if (!(e instanceof FinishError)) throw e;
      const m: Meta = { ...meta, refused: e.message, updated: now };
      // the refused reply is kept until one ends the run: its head names the rollout's group (the index row)
      state.transaction(() => {
        state.record.saveReply(body);
        state.record.saveMeta(m);
      });
      return { kind: "refused", meta: m, message: e.message };
    }
  }
  const m: Meta = {
    ...meta,
    status: reply.success ? "finished" : "failed",
    error: reply.error,
    updated: now,
    refused: null,
    size,
    etag: size === null ? null : finishedEtag(meta, size),
  };
  state.transaction(() => {
    state.record.saveReply(body);
    // the run ended: nothing can be retracted any more
    confirmAll(mem.ledger);
    state.record.saveMeta(m, mem.ledger);
  });
  state.store.setFloors([]);
  state.store.collect();
  return { kind: "ended", meta: m };
}

/** The finished episode's ETag (without the representation): it never changes once finished. */
function finishedEtag(meta: Pick<Meta, "created" | "seq">, size: number): string {
  return `${meta.created.toString(36)}-${meta.seq}-${size.toString(36)}`;
}

export function replyAck(m: Meta): ReplyAck {
  return { ok: true, status: m.status, seq: m.seq };
}

// Finished episodes in R2. A finished episode never changes, and Durable Object storage costs
// about 13× R2's per byte, so once a reply finished the run the object (by its alarm) writes the
// episode's exact msgpack to R2 (with the ETag GET answers), then drops its node and item bodies
// and its log in one transaction. What is left in SQLite is the index (traces, scalar fields,
// node sizes), the reply and the counters. The JSON view is not stored: it is rendered from the
// msgpack as it is read (src/protocol/archive/json-view.ts), the same bytes; writing it too doubled the
// step's bytes and CPU on the episode tier's one thread (issue 28 item 4).
//
// Each step can be cut by a crash and is repeated from the top: the put writes the same bytes
// again; the drop happens only after the put landed, in one transaction, and never while a
// reader (a GET, a catch-up) still streams bodies from SQLite (it waits for the next alarm).
//
// From then on GET, HEAD and a run's bulk fetch are answered from R2 by the Worker without waking
// this object (src/protocol/archive/archive-read.ts), and a watcher's catch-up is built from the archived
// msgpack (src/protocol/archive/finished-deltas.ts). A delete, or the end of retention, removes the copy,
// and the JSON copy an older release wrote beside it (which the step also removes, and nothing reads).

import { type ArchiveMetadata, archiveKey } from "../../protocol/archive/archive-read.js";
import type { Grant } from "../../protocol/archive/leases.js";
import { LEASE_MS, MAX_PAUSE_MS } from "../../protocol/archive/leases.js";
import { MsgpackOut, writeFinished } from "../../protocol/assembly/render.js";
import { parseReply } from "../../protocol/assembly/reply.js";
import type { UsageMeter } from "../../protocol/billing/usage.js";
import { MSGPACK } from "../../protocol/http/representation.js";
import { DEFAULT_ARCHIVE_PART_BYTES } from "../../protocol/limits/limits.js";
import { ArchiveUploadStore } from "./archive-upload.js";
import type { Meta } from "./record-store.js";
import type { EpisodeState } from "./state.js";

/** Where releases before issue 28 also kept the JSON view: never read, removed by the step and by `remove`. */
export function legacyJsonKey(id: string): string {
  return `episodes/json/${id}`;
}

/** What the archive step did: nothing to do, done, or waiting for readers to finish (try again later). */
type ArchiveOutcome = "none" | "archived" | "busy";

/** How soon the alarm tries again when a reader held the bodies, or a put failed. */
const ARCHIVE_RETRY_MS = 5_000;
/** A reader holding the bodies longer than this (a stalled GET) no longer delays the drop: it fails instead. */
const ARCHIVE_MAX_WAIT_MS = 600_000;

/** The class's archive slots (src/objects/archive/gate.ts), asked by the alarm's step; null: unlimited. */
export interface ArchiveSlots {
  acquire(holder: string): Promise<Grant>;
  /** The step is over; `tookMs`: how long it held the slot (the slot rests as long after it). */
  release(holder: string, tookMs?: number): Promise<void>;
}

export class EpisodeArchive {
  /** The archive step under way (a delete waits for it, so no put lands after the delete). */
  private inflight: Promise<ArchiveOutcome> | null = null;
  /** The alarm's or the gate's attempt under way (with its slot). */
  private attempting: Promise<void> | null = null;
  /** Set while the episode is being erased: no step starts. */
  private stopped = false;
  /** When `attempt` is to run again after a reader held the bodies or R2 failed (0: as soon as due; memory only). */
  private retryTime = 0;
  /** Failed attempts in a row (the retry backs off by them). */
  private failures = 0;
  /** Since when readers have held the bodies the step would drop (0: none did). */
  private busySince = 0;
  /** Whether an older release's JSON copy is known gone (memory only: a restart deletes it once more). */
  private legacyChecked = false;

  constructor(
    private readonly state: EpisodeState,
    private readonly bucket: R2Bucket,
    private readonly meter: () => UsageMeter | undefined,
    private readonly slots: ArchiveSlots | null = null,
    /** Past this size the msgpack goes to R2 in parts of this many bytes (`putInParts`). */
    private readonly partBytes = DEFAULT_ARCHIVE_PART_BYTES,
  ) {}

  /** Whether the episode is finished and not archived yet. */
  due(m: Meta | null = this.state.meta()): boolean {
    return m !== null && m.status === "finished" && m.etag !== null && m.archived === null;
  }

  /** Write the msgpack to R2, then drop the bodies and the log (see the header); `force`: even under a reader. */
  run(force = false): Promise<ArchiveOutcome> {
    if (this.stopped) return Promise.resolve("none");
    // one step at a time: a second would resume the same upload and race the first to R2
    if (this.inflight) return this.inflight;
    const run = this.step(force).finally(() => {
      if (this.inflight === run) this.inflight = null;
    });
    this.inflight = run;
    return run;
  }

  /** When the alarm is to try `attempt` again (0: as soon as the episode is due). */
  get retryAt(): number {
    return this.retryTime;
  }

  /**
   * The step as the alarm runs it: forced once readers have held the bodies longer than
   * ARCHIVE_MAX_WAIT_MS; tried again (`retryAt`) while they hold them, and backing off while R2
   * fails. With archive slots, only under a lease (renewed while the step runs, given back after):
   * without one, it waits in the gate's line and is woken when its turn comes (`retryAt`: when it
   * asks again by itself, in case that wake was lost).
   */
  attempt(): Promise<void> {
    // the alarm and the gate's wake may both ask (a slot is granted again to the object holding it): one at a time
    if (this.attempting) return this.attempting;
    const a = this.attemptOnce().finally(() => {
      if (this.attempting === a) this.attempting = null;
    });
    this.attempting = a;
    return a;
  }

  private async attemptOnce(): Promise<void> {
    const id = this.state.meta()?.id;
    if (id === undefined) return;
    let renew: ReturnType<typeof setTimeout> | null = null;
    /** A renewal on its way to the gate: awaited before the release, else it could land after and hold the slot again. */
    let renewing: Promise<void> | null = null;
    let leased = false;
    if (this.slots) {
      let grant: Grant;
      try {
        grant = await this.slots.acquire(id);
      } catch (e) {
        return this.failed(e, "the archive gate did not answer");
      }
      if (!grant.granted) {
        this.retryTime = grant.retryAt;
        return;
      }
      // renewed while the step runs
      const slots = this.slots;
      const again = () => {
        if (!leased) return;
        renew = setTimeout(() => {
          if (leased) renewing = slots.acquire(id).then(again, again);
        }, LEASE_MS / 3);
      };
      leased = true;
      again();
    }
    const began = Date.now();
    try {
      const outcome = await this.run(this.busySince !== 0 && began - this.busySince > ARCHIVE_MAX_WAIT_MS);
      this.busySince = outcome === "busy" ? this.busySince || began : 0;
      this.failures = outcome === "busy" ? this.failures : 0;
      this.retryTime = outcome === "busy" ? Date.now() + ARCHIVE_RETRY_MS : 0;
    } catch (e) {
      this.failed(e, "archiving failed");
    } finally {
      if (this.slots && leased) {
        leased = false;
        if (renew !== null) clearTimeout(renew);
        // a renewal that landed after the release would hold the slot, idle, until LEASE_MS (seen: the
        // next episode in line refused for 30 s after a step longer than LEASE_MS / 3)
        if (renewing !== null) await renewing;
        // unanswered: the lease expires by itself (LEASE_MS)
        await this.slots
          .release(id, Date.now() - began)
          .catch((e) => console.warn(`episode ${id}: archive slot not given back`, e));
      }
    }
  }

  /** The gate woke `holder` for a step it no longer needs (archived or erased meanwhile): the slot goes on. */
  async giveBack(holder: string): Promise<void> {
    await this.slots?.release(holder).catch((e) => console.warn(`episode ${holder}: archive slot not given back`, e));
  }

  private failed(e: unknown, what: string): void {
    this.failures++;
    this.retryTime = Date.now() + Math.min(ARCHIVE_RETRY_MS * 2 ** this.failures, 600_000);
    console.error(`episode ${this.state.meta()?.id}: ${what} (attempt ${this.failures}), retried by the alarm`, e);
  }

  private async step(force: boolean): Promise<ArchiveOutcome> {
    const m = this.state.meta();
    if (!m || !this.due(m)) return "none";
    const metadata: ArchiveMetadata = { etag: m.etag!, seq: String(m.seq) };
    await this.put(m, metadata);
    if (this.stopped) return "none";
    await this.dropLegacyJson(m.id);
    // a reader streaming from SQLite keeps what it reads; the next alarm tries again
    if (this.state.store.readers() > 0 && !force) return "busy";
    const now = this.state.meta();
    if (!now || now.seq !== m.seq || !this.due(now)) return "none"; // deleted or changed meanwhile
    this.state.transaction(() => {
      this.state.store.dropBodies();
      // the whole log goes (base = seq): emptied at once, not row by row
      this.state.record.dropLog();
      this.state.record.saveMeta({ ...now, base: now.seq, archived: Date.now() });
    });
    return "archived";
  }

  /**
   * Remove the copy (and an older release's JSON copy) from R2 (a delete or the end of retention;
   * before SQLite is erased). A step under way ends first, and none starts until `resume` (after
   * the erase): no put lands after this.
   */
  async remove(id: string): Promise<void> {
    this.stopped = true;
    await this.inflight?.catch(() => undefined);
    // an upload a restart cut (its parts would stay in R2 until its lifecycle rule drops them)
    await this.abortRecorded(archiveKey(id));
    await this.bucket.delete([archiveKey(id), legacyJsonKey(id)]);
    this.meter()?.r2Delete();
  }

  /**
   * The JSON copy an older release wrote beside the msgpack goes (nothing reads it): by the step,
   * and once per object's life when an archived episode is touched by its alarm.
   */
  async dropLegacyJson(id: string): Promise<void> {
    if (this.legacyChecked) return;
    await this.bucket.delete(legacyJsonKey(id));
    this.meter()?.r2Delete();
    this.legacyChecked = true;
  }

  /** The erase is over (or failed): the episode may be archived again (an id written anew). */
  resume(): void {
    this.stopped = false;
  }

  /** The archived msgpack, as a stream (a watcher's catch-up); throws if it is missing. */
  async body(id: string): Promise<ReadableStream<Uint8Array>> {
    const obj = await this.bucket.get(archiveKey(id));
    this.meter()?.r2Get();
    if (!obj) throw new Error(`the archive of episode ${id} is missing from R2`);
    return obj.body;
  }

  /** The msgpack, streamed from SQLite into R2: in one put, or past `partBytes` in parts. */
  private async put(m: Meta, metadata: ArchiveMetadata): Promise<void> {
    const size = m.size!;
    if (size > this.partBytes) return this.putInParts(m, metadata);
    // a multipart upload a restart cut before ARCHIVE_PART_BYTES grew past the episode: it goes
    await this.abortRecorded(archiveKey(m.id));
    const { readable, writable } = new FixedLengthStream(size);
    // a failed put must not leave the render (and its pin on the bodies) waiting for a reader
    const abort = new AbortController();
    const written = this.finishedStream(m).pipeTo(writable, { signal: abort.signal });
    const put = this.bucket.put(archiveKey(m.id), readable, {
      httpMetadata: { contentType: MSGPACK },
      customMetadata: metadata,
    });
    try {
      await Promise.all([written, put]);
    } catch (e) {
      abort.abort(e);
      await Promise.allSettled([written, put]);
      throw e;
    }
    this.meter()?.r2Put(size);
  }

  /**
   * A multipart upload, `partBytes` a part (R2 wants every part but the last the same size, at
   * least 5 MiB). Under archive slots (one thread for the class: local runs) the step rests after
   * each part as long as the part took, so a big episode's archive never holds the thread for more
   * than one part at a time. A copy R2 already holds (a step repeated after readers held the
   * bodies) is not sent again. The upload and each part R2 took are recorded as they go
   * (archive-upload.ts): a step cut by a restart resumes the upload and sends only the parts R2
   * lacks (the render skips the bytes of those it has). A failed or stopped upload is aborted.
   */
  private async putInParts(m: Meta, metadata: ArchiveMetadata): Promise<void> {
    const key = archiveKey(m.id);
    const held = await this.bucket.head(key);
    this.meter()?.r2Head();
    const uploads = this.uploads;
    if (held?.customMetadata?.etag === metadata.etag && held.size === m.size) return uploads.clear();
    const size = m.size!;
    const count = Math.ceil(size / this.partBytes);
    const { upload, taken } = await this.openUpload(key, metadata);
    const done = new Map(taken.map((p) => [p.partNumber, p]));
    const render = this.finishedStream(m).getReader();
    let carry: Uint8Array | null = null;
    /** The render's next `length` bytes, chunk by chunk (the boundary's bytes copied: a chunk may be handed over whole). */
    const next = async function* (length: number, n: number): AsyncGenerator<Uint8Array> {
      for (let left = length; left > 0; ) {
        let chunk = carry ?? (await render.read()).value;
        carry = null;
        if (chunk === undefined) throw new Error(`the render ended ${left} bytes short of part ${n}`);
        if (chunk.byteLength > left) [chunk, carry] = [chunk.slice(0, left), chunk.subarray(left)];
        yield chunk;
        left -= chunk.byteLength;
      }
    };
    try {
      for (let n = 1; n <= count; n++) {
        if (this.stopped) {
          // erased meanwhile (`remove` waits for this step): no part more, nothing left behind
          await render.cancel().catch(() => undefined);
          await this.abortUpload(upload);
          return;
        }
        const length = n < count ? this.partBytes : size - (count - 1) * this.partBytes;
        const began = Date.now();
        if (done.has(n)) {
          // R2 has it (a step cut by a restart): its bytes are rendered and skipped
          for await (const _ of next(length, n));
        } else await this.sendPart(upload, n, length, next(length, n), done);
        if (this.slots && n < count) await scheduler.wait(Math.min(Date.now() - began, MAX_PAUSE_MS));
      }
      await upload.complete([...done.values()].sort((a, b) => a.partNumber - b.partNumber));
      uploads.clear();
      this.meter()?.r2MultipartOp(0, size);
    } catch (e) {
      await render.cancel(e).catch(() => undefined);
      await this.abortUpload(upload);
      throw e;
    }
  }

  /** Part `n` of `length` bytes, streamed from `chunks` to R2; recorded (and counted) once R2 took it. */
  private async sendPart(
    upload: R2MultipartUpload,
    n: number,
    length: number,
    chunks: AsyncIterable<Uint8Array>,
    done: Map<number, R2UploadedPart>,
  ): Promise<void> {
    const { readable, writable } = new FixedLengthStream(length);
    const writer = writable.getWriter();
    const part = upload.uploadPart(n, readable);
    const write = async () => {
      for await (const chunk of chunks) await writer.write(chunk);
      await writer.close();
    };
    const written = write();
    try {
      await Promise.all([written, part]);
    } catch (e) {
      await writer.abort(e).catch(() => undefined);
      await Promise.allSettled([written, part]);
      throw e;
    }
    const landed = await part;
    done.set(n, landed);
    this.uploads.took(landed);
    this.meter()?.r2MultipartOp(length);
  }

  /** Records of the multipart upload under way (SQLite). */
  private get uploads(): ArchiveUploadStore {
    return new ArchiveUploadStore(this.state.sql);
  }

  /**
   * The upload to go on with: the one recorded, if it is for these bytes in these parts (with the
   * parts R2 took), else a new one (a recorded one that cannot go on is aborted first).
   */
  private async openUpload(
    key: string,
    metadata: ArchiveMetadata,
  ): Promise<{ upload: R2MultipartUpload; taken: R2UploadedPart[] }> {
    const uploads = this.uploads;
    const was = uploads.get();
    if (was && was.etag === metadata.etag && was.partBytes === this.partBytes)
      return { upload: this.bucket.resumeMultipartUpload(key, was.uploadId), taken: was.parts };
    if (was) await this.abortRecorded(key);
    const upload = await this.bucket.createMultipartUpload(key, {
      httpMetadata: { contentType: MSGPACK },
      customMetadata: metadata,
    });
    uploads.began(upload.uploadId, metadata.etag, this.partBytes);
    this.meter()?.r2MultipartOp();
    return { upload, taken: [] };
  }

  /** Abort the upload SQLite records as under way, if any (a restart cut it). */
  private async abortRecorded(key: string): Promise<void> {
    const was = this.uploads.get();
    if (was) await this.abortUpload(this.bucket.resumeMultipartUpload(key, was.uploadId));
  }

  /** Abort an upload (R2 may no longer know it: nothing to do then) and forget it. */
  private async abortUpload(upload: R2MultipartUpload): Promise<void> {
    await upload.abort().catch(() => undefined);
    this.uploads.clear();
  }

  /** The finished episode's msgpack, rendered from SQLite a step at a time. */
  private finishedStream(m: Meta): ReadableStream<Uint8Array> {
    const out = new MsgpackOut();
    const { reader, head, views, release } = this.finishedParts(m);
    const writer = writeFinished(out, reader, head, views);
    return new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          let done: boolean | undefined;
          try {
            done = writer.next().done;
          } catch (e) {
            release();
            controller.error(e);
            return;
          }
          for (const chunk of out.take()) controller.enqueue(chunk);
          if (done) {
            release();
            controller.close();
          }
        },
        cancel: release,
      },
      { highWaterMark: 0 },
    );
  }

  private finishedParts(m: Meta) {
    const reply = parseReply(this.state.record.reply()!);
    const views = this.state.memory().asm.pick(reply.summaries);
    const pin = this.state.store.pin(m.seq);
    return { reader: this.state.store.reader(m.seq), head: reply.head ?? [], views, release: () => pin.release() };
  }
}

// The episode as the object holds it: its SQLite record (meta, log, producers, reply), its
// assembled state (SqlStore), and in memory only the index over them (per trace its fields,
// pending, per node a NodeInfo), the appends since the last checkpoint (checkpoint.ts) and the
// producers' ledger, read back on first use: the state's tables as of the checkpoint, then the
// log's frames after it replayed. Every module
// that changes the episode goes through here; none keeps a copy of its own.

import { EpisodeAssembly } from "../../protocol/assembly/episode-assembly.js";
import { type ProducerLedger, retractable } from "../../protocol/envelope/ledger.js";
import { RelayError } from "../../protocol/http/errors.js";
import { SchemaState } from "../storage/schema.js";
import { type Meta, RecordStore } from "./record-store.js";
import { EPISODE_SCHEMA } from "./schema.js";
import { SqlStore } from "./sql-store.js";

/** What memory holds of the episode: the assembly's index and the producers' ledger. */
export interface EpisodeMemory {
  asm: EpisodeAssembly;
  ledger: ProducerLedger;
}

export class EpisodeState {
  readonly record: RecordStore;
  readonly store: SqlStore;
  readonly schema: SchemaState;
  private memo: EpisodeMemory | null = null;
  private opened = false;

  constructor(private readonly storage: DurableObjectStorage) {
    this.schema = new SchemaState(storage, EPISODE_SCHEMA);
    this.record = new RecordStore(storage.sql, this.schema);
    this.store = new SqlStore(storage.sql, this.record);
  }

  /** The object's SQLite (for the modules that own a table of their own: annotations.ts). */
  get sql(): SqlStorage {
    return this.storage.sql;
  }

  /** In the constructor (and again after a transient failure): storage is brought to this release's schema, then read. */
  open(): void {
    if (this.opened) return;
    this.schema.open();
    if (!this.schema.isOpen) return; // the runtime short of memory: opened again by the next request
    this.opened = true;
    if (this.schema.failed === null && this.record.exists()) {
      // a restart forgets every reader: what was kept only for them can go (not what a retraction may need)
      this.holdRetractable(this.record.producers());
      this.store.afterRestart();
    }
  }

  /** Whether the index is in memory (a woken object reads it back on first use). */
  get loaded(): boolean {
    return this.memo !== null;
  }

  /** What memory holds (the assembly's index and the ledger), read from storage on first use. */
  memory(): EpisodeMemory {
    if (this.memo) return this.memo;
    this.open();
    this.schema.check();
    this.store.forgetAppends();
    const { traces, nextTnum } = this.record.exists() ? this.store.load() : { traces: [], nextTnum: 1 };
    const asm = new EpisodeAssembly(this.store, traces);
    asm.reserveTnums(nextTnum);
    const memo = { asm, ledger: this.record.producers() };
    this.holdRetractable(memo.ledger);
    this.replay(asm);
    this.memo = memo;
    return memo;
  }

  /**
   * The frames after the last checkpoint applied again (their appends are read from the log): memory as it stood.
   * In a transaction: a frame that writes to the tables makes a checkpoint of itself, atomically.
   */
  private replay(asm: EpisodeAssembly): void {
    const from = this.record.exists() ? this.store.replayFrom() : null;
    if (from === null) return;
    try {
      this.storage.transactionSync(() => {
        for (const { seq, frame } of this.record.frames(from)) {
          asm.version = this.store.version = seq;
          asm.apply(frame, true);
          this.store.logged(seq, frame);
        }
        this.record.saveCheckpoint();
      });
    } catch (e) {
      this.store.forgetAppends();
      throw e;
    }
  }

  meta(): Meta | null {
    this.open();
    this.schema.check();
    return this.record.meta();
  }

  /** The meta row, or 404. */
  requireMeta(): Meta {
    const m = this.meta();
    if (!m) throw new RelayError("not_found", "no such episode");
    return m;
  }

  /**
   * Run `fn` in one SQLite transaction (it commits atomically; an answer sent after it waits for
   * it to be durable). If it throws `e`, it rolled back: `keepIndex(e)` says the index in memory
   * was left as it was (a refused delta undoes its own changes), else it is read back on next use.
   * What is kept of the record's rows is read back either way.
   */
  transaction<T>(fn: () => T, keepIndex: (e: unknown) => boolean = () => false): T {
    this.store.begin();
    try {
      return this.storage.transactionSync(() => {
        const out = fn();
        // a checkpoint no frame or meta row of `fn` carried
        this.record.saveCheckpoint();
        return out;
      });
    } catch (e) {
      // a checkpoint rolled back: the appends it wrote are no longer in memory, nor in the tables
      if (keepIndex(e) && !this.store.checkpointed) this.record.forget();
      else this.forget();
      throw e;
    }
  }

  /**
   * Memory may be ahead of storage (a rolled-back write), or storage gone (deleteAll): the index
   * and what is kept of the rows are read back on next use.
   */
  forget(): void {
    this.memo = null;
    this.record.forget();
    this.store.forgetAppends();
  }

  /** Frames that may still be retracted hold the state before them; the rest can go. */
  holdRetractable(ledger: ProducerLedger = this.memory().ledger): void {
    this.store.setFloors(retractable(ledger).map((s) => s - 1));
  }
}

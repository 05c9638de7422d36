// Who needs an older state of the episode, by seq ("holds"); the SqlStore keeps the versions such
// a state is made of until nothing holds it (src/objects/episode/sql-store.ts):
// - readers (a GET streamed over several turns, a watcher's catch-up) read the state as of a seq
//   while ingest goes on: they `pin` it (memory only: a restart forgets readers);
// - retraction: a frame that its producer may still retract needs the state before it (`floors`,
//   set by EpisodeState from its ledger, src/protocol/envelope/ledger.ts, and by the commit for the frames
//   it applies).

/** A reader's hold on the state as of `asOf`; `release` when done (idempotent). */
export interface Pin {
  readonly asOf: number;
  /** False once a retraction rewound the episode to before `asOf`: what it reads is gone. */
  readonly valid: boolean;
  release(): void;
}

export class Holds {
  private readonly pins = new Set<{ asOf: number; valid: boolean }>();
  /** Seqs whose state a retraction may need (one before each retractable frame). */
  private floors: number[] = [];

  /** `released` runs once a reader let go (what only it held can go). */
  constructor(private readonly released: () => void) {}

  /** Hold the state as of `asOf` for a reader. */
  pin(asOf: number): Pin {
    const p = { asOf, valid: true };
    this.pins.add(p);
    let done = false;
    return {
      asOf,
      get valid() {
        return p.valid;
      },
      release: () => {
        if (done) return;
        done = true;
        this.pins.delete(p);
        this.released();
      },
    };
  }

  /** Hold the state as of each of these seqs for a retraction (EpisodeState sets them from its ledger). */
  setFloors(seqs: number[]): void {
    this.floors = seqs;
  }

  /** Also hold the state as of `seq` (the seq before a frame being applied, which may yet be retracted). */
  addFloor(seq: number): void {
    this.floors.push(seq);
  }

  /** The oldest held seq, or null when nothing holds an older state. */
  oldestHold(): number | null {
    let min: number | null = null;
    for (const p of this.pins) if (min === null || p.asOf < min) min = p.asOf;
    for (const f of this.floors) if (min === null || f < min) min = f;
    return min;
  }

  /** Whether something holds a state in which a version current from `from` until (not including) `until` is seen. */
  needed(from: number, until: number): boolean {
    for (const p of this.pins) if (p.asOf >= from && p.asOf < until) return true;
    for (const f of this.floors) if (f >= from && f < until) return true;
    return false;
  }

  /** Every held seq, readers' and retraction's. */
  seqs(): number[] {
    return [...[...this.pins].map((p) => p.asOf), ...this.floors];
  }

  /** Readers holding a state now. */
  readers(): number {
    return this.pins.size;
  }

  /** A retraction rewound the episode to `seq`: readers of a later state are told (`Pin.valid`). */
  rewound(seq: number): void {
    for (const p of this.pins) if (p.asOf > seq) p.valid = false;
  }

  /** After a restart no reader is left. */
  dropReaders(): void {
    this.pins.clear();
  }
}

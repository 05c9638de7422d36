// Whether someone attends a run (issue 42): a live row's throttled counters only matter to someone
// looking at them, so the run's index (episode-index.ts) answers its episodes' updates with
// INDEX_FLUSH_MS while someone does, and INDEX_IDLE_FLUSH_MS otherwise (src/protocol/limits/vars.ts).
// Attending is: a run socket open (RunSockets, hibernated ones too), a read of the run's rows, search
// or aggregates over HTTP within ATTENTION_MS, or an alert armed that fires on a live row's throttled
// fields (a `flag` alert: a running rollout's text, and the flags read from it, come with its
// throttled updates; the threshold alerts run on ended rows, which go at once). The read is
// kept in memory only: an evicted index forgets it, which costs staleness, never a row; no timer runs.

/** How long a read over HTTP keeps its run attended, ms: a reader back within it finds rows INDEX_FLUSH_MS fresh. */
export const ATTENTION_MS = 300_000;

/** The answer to an update: whether it was newer than the row held, and the episode's next interval. */
export interface UpdateAnswer {
  applied: boolean;
  /** Least ms between this episode's next updates: backpressure, and INDEX_IDLE_FLUSH_MS while unattended. */
  flushMs: number;
}

export class Attention {
  /** When the run was last read over HTTP (ms); memory only. */
  private readAt = Number.NEGATIVE_INFINITY;

  /** The run's rows, search or aggregates were read at `now`. */
  read(now: number): void {
    this.readAt = now;
  }

  /** Whether the run is attended at `now`, with `sockets` run sockets open and whether an alert reads live rows. */
  attended(now: number, sockets: number, liveAlert: boolean): boolean {
    return sockets > 0 || now - this.readAt < ATTENTION_MS || liveAlert;
  }
}

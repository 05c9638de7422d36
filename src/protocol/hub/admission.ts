// How much viewer work a hub takes on. A watcher costs an accept and a hello; its catch-up costs
// a snapshot's reads and sends, so catch-ups are bounded three ways: how many run at once (the
// others wait their turn, after their hello), how many may start per second (a token bucket), and
// how many may wait. The bytes sent and not yet acknowledged by all watchers together are bounded
// too (they sit in the runtime's buffers). Past a bound a newcomer is refused at once with 1013
// and a retry hint, jittered so that watchers dropped together (a deploy drops every socket) do
// not come back together. The run and runs sockets (src/objects/registry/run-sockets.ts) are admitted by the
// same rules: a cap per object and a start rate (each start sends a snapshot).

export interface AdmissionLimits {
  /** Sockets per hub; one more is refused. */
  maxWatchers: number;
  /** Watchers waiting for a catch-up slot; one more is refused. */
  maxWaiting: number;
  /** Catch-ups that may start per second (bursts of as many). */
  catchUpsPerSecond: number;
  /** Bytes sent to all watchers and not yet acknowledged; past it newcomers are refused. */
  maxQueuedBytes: number;
}

interface HubLoad {
  watchers: number;
  waiting: number;
  queuedBytes: number;
}

/** Whether a newcomer is admitted now, else why not and when to try again. */
type Admit = { ok: true } | { ok: false; reason: string; retryMs: number };

/** Retry hints stay within these bounds. */
export const RETRY_MIN_MS = 1000;
export const RETRY_MAX_MS = 60_000;

export class Admission {
  private tokens: number;
  private refilled: number;

  constructor(
    private readonly limits: AdmissionLimits,
    now: number,
    private readonly random: () => number = Math.random,
    /** What `maxWatchers` counts, in a refusal's words. */
    private readonly counted = "watchers on this hub",
  ) {
    this.tokens = this.burst;
    this.refilled = now;
  }

  private get burst(): number {
    return Math.max(1, this.limits.catchUpsPerSecond);
  }

  /** Whether a new watcher may connect now, else why not and when to try again. */
  admit(load: HubLoad): Admit {
    const l = this.limits;
    if (load.watchers >= l.maxWatchers) return this.refuse(`too many ${this.counted} (limit ${l.maxWatchers})`, 5000);
    if (load.waiting >= l.maxWaiting) {
      // the queue drains at the start rate: come back about when it has
      return this.refuse(
        `busy: ${load.waiting} catch-ups waiting`,
        (1000 * load.waiting) / Math.max(0.001, l.catchUpsPerSecond),
      );
    }
    if (load.queuedBytes >= l.maxQueuedBytes)
      return this.refuse(`busy: ${Math.round(load.queuedBytes / 2 ** 20)} MiB not yet acknowledged by watchers`, 2000);
    return { ok: true };
  }

  /**
   * A newcomer that has nothing to wait for (a run or runs socket: its snapshot is sent at once):
   * admitted and started now (a token is taken), or refused with a hint.
   */
  startNow(load: HubLoad, now: number): Admit {
    const d = this.admit(load);
    if (!d.ok) return d;
    const wait = this.take(now);
    return wait === 0
      ? d
      : this.refuse(`busy: sockets are starting faster than ${this.limits.catchUpsPerSecond} a second`, wait);
  }

  /** A catch-up may start now (a token is taken), else the ms until one can. */
  take(now: number): number {
    this.refill(now);
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil((1000 * (1 - this.tokens)) / Math.max(0.001, this.limits.catchUpsPerSecond));
  }

  private refill(now: number): void {
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.refilled) / 1000) * this.limits.catchUpsPerSecond);
    this.refilled = now;
  }

  /** A refusal whose hint is `baseMs` stretched by 1–2× at random, within the bounds. */
  private refuse(reason: string, baseMs: number): Admit {
    const ms = Math.round(Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, baseMs) * (1 + this.random())));
    return { ok: false, reason, retryMs: ms };
  }
}

// The episode's one alarm, as armed. Each setAlarm is billed as a row written, and the handler decides
// what is due whenever it runs (then arms the next deadline), so a deadline that an alarm armed no
// later already serves arms nothing: a turn within the index's interval finds the alarm armed for its
// update. Only what this object armed or read in its life is trusted; anything else (a wake, the
// handler running, a path that armed without this class) makes the next deadline arm as before.

import { alarmTime } from "../storage/alarm-window.js";

export class EpisodeAlarm {
  /** The time armed (null: none), as set or read in this object's life; undefined: not known. */
  private armed: number | null | undefined = undefined;
  private reading: Promise<void> | null = null;
  /** Bumped by every change here: a read that started before one is stale. */
  private epoch = 0;
  private running = false;

  constructor(private readonly storage: DurableObjectStorage) {}

  /**
   * Read what is armed, once per life, before a commit that may arm (a read is not a row written); undefined when
   * there is nothing to wait for (await it only then: a producer's messages keep their order).
   */
  known(): Promise<void> | undefined {
    if (this.armed !== undefined || this.running) return undefined;
    const epoch = this.epoch;
    this.reading ??= this.storage.getAlarm().then(
      (at) => {
        this.reading = null;
        if (this.epoch === epoch && !this.running && this.armed === undefined) this.armed = at;
      },
      () => {
        this.reading = null; // not known: the next deadline arms
      },
    );
    return this.reading;
  }

  /** The time armed (null: none), when known (not while the handler runs). */
  get at(): number | null | undefined {
    return this.running ? undefined : this.armed;
  }

  /**
   * Have the alarm run by `at` (epoch ms): armed unless an alarm no later is known to be armed; always while the
   * handler runs (the alarm running may still read as armed) and when `force`d.
   */
  by(at: number, force = false): void {
    const t = alarmTime(at, Date.now());
    if (!force && !this.running && this.armed != null && this.armed <= t) return;
    this.epoch++;
    this.armed = t;
    // already outside the eviction window (alarm-window.ts): set as it is
    void this.storage.setAlarm(t);
  }

  /** The alarm was deleted. */
  deleted(): void {
    this.epoch++;
    this.armed = null;
  }

  /** Something armed or deleted it without this class (or may have): not known until read again. */
  forget(): void {
    this.epoch++;
    this.armed = undefined;
  }

  /** The handler: the alarm that fired is gone, and what it arms as it runs is set as asked. */
  async firing(run: () => Promise<void>): Promise<void> {
    this.forget();
    this.running = true;
    try {
      await run();
    } finally {
      this.running = false;
    }
  }
}

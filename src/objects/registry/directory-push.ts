// When a run's index (episode-index.ts) tells the run directory of its row. The directory hears of a change within
// DIRECTORY_MS: sent at once when none went within the interval, else by the index's alarm (one already set stays).
// An alarm set per change cost a row written (each setAlarm is billed as one) and a wake: a quiet run's every update
// paid both, where the send itself is the one call the alarm would have made.

import { armAlarm } from "../storage/alarm-window.js";

export class DirectoryPush {
  /** When this object last sent the run's row (memory only: a woken object sends at once). */
  private sentAt = 0;
  /** That send, while in flight (the alarm's own send waits for it: the directory takes the rows in order). */
  private sending: Promise<void> | null = null;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly intervalMs: number,
  ) {}

  /**
   * The run's row changed: `send` it now (in the background, its failure left to the alarm, which retries), unless
   * one went within the interval or there is no `send` (what only the alarm decides: no row left, rules waiting for
   * the first); then the alarm goes, armed unless one is.
   */
  changed(send: (() => Promise<void>) | null): void {
    const now = Date.now();
    if (send === null || this.sending !== null || now - this.sentAt < this.intervalMs) {
      void this.alarmBy(Math.max(now, this.sentAt) + this.intervalMs);
      return;
    }
    this.sentAt = now;
    const sending = send()
      .catch((e: unknown) => {
        console.warn(`directory update failed, the alarm retries it: ${e instanceof Error ? e.message : String(e)}`);
        return this.alarmBy(Date.now() + this.intervalMs);
      })
      .finally(() => {
        this.sending = null;
      });
    this.sending = sending;
    this.ctx.waitUntil(sending);
  }

  /** The alarm armed to run by `at`: an alarm set no later stays (it does everything due when it runs). */
  private async alarmBy(at: number): Promise<void> {
    const armed = await this.ctx.storage.getAlarm();
    if (armed === null || armed > at) await armAlarm(this.ctx.storage, at);
  }

  /** The alarm sends now: after the send in flight, if any, so the directory takes the rows in order. */
  async alarmSends(): Promise<void> {
    await this.sending;
    this.sentAt = Date.now();
  }
}

// Where an alarm may be armed. workerd before 1.20260619.1 (the one we run: Node 20 pins it, see
// package.json) frees an actor in its eviction sweep while the alarm scheduler still
// holds it: an alarm that fires on an object idle for more than ~70 s, in the same turn as that
// sweep, fails `server.c++:2508: expected classAndId.tryGet<ClassAndId>() != nullptr` and then
// crashes the process (SIGSEGV; bench/repro/alarm-eviction.mjs reproduces it). An alarm armed 60 s
// or less ahead fires before the object has been idle that long; one armed 150 s or more ahead
// fires after the sweep has evicted it (a fresh object). So no alarm is armed in between: it is
// armed sooner instead (the object wakes, finds nothing due yet and arms the rest, again outside
// the window), which keeps every deadline.

/** Alarms armed this far ahead or more (ms), and less than AVOID_TO, would fire in the sweep's window. */
export const AVOID_FROM = 60_000;
/** From this far ahead (ms) the object has been evicted before the alarm fires. */
export const AVOID_TO = 150_000;
/** Where an alarm that would fall in the window is armed instead (ms ahead; margin for a late arm). */
export const EARLY_ARM = 50_000;

/**
 * The time to arm for an alarm wanted at `at` (epoch ms), given the time now: `at`, or sooner when it falls in the
 * window.
 */
export function alarmTime(at: number, now: number): number {
  const ahead = at - now;
  return ahead >= AVOID_FROM && ahead < AVOID_TO ? now + EARLY_ARM : at;
}

/** Arm the object's alarm for `at`, outside the window (every `setAlarm` of the relay goes through this). */
export function armAlarm(storage: { setAlarm(at: number): Promise<void> }, at: number): Promise<void> {
  return storage.setAlarm(alarmTime(at, Date.now()));
}
